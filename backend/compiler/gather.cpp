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
        if (unit >= 2) b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << (2 + slot))});
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

}  // namespace spyre::compiler
