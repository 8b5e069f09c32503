// The kernel compiler's matmul: C[M x N] = A[M x K] B[K x N], A row-major, B row-major
// or given as the transpose of a row-major [N x K] (as linear's weights are), C
// row-major, in fp32, fp16 or bf16 with fp32 accumulation on chip.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/elementwise.h"

namespace spyre::compiler {

struct MatmulShape {
  std::uint64_t m = 0, n = 0, k = 0;
  isa::DType dtype = isa::DType::fp16;
  bool b_transposed = false;  // B is stored as [N x K] row-major
};

// Output tiles are spread round robin over the cores; each core streams its A and B
// panels along K with double-buffered DMA, accumulates in fp32 in its scratchpad,
// converts and stores. Arguments: 0 = A, 1 = B, 2 = C. Throws std::invalid_argument
// naming the shapes and the bytes needed when no tiling fits the scratchpad.
std::vector<std::uint8_t> compile_matmul(const MatmulShape& shape, const Target& target, const std::string& name);

}  // namespace spyre::compiler
