#include "compiler/triangle.h"

#include <algorithm>
#include <stdexcept>

#include "compiler/dma.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {

std::vector<std::uint8_t> compile_triangle(const TriangleShape& s, const Target& target, const std::string& name) {
  const std::uint64_t total = s.matrices * s.rows;
  const std::uint64_t row_bytes = s.cols * s.element_bytes;
  if (total == 0 || row_bytes == 0) throw std::invalid_argument(name + ": nothing to compute (zero elements)");
  const std::uint64_t half = target.scratchpad_bytes / 2;
  if (row_bytes > half) {
    throw std::invalid_argument(name + ": a row of " + std::to_string(row_bytes) + " bytes needs " +
                                std::to_string(2 * row_bytes) + " bytes of scratchpad, the device has " +
                                std::to_string(target.scratchpad_bytes));
  }
  const std::uint64_t cores = std::max<std::uint32_t>(1, target.cores);
  const std::uint64_t block = std::max<std::uint64_t>(1, std::min({half / row_bytes, (total + cores - 1) / cores,
                                                                   std::uint64_t{1024}}));
  const std::uint64_t blocks = (total + block - 1) / block;
  const std::uint64_t used = std::min(cores, blocks);
  const std::uint32_t sp[2] = {0, static_cast<std::uint32_t>(block * row_bytes)};
  // The kept columns [keep_begin, keep_end) of row i of a matrix.
  const auto keep = [&](std::uint64_t i) -> std::pair<std::uint64_t, std::uint64_t> {
    const std::int64_t edge = static_cast<std::int64_t>(i) + s.diagonal;  // j - i compared with diagonal
    const auto clamp = [&](std::int64_t v) { return static_cast<std::uint64_t>(std::clamp<std::int64_t>(v, 0, static_cast<std::int64_t>(s.cols))); };
    return s.lower ? std::pair{std::uint64_t{0}, clamp(edge + 1)} : std::pair{clamp(edge), s.cols};
  };
  isa::ProgramBuilder b(name, static_cast<std::uint32_t>(used));
  for (std::uint32_t core = 0; core < used; ++core) {
    const std::uint64_t first = blocks * core / used, last = blocks * (core + 1) / used;
    const auto rows_of = [&](std::uint64_t u) { return static_cast<std::uint32_t>(std::min(block, total - u * block)); };
    const auto load = [&](std::uint64_t u, std::uint32_t slot) {
      b.add(core, make_dma<isa::DmaLoad>(static_cast<std::uint8_t>(slot), isa::DType::int8, 0, u * block * row_bytes,
                                         sp[slot], {static_cast<std::uint32_t>(row_bytes), rows_of(u), 1},
                                         {1, static_cast<std::int64_t>(row_bytes), 0}));
    };
    load(first, 0);
    for (std::uint64_t u = first; u < last; ++u) {
      const auto slot = static_cast<std::uint32_t>((u - first) % 2);
      if (u + 1 < last) {
        if (u >= first + 1) b.add(core, wait_on(3 - slot));
        load(u + 1, 1 - slot);
      }
      b.add(core, wait_on(slot));
      for (std::uint32_t r = 0; r < rows_of(u); ++r) {
        const auto [k0, k1] = keep((u * block + r) % s.rows);
        const std::uint64_t at = sp[slot] + r * row_bytes;
        // Zero the spans outside [k0, k1).
        for (const auto& [z0, z1] : {std::pair{std::uint64_t{0}, k0}, std::pair{k1, s.cols}}) {
          if (z1 <= z0) continue;
          b.add(core, isa::VFill{.dtype = isa::DType::int8, .dst = static_cast<std::uint32_t>(at + z0 * s.element_bytes),
                                 .count = static_cast<std::uint32_t>((z1 - z0) * s.element_bytes), .value = 0});
        }
      }
      b.add(core, make_dma<isa::DmaStore>(static_cast<std::uint8_t>(2 + slot), isa::DType::int8, 1,
                                          u * block * row_bytes, sp[slot],
                                          {static_cast<std::uint32_t>(row_bytes), rows_of(u), 1},
                                          {1, static_cast<std::int64_t>(row_bytes), 0}));
    }
    b.add(core, isa::Wait{.token_mask = 0xf});
  }
  return b.build();
}

}  // namespace spyre::compiler
