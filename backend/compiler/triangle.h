// The kernel compiler's tril/triu: the lower (or upper) triangle of each matrix of a
// contiguous batch, the rest zeroed. Rows are bytes to this kernel (a zero of every
// device dtype is all zero bytes): each core streams blocks of whole rows through its
// scratchpad, zero-fills each row's discarded span and stores the block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/elementwise.h"

namespace spyre::compiler {

struct TriangleShape {
  std::uint64_t matrices = 1, rows = 0, cols = 0;
  std::uint64_t element_bytes = 4;
  bool lower = true;         // tril (keep j - i <= diagonal); else triu (keep j - i >= diagonal)
  std::int64_t diagonal = 0;
};

// Arguments: 0 = in, 1 = out (both contiguous). Throws std::invalid_argument when a
// row does not fit half the scratchpad.
std::vector<std::uint8_t> compile_triangle(const TriangleShape& shape, const Target& target, const std::string& name);

}  // namespace spyre::compiler
