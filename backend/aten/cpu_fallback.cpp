// The boxed CPU fallback: every aten op without a spyre kernel runs on the CPU (its
// spyre arguments copied over and results copied back, in-place and out= included),
// with a one-time warning per op and a count users can read to see what still falls back.
#include <ATen/native/CPUFallback.h>

#include <map>
#include <mutex>

#include "aten/cpu_fallback.h"

namespace spyre::backend {
namespace {

std::mutex g_mutex;
std::map<std::string, std::int64_t> g_counts;

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  bool first = false;
  {
    const std::lock_guard lock(g_mutex);
    first = g_counts[name]++ == 0;
  }
  if (first) {
    TORCH_WARN("spyre: ", name, " has no spyre kernel and runs on the CPU (see torch.spyre.fallback_counts())");
  }
  at::native::cpu_fallback(op, stack);
}

}  // namespace

std::map<std::string, std::int64_t> fallback_counts() {
  const std::lock_guard lock(g_mutex);
  return g_counts;
}

void reset_fallback_counts() {
  const std::lock_guard lock(g_mutex);
  g_counts.clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }

}  // namespace spyre::backend
