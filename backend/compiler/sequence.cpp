#include "compiler/sequence.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "compiler/arena.h"
#include "compiler/dma.h"
#include "compiler/does_not_fit.h"
#include "compiler/rows.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {

std::vector<std::uint8_t> compile_arange(const ArangeShape& s, std::uint64_t positions, const Target& target,
                                         const std::string& name) {
  constexpr isa::DType f32 = isa::DType::fp32, i32 = isa::DType::int32;
  if (s.count == 0 || positions == 0) throw std::invalid_argument(name + ": nothing to make (zero elements)");
  const double last = s.start + s.step * static_cast<double>(s.count - 1);
  if (std::max(std::fabs(s.start), std::fabs(last)) >= 16777216.0 || s.start != std::floor(s.start) ||
      s.step != std::floor(s.step)) {
    throw std::invalid_argument(name + ": the device makes integer sequences within +-2^24 (fp32-exact), asked for " +
                                std::to_string(s.start) + " + " + std::to_string(s.step) + " * i, i < " +
                                std::to_string(s.count));
  }
  const isa::DType store = s.int64 ? i32 : s.out;
  const std::uint64_t size = s.int64 ? 8 : isa::dtype_size(s.out);
  const std::uint64_t tile = std::min(s.count, positions);
  const std::uint64_t tiles = (s.count + tile - 1) / tile;
  const auto cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(std::max<std::uint32_t>(1, target.cores), tiles));
  // pos, the fp32 values, the stored values (and their sign words), 64-byte aligned.
  const auto align = [](std::uint64_t b) { return static_cast<std::uint32_t>((b + 63) / 64 * 64); };
  const std::uint32_t sp_pos = 0, sp_val = align(tile * 4), sp_out = 2 * align(tile * 4);
  const std::uint32_t sp_sign = sp_out + align(tile * 4), sp_flag = sp_sign + align(tile * 4);
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const auto add = [&](const isa::Instruction& inst) { b.add(core, inst); };
    const std::uint64_t first = tiles * core / cores, end = tiles * (core + 1) / cores;
    add(make_dma<isa::DmaLoad>(0, f32, 1, 0, sp_pos, {static_cast<std::uint32_t>(tile), 1, 1}, {1, 0, 0}));
    add(isa::Wait{.token_mask = 1});
    for (std::uint64_t t = first; t < end; ++t) {
      const std::uint64_t i0 = t * tile;
      const auto n = static_cast<std::uint32_t>(std::min(tile, s.count - i0));
      add(isa::Wait{.token_mask = 2});  // the previous tile's store has read its buffers
      // start + step * (i0 + p), as (start + step * i0) + step * p: both terms exact.
      add(isa::VBinary{.op = isa::BinaryOp::mul, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = sp_pos,
                       .dst = sp_val, .rows = 1, .cols = n, .imm = s.step});
      add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = sp_val,
                       .dst = sp_val, .rows = 1, .cols = n, .imm = s.start + s.step * static_cast<double>(i0)});
      std::uint32_t from = sp_val;
      if (store != f32) {
        add(isa::VConvert{.from = f32, .to = store, .src = sp_val, .dst = sp_out, .count = n});
        from = sp_out;
      }
      if (!s.int64) {
        add(make_dma<isa::DmaStore>(1, store, 0, i0 * size, from, {n, 1, 1}, {1, 0, 0}));
        continue;
      }
      // int64: the value's low word, then its sign word (-1 for negative values).
      add(isa::VCompare{.op = isa::CompareOp::lt, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = sp_val,
                        .dst = sp_flag, .rows = 1, .cols = n, .imm = 0});
      add(isa::VConvert{.from = isa::DType::boolean, .to = i32, .src = sp_flag, .dst = sp_sign, .count = n});
      add(isa::VUnary{.op = isa::UnaryOp::neg, .dtype = i32, .src = sp_sign, .dst = sp_sign, .count = n});
      add(make_dma<isa::DmaStore>(1, i32, 0, i0 * 8, from, {1, n, 1}, {1, 2, 0}));
      add(make_dma<isa::DmaStore>(1, i32, 0, i0 * 8 + 4, sp_sign, {1, n, 1}, {1, 2, 0}));
    }
    add(isa::Wait{.token_mask = 3});
  }
  return b.build();
}

}  // namespace spyre::compiler

