// Device kernels of the activations' gradients (what autograd's backward of tanh,
// sigmoid, relu, silu and gelu calls) and of the hard activations (hardswish,
// hardsigmoid, hardtanh) with their gradients, each one pointwise kernel
// (aten/pointwise_kernels.h) in the CPU kernels' order of operations.
#include <ATen/ops/gelu_backward.h>
#include <ATen/ops/hardsigmoid.h>
#include <ATen/ops/hardsigmoid_backward.h>
#include <ATen/ops/hardswish.h>
#include <ATen/ops/hardswish_backward.h>
#include <ATen/ops/hardtanh.h>
#include <ATen/ops/hardtanh_backward.h>
#include <ATen/ops/sigmoid_backward.h>
#include <ATen/ops/silu_backward.h>
#include <ATen/ops/tanh_backward.h>
#include <ATen/ops/threshold_backward.h>
#include <torch/library.h>

#include "aten/pointwise_kernels.h"

namespace spyre::backend {
namespace {

using namespace pointwise_kernels;

// ---- activation gradients --------------------------------------------------------

// What autograd's backward of tanh, sigmoid, relu (threshold_backward), silu and gelu
// calls: grad_input = grad_output x f'(x) (or f'(y) from the forward's result) as one
// kernel, fp16/bf16 computed in fp32 and rounded once, in the CPU kernels' order of
// operations (aten/src/ATen/native/cpu/BinaryOpsKernel.cpp, Activation.cpp).
// Input 0 is grad_output, input 1 x (or y).
template <class Make, class Cpu>
at::Tensor activation_grad(const char* name, at::TensorBase out, const at::Tensor& grad, const at::Tensor& x,
                           Make&& make, Cpu&& cpu_op) {
  auto iter = at::TensorIterator::binary_op(out, grad, x);
  const Steps probe = make(isa::DType::fp32);
  return finish(name, iter, iter.common_dtype(), probe.size(), make, [&] { return cpu_op(cpu(grad), cpu(x)); });
}


// grad x (1 - y^2)
Steps tanh_grad_steps(isa::DType c) {
  return {Step::binary(BinaryOp::mul, c, in(1), in(1)), Step::binary(BinaryOp::sub, c, k(1), st(0)),
          Step::binary(BinaryOp::mul, c, in(0), st(1))};
}
// grad x (1 - y) x y
Steps sigmoid_grad_steps(isa::DType c) {
  return {Step::binary(BinaryOp::sub, c, k(1), in(1)), Step::binary(BinaryOp::mul, c, in(0), st(0)),
          Step::binary(BinaryOp::mul, c, st(1), in(1))};
}
// s = sigmoid(x): grad x s x (1 + x (1 - s))
Steps silu_grad_steps(isa::DType c) {
  return {Step::unary(UnaryOp::sigmoid, c, in(1)),         Step::binary(BinaryOp::sub, c, k(1), st(0)),
          Step::binary(BinaryOp::mul, c, in(1), st(1)),     Step::binary(BinaryOp::add, c, k(1), st(2)),
          Step::binary(BinaryOp::mul, c, in(0), st(0)),     Step::binary(BinaryOp::mul, c, st(4), st(3))};
}
// grad x (Phi(x) + x phi(x)): Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi(x) = e^(-x^2/2) / sqrt(2 pi)
Steps gelu_grad_steps(isa::DType c) {
  const double alpha = M_SQRT1_2, beta = M_2_SQRTPI * M_SQRT1_2 * 0.5;
  return {Step::binary(BinaryOp::mul, c, in(1), k(alpha)),  Step::unary(UnaryOp::erf, c, st(0)),
          Step::binary(BinaryOp::add, c, st(1), k(1)),      Step::binary(BinaryOp::mul, c, st(2), k(0.5)),
          Step::binary(BinaryOp::mul, c, in(1), in(1)),     Step::binary(BinaryOp::mul, c, st(4), k(-0.5)),
          Step::unary(UnaryOp::exp, c, st(5)),              Step::binary(BinaryOp::mul, c, st(6), k(beta)),
          Step::binary(BinaryOp::mul, c, in(1), st(7)),     Step::binary(BinaryOp::add, c, st(3), st(8)),
          Step::binary(BinaryOp::mul, c, in(0), st(9))};
}
// The tanh approximation's derivative: t = tanh(b (x + k x^3)),
// grad x ((1 + t) / 2 + (x / 2)(1 - t^2) x b (1 + 3 k x^2)), b = sqrt(2 / pi), k = 0.044715
Steps gelu_tanh_grad_steps(isa::DType c) {
  const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
  return {Step::binary(BinaryOp::mul, c, in(1), in(1)),        // 0: x^2
          Step::binary(BinaryOp::mul, c, st(0), in(1)),        // 1: x^3
          Step::binary(BinaryOp::mul, c, k(kappa), st(1)),     // 2: k x^3
          Step::binary(BinaryOp::add, c, in(1), st(2)),        // 3
          Step::binary(BinaryOp::mul, c, k(beta), st(3)),      // 4: the inner value
          Step::unary(UnaryOp::tanh, c, st(4)),                // 5: t
          Step::binary(BinaryOp::mul, c, k(0.5), in(1)),       // 6: left = x / 2
          Step::binary(BinaryOp::add, c, k(1), st(5)),         // 7: right = 1 + t
          Step::binary(BinaryOp::mul, c, k(0.5), st(7)),       // 8: left's derivative
          Step::binary(BinaryOp::mul, c, st(5), st(5)),        // 9
          Step::binary(BinaryOp::sub, c, k(1), st(9)),         // 10: tanh's derivative
          Step::binary(BinaryOp::mul, c, k(3 * kappa), st(0)), // 11
          Step::binary(BinaryOp::add, c, k(1), st(11)),        // 12
          Step::binary(BinaryOp::mul, c, k(beta), st(12)),     // 13: the inner value's derivative
          Step::binary(BinaryOp::mul, c, st(6), st(10)),       // 14
          Step::binary(BinaryOp::mul, c, st(14), st(13)),      // 15: right's derivative
          Step::binary(BinaryOp::add, c, st(8), st(15)),       // 16
          Step::binary(BinaryOp::mul, c, in(0), st(16))};
}

at::Tensor tanh_backward(const at::Tensor& grad, const at::Tensor& y) {
  return activation_grad("aten::tanh_backward", at::TensorBase(), grad, y, tanh_grad_steps,
                         [](const at::Tensor& g, const at::Tensor& v) { return at::tanh_backward(g, v); });
}
at::Tensor& tanh_backward_out(const at::Tensor& grad, const at::Tensor& y, at::Tensor& out) {
  activation_grad("aten::tanh_backward.grad_input", out, grad, y, tanh_grad_steps,
                  [](const at::Tensor& g, const at::Tensor& v) { return at::tanh_backward(g, v); });
  return out;
}
at::Tensor sigmoid_backward(const at::Tensor& grad, const at::Tensor& y) {
  return activation_grad("aten::sigmoid_backward", at::TensorBase(), grad, y, sigmoid_grad_steps,
                         [](const at::Tensor& g, const at::Tensor& v) { return at::sigmoid_backward(g, v); });
}
at::Tensor& sigmoid_backward_out(const at::Tensor& grad, const at::Tensor& y, at::Tensor& out) {
  activation_grad("aten::sigmoid_backward.grad_input", out, grad, y, sigmoid_grad_steps,
                  [](const at::Tensor& g, const at::Tensor& v) { return at::sigmoid_backward(g, v); });
  return out;
}
at::Tensor silu_backward(const at::Tensor& grad, const at::Tensor& x) {
  return activation_grad("aten::silu_backward", at::TensorBase(), grad, x, silu_grad_steps,
                         [](const at::Tensor& g, const at::Tensor& v) { return at::silu_backward(g, v); });
}
at::Tensor& silu_backward_out(const at::Tensor& grad, const at::Tensor& x, at::Tensor& out) {
  activation_grad("aten::silu_backward.grad_input", out, grad, x, silu_grad_steps,
                  [](const at::Tensor& g, const at::Tensor& v) { return at::silu_backward(g, v); });
  return out;
}
Steps (*gelu_grad(c10::string_view approximate))(isa::DType) {
  return gelu_op(approximate) == UnaryOp::gelu_tanh ? gelu_tanh_grad_steps : gelu_grad_steps;
}
at::Tensor gelu_backward(const at::Tensor& grad, const at::Tensor& x, c10::string_view approximate) {
  return activation_grad("aten::gelu_backward", at::TensorBase(), grad, x, gelu_grad(approximate),
                         [&](const at::Tensor& g, const at::Tensor& v) { return at::gelu_backward(g, v, approximate); });
}
at::Tensor& gelu_backward_out(const at::Tensor& grad, const at::Tensor& x, c10::string_view approximate,
                              at::Tensor& out) {
  activation_grad("aten::gelu_backward.grad_input", out, grad, x, gelu_grad(approximate),
                  [&](const at::Tensor& g, const at::Tensor& v) { return at::gelu_backward(g, v, approximate); });
  return out;
}
// relu's backward: x <= threshold ? 0 : grad (a NaN x passes grad, as the CPU's).
at::Tensor threshold_grad(const char* name, at::TensorBase out, const at::Tensor& grad, const at::Tensor& x,
                          const c10::Scalar& threshold) {
  const double t = threshold.toDouble();
  return activation_grad(
      name, out, grad, x,
      [t](isa::DType c) {
        return Steps{Step::compare(CompareOp::le, c, in(1), k(t)), Step::select(c, st(0), k(0), in(0))};
      },
      [&](const at::Tensor& g, const at::Tensor& v) { return at::threshold_backward(g, v, threshold); });
}
at::Tensor threshold_backward(const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& threshold) {
  return threshold_grad("aten::threshold_backward", at::TensorBase(), grad, x, threshold);
}
at::Tensor& threshold_backward_out(const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& threshold,
                                   at::Tensor& out) {
  threshold_grad("aten::threshold_backward.grad_input", out, grad, x, threshold);
  return out;
}

// ---- hardswish, hardsigmoid, hardtanh and their gradients ------------------------

// One kernel each, in the CPU kernels' order of operations (Activation.cpp), fp16/bf16
// computed in fp32 and rounded once: hardswish x min(max(x + 3, 0), 6) / 6, hardsigmoid
// min(max(x + 3, 0), 6) / 6, hardtanh max(min_val) then min(max_val). Integer and bool
// inputs run on the CPU, which refuses them with its own error (or computes, hardtanh).
template <class Make, class Cpu>
at::Tensor activation(const char* name, at::TensorBase out, const at::Tensor& self, Make&& make, Cpu&& cpu_op) {
  if (!at::isFloatingType(self.scalar_type())) {
    count_fallback(name);
    at::Tensor r = cpu_op(cpu(self)).to(self.device());
    if (!out.defined()) return r;
    return deliver(r, at::Tensor(out));
  }
  auto iter = at::TensorIterator::unary_op(out, self);
  const Steps probe = make(isa::DType::fp32);
  return finish(name, iter, iter.common_dtype(), probe.size(), make, [&] { return cpu_op(cpu(self)); });
}

Steps hardsigmoid_steps(isa::DType c) {
  return {Step::binary(BinaryOp::add, c, in(0), k(3)), Step::binary(BinaryOp::max, c, st(0), k(0)),
          Step::binary(BinaryOp::min, c, st(1), k(6)), Step::binary(BinaryOp::div, c, st(2), k(6))};
}
Steps hardswish_steps(isa::DType c) {
  return {Step::binary(BinaryOp::add, c, in(0), k(3)), Step::binary(BinaryOp::max, c, st(0), k(0)),
          Step::binary(BinaryOp::min, c, st(1), k(6)), Step::binary(BinaryOp::mul, c, in(0), st(2)),
          Step::binary(BinaryOp::div, c, st(3), k(6))};
}
// x < -3: 0; x >= 3: grad; else grad x (x / 3 + 1/2). (The CPU's vectorised rule; its
// scalar tail takes x = 3 into the middle case.)
Steps hardswish_grad_steps(isa::DType c) {
  return {Step::compare(CompareOp::lt, c, in(1), k(-3)),  Step::compare(CompareOp::ge, c, in(1), k(3)),
          Step::binary(BinaryOp::div, c, in(1), k(3)),     Step::binary(BinaryOp::add, c, st(2), k(0.5)),
          Step::binary(BinaryOp::mul, c, in(0), st(3)),    Step::select(c, st(1), in(0), st(4)),
          Step::select(c, st(0), k(0), st(5))};
}
// -3 < x < 3: grad x 1/6 (the fp32 constant); else 0
Steps hardsigmoid_grad_steps(isa::DType c) {
  return {Step::compare(CompareOp::gt, c, in(1), k(-3)),
          Step::compare(CompareOp::lt, c, in(1), k(3)),
          Step::binary(BinaryOp::min, isa::DType::boolean, st(0), st(1)),
          Step::binary(BinaryOp::mul, c, in(0), k(static_cast<double>(1.0f / 6.0f))),
          Step::select(c, st(2), st(3), k(0))};
}

#define SPYRE_ACTIVATION(fn, steps)                                                                   \
  at::Tensor fn(const at::Tensor& self) {                                                             \
    return activation("aten::" #fn, at::TensorBase(), self, steps, [](const at::Tensor& t) { return at::fn(t); }); \
  }                                                                                                   \
  at::Tensor& fn##_(at::Tensor& self) {                                                               \
    activation("aten::" #fn "_", self, self, steps, [](const at::Tensor& t) { return at::fn(t); });   \
    return self;                                                                                      \
  }                                                                                                   \
  at::Tensor& fn##_out(const at::Tensor& self, at::Tensor& out) {                                     \
    activation("aten::" #fn ".out", out, self, steps, [](const at::Tensor& t) { return at::fn(t); }); \
    return out;                                                                                       \
  }
SPYRE_ACTIVATION(hardswish, hardswish_steps)
SPYRE_ACTIVATION(hardsigmoid, hardsigmoid_steps)
#undef SPYRE_ACTIVATION

at::Tensor hardtanh_impl(const char* name, at::TensorBase out, const at::Tensor& self, const c10::Scalar& lo,
                         const c10::Scalar& hi) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Bool inputs not supported for hardtanh");
  const double a = lo.toDouble(), b = hi.toDouble();
  return activation(
      name, out, self,
      [&](isa::DType c) { return Steps{Step::binary(BinaryOp::max, c, in(0), k(a)), Step::binary(BinaryOp::min, c, st(0), k(b))}; },
      [&](const at::Tensor& t) { return at::hardtanh(t, lo, hi); });
}
at::Tensor hardtanh(const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
  return hardtanh_impl("aten::hardtanh", at::TensorBase(), self, lo, hi);
}
at::Tensor& hardtanh_(at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
  hardtanh_impl("aten::hardtanh_", self, self, lo, hi);
  return self;
}
at::Tensor& hardtanh_out(const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi, at::Tensor& out) {
  hardtanh_impl("aten::hardtanh.out", out, self, lo, hi);
  return out;
}

at::Tensor hardswish_backward(const at::Tensor& grad, const at::Tensor& x) {
  return activation_grad("aten::hardswish_backward", at::TensorBase(), grad, x, hardswish_grad_steps,
                         [](const at::Tensor& g, const at::Tensor& v) { return at::hardswish_backward(g, v); });
}
at::Tensor& hardswish_backward_out(const at::Tensor& grad, const at::Tensor& x, at::Tensor& out) {
  activation_grad("aten::hardswish_backward.out", out, grad, x, hardswish_grad_steps,
                  [](const at::Tensor& g, const at::Tensor& v) { return at::hardswish_backward(g, v); });
  return out;
}
at::Tensor hardsigmoid_backward(const at::Tensor& grad, const at::Tensor& x) {
  return activation_grad("aten::hardsigmoid_backward", at::TensorBase(), grad, x, hardsigmoid_grad_steps,
                         [](const at::Tensor& g, const at::Tensor& v) { return at::hardsigmoid_backward(g, v); });
}
at::Tensor& hardsigmoid_backward_out(const at::Tensor& grad, const at::Tensor& x, at::Tensor& out) {
  activation_grad("aten::hardsigmoid_backward.grad_input", out, grad, x, hardsigmoid_grad_steps,
                  [](const at::Tensor& g, const at::Tensor& v) { return at::hardsigmoid_backward(g, v); });
  return out;
}
// x <= min_val or x >= max_val: 0; else grad
at::Tensor hardtanh_grad(const char* name, at::TensorBase out, const at::Tensor& grad, const at::Tensor& x,
                         const c10::Scalar& lo, const c10::Scalar& hi) {
  const double a = lo.toDouble(), b = hi.toDouble();
  return activation_grad(
      name, out, grad, x,
      [a, b](isa::DType c) {
        return Steps{Step::compare(CompareOp::le, c, in(1), k(a)), Step::compare(CompareOp::ge, c, in(1), k(b)),
                     Step::binary(BinaryOp::max, isa::DType::boolean, st(0), st(1)), Step::select(c, st(2), k(0), in(0))};
      },
      [&](const at::Tensor& g, const at::Tensor& v) { return at::hardtanh_backward(g, v, lo, hi); });
}
at::Tensor hardtanh_backward(const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& lo, const c10::Scalar& hi) {
  return hardtanh_grad("aten::hardtanh_backward", at::TensorBase(), grad, x, lo, hi);
}
at::Tensor& hardtanh_backward_out(const at::Tensor& grad, const at::Tensor& x, const c10::Scalar& lo,
                                  const c10::Scalar& hi, at::Tensor& out) {
  hardtanh_grad("aten::hardtanh_backward.grad_input", out, grad, x, lo, hi);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("tanh_backward", tanh_backward);
  m.impl("tanh_backward.grad_input", tanh_backward_out);
  m.impl("sigmoid_backward", sigmoid_backward);
  m.impl("sigmoid_backward.grad_input", sigmoid_backward_out);
  m.impl("hardswish", hardswish);
  m.impl("hardswish_", hardswish_);
  m.impl("hardswish.out", hardswish_out);
  m.impl("hardsigmoid", hardsigmoid);
  m.impl("hardsigmoid_", hardsigmoid_);
  m.impl("hardsigmoid.out", hardsigmoid_out);
  m.impl("hardtanh", hardtanh);
  m.impl("hardtanh_", hardtanh_);
  m.impl("hardtanh.out", hardtanh_out);
  m.impl("hardswish_backward", hardswish_backward);
  m.impl("hardswish_backward.out", hardswish_backward_out);
  m.impl("hardsigmoid_backward", hardsigmoid_backward);
  m.impl("hardsigmoid_backward.grad_input", hardsigmoid_backward_out);
  m.impl("hardtanh_backward", hardtanh_backward);
  m.impl("hardtanh_backward.grad_input", hardtanh_backward_out);
  m.impl("silu_backward", silu_backward);
  m.impl("silu_backward.grad_input", silu_backward_out);
  m.impl("gelu_backward", gelu_backward);
  m.impl("gelu_backward.grad_input", gelu_backward_out);
  m.impl("threshold_backward", threshold_backward);
  m.impl("threshold_backward.grad_input", threshold_backward_out);
}

}  // namespace spyre::backend
