// Device kernels for elementwise binary ops (add, sub, mul, div, maximum, minimum):
// contiguous spyre tensors of one shape and one float dtype (fp32, fp16, bf16) run on
// the device through the kernel compiler; other variants (broadcasting, scalars,
// alpha != 1, other dtypes, mixed devices) still run on the CPU and are counted as
// fallbacks.
#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "runtime/driver.h"

namespace spyre::backend {
namespace {

bool on_device(const at::Tensor& self, const at::Tensor& other) {
  return self.device().type() == c10::DeviceType::PrivateUse1 && other.device() == self.device() &&
         self.sizes() == other.sizes() && self.scalar_type() == other.scalar_type() &&
         device_dtype(self.scalar_type()) && self.is_contiguous() && other.is_contiguous() && self.numel() > 0;
}

at::Tensor run(isa::BinaryOp op, const char* name, const at::Tensor& self, const at::Tensor& other) {
  return run_elementwise(name, {self, other}, [&](isa::DType dtype, std::uint64_t count, const compiler::Target& t) {
    return compiler::compile_binary(op, dtype, count, t, name);
  });
}

// The same op on CPU copies, result back on the device of `self` (counted).
template <class F>
at::Tensor on_cpu(const char* name, const at::Tensor& self, const at::Tensor& other, F&& f) {
  count_fallback(name);
  const c10::Device device = self.device().type() == c10::DeviceType::PrivateUse1 ? self.device() : other.device();
  return f(self.cpu(), other.cpu()).to(device);
}

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  if (alpha.equal(1) && on_device(self, other)) return run(isa::BinaryOp::add, "aten::add.Tensor", self, other);
  return on_cpu("aten::add.Tensor", self, other, [&](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b, alpha); });
}
at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  if (alpha.equal(1) && on_device(self, other)) return run(isa::BinaryOp::sub, "aten::sub.Tensor", self, other);
  return on_cpu("aten::sub.Tensor", self, other, [&](const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b, alpha); });
}
at::Tensor mul(const at::Tensor& self, const at::Tensor& other) {
  if (on_device(self, other)) return run(isa::BinaryOp::mul, "aten::mul.Tensor", self, other);
  return on_cpu("aten::mul.Tensor", self, other, [](const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); });
}
at::Tensor div(const at::Tensor& self, const at::Tensor& other) {
  if (on_device(self, other)) return run(isa::BinaryOp::div, "aten::div.Tensor", self, other);
  return on_cpu("aten::div.Tensor", self, other, [](const at::Tensor& a, const at::Tensor& b) { return at::div(a, b); });
}
at::Tensor maximum(const at::Tensor& self, const at::Tensor& other) {
  if (on_device(self, other)) return run(isa::BinaryOp::max, "aten::maximum", self, other);
  return on_cpu("aten::maximum", self, other, [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); });
}
at::Tensor minimum(const at::Tensor& self, const at::Tensor& other) {
  if (on_device(self, other)) return run(isa::BinaryOp::min, "aten::minimum", self, other);
  return on_cpu("aten::minimum", self, other, [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", add);
  m.impl("sub.Tensor", sub);
  m.impl("mul.Tensor", mul);
  m.impl("div.Tensor", div);
  m.impl("maximum", maximum);
  m.impl("minimum", minimum);
}

}  // namespace spyre::backend
