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

// topk along rows: the k largest (smallest) values of each row, in order, and their
// indices; equal values in index order; NaN above +inf (as PyTorch's CPU kernel).
struct TopkShape {
  std::uint64_t rows = 1, cols = 1;  // row r's values at r * row_stride + [0, cols)
  std::int64_t row_stride = 0;
  std::uint64_t k = 1;
  isa::DType in = isa::DType::fp32;  // fp32, fp16 or bf16
  bool largest = true;
};

// k passes per row, each a reduction over the row: the device takes k up to this.
inline constexpr std::uint64_t kTopkMaxK = 256;
// Rows longer than this run in chunks; element keys (index, with NaN offset by 2^23)
// must stay exact in fp32, so rows are at most 2^23 values.
inline constexpr std::uint64_t kTopkMaxCols = std::uint64_t{1} << 23;

// Per row, in chunks of up to 16384 values (a row's running k candidates travel with
// its next chunk): k rounds of (the largest value, the least key among the values
// equal to it, that element removed). Values are compared in fp32, negated for the
// smallest; a NaN is +inf (largest) or -inf (smallest) with its key moved past every
// index (before them for the largest, after them for the smallest), so it comes first
// or last as on the CPU. Arguments: 0 = in, 1 = values (`in`, rows x k, contiguous),
// 2 = indices (int64, rows x k), 3 = positions (fp32, at least min(cols, 16384)).
std::vector<std::uint8_t> compile_topk(const TopkShape& shape, const Target& target, const std::string& name);

}  // namespace spyre::compiler
