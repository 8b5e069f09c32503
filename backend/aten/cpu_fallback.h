// How often each aten op ran through the CPU fallback ("aten::abs" -> calls).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace spyre::backend {

std::map<std::string, std::int64_t> fallback_counts();
void reset_fallback_counts();

}  // namespace spyre::backend
