// The kernel compiler's arg reductions (argmax, argmin, max/min along a dim): for
// each of `rows` rows of `cols` contiguous values, the extreme value and the index of
// its first occurrence (a NaN counts as the extreme, as PyTorch's CPU kernels do).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/elementwise.h"
#include "spyre/isa/isa.h"

namespace spyre::compiler {

struct ArgReduceShape {
  std::uint64_t rows = 1, cols = 1;  // row r's values at r * row_stride + [0, cols)
  std::int64_t row_stride = 0;
  isa::DType in = isa::DType::fp32;  // fp32, fp16, bf16 or int8 (exact in fp32)
  bool max = true;                   // argmax (else argmin)
  bool values = false;               // also store the extreme values (in `in`)
};

// Positions are compared as fp32, exact to 2^24: longer rows are refused.
inline constexpr std::uint64_t kArgReduceMaxCols = std::uint64_t{1} << 24;

// Each core takes a run of rows; a tile holds whole rows (or a row's chunk) in fp32:
// the row maxima (minima), where each value equals its row's (or is NaN), the least
// position there (positions from the argument, pos[c] = c); chunks of long rows
// combine, an earlier one winning ties. Indices are stored as int64 (the int32 index,
// then a zero word: indices are never negative). Arguments: 0 = in, 1 = indices
// (int64, rows), 2 = positions (fp32, at least min(cols, 16384) values), 3 = values
// when asked (`in`'s dtype, rows).
std::vector<std::uint8_t> compile_argreduce(const ArgReduceShape& shape, const Target& target, const std::string& name);

// The tile width: the positions argument needs this many values.
std::uint64_t argreduce_positions(const ArgReduceShape& shape);

}  // namespace spyre::compiler
