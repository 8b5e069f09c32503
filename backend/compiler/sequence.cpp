#include "compiler/sequence.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "compiler/dma.h"
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
