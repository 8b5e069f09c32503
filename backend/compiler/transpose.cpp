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
  // A narrow source (fewer than `side` elements a row: a convolution's 9 taps) takes
  // as many rows as fill the block, while the blocks still give every core one.
  const std::uint64_t bj = std::min(side, shape[1]);
  std::uint64_t others = (shape[1] + bj - 1) / bj;  // blocks per block row, times the outer dimensions
  for (std::size_t d = 2; d < shape.size(); ++d) others *= shape[d];
  const std::uint64_t rows_per_block_row = (target.cores + others - 1) / std::max<std::uint64_t>(1, others);
  const std::uint64_t rows_cap = (shape[0] + rows_per_block_row - 1) / std::max<std::uint64_t>(1, rows_per_block_row);
  const std::uint64_t bi = std::min(shape[0], std::max(side, std::min(side * side / bj, rows_cap)));
  const std::uint64_t blk = block_bytes(side);

  const std::uint64_t n0 = (shape[0] + bi - 1) / bi, n1 = (shape[1] + bj - 1) / bj;

  // Whole planes that follow one another in the source and in the destination alike
  // (a convolution's weights [out][in][taps] made [out][taps][in]: planes of in x taps
  // with rows of 9 elements): one contiguous load and one contiguous store move
  // `group` planes, each turned by its own transpose, instead of a load and a store of
  // a few dozen bytes a row per plane. At most a block's bytes, and an even share of
  // the planes per core.
  const std::uint64_t plane = shape[0] * shape[1];
  std::uint64_t group = 1;
  if (n0 == 1 && n1 == 1 && shape.size() >= 3 && in[0] == static_cast<std::int64_t>(shape[1]) &&
      out[1] == static_cast<std::int64_t>(shape[0]) && in[2] == static_cast<std::int64_t>(plane) &&
      out[2] == static_cast<std::int64_t>(plane)) {
    const std::uint64_t share = (shape[2] + target.cores - 1) / std::max<std::uint32_t>(1, target.cores);
    group = std::max<std::uint64_t>(1, std::min(blk / (plane * size), share));
  }
  const std::uint64_t n2 = shape.size() >= 3 ? (shape[2] + group - 1) / group : 1;
  std::uint64_t outer = 1;
  for (std::size_t d = 3; d < shape.size(); ++d) outer *= shape[d];
  const std::uint64_t units = n0 * n1 * n2 * outer;
  if (units == 0 || units > (1u << 22)) return std::nullopt;

  struct Block {
    std::uint64_t in_offset, out_offset;  // bytes
    std::uint32_t ei, ej;                 // elements along dimensions 0 and 1
    std::uint32_t planes;                 // along dimension 2 (more than 1: whole contiguous planes)
  };
  const auto block = [&](std::uint64_t u) {
    const std::uint64_t b0 = u % n0, b1 = (u / n0) % n1, b2 = (u / (n0 * n1)) % n2;
    std::uint64_t rest = u / (n0 * n1 * n2);
    std::uint64_t oi = b0 * bi * static_cast<std::uint64_t>(in[0]) + b1 * bj * static_cast<std::uint64_t>(in[1]);
    std::uint64_t oo = b0 * bi * static_cast<std::uint64_t>(out[0]) + b1 * bj * static_cast<std::uint64_t>(out[1]);
    std::uint64_t planes = 1;
    if (shape.size() >= 3) {
      oi += b2 * group * static_cast<std::uint64_t>(in[2]);
      oo += b2 * group * static_cast<std::uint64_t>(out[2]);
      planes = std::min(group, shape[2] - b2 * group);
    }
    for (std::size_t d = 3; d < shape.size(); ++d) {
      const std::uint64_t i = rest % shape[d];
      rest /= shape[d];
      oi += i * static_cast<std::uint64_t>(in[d]);
      oo += i * static_cast<std::uint64_t>(out[d]);
    }
    return Block{oi * size, oo * size, static_cast<std::uint32_t>(std::min(bi, shape[0] - b0 * bi)),
                 static_cast<std::uint32_t>(std::min(bj, shape[1] - b1 * bj)), static_cast<std::uint32_t>(planes)};
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
      if (group > 1) {
        b.add(core, make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(slot), dtype, 0, k.in_offset, src_sp(slot),
                                           {static_cast<std::uint32_t>(plane * k.planes), 1, 1}, {1, 0, 0}));
        return;
      }
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
      b.add(core, wait_on(slot));
      // The store of block i - 2 read this slot's transposed buffer.
      if (i >= 2) b.add(core, wait_on(2 + slot));
      const Block k = block(nth(i));
      if (group > 1) {
        const auto step = static_cast<std::uint32_t>(plane * size);
        for (std::uint32_t p = 0; p < k.planes; ++p) {
          b.add(core, isa::VTranspose{.dtype = dtype, .src = src_sp(slot) + p * step, .dst = dst_sp(slot) + p * step,
                                      .rows = k.ei, .cols = k.ej});
        }
        b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + slot), dtype, 1, k.out_offset, dst_sp(slot),
                                            {static_cast<std::uint32_t>(plane * k.planes), 1, 1}, {1, 0, 0}));
        continue;
      }
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
