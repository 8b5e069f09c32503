// arange on the device (torch.arange, and the position ids and rotary indices models
// make from it): integer sequences within +-2^24, which fp32 holds exactly, in any
// device dtype or int64 (compiler/sequence.h). Other ranges (fractional start or step,
// larger values, float64 and the like) are made on the CPU and copied, counted.
#include <cmath>

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "compiler/sequence.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

constexpr const char* kName = "aten::arange.start_out";

// As PyTorch's arange: an out tensor of `size` elements keeps its shape and strides
// (the values go in its logical order); any other is resized to [size], with
// PyTorch's warning when it held elements.
void fit(at::Tensor& out, std::int64_t size) {
  at::assert_no_internal_overlap(out);
  if (out.numel() == size) return;
  if (out.numel() > 0) {
    TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", out.numel(),
               " which does not match the computed number of elements ", size,
               ". Note that this may occur as a result of rounding error. The out tensor will be resized to a tensor "
               "of shape (", size, ",).");
  }
  out.resize_({size});
}

at::Tensor& arange_out(const c10::Scalar& start_s, const c10::Scalar& end_s, const c10::Scalar& step_s, at::Tensor& out) {
  const double start = start_s.toDouble(), end = end_s.toDouble(), step = step_s.toDouble();
  const bool int64 = out.scalar_type() == at::kLong;
  const auto dtype = device_dtype(out.scalar_type());
  const auto integer = [](double x) { return std::isfinite(x) && x == std::floor(x); };
  bool on_device = integer(start) && integer(end) && integer(step) && step != 0 &&
                   ((step > 0 && end >= start) || (step < 0 && end <= start)) &&
                   (int64 || (dtype && *dtype != isa::DType::boolean));
  // Integers: PyTorch's size, ceil((end - start) / step), and the values must be fp32-exact.
  const double size_d = on_device ? std::ceil((end - start) / step) : 0;
  on_device = on_device && size_d <= 16777216.0 &&
              std::max(std::fabs(start), std::fabs(start + step * std::max(0.0, size_d - 1))) < 16777216.0;
  if (!on_device) {
    // PyTorch's own checks, size and values (its integer types truncate the bounds
    // first), made on the CPU and copied, counted.
    count_fallback(kName);
    at::Tensor cpu = at::empty({0}, out.options().device(c10::kCPU));
    at::arange_out(cpu, start_s, end_s, step_s);
    fit(out, cpu.numel());
    out.copy_(cpu.view(out.sizes()));
    return out;
  }
  const auto size = static_cast<std::int64_t>(size_d);
  fit(out, size);
  if (size == 0) return out;
  if (!out.is_contiguous()) {
    at::Tensor dense = at::empty({size}, out.options());
    arange_out(start_s, end_s, step_s, dense);
    out.copy_(dense.view(out.sizes()));
    return out;
  }
  compiler::ArangeShape s;
  s.count = static_cast<std::uint64_t>(size);
  s.start = start;
  s.step = step;
  s.int64 = int64;
  s.out = int64 ? isa::DType::int32 : *dtype;
  const c10::DeviceGuard guard(out.device());
  char text[96];
  std::snprintf(text, sizeof text, "|%a,%a|", start, step);
  const std::string key = std::string(kName) + text + std::to_string(s.count) + "|" +
                          (int64 ? std::string("int64") : std::string(isa::to_string(s.out)));
  const at::Tensor& positions = device_positions(out.device());
  run_cached(out.device().index(), key,
             [&](const compiler::Target& t) {
               return compiler::compile_arange(s, static_cast<std::uint64_t>(positions.numel()), t, kName);
             },
             {device_address(out), device_address(positions)}, kName,
             Traffic{.read = 0, .written = static_cast<std::uint64_t>(out.numel() * out.element_size())});
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("arange.start_out", arange_out); }

}  // namespace spyre::backend
