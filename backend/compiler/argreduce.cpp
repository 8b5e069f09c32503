#include "compiler/argreduce.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "compiler/arena.h"
#include "compiler/dma.h"
#include "compiler/does_not_fit.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {
namespace {

constexpr isa::DType f32 = isa::DType::fp32, i32 = isa::DType::int32, i8 = isa::DType::int8;
constexpr std::uint64_t kMaxTileCols = 16384;
constexpr double kBig = 3.0e38;  // above every position
constexpr std::uint8_t kTokIn = 0, kTokPos = 2, kTokOut = 3;

struct Layout {
  std::uint32_t in[2] = {0, 0}, x = 0, flag = 0, nan = 0, pos = 0, big = 0, sel = 0;
  std::uint32_t tmax = 0, tidx = 0, best = 0, idx = 0, better = 0, tnan = 0, bnan = 0;
  std::uint32_t idx32 = 0, zero = 0, val = 0;
  std::uint64_t bytes = 0;
};

Layout layout(const ArgReduceShape& s, std::uint64_t rows, std::uint64_t cols) {
  Layout l;
  Arena take;
  const std::uint64_t n = rows * cols, in_size = isa::dtype_size(s.in);
  l.in[0] = take(n * in_size);
  l.in[1] = take(n * in_size);
  l.x = s.in == f32 ? l.in[0] : take(n * 4);
  l.flag = take(n);
  l.nan = take(n);
  l.pos = take(n * 4);
  l.big = take(n * 4);
  l.sel = take(n * 4);
  for (std::uint32_t* v : {&l.tmax, &l.tidx, &l.best, &l.idx}) *v = take(rows * 4);
  for (std::uint32_t* v : {&l.better, &l.tnan, &l.bnan}) *v = take(rows);
  l.idx32 = take(rows * 4);
  l.zero = take(rows * 4);
  l.val = take(rows * in_size);
  l.bytes = take.next;
  return l;
}

// The tile: whole rows when a row fits kMaxTileCols, as many as fit the scratchpad.
std::pair<std::uint64_t, std::uint64_t> tile(const ArgReduceShape& s, const Target& target, std::uint32_t cores) {
  const std::uint64_t cols = std::min(s.cols, kMaxTileCols);
  std::uint64_t rows = std::max<std::uint64_t>(1, std::min((s.rows + cores - 1) / cores, kMaxTileCols / cols));
  while (rows > 1 && layout(s, rows, cols).bytes > target.scratchpad_bytes) rows /= 2;
  return {rows, cols};
}

}  // namespace

std::uint64_t argreduce_positions(const ArgReduceShape& s) { return std::min(s.cols, kMaxTileCols); }

