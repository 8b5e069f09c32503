// Device kernels for elementwise unary ops on contiguous fp32/fp16/bf16 spyre tensors;
// other dtypes and layouts run on the CPU and are counted as fallbacks. The device
// computes in fp32 and rounds to the dtype (sim/README.md states the accuracy).
#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "runtime/driver.h"

namespace spyre::backend {
namespace {

template <class Cpu>
at::Tensor unary(isa::UnaryOp op, const char* name, const at::Tensor& self, Cpu&& cpu) {
  const bool on_device = self.device().type() == c10::DeviceType::PrivateUse1 && self.is_contiguous() &&
                         device_dtype(self.scalar_type()) && self.numel() > 0;
  if (!on_device) {
    count_fallback(name);
    return cpu(self.cpu()).to(self.device());
  }
  return run_elementwise(name, {self}, [&](isa::DType dtype, std::uint64_t count, const compiler::Target& t) {
    return compiler::compile_unary(op, dtype, count, t, name);
  });
}

#define SPYRE_UNARY(fn, op, aten_name)                                                            \
  at::Tensor fn(const at::Tensor& self) {                                                         \
    return unary(isa::UnaryOp::op, aten_name, self, [](const at::Tensor& t) { return at::fn(t); }); \
  }
SPYRE_UNARY(neg, neg, "aten::neg")
SPYRE_UNARY(abs, abs, "aten::abs")
SPYRE_UNARY(exp, exp, "aten::exp")
SPYRE_UNARY(log, log, "aten::log")
SPYRE_UNARY(sqrt, sqrt, "aten::sqrt")
SPYRE_UNARY(rsqrt, rsqrt, "aten::rsqrt")
SPYRE_UNARY(reciprocal, reciprocal, "aten::reciprocal")
SPYRE_UNARY(relu, relu, "aten::relu")
SPYRE_UNARY(sigmoid, sigmoid, "aten::sigmoid")
SPYRE_UNARY(tanh, tanh, "aten::tanh")
SPYRE_UNARY(silu, silu, "aten::silu")
SPYRE_UNARY(erf, erf, "aten::erf")
#undef SPYRE_UNARY

at::Tensor gelu(const at::Tensor& self, c10::string_view approximate) {
  const bool tanh_form = approximate == "tanh";
  return unary(tanh_form ? isa::UnaryOp::gelu_tanh : isa::UnaryOp::gelu, tanh_form ? "aten::gelu.tanh" : "aten::gelu",
               self, [&](const at::Tensor& t) { return at::gelu(t, approximate); });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("neg", neg);
  m.impl("abs", abs);
  m.impl("exp", exp);
  m.impl("log", log);
  m.impl("sqrt", sqrt);
  m.impl("rsqrt", rsqrt);
  m.impl("reciprocal", reciprocal);
  m.impl("relu", relu);
  m.impl("sigmoid", sigmoid);
  m.impl("tanh", tanh);
  m.impl("silu", silu);
  m.impl("erf", erf);
  m.impl("gelu", gelu);
}

}  // namespace spyre::backend