namespace spyre::compiler {
namespace {

constexpr std::uint64_t kScanChunk = 16384;

struct ScanLayout {
  std::uint32_t in[2] = {0, 0}, x = 0, y = 0, pos = 0, flag = 0, zero = 0, out = 0, carry = 0;
  std::uint64_t bytes = 0;
};

ScanLayout scan_layout(const CumsumShape& s, std::uint64_t n) {
  ScanLayout l;
  Arena take;
  l.in[0] = take(n * isa::dtype_size(s.in));
  l.in[1] = take(n * isa::dtype_size(s.in));
  l.x = take(n * 4);
  l.y = take(n * 4);
  l.pos = take(n * 4);
  l.zero = take(n * 4);
  l.flag = take(n);
  l.out = take(n * isa::dtype_size(s.out));
  l.carry = take(4);
  l.bytes = take.next;
  return l;
}

}  // namespace

std::vector<std::uint8_t> compile_cumsum(const CumsumShape& s, const Target& target, const std::string& name) {
  constexpr isa::DType f32 = isa::DType::fp32;
  for (const isa::DType t : {s.in, s.out}) {
    if (t != f32 && t != isa::DType::fp16 && t != isa::DType::bf16) {
      throw std::invalid_argument(name + ": running sums take fp32, fp16 or bf16, found " + std::string(isa::to_string(t)));
    }
  }
  if (s.rows == 0 || s.cols == 0) throw std::invalid_argument(name + ": nothing to sum (zero elements)");
  const auto cores_max = std::max<std::uint32_t>(1, target.cores);
  const bool chunked = s.cols > kScanChunk;
  const std::uint64_t tc = chunked ? kScanChunk : s.cols;
  std::uint64_t tr = chunked ? 1 : std::max<std::uint64_t>(1, std::min((s.rows + cores_max - 1) / cores_max, kScanChunk / tc));
  while (tr > 1 && scan_layout(s, tr * tc).bytes > target.scratchpad_bytes) tr /= 2;
  const ScanLayout L = scan_layout(s, tr * tc);
  if (L.bytes > target.scratchpad_bytes) {
    throw DoesNotFit(name + ": a tile of " + std::to_string(tc) + " values needs " + std::to_string(L.bytes) +
                     " bytes of scratchpad, the device has " + std::to_string(target.scratchpad_bytes));
  }
  const std::uint64_t row_tiles = (s.rows + tr - 1) / tr;
  const auto cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(cores_max, row_tiles));
  const std::uint64_t in_size = isa::dtype_size(s.in), out_size = isa::dtype_size(s.out);
  const auto u32 = [](std::uint64_t v) { return static_cast<std::uint32_t>(v); };
  constexpr std::uint8_t kTokIn = 0, kTokPos = 2, kTokOut = 3;
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const auto add = [&](const isa::Instruction& inst) { b.add(core, inst); };
    const std::uint64_t first = row_tiles * core / cores, last = row_tiles * (core + 1) / cores;
    if (first == last) continue;
    // Each element's column (for the row masks of tiles of several rows), and zeros.
    if (tr > 1) {
      add(isa::VFill{.dtype = f32, .dst = L.zero, .count = u32(tr * tc), .value = 0});
      emit_row_positions(b, core, kTokPos, 2, L.pos, L.x, tr, tc);
    }
    const std::vector<RowUnit> units = row_units(first, last, tr, tc, s.rows, s.cols);
    const auto load = [&](std::size_t u) {
      const RowUnit& x = units[u];
      add(make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(kTokIn + u % 2), s.in, 0, (x.r0 * s.cols + x.c0) * in_size,
                                 L.in[u % 2], {u32(x.cols), u32(x.rows), 1}, {1, static_cast<std::int64_t>(s.cols), 0}));
    };
    load(0);
    for (std::size_t u = 0; u < units.size(); ++u) {
      const RowUnit& x = units[u];
      const auto r = u32(x.rows), c = u32(x.cols), n = r * c;
      if (u + 1 < units.size()) load(u + 1);
      add(wait_on(kTokIn + u % 2));
      if (s.in == f32) {
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = L.in[u % 2], .dst = L.x, .count = n});
      } else {
        add(isa::VConvert{.from = s.in, .to = f32, .src = L.in[u % 2], .dst = L.x, .count = n});
      }
      // Doubling steps, ping-ponging between x and y: y[i] = x[i] + x[i - d] (from the
      // same row), y[i] = x[i] for the first d of a row.
      std::uint32_t src = L.x, dst = L.y;
      for (std::uint64_t d = 1; d < c; d *= 2) {
        const auto dd = u32(d), m = n - dd;
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = src, .dst = dst, .count = dd});
        if (r > 1) {
          add(isa::VCompare{.op = isa::CompareOp::ge, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = L.pos,
                            .dst = L.flag, .rows = 1, .cols = n, .imm = static_cast<double>(d)});
          add(isa::VSelect{.dtype = f32, .cond = L.flag + dd, .a = src, .b = L.zero, .dst = dst + dd * 4, .count = m});
          add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = src + dd * 4, .b = dst + dd * 4,
                           .dst = dst + dd * 4, .rows = 1, .cols = m});
        } else {
          add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .a = src + dd * 4, .b = src, .dst = dst + dd * 4,
                           .rows = 1, .cols = m});
        }
        std::swap(src, dst);
      }
      // A chunked row: the sums so far, carried.
      if (chunked) {
        if (x.c0 != 0) {
          add(isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::scalar, .a = src,
                           .b = L.carry, .dst = src, .rows = 1, .cols = n});
        }
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = src + (n - 1) * 4, .dst = L.carry, .count = 1});
      }
      add(wait_on(kTokOut));
      if (s.out == f32) {
        add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = src, .dst = L.out, .count = n});
      } else {
        add(isa::VConvert{.from = f32, .to = s.out, .src = src, .dst = L.out, .count = n});
      }
      add(make_dma<isa::DmaStore>(kTokOut, s.out, 1, (x.r0 * s.cols + x.c0) * out_size, L.out, {c, r, 1},
                                  {1, static_cast<std::int64_t>(s.cols), 0}));
    }
    add(isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

}  // namespace spyre::compiler

