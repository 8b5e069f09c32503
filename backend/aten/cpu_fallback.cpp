// The boxed CPU fallback: every aten op without a spyre kernel runs on the CPU (its
// spyre arguments copied over and results copied back, in-place and out= included),
// with a one-time warning per op and a count users can read to see what still falls back.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "aten/cpu_fallback.h"
#include "runtime/driver.h"
#include "runtime/generator.h"

namespace spyre::backend {
namespace {

std::mutex g_mutex;
std::map<std::string, std::int64_t> g_counts;
std::set<std::string> g_warned;  // once per op and process: resetting the counts does not warn again

// SPYRE_FALLBACK_WARN=0 silences the warning (the counts stay): for test suites that
// count the warnings an op raises (tests/torch_suites/run.py sets it).
bool warnings_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("SPYRE_FALLBACK_WARN");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled;
}

// `has_kernel`: the op has spyre kernels, but not for these arguments (a dtype they do
// not take, tensors on several devices, ...).
void count(const std::string& name, bool has_kernel) {
  bool first = false;
  {
    const std::lock_guard lock(g_mutex);
    ++g_counts[name];
    first = g_warned.insert(name).second;
  }
  if (!first || !warnings_enabled()) return;
  if (has_kernel) {
    TORCH_WARN("spyre: ", name, " runs on the CPU for these arguments: its spyre kernels do not take them (such as "
               "float64, int64, uint8 and complex tensors, tensors on several devices, or sizes past a kernel's limits) (see torch.spyre.fallback_counts())");
  } else {
    TORCH_WARN("spyre: ", name, " has no spyre kernel and runs on the CPU (see torch.spyre.fallback_counts())");
  }
}

// A random op on the CPU draws from a CPU generator seeded from the spyre one (runtime/
// generator.h), not from the CPU's default: torch.spyre.manual_seed governs it.
void seed_random_arguments(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  const std::size_t n = schema.arguments().size();
  if (stack->size() < n) return;
  const auto args = stack->end() - static_cast<std::ptrdiff_t>(n);
  std::optional<c10::Device> device;
  for (std::size_t i = 0; i < n && !device; ++i) {
    const c10::IValue& v = args[static_cast<std::ptrdiff_t>(i)];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == c10::DeviceType::PrivateUse1) {
      device = v.toTensor().device();
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto& type = schema.arguments()[i].type();
    const bool generator = type->kind() == c10::TypeKind::GeneratorType ||
                           (type->kind() == c10::TypeKind::OptionalType &&
                            type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType);
    if (!generator) continue;
    c10::IValue& v = args[static_cast<std::ptrdiff_t>(i)];
    std::optional<at::Generator> given;
    if (v.isGenerator()) {
      if (v.toGenerator().device().type() != c10::DeviceType::PrivateUse1) continue;  // the caller's CPU generator
      given = v.toGenerator();
    }
    v = c10::IValue(cpu_generator_for(given, device.value_or(c10::Device(c10::DeviceType::PrivateUse1, current_device()))));
  }
}

// PyTorch's device check, before the op runs (CUDA does it in every op's generated
// code): tensors on two devices are an error, except 0-d CPU tensors (scalars) and the
// index tensors of indexing ops, which may stay on the CPU as they may for CUDA.
void check_same_device(const c10::FunctionSchema& schema, const std::string& name, const torch::jit::Stack& stack) {
  static const std::set<std::string> kCpuIndicesAllowed = {"aten::index.Tensor", "aten::index_put_",
                                                           "aten::index_put", "aten::_index_put_impl_",
                                                           "aten::index.Tensor_out", "aten::_unsafe_index.Tensor"};
  if (kCpuIndicesAllowed.count(name) != 0) return;
  const std::size_t n = schema.arguments().size();
  if (stack.size() < n) return;
  std::optional<c10::Device> first;
  const auto visit = [&](const at::Tensor& t) {
    if (!t.defined() || (t.device().is_cpu() && t.dim() == 0)) return;
    if (!first) {
      first = t.device();
    } else {
      TORCH_CHECK(*first == t.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
                  *first, " and ", t.device(), "! (when checking the arguments of ", name, ")");
    }
  };
  for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end(); ++it) {
    if (it->isTensor()) {
      visit(it->toTensor());
    } else if (it->isTensorList()) {
      for (const at::Tensor& t : it->toTensorVector()) visit(t);
    } else if (it->isList()) {
      for (const c10::IValue& v : it->toListRef()) {
        if (v.isTensor()) visit(v.toTensor());
      }
    }
  }
}

// The CPU run writes a copy and copies it back, so an output (out= or in-place argument)
// that partly overlaps an input would be computed from stale values and then smear
// over the input. PyTorch's own kernels refuse that (TensorIterator's overlap check);
// so does the fallback, with their words. (Identical tensors, as in x.add_(x), are fine.)
void check_no_partial_overlap(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  const std::size_t n = schema.arguments().size();
  if (stack.size() < n) return;
  const auto arg = [&](std::size_t i) -> const c10::IValue& { return stack[stack.size() - n + i]; };
  for (std::size_t w = 0; w < n; ++w) {
    const auto* alias = schema.arguments()[w].alias_info();
    if (alias == nullptr || !alias->isWrite() || !arg(w).isTensor()) continue;
    const at::Tensor& written = arg(w).toTensor();
    if (!written.defined()) continue;
    for (std::size_t r = 0; r < n; ++r) {
      if (r == w || !arg(r).isTensor()) continue;
      const auto* other = schema.arguments()[r].alias_info();
      if (other != nullptr && other->isWrite()) continue;
      const at::Tensor& read = arg(r).toTensor();
      if (read.defined()) at::assert_no_partial_overlap(written, read);
    }
  }
}

void fallback_counted(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool has_kernel) {
  const auto& schema = op.schema();
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  // A CPU run returns a copy: for an op whose schema says its result aliases an input
  // (a view), writes through the result would silently miss the input. Refuse instead.
  for (const auto& r : schema.returns()) {
    TORCH_CHECK_NOT_IMPLEMENTED(!r.alias_info() || r.alias_info()->isWrite(), "spyre: ", name,
                                " returns a view of its input but has no spyre kernel; on the CPU it would return a "
                                "copy that does not alias the input, so it is refused (move the tensor to the CPU "
                                "first)");
  }
  check_same_device(schema, name, *stack);
  check_no_partial_overlap(schema, *stack);
  count(name, has_kernel);
  seed_random_arguments(schema, stack);
  at::native::cpu_fallback(op, stack);
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { fallback_counted(op, stack, false); }

}  // namespace

std::map<std::string, std::int64_t> fallback_counts() {
  const std::lock_guard lock(g_mutex);
  return g_counts;
}

void count_fallback(const std::string& op, bool has_kernel) { count(op, has_kernel); }

void run_on_cpu(const char* op, const char* overload, torch::jit::Stack* stack) {
  const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, overload);
  fallback_counted(handle, stack, true);
}

void reset_fallback_counts() {
  const std::lock_guard lock(g_mutex);
  g_counts.clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }


}  // namespace spyre::backend
