// How often each aten op ran through the CPU fallback ("aten::abs" -> calls).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "spyre_torch/spyre_torch.h"

namespace c10 {
struct IValue;
}
namespace torch::jit {
using Stack = std::vector<c10::IValue>;
}

namespace spyre::backend {

// Counts a CPU run of `op` done by a kernel wrapper (and warns the first time in the
// process): `has_kernel` when spyre kernels exist for the op but not for these
// arguments (the warning then says so rather than "no spyre kernel").
void count_fallback(const std::string& op, bool has_kernel = true);
// Runs `op` (e.g. "aten::index_put_", overload "") on CPU copies of the stack's tensors
// as the boxed fallback does (the same checks and copies back), counted as an op whose
// spyre kernels do not take these arguments. For kernels that handle some patterns only.
void run_on_cpu(const char* op, const char* overload, torch::jit::Stack* stack);

}  // namespace spyre::backend
