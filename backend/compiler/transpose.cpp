#include "compiler/transpose.h"

#include <algorithm>
#include <array>

#include "compiler/dma.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {

std::optional<std::vector<std::uint8_t>> compile_transposed_copy(const PointwiseKernel& kernel, const Target& target,
                                                                 const std::string& name) {
  if (kernel.inputs.size() != 1 || !kernel.steps.empty() || kernel.inputs[0].dtype != kernel.output.dtype ||
      kernel.shape.size() < 2) {
    return std::nullopt;
  }
  const std::vector<std::uint64_t>& shape = kernel.shape;
  const std::vector<std::int64_t>& in = kernel.inputs[0].strides;
  const std::vector<std::int64_t>& out = kernel.output.strides;
  if (in.size() != shape.size() || out.size() != shape.size()) return std::nullopt;
  if (shape[0] < 2 || shape[1] < 2 || in[1] != 1 || out[0] != 1 || in[0] == 1 || in[0] == 0) return std::nullopt;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (in[d] < 0 || out[d] < 0) return std::nullopt;  // (reversed views: the pointwise family)
  }
  const isa::DType dtype = kernel.output.dtype;
  const std::uint64_t size = isa::dtype_size(dtype);
  const std::uint64_t per_stick = std::max<std::uint64_t>(1, target.stick_bytes / size);

  // Square blocks of whole sticks: four of them (source and transposed, double
  // buffered) in the scratchpad; 256 elements a side at most.
  std::uint64_t side = 256;
  const auto block_bytes = [&](std::uint64_t s) { return (s * s * size + 127) / 128 * 128; };
  while (side > per_stick && 4 * block_bytes(side) > target.scratchpad_bytes) side /= 2;
  if (4 * block_bytes(side) > target.scratchpad_bytes) return std::nullopt;
  const std::uint64_t bi = std::min(side, shape[0]), bj = std::min(side, shape[1]);
  const std::uint64_t blk = block_bytes(side);

  const std::uint64_t n0 = (shape[0] + bi - 1) / bi, n1 = (shape[1] + bj - 1) / bj;
  std::uint64_t outer = 1;
  for (std::size_t d = 2; d < shape.size(); ++d) outer *= shape[d];
  const std::uint64_t units = n0 * n1 * outer;
  if (units == 0 || units > (1u << 22)) return std::nullopt;

  struct Block {
    std::uint64_t in_offset, out_offset;  // bytes
    std::uint32_t ei, ej;                 // elements along dimensions 0 and 1
  };
  const auto block = [&](std::uint64_t u) {
    const std::uint64_t b0 = u % n0, b1 = (u / n0) % n1;
    std::uint64_t rest = u / (n0 * n1);
    std::uint64_t oi = b0 * bi * static_cast<std::uint64_t>(in[0]) + b1 * bj * static_cast<std::uint64_t>(in[1]);
    std::uint64_t oo = b0 * bi * static_cast<std::uint64_t>(out[0]) + b1 * bj * static_cast<std::uint64_t>(out[1]);
    for (std::size_t d = 2; d < shape.size(); ++d) {
      const std::uint64_t i = rest % shape[d];
      rest /= shape[d];
      oi += i * static_cast<std::uint64_t>(in[d]);
      oo += i * static_cast<std::uint64_t>(out[d]);
    }
    return Block{oi * size, oo * size, static_cast<std::uint32_t>(std::min(bi, shape[0] - b0 * bi)),
                 static_cast<std::uint32_t>(std::min(bj, shape[1] - b1 * bj))};
  };
  const auto src_sp = [&](std::uint32_t slot) { return static_cast<std::uint32_t>(2 * slot * blk); };
  const auto dst_sp = [&](std::uint32_t slot) { return static_cast<std::uint32_t>((2 * slot + 1) * blk); };

  const std::uint32_t cores = static_cast<std::uint32_t>(std::min<std::uint64_t>(target.cores, units));
  isa::ProgramBuilder b(name, cores);
  for (std::uint32_t core = 0; core < cores; ++core) {
    const std::uint64_t first = units * core / cores, last = units * (core + 1) / cores;
    // Source block: ei rows (dimension 0) of ej elements contiguous in the source.
    const auto load = [&](std::uint64_t u, std::uint32_t slot) {
      const Block k = block(u);
      b.add(core, make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(slot), dtype, 0, k.in_offset, src_sp(slot),
                                         {k.ej, k.ei, 1}, {1, in[0], 0}));
    };
    // Each core starts its run at a different block: cores working on the same block
    // row at the same time would store into the same DRAM channels (the destination
    // rows of one block column are a whole row stride apart).
    const std::uint64_t count = last - first;
    const auto nth = [&](std::uint64_t i) { return first + (i + core) % count; };
    load(nth(0), 0);
    for (std::uint64_t i = 0; i < count; ++i) {
      const auto slot = static_cast<std::uint32_t>(i % 2);
      if (i + 1 < count) load(nth(i + 1), 1 - slot);
      b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << slot)});
      // The store of block i - 2 read this slot's transposed buffer.
      if (i >= 2) b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << (2 + slot))});
      const Block k = block(nth(i));
      b.add(core, isa::VTranspose{.dtype = dtype, .src = src_sp(slot), .dst = dst_sp(slot), .rows = k.ei, .cols = k.ej});
      // Transposed block: ej rows (dimension 1) of ei elements contiguous in the output.
      b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + slot), dtype, 1, k.out_offset, dst_sp(slot),
                                          {k.ei, k.ej, 1}, {1, out[1], 0}));
    }
    b.add(core, isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

}  // namespace spyre::compiler
