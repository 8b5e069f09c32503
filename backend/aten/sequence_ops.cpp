// arange on the device (torch.arange, and the position ids and rotary indices models
// make from it): integer sequences within +-2^24, which fp32 holds exactly, in any
// device dtype or int64 (compiler/sequence.h). Other ranges (fractional start or step,
// larger values, float64 and the like) are made on the CPU and copied, counted.
#include <cmath>

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cumsum.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linspace.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/out.h"
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

// linspace into `out` (torch.linspace): fp32/fp16/bf16 on the device with the CPU
// kernel's start, end and step (computed in the output's dtype, compiler/sequence.h);
// other dtypes, non-finite bounds and more than 2^24 steps on the CPU, counted.
at::Tensor& linspace_out(const c10::Scalar& start, const c10::Scalar& end, std::int64_t steps, at::Tensor& out) {
  constexpr const char* name = "aten::linspace.out";
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  if (out.numel() != steps) out.resize_({steps});
  if (steps == 0) return out;
  if (steps == 1) return out.fill_(start);
  const c10::ScalarType t = out.scalar_type();
  const bool real = !start.isComplex() && !end.isComplex();
  const bool on_device = (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) && real && steps <= 16777216 &&
                         std::isfinite(start.toDouble()) && std::isfinite(end.toDouble());
  if (!on_device) {
    count_fallback(name);
    out.copy_(at::linspace(start, end, steps, out.options().device(c10::kCPU)));
    return out;
  }
  if (!out.is_contiguous()) {
    at::Tensor dense = at::empty({steps}, out.options());
    linspace_out(start, end, steps, dense);
    out.copy_(dense);
    return out;
  }
  compiler::LinspaceShape s;
  s.count = static_cast<std::uint64_t>(steps);
  s.out = *device_dtype(t);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, "linspace_spyre", [&] {
    // As the CPU kernel: the bounds in the dtype, step = (end - start) / (steps - 1) in it.
    const scalar_t a = start.to<scalar_t>(), e = end.to<scalar_t>();
    const scalar_t step = (e - a) / static_cast<scalar_t>(steps - 1);
    s.start = static_cast<double>(a);
    s.end = static_cast<double>(e);
    s.step = static_cast<double>(step);
  });
  const c10::DeviceGuard guard(out.device());
  char text[128];
  std::snprintf(text, sizeof text, "|%a,%a,%a|", s.start, s.end, s.step);
  const std::string key = std::string(name) + text + std::to_string(s.count) + "|" + std::string(isa::to_string(s.out));
  const at::Tensor& positions = device_positions(out.device());
  run_cached(out.device().index(), key,
             [&](const compiler::Target& tg) {
               return compiler::compile_linspace(s, static_cast<std::uint64_t>(positions.numel()), tg, name);
             },
             {device_address(out), device_address(positions)}, name,
             Traffic{.read = 0, .written = static_cast<std::uint64_t>(out.numel() * out.element_size())});
  return out;
}

// cumsum along `dim` (the sums of sampling's sorted probabilities, and the like): float
// tensors on the device, the dim moved last (compiler/sequence.h, summed in fp32);
// integer and bool inputs (summed as int64), float64 and empty tensors on the CPU,
// counted. The result dtype as PyTorch's: `dtype`, else the out tensor's, else int64
// for integers and the input's own.
at::Tensor cumsum_impl(const char* name, const at::Tensor& self, std::int64_t dim,
                       std::optional<c10::ScalarType> dtype, const at::Tensor& out) {
  const std::int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const c10::ScalarType result_type =
      dtype ? *dtype
            : out.defined() ? out.scalar_type()
                            : (at::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? at::kLong : self.scalar_type());
  const auto is_float = [](c10::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; };
  at::Tensor result;
  if (!is_float(self.scalar_type()) || !is_float(result_type) || self.numel() == 0) {
    if (self.numel() > 0) count_fallback(name);
    result = at::cumsum(self.cpu(), d, result_type).to(self.device());
  } else {
    const c10::DeviceGuard guard(self.device());
    const at::Tensor moved = (self.dim() == 0 ? self.reshape({1}) : self.movedim(d, -1)).contiguous();
    const std::int64_t size = moved.size(-1);
    at::Tensor y = at::empty(moved.sizes(), self.options().dtype(result_type));
    compiler::CumsumShape s;
    s.rows = static_cast<std::uint64_t>(moved.numel() / size);
    s.cols = static_cast<std::uint64_t>(size);
    s.in = *device_dtype(self.scalar_type());
    s.out = *device_dtype(result_type);
    const std::string key = std::string(name) + "|" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "|" +
                            std::string(isa::to_string(s.in)) + ">" + std::string(isa::to_string(s.out));
    run_cached(self.device().index(), key,
               [&](const compiler::Target& t) { return compiler::compile_cumsum(s, t, name); },
               {device_address(moved), device_address(y), device_address(device_positions(self.device()))}, name,
               Traffic{.read = static_cast<std::uint64_t>(moved.numel() * moved.element_size()),
                       .written = static_cast<std::uint64_t>(y.numel() * y.element_size())});
    result = self.dim() == 0 ? y.reshape({}) : y.movedim(-1, d);
    if (!result.is_contiguous()) result = result.contiguous();
  }
  return deliver(result, out, OutDtype::exact);
}
at::Tensor cumsum(const at::Tensor& self, std::int64_t dim, std::optional<c10::ScalarType> dtype) {
  return cumsum_impl("aten::cumsum", self, dim, dtype, at::Tensor());
}
at::Tensor& cumsum_out(const at::Tensor& self, std::int64_t dim, std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  cumsum_impl("aten::cumsum.out", self, dim, dtype, out);
  return out;
}
at::Tensor& cumsum_(at::Tensor& self, std::int64_t dim, std::optional<c10::ScalarType> dtype) {
  return cumsum_out(self, dim, dtype ? dtype : std::optional<c10::ScalarType>(self.scalar_type()), self);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("arange.start_out", arange_out);
  m.impl("linspace.out", linspace_out);
  m.impl("cumsum", cumsum);
  m.impl("cumsum.out", cumsum_out);
  m.impl("cumsum_", cumsum_);
}

}  // namespace spyre::backend