namespace spyre::compiler {

std::vector<std::uint8_t> compile_linspace(const LinspaceShape& s, std::uint64_t positions, const Target& target,
                                           const std::string& name) {
  constexpr isa::DType f32 = isa::DType::fp32;
  if (s.out != f32 && s.out != isa::DType::fp16 && s.out != isa::DType::bf16) {
    throw std::invalid_argument(name + ": linspace makes fp32, fp16 or bf16, asked for " +
                                std::string(isa::to_string(s.out)));
  }
  if (s.count < 2 || s.count > 16777216 || positions == 0) {
    throw std::invalid_argument(name + ": the device makes 2 to 2^24 linspace values, asked for " +
                                std::to_string(s.count));
  }
  const std::uint64_t size = isa::dtype_size(s.out), half = s.count / 2;
  const std::uint64_t tile = std::min(s.count, positions);
  // Tiles never straddle the halfway point: the first half's tiles, then the second's.
  struct Tile {
    std::uint64_t i0, n;
  };
  std::vector<Tile> tiles;
  for (std::uint64_t i = 0; i < half; i += tile) tiles.push_back({i, std::min(tile, half - i)});
  for (std::uint64_t i = half; i < s.count; i += tile) tiles.push_back({i, std::min(tile, s.count - i)});
  const auto cores = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(std::max<std::uint32_t>(1, target.cores), tiles.size()));
  const auto align = [](std::uint64_t b) { return static_cast<std::uint32_t>((b + 63) / 64 * 64); };
  const std::uint32_t sp_pos = 0, sp_val = align(tile * 4), sp_out = 2 * align(tile * 4);
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const auto add = [&](const isa::Instruction& inst) { b.add(core, inst); };
    const std::uint64_t first = tiles.size() * core / cores, end = tiles.size() * (core + 1) / cores;
    add(make_dma<isa::DmaLoad>(0, f32, 1, 0, sp_pos, {static_cast<std::uint32_t>(tile), 1, 1}, {1, 0, 0}));
    add(isa::Wait{.token_mask = 1});
    for (std::uint64_t t = first; t < end; ++t) {
      const auto [i0, n64] = tiles[t];
      const auto n = static_cast<std::uint32_t>(n64);
      const auto imm = [&](isa::BinaryOp op, double v) {
        add(isa::VBinary{.op = op, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = sp_val, .dst = sp_val,
                         .rows = 1, .cols = n, .imm = v});
      };
      add(isa::Wait{.token_mask = 2});  // the previous tile's store has read its buffer
      add(isa::VUnary{.op = isa::UnaryOp::copy, .dtype = f32, .src = sp_pos, .dst = sp_val, .count = n});
      if (i0 < half) {
        // i = i0 + p (exact), then start + step * i.
        imm(isa::BinaryOp::add, static_cast<double>(i0));
        imm(isa::BinaryOp::mul, s.step);
        imm(isa::BinaryOp::add, s.start);
      } else {
        // j = count - 1 - i = (count - 1 - i0) - p (exact), then end - step * j.
        imm(isa::BinaryOp::mul, -1.0);
        imm(isa::BinaryOp::add, static_cast<double>(s.count - 1 - i0));
        imm(isa::BinaryOp::mul, s.step);
        add(isa::VBinary{.op = isa::BinaryOp::sub, .dtype = f32, .bcast = isa::Broadcast::immediate, .a = sp_val,
                         .dst = sp_val, .rows = 1, .cols = n, .imm = s.end});
        imm(isa::BinaryOp::mul, -1.0);
      }
      std::uint32_t from = sp_val;
      if (s.out != f32) {
        add(isa::VConvert{.from = f32, .to = s.out, .src = sp_val, .dst = sp_out, .count = n});
        from = sp_out;
      }
      add(make_dma<isa::DmaStore>(1, s.out, 0, i0 * size, from, {n, 1, 1}, {1, 0, 0}));
    }
    add(isa::Wait{.token_mask = 3});
  }
  return b.build();
}

}  // namespace spyre::compiler
