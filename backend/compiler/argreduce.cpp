#include "compiler/argreduce.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "compiler/arena.h"
#include "compiler/dma.h"
#include "compiler/does_not_fit.h"
#include "compiler/rows.h"
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
  const std::uint64_t row_tiles = (s.rows + tr - 1) / tr;
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
    add(isa::VFill{.dtype = f32, .dst = L.big, .count = n_all, .value = kBig});
    add(isa::VFill{.dtype = i32, .dst = L.zero, .count = static_cast<std::uint32_t>(tr), .value = 0});
    emit_row_positions(b, core, kTokPos, 2, L.pos, L.sel, tr, tc);
    // The units: (row tile, column tile), double-buffered loads.
    const std::vector<RowUnit> units = row_units(first, last, tr, tc, s.rows, s.cols);
    const auto load = [&](std::size_t u) {
      const RowUnit& x = units[u];
      const auto off = static_cast<std::uint64_t>(static_cast<std::int64_t>(x.r0) * s.row_stride +
                                                  static_cast<std::int64_t>(x.c0)) * in_size;
      add(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kTokIn + u % 2), s.in, 0, off, L.in[u % 2],
                                 {static_cast<std::uint32_t>(x.cols), static_cast<std::uint32_t>(x.rows), 1},
                                 {1, s.row_stride, 0}));
    };
    load(0);
    for (std::size_t u = 0; u < units.size(); ++u) {
      const RowUnit& x = units[u];
      const auto r = static_cast<std::uint32_t>(x.rows), c = static_cast<std::uint32_t>(x.cols);
      const std::uint32_t n = r * c;
      if (u + 1 < units.size()) load(u + 1);
      add(wait_on(kTokIn + u % 2));
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
      add(wait_on(kTokOut));
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

namespace spyre::compiler {
namespace {

constexpr std::uint64_t kTopkChunk = 16384;
constexpr double kNanShift = 8388608.0;  // 2^23: a NaN's key offset
constexpr std::uint8_t kTopkTokIn = 0, kTopkTokPos = 2, kTopkTokOut = 3;

struct TopkLayout {
  std::uint32_t in[2] = {0, 0}, x = 0, key = 0, pos = 0, flag = 0, nan = 0, sel = 0, big = 0, ninf = 0, fix = 0;
  std::uint32_t m = 0, kb = 0, outv = 0, outk = 0, tv = 0, tk = 0, tf = 0, nanout = 0, idx32 = 0, zero = 0, val = 0,
                nanfill = 0;
  std::uint64_t bytes = 0;
};

// r rows of c columns a tile; `carry`: a chunked row's candidates ride along (k more columns).
TopkLayout topk_layout(const TopkShape& s, std::uint64_t r, std::uint64_t c, bool carry) {
  TopkLayout l;
  Arena take;
  const std::uint64_t n = r * c, w = r * (c + (carry ? s.k : 0)), o = r * s.k, in_size = isa::dtype_size(s.in);
  l.in[0] = take(n * in_size);
  l.in[1] = take(n * in_size);
  for (std::uint32_t* v : {&l.x, &l.key, &l.sel, &l.big, &l.ninf}) *v = take(w * 4);
  l.flag = take(w);
  l.pos = take(n * 4);
  l.nan = take(n);
  l.fix = take(n * 4);
  l.m = take(r * 4);
  l.kb = take(r * 4);
  for (std::uint32_t* v : {&l.outv, &l.outk, &l.tv, &l.tk, &l.tf, &l.idx32, &l.zero, &l.nanfill}) *v = take(o * 4);
  l.nanout = take(o);
  l.val = take(o * in_size);
  l.bytes = take.next;
  return l;
}

}  // namespace

std::vector<std::uint8_t> compile_topk(const TopkShape& s, const Target& target, const std::string& name) {
  if (s.in != f32 && s.in != isa::DType::fp16 && s.in != isa::DType::bf16) {
    throw std::invalid_argument(name + ": topk takes fp32, fp16 or bf16, found " + std::string(isa::to_string(s.in)));
  }
  if (s.rows == 0 || s.cols == 0 || s.k == 0) throw std::invalid_argument(name + ": nothing to select (zero elements)");
  if (s.k > s.cols || s.k > kTopkMaxK || s.cols > kTopkMaxCols) {
    throw std::invalid_argument(name + ": the device selects k <= " + std::to_string(kTopkMaxK) + " of rows of at most " +
                                std::to_string(kTopkMaxCols) + " values, asked for k = " + std::to_string(s.k) +
                                " of " + std::to_string(s.cols));
  }
  const auto cores_max = std::max<std::uint32_t>(1, target.cores);
  const bool chunked = s.cols > kTopkChunk;
  const std::uint64_t tc = chunked ? kTopkChunk : s.cols;
  std::uint64_t tr = chunked ? 1 : std::max<std::uint64_t>(1, std::min((s.rows + cores_max - 1) / cores_max, kTopkChunk / tc));
  while (tr > 1 && topk_layout(s, tr, tc, chunked).bytes > target.scratchpad_bytes) tr /= 2;
  const TopkLayout L = topk_layout(s, tr, tc, chunked);
  if (L.bytes > target.scratchpad_bytes) {
    throw DoesNotFit(name + ": a tile of " + std::to_string(tc) + " values (k = " + std::to_string(s.k) + ") needs " +
                     std::to_string(L.bytes) + " bytes of scratchpad, the device has " +
                     std::to_string(target.scratchpad_bytes));
  }
  const std::uint64_t row_tiles = (s.rows + tr - 1) / tr;
  const auto cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(cores_max, row_tiles));
  const std::uint64_t in_size = isa::dtype_size(s.in);
  const auto k = static_cast<std::uint32_t>(s.k);
  const auto u32 = [](std::uint64_t v) { return static_cast<std::uint32_t>(v); };
  const double inf = std::numeric_limits<double>::infinity();
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const auto add = [&](const isa::Instruction& inst) { b.add(core, inst); };
    const std::uint64_t first = row_tiles * core / cores, last = row_tiles * (core + 1) / cores;
    if (first == last) continue;
    const std::uint32_t wmax = u32(tr * (tc + (chunked ? s.k : 0))), o = u32(tr * s.k);
    // The constants the selects take; positions 0..tc-1 in every row of a tile.
    add(isa::VFill{.dtype = f32, .dst = L.big, .count = wmax, .value = kBig});
    add(isa::VFill{.dtype = f32, .dst = L.ninf, .count = wmax, .value = -inf});
    add(isa::VFill{.dtype = f32, .dst = L.fix, .count = u32(tr * tc), .value = s.largest ? inf : -inf});
    add(isa::VFill{.dtype = i32, .dst = L.zero, .count = o, .value = 0});
    add(isa::VFill{.dtype = f32, .dst = L.nanfill, .count = o, .value = std::numeric_limits<double>::quiet_NaN()});
    emit_row_positions(b, core, kTopkTokPos, 3, L.pos, L.sel, tr, tc);
    const std::vector<RowUnit> units = row_units(first, last, tr, tc, s.rows, s.cols);
    const auto load = [&](std::size_t u) {
      const RowUnit& x = units[u];
      const auto off = static_cast<std::uint64_t>(static_cast<std::int64_t>(x.r0) * s.row_stride +
                                                  static_cast<std::int64_t>(x.c0)) * in_size;
      add(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kTopkTokIn + u % 2), s.in, 0, off, L.in[u % 2],
                                 {u32(x.cols), u32(x.rows), 1}, {1, s.row_stride, 0}));
    };
    load(0);
    for (std::size_t u = 0; u < units.size(); ++u) {
      const RowUnit& x = units[u];
      const auto r = u32(x.rows), c = u32(x.cols), n = r * c;
      if (u + 1 < units.size()) load(u + 1);
      add(wait_on(kTopkTokIn + u % 2));
      // The chunk in fp32 (negated for the smallest), its keys (positions from the
      // row's start), NaNs made infinite with their keys moved.
      if (s.in == f32) {
        add(isa::VUnary{.op = s.largest ? isa::UnaryOp::copy : isa::UnaryOp::neg, .dtype = f32, .src = L.in[u % 2],
                        .dst = L.x, .count = n});
      } else {
        add(isa::VConvert{.from = s.in, .to = f32, .src = L.in[u % 2], .dst = L.x, .count = n});
        if (!s.largest) add(isa::VUnary{.op = isa::UnaryOp::neg, .dtype = f32, .src = L.x, .dst = L.x, .count = n});
      }
      add(isa::VCompare{.op = isa::CompareOp::ne, .dtype = f32, .a = L.x, .b = L.x, .dst = L.nan, .rows = 1, .cols = n});
      add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = L.pos,
                       .dst = L.key, .rows = 1, .cols = n, .imm = static_cast<double>(x.c0)});
      add(isa::VConvert{.from = isa::DType::boolean, .to = f32, .src = L.nan, .dst = L.sel, .count = n});
      add(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = L.sel,
                       .dst = L.sel, .rows = 1, .cols = n, .imm = s.largest ? -kNanShift : kNanShift});
      add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = L.key, .b = L.sel, .dst = L.key, .rows = 1, .cols = n});
      add(isa::VSelect{.dtype = f32, .cond = L.nan, .a = L.fix, .b = L.x, .dst = L.x, .count = n});
      // A chunked row's candidates so far join its chunk.
      std::uint32_t width = c;
      if (chunked && x.c0 != 0) {
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = L.outv, .dst = L.x + c * 4, .count = k});
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = L.outk, .dst = L.key + c * 4, .count = k});
        width += k;
      }
      const std::uint32_t nw = r * width;
      for (std::uint32_t j = 0; j < k; ++j) {
        add(isa::VReduce{.op = isa::ReduceOp::max, .in = f32, .out = f32, .axis = 1, .src = L.x, .dst = L.m, .rows = r,
                         .cols = width});
        add(isa::VCompare{.op = isa::CompareOp::eq, .dtype = f32, .bcast = isa::Broadcast::col, .a = L.x, .b = L.m,
                          .dst = L.flag, .rows = r, .cols = width});
        add(isa::VSelect{.dtype = f32, .cond = L.flag, .a = L.key, .b = L.big, .dst = L.sel, .count = nw});
        add(isa::VReduce{.op = isa::ReduceOp::min, .in = f32, .out = f32, .axis = 1, .src = L.sel, .dst = L.kb,
                         .rows = r, .cols = width});
        add(isa::VCompare{.op = isa::CompareOp::eq, .dtype = f32, .bcast = isa::Broadcast::col, .a = L.key, .b = L.kb,
                          .dst = L.flag, .rows = r, .cols = width});
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = L.m, .dst = L.outv + j * r * 4, .count = r});
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = L.kb, .dst = L.outk + j * r * 4, .count = r});
        add(isa::VSelect{.dtype = f32, .cond = L.flag, .a = L.ninf, .b = L.x, .dst = L.x, .count = nw});
        add(isa::VSelect{.dtype = f32, .cond = L.flag, .a = L.big, .b = L.key, .dst = L.key, .count = nw});
      }
      if (x.c0 + x.cols < s.cols) continue;
      // The row tile is done: rows x k values and indices (NaN keys back to indices).
      const std::uint32_t no = r * k;
      std::uint32_t tv = L.outv, tk = L.outk;
      if (r > 1) {
        add(isa::VTranspose{.dtype = f32, .src = L.outv, .dst = L.tv, .rows = k, .cols = r});
        add(isa::VTranspose{.dtype = f32, .src = L.outk, .dst = L.tk, .rows = k, .cols = r});
        tv = L.tv;
        tk = L.tk;
      }
      add(isa::VCompare{.op = s.largest ? isa::CompareOp::lt : isa::CompareOp::ge, .dtype = f32,
                        .bcast = isa::Broadcast::immediate, .a = tk, .dst = L.nanout, .rows = 1, .cols = no,
                        .imm = s.largest ? 0.0 : kNanShift});
      add(isa::VConvert{.from = isa::DType::boolean, .to = f32, .src = L.nanout, .dst = L.tf, .count = no});
      add(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = L.tf,
                       .dst = L.tf, .rows = 1, .cols = no, .imm = s.largest ? kNanShift : -kNanShift});
      add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = tk, .b = L.tf, .dst = tk, .rows = 1, .cols = no});
      if (!s.largest) add(isa::VUnary{.op = isa::UnaryOp::neg, .dtype = f32, .src = tv, .dst = tv, .count = no});
      add(isa::VSelect{.dtype = f32, .cond = L.nanout, .a = L.nanfill, .b = tv, .dst = tv, .count = no});
      add(wait_on(kTopkTokOut));
      std::uint32_t vals = tv;
      if (s.in != f32) {
        add(isa::VConvert{.from = f32, .to = s.in, .src = tv, .dst = L.val, .count = no});
        vals = L.val;
      } else {
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = tv, .dst = L.val, .count = no});
        vals = L.val;
      }
      add(isa::VConvert{.from = f32, .to = i32, .src = tk, .dst = L.idx32, .count = no});
      add(make_dma<isa::DmaStore>(kTopkTokOut, s.in, 1, x.r0 * s.k * in_size, vals, {no, 1, 1}, {1, 0, 0}));
      add(make_dma<isa::DmaStore>(kTopkTokOut, i32, 2, x.r0 * s.k * 8, L.idx32, {1, no, 1}, {1, 2, 0}));
      add(make_dma<isa::DmaStore>(kTopkTokOut, i32, 2, x.r0 * s.k * 8 + 4, L.zero, {1, no, 1}, {1, 2, 0}));
    }
    add(isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

}  // namespace spyre::compiler
