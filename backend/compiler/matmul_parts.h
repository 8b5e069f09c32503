// compile_matmul's own pieces shared by its two files: matmul_plan.cpp checks a shape
// and plans it, matmul.cpp lays the plan out and writes each core's code.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/matmul.h"

namespace spyre::compiler {

// A norm prologue's bytes for one row of a statistics piece (whole rows of K values,
// loaded double-buffered and converted to fp32).
std::uint64_t norm_row_bytes(const MatmulShape& s);

// The plan compile_matmul writes: the shape checked (std::invalid_argument naming what
// is wrong), planned, and refused with DoesNotFit when no tiling fits.
MatmulPlan plan_to_compile(const MatmulShape& s, const Target& target, const std::string& name);

}  // namespace spyre::compiler
