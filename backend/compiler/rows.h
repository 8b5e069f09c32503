// Code generation shared by the row kernels (arg reductions, topk, cumsum): the work
// units of a core's run of row tiles, and the positions 0..cols-1 laid in every row of
// a tile (the vector units have no index instruction; kernels read the device's
// positions vector).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "compiler/dma.h"
#include "spyre/isa/program.h"

namespace spyre::compiler {

// Rows [r0, r0 + rows) x columns [c0, c0 + cols) of the input.
struct RowUnit {
  std::uint64_t r0, rows, c0, cols;
};

// The units of row tiles [first, last) of `tile_rows` rows, each split into column
// chunks of `tile_cols`, in order (a row tile's chunks consecutive).
inline std::vector<RowUnit> row_units(std::uint64_t first, std::uint64_t last, std::uint64_t tile_rows,
                                      std::uint64_t tile_cols, std::uint64_t rows, std::uint64_t cols) {
  std::vector<RowUnit> units;
  const std::uint64_t chunks = (cols + tile_cols - 1) / tile_cols;
  for (std::uint64_t t = first; t < last; ++t) {
    for (std::uint64_t c = 0; c < chunks; ++c) {
      units.push_back({t * tile_rows, std::min(tile_rows, rows - t * tile_rows), c * tile_cols,
                       std::min(tile_cols, cols - c * tile_cols)});
    }
  }
  return units;
}

// Emits, on `core`, fp32 positions 0..cols-1 in each of `rows` rows at `sp_pos`: the
// positions argument `arg` loaded (token `token`) into `sp_tmp`, then added to zeros
// row by row.
inline void emit_row_positions(isa::ProgramBuilder& b, std::uint32_t core, std::uint8_t token, std::uint16_t arg,
                               std::uint32_t sp_pos, std::uint32_t sp_tmp, std::uint64_t rows, std::uint64_t cols) {
  constexpr isa::DType f32 = isa::DType::fp32;
  const auto r = static_cast<std::uint32_t>(rows), c = static_cast<std::uint32_t>(cols);
  b.add(core, make_dma<isa::DmaLoad>(token, f32, arg, 0, sp_tmp, {c, 1, 1}, {1, 0, 0}));
  b.add(core, isa::VFill{.dtype = f32, .dst = sp_pos, .count = r * c, .value = 0});
  b.add(core, isa::Wait{.token_mask = static_cast<std::uint16_t>(1u << token)});
  b.add(core, isa::VBinary{.op = isa::BinaryOp::add, .dtype = f32, .bcast = isa::Broadcast::row, .a = sp_pos,
                           .b = sp_tmp, .dst = sp_pos, .rows = r, .cols = c});
}

}  // namespace spyre::compiler
