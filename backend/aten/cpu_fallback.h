// How often each aten op ran through the CPU fallback ("aten::abs" -> calls).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace spyre::backend {

std::map<std::string, std::int64_t> fallback_counts();
void reset_fallback_counts();
// Counts a CPU run of `op` done by a kernel wrapper (and warns the first time in the
// process): `has_kernel` when spyre kernels exist for the op but not for these
// arguments (the warning then says so rather than "no spyre kernel").
void count_fallback(const std::string& op, bool has_kernel = true);

}  // namespace spyre::backend