std::vector<std::uint8_t> compile_argreduce(const ArgReduceShape& s, const Target& target, const std::string& name) {
  if (s.in != f32 && s.in != isa::DType::fp16 && s.in != isa::DType::bf16 && s.in != i8) {
    throw std::invalid_argument(name + ": arg reductions take fp32, fp16, bf16 or int8, found " +
                                std::string(isa::to_string(s.in)));
  }
  if (s.rows == 0 || s.cols == 0) throw std::invalid_argument(name + ": nothing to reduce (zero elements)");
  if (s.cols > kArgReduceMaxCols) {
    throw std::invalid_argument(name + ": rows of " + std::to_string(s.cols) + " values; positions are exact in fp32 up to " +
                                std::to_string(kArgReduceMaxCols));
  }
  const auto cores_max = std::max<std::uint32_t>(1, target.cores);
  const auto [tr, tc] = tile(s, target, cores_max);
  const Layout L = layout(s, tr, tc);
  if (L.bytes > target.scratchpad_bytes) {
    throw DoesNotFit(name + ": a tile of " + std::to_string(tc) + " values needs " + std::to_string(L.bytes) +
                     " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  const std::uint64_t row_tiles = (s.rows + tr - 1) / tr, col_tiles = (s.cols + tc - 1) / tc;
  const auto cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(cores_max, row_tiles));
  const std::uint64_t in_size = isa::dtype_size(s.in);
  const isa::ReduceOp extreme = s.max ? isa::ReduceOp::max : isa::ReduceOp::min;
  const isa::CompareOp wins = s.max ? isa::CompareOp::gt : isa::CompareOp::lt;
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const auto add = [&](const isa::Instruction& inst) { b.add(core, inst); };
    const std::uint64_t first = row_tiles * core / cores, last = row_tiles * (core + 1) / cores;
    if (first == last) continue;
    // Positions 0..tc-1 in every row of a tile, and a value above them all.
    const auto n_all = static_cast<std::uint32_t>(tr * tc);
    add(make_dma<isa::DmaLoad>(kTokPos, f32, 2, 0, L.sel, {static_cast<std::uint32_t>(tc), 1, 1}, {1, 0, 0}));
    add(isa::VFill{.dtype = f32, .dst = L.pos, .count = n_all, .value = 0});
    add(isa::VFill{.dtype = f32, .dst = L.big, .count = n_all, .value = kBig});
    add(isa::VFill{.dtype = i32, .dst = L.zero, .count = static_cast<std::uint32_t>(tr), .value = 0});
    add(isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << kTokPos)});
    add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = L.pos, .b = L.sel,
                     .dst = L.pos, .rows = static_cast<std::uint32_t>(tr), .cols = static_cast<std::uint32_t>(tc)});
    // The units: (row tile, column tile), double-buffered loads.
    struct Unit {
      std::uint64_t r0, rows, c0, cols;
    };
    std::vector<Unit> units;
    for (std::uint64_t t = first; t < last; ++t) {
      for (std::uint64_t c = 0; c < col_tiles; ++c) {
        units.push_back({t * tr, std::min(tr, s.rows - t * tr), c * tc, std::min(tc, s.cols - c * tc)});
      }
    }
    const auto load = [&](std::size_t u) {
      const Unit& x = units[u];
      const auto off = static_cast<std::uint64_t>(static_cast<std::int64_t>(x.r0) * s.row_stride +
                                                  static_cast<std::int64_t>(x.c0)) * in_size;
      add(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kTokIn + u % 2), s.in, 0, off, L.in[u % 2],
                                 {static_cast<std::uint32_t>(x.cols), static_cast<std::uint32_t>(x.rows), 1},
                                 {1, s.row_stride, 0}));
    };
    load(0);
    for (std::size_t u = 0; u < units.size(); ++u) {
      const Unit& x = units[u];
      const auto r = static_cast<std::uint32_t>(x.rows), c = static_cast<std::uint32_t>(x.cols);
      const std::uint32_t n = r * c;
      if (u + 1 < units.size()) load(u + 1);
      add(isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << (kTokIn + u % 2))});
      std::uint32_t xv = L.in[u % 2];
      if (s.in != f32) {
        add(isa::VConvert{.from = s.in, .to = f32, .src = xv, .dst = L.x, .count = n});
        xv = L.x;
      }
      // The tile's extreme per row, where values equal it or are NaN, the least position there.
      add(isa::VReduce{.op = extreme, .in = f32, .out = f32, .axis = 1, .src = xv, .dst = L.tmax, .rows = r, .cols = c});
      add(isa::VCompare{.op = isa::CompareOp::eq, .dtype = f32, .bcast = isa::Broadcast::col, .a = xv, .b = L.tmax,
                        .dst = L.flag, .rows = r, .cols = c});
      add(isa::VCompare{.op = isa::CompareOp::ne, .dtype = f32, .a = xv, .b = xv, .dst = L.nan, .rows = r, .cols = c});
      add(isa::VBinary{.op = isa::BinaryOp::max, .dtype = i8, .a = L.flag, .b = L.nan, .dst = L.flag, .rows = r, .cols = c});
      // (Positions of a short last column tile: the first c of each tile row, so the
      // position matrix is read with the tile's own width.)
      std::uint32_t pos = L.pos, big = L.big;
      if (c != tc) {
        add(isa::VFill{.dtype = f32, .dst = L.sel, .count = n, .value = 0});
        add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = L.sel,
                         .b = L.pos, .dst = L.sel, .rows = r, .cols = c});
        pos = L.sel;
      }
      add(isa::VSelect{.dtype = f32, .cond = L.flag, .a = pos, .b = big, .dst = L.sel, .count = n});
      add(isa::VReduce{.op = isa::ReduceOp::min, .in = f32, .out = f32, .axis = 1, .src = L.sel, .dst = L.tidx,
                       .rows = r, .cols = c});
      if (x.c0 != 0) {
        add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = L.tidx,
                         .dst = L.tidx, .rows = 1, .cols = r, .imm = static_cast<double>(x.c0)});
      }
      if (x.c0 == 0) {
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = L.tmax, .dst = L.best, .count = r});
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = L.tidx, .dst = L.idx, .count = r});
      } else {
        // A later chunk wins when strictly better, or NaN against a number.
        add(isa::VCompare{.op = wins, .dtype = f32, .a = L.tmax, .b = L.best, .dst = L.better, .rows = 1, .cols = r});
        add(isa::VCompare{.op = isa::CompareOp::ne, .dtype = f32, .a = L.tmax, .b = L.tmax, .dst = L.tnan, .rows = 1, .cols = r});
        add(isa::VCompare{.op = isa::CompareOp::eq, .dtype = f32, .a = L.best, .b = L.best, .dst = L.bnan, .rows = 1, .cols = r});
        add(isa::VBinary{.op = isa::BinaryOp::min, .dtype = i8, .a = L.tnan, .b = L.bnan, .dst = L.tnan, .rows = 1, .cols = r});
        add(isa::VBinary{.op = isa::BinaryOp::max, .dtype = i8, .a = L.better, .b = L.tnan, .dst = L.better, .rows = 1, .cols = r});
        add(isa::VSelect{.dtype = f32, .cond = L.better, .a = L.tmax, .b = L.best, .dst = L.best, .count = r});
        add(isa::VSelect{.dtype = f32, .cond = L.better, .a = L.tidx, .b = L.idx, .dst = L.idx, .count = r});
      }
      if (x.c0 + x.cols < s.cols) continue;
      // The row tile is done: its indices as int64 (low word, then a zero word), its values.
      add(isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << kTokOut)});
      add(isa::VConvert{.from = f32, .to = i32, .src = L.idx, .dst = L.idx32, .count = r});
      add(make_dma<isa::DmaStore>(kTokOut, i32, 1, x.r0 * 8, L.idx32, {1, r, 1}, {1, 2, 0}));
      add(make_dma<isa::DmaStore>(kTokOut, i32, 1, x.r0 * 8 + 4, L.zero, {1, r, 1}, {1, 2, 0}));
      if (s.values) {
        add(isa::VConvert{.from = f32, .to = s.in, .src = L.best, .dst = L.val, .count = r});
        add(make_dma<isa::DmaStore>(kTokOut, s.in, 3, x.r0 * in_size, L.val, {r, 1, 1}, {1, 0, 0}));
      }
    }
    add(isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

}  // namespace spyre::compiler
