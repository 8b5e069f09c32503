#include "compiler/gather.h"
#include "compiler/does_not_fit.h"

#include <algorithm>
#include <stdexcept>

#include "compiler/dma.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {

std::vector<std::uint8_t> compile_gather(const GatherShape& s, const Target& target, const std::string& name) {
  if (s.count == 0 || s.rows == 0 || s.row_bytes == 0) {
    throw std::invalid_argument(name + ": nothing to gather (" + std::to_string(s.count) + " indices, a table of " +
                                std::to_string(s.rows) + " rows of " + std::to_string(s.row_bytes) + " bytes)");
  }
  const std::uint64_t index_size = s.wide_index ? 8 : 4;
  const std::uint64_t stick = std::max<std::uint64_t>(1, target.stick_bytes);
  // Scratchpad: the index run, then two row buffers (gather one while storing the other).
  const std::uint64_t cores = std::max<std::uint32_t>(1, target.cores);
  const std::uint64_t per_core = (s.count + cores - 1) / cores;
  const std::uint64_t room = target.scratchpad_bytes;
  if (room < 2 * index_size + 2 * stick) {
    throw DoesNotFit(name + ": a gather needs at least " + std::to_string(2 * index_size + 2 * stick) +
                                " bytes of scratchpad, the device has " + std::to_string(room));
  }
  // Row pieces: whole rows when two fit beside a few indices, else stick multiples.
  const std::uint64_t half = (room - 64 * index_size) / 2;
  const std::uint64_t piece = s.row_bytes <= half ? s.row_bytes : std::max(stick, half / stick * stick);
  // Indices per block: as many rows of `piece` bytes as fit a row buffer, and all of a
  // core's indices when they fit (capped, so programs stay small and loads overlap).
  // (idx_bytes, the indices rounded up to 64 bytes, is at most block * index_size + 63.)
  const std::uint64_t block = std::max<std::uint64_t>(
      1, std::min({per_core, (room - 63) / (2 * piece + index_size), std::uint64_t{4096}}));
  const auto idx_bytes = static_cast<std::uint32_t>((block * index_size + 63) / 64 * 64);
  const std::uint32_t sp_rows[2] = {idx_bytes, static_cast<std::uint32_t>(idx_bytes + block * piece)};
  if (idx_bytes + 2 * block * piece > room) {
    throw DoesNotFit(name + ": the gather's buffers need " + std::to_string(idx_bytes + 2 * block * piece) +
                                " bytes of scratchpad, the device has " + std::to_string(room));
  }
  const std::uint64_t used_cores = std::min<std::uint64_t>(cores, (s.count + block - 1) / block);
  isa::ProgramBuilder b(name, static_cast<std::uint32_t>(used_cores));
  for (std::uint32_t core = 0; core < used_cores; ++core) {
    const std::uint64_t first = s.count * core / used_cores, last = s.count * (core + 1) / used_cores;
    std::uint64_t unit = 0;
    for (std::uint64_t i0 = first; i0 < last; i0 += block) {
      const auto n = static_cast<std::uint32_t>(std::min(block, last - i0));
      // Token 0: the index load (its gathers have all been waited for before the next).
      b.add(core, make_dma<isa::DmaLoad>(0, isa::DType::int8, 1, i0 * index_size, 0,
                                         {static_cast<std::uint32_t>(n * index_size), 1, 1}, {1, 0, 0}));
      b.add(core, isa::Wait{.token_mask = 1});
      for (std::uint64_t p0 = 0; p0 < s.row_bytes; p0 += piece, ++unit) {
        const auto slot = static_cast<std::uint32_t>(unit % 2);
        const auto len = static_cast<std::uint32_t>(std::min(piece, s.row_bytes - p0));
        // The slot's buffer is free once its store from two blocks ago is done.
        if (unit >= 2) b.add(core, wait_on(2 + slot));
        b.add(core, isa::DmaGather{.token = 1, .wide_index = s.wide_index, .arg = 0, .index_sp = 0, .count = n,
                                   .sp_addr = sp_rows[slot], .row_bytes = len, .offset = p0, .rows = s.rows,
                                   .row_stride = s.row_bytes});
        b.add(core, isa::Wait{.token_mask = 2});
        b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + slot), isa::DType::int8, 2,
                                            i0 * s.row_bytes + p0, sp_rows[slot], {len, n, 1},
                                            {1, static_cast<std::int64_t>(s.row_bytes), 0}));
      }
    }
    b.add(core, isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

std::vector<std::uint8_t> compile_scatter(const ScatterShape& s, const Target& target, const std::string& name) {
  std::uint64_t outer = 1;
  for (const std::uint64_t d : s.outer_sizes) outer *= d;
  if (s.count == 0 || s.rows == 0 || s.row_bytes == 0 || outer == 0 || s.outer_sizes.size() != s.outer_strides.size()) {
    throw std::invalid_argument(name + ": nothing to scatter (" + std::to_string(s.count) + " indices into " +
                                std::to_string(s.rows) + " rows of " + std::to_string(s.row_bytes) + " bytes, " +
                                std::to_string(outer) + " outer positions)");
  }
  if (s.source_row_stride != 0 && (outer != 1 || s.source_row_stride < s.row_bytes)) {
    throw std::invalid_argument(name + ": a source row stride (" + std::to_string(s.source_row_stride) +
                                " bytes) takes rows of at most that many bytes (" + std::to_string(s.row_bytes) +
                                ") and no outer dims (" + std::to_string(outer) + " outer positions)");
  }
  const std::uint64_t index_size = s.wide_index ? 8 : 4;
  const std::uint64_t room = target.scratchpad_bytes;
  if (room < 64 + 2 * s.row_bytes + index_size) {
    throw DoesNotFit(name + ": a scatter of " + std::to_string(s.row_bytes) + "-byte rows needs " +
                     std::to_string(64 + 2 * s.row_bytes + index_size) + " bytes of scratchpad, the device has " +
                     std::to_string(room));
  }
  // An index block and two row buffers of a block's rows each.
  const std::uint64_t block =
      std::max<std::uint64_t>(1, std::min({s.count, (room - 63) / (2 * s.row_bytes + index_size), std::uint64_t{4096}}));
  const auto idx_bytes = static_cast<std::uint32_t>((block * index_size + 63) / 64 * 64);
  const std::uint32_t sp_rows[2] = {idx_bytes, static_cast<std::uint32_t>(idx_bytes + block * s.row_bytes)};
  const std::uint64_t blocks = (s.count + block - 1) / block, units = blocks * outer;
  // The byte offset of outer position o in the table (the last outer dim fastest).
  const auto outer_offset = [&](std::uint64_t o) {
    std::uint64_t off = 0;
    for (std::size_t d = s.outer_sizes.size(); d-- > 0;) {
      off += (o % s.outer_sizes[d]) * s.outer_strides[d];
      o /= s.outer_sizes[d];
    }
    return off;
  };
  const std::uint64_t cores = std::min<std::uint64_t>(std::max<std::uint32_t>(1, target.cores), units);
  isa::ProgramBuilder b(name, static_cast<std::uint32_t>(cores));
  const auto row_bytes = static_cast<std::uint32_t>(s.row_bytes);
  const std::uint64_t source_stride = s.source_row_stride != 0 ? s.source_row_stride : s.row_bytes;
  for (std::uint32_t core = 0; core < cores; ++core) {
    const std::uint64_t first = units * core / cores, last = units * (core + 1) / cores;
    std::uint64_t loaded_block = blocks;  // none yet
    for (std::uint64_t u = first; u < last; ++u) {
      const std::uint64_t blk = u / outer, o = u % outer, i0 = blk * block;
      const auto n = static_cast<std::uint32_t>(std::min(block, s.count - i0));
      const auto slot = static_cast<std::uint32_t>((u - first) % 2);
      // Tokens: 0 the indices, 1 the source rows, 2/3 the scatters of slots 0/1.
      if (blk != loaded_block) {
        // The indices are overwritten only once the scatters reading them are done.
        if (u > first) b.add(core, isa::Wait{.token_mask = 0xc});
        b.add(core, make_dma<isa::DmaLoad>(0, isa::DType::int8, 1, i0 * index_size, 0,
                                           {static_cast<std::uint32_t>(n * index_size), 1, 1}, {1, 0, 0}));
        loaded_block = blk;
      }
      // The slot's buffer is free once its scatter from two units ago is done.
      if (u >= first + 2) b.add(core, wait_on(2 + slot));
      b.add(core, make_dma<isa::DmaLoad>(1, isa::DType::int8, 2, (o * s.count + i0) * source_stride, sp_rows[slot],
                                         {row_bytes, n, 1}, {1, static_cast<std::int64_t>(source_stride), 0}));
      b.add(core, isa::Wait{.token_mask = 3});
      b.add(core, isa::DmaGather{.token = static_cast<std::uint8_t>(2 + slot), .wide_index = s.wide_index,
                                 .scatter = true, .wrap = s.wrap, .arg = 0, .index_sp = 0, .count = n, .sp_addr = sp_rows[slot],
                                 .row_bytes = row_bytes, .offset = outer_offset(o), .rows = s.rows,
                                 .row_stride = s.row_stride});
    }
    b.add(core, isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

std::vector<std::uint8_t> compile_gather_along(const GatherAlongShape& s, const Target& target,
                                               const std::string& name) {
  std::uint64_t outer = 1;
  for (const std::uint64_t d : s.outer_sizes) outer *= d;
  if (s.count == 0 || s.rows == 0 || outer == 0 || s.outer_sizes.size() != s.outer_strides.size() ||
      (s.elem_bytes != 1 && s.elem_bytes != 2 && s.elem_bytes != 4 && s.elem_bytes != 8)) {
    throw std::invalid_argument(name + ": nothing to gather (" + std::to_string(s.count) + " indices into " +
                                std::to_string(s.rows) + " elements of " + std::to_string(s.elem_bytes) + " bytes, " +
                                std::to_string(outer) + " outer positions)");
  }
  constexpr std::uint64_t kIndex = 8;
  const std::uint64_t room = target.scratchpad_bytes;
  if (room < 4 * 64 + 2 * (s.elem_bytes + kIndex)) {
    throw DoesNotFit(name + ": a gather needs " + std::to_string(4 * 64 + 2 * (s.elem_bytes + kIndex)) +
                     " bytes of scratchpad, the device has " + std::to_string(room));
  }
  // Two index blocks and two element blocks.
  const std::uint64_t block =
      std::max<std::uint64_t>(1, std::min({s.count, (room - 4 * 64) / (2 * (s.elem_bytes + kIndex)), std::uint64_t{4096}}));
  const auto align = [](std::uint64_t v) { return static_cast<std::uint32_t>((v + 63) / 64 * 64); };
  const std::uint32_t sp_idx[2] = {0, align(block * kIndex)};
  const std::uint32_t sp_val[2] = {2 * align(block * kIndex), 2 * align(block * kIndex) + align(block * s.elem_bytes)};
  const std::uint64_t blocks = (s.count + block - 1) / block, units = blocks * outer;
  const auto outer_offset = [&](std::uint64_t o) {
    std::uint64_t off = 0;
    for (std::size_t d = s.outer_sizes.size(); d-- > 0;) {
      off += (o % s.outer_sizes[d]) * s.outer_strides[d];
      o /= s.outer_sizes[d];
    }
    return off;
  };
  const std::uint64_t cores = std::min<std::uint64_t>(std::max<std::uint32_t>(1, target.cores), units);
  isa::ProgramBuilder b(name, static_cast<std::uint32_t>(cores));
  for (std::uint32_t core = 0; core < cores; ++core) {
    const std::uint64_t first = units * core / cores, last = units * (core + 1) / cores;
    for (std::uint64_t u = first; u < last; ++u) {
      const std::uint64_t o = u / blocks, i0 = (u % blocks) * block;
      const auto n = static_cast<std::uint32_t>(std::min(block, s.count - i0));
      const auto slot = static_cast<std::uint32_t>((u - first) % 2);
      // Tokens: 0 the indices, 1 the gather, 2/3 the stores of slots 0/1.
      if (u >= first + 2) b.add(core, wait_on(2 + slot));
      b.add(core, make_dma<isa::DmaLoad>(0, isa::DType::int8, 1, (o * s.count + i0) * kIndex, sp_idx[slot],
                                         {static_cast<std::uint32_t>(n * kIndex), 1, 1}, {1, 0, 0}));
      b.add(core, isa::Wait{.token_mask = 1});
      b.add(core, isa::DmaGather{.token = 1, .wide_index = true, .arg = 0, .index_sp = sp_idx[slot], .count = n,
                                 .sp_addr = sp_val[slot], .row_bytes = static_cast<std::uint32_t>(s.elem_bytes),
                                 .offset = outer_offset(o), .rows = s.rows, .row_stride = s.row_stride});
      b.add(core, isa::Wait{.token_mask = 2});
      b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + slot), isa::DType::int8, 2,
                                          (o * s.count + i0) * s.elem_bytes, sp_val[slot],
                                          {static_cast<std::uint32_t>(n * s.elem_bytes), 1, 1}, {1, 0, 0}));
    }
    b.add(core, isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

}  // namespace spyre::compiler
