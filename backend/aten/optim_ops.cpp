// The fused optimizer steps PyTorch 2.6 offers a PrivateUse1 device (`fused=True`):
// _fused_adamw_, _fused_adam_ and _fused_sgd_, on the device in the formulas of
// PyTorch's CUDA kernels (fused_adam_utils.cuh, FusedSgdKernel.cu): a few pointwise
// kernels per parameter, each updating one state tensor in place, launched phase by
// phase with every parameter's kernel of a phase in one launch (aten/pointwise.h,
// PointwiseGroup): SGD two launches a step, Adam(W) two (three with amsgrad). Nothing
// is read back to the host: a step count is a device tensor, so the bias corrections
// 1 - beta^step are computed in the parameter's kernel; grad_scale divides the gradients and a nonzero found_inf
// leaves every tensor as it was (an AMP step whose gradients overflowed), both as 0-d
// device operands of every kernel. Tensors of other dtypes or devices are refused
// (NotImplementedError naming the default implementation to use); the tensor-lr
// overloads take the CPU fallback (counted).
//   adam(w):  g' = (maximize ? -g : g) / grad_scale
//             adamw: p -= lr wd p;  adam: g' += wd p
//             m = beta1 m + (1 - beta1) g';  v = beta2 v + (1 - beta2) g'^2
//             amsgrad: vmax = max(vmax, v), v' = vmax (else v' = v)
//             p -= (lr / (1 - beta1^t)) m / (sqrt(v') / sqrt(1 - beta2^t) + eps)
//   sgd:      g' = (maximize ? -g : g) / grad_scale + wd p
//             momentum: b = first step ? g' : momentum b + (1 - dampening) g';
//                       g' = nesterov ? g' + momentum b : b
//             p -= lr g'
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/pointwise.h"

namespace spyre::backend {
namespace {

using compiler::Step;
using compiler::Value;
using isa::BinaryOp;
constexpr auto f32 = isa::DType::fp32;

Value in(std::uint32_t i) { return Value::input(i); }
Value st(std::uint32_t i) { return Value::step(i); }
Value k(double v) { return Value::constant(v); }

bool device_floats(at::TensorList list, c10::Device device) {
  for (const at::Tensor& t : list) {
    if (!t.defined() || t.device() != device || !device_float_dtype(t.scalar_type())) return false;
  }
  return true;
}

// Steps that append to `s` the step's gradient g' from inputs grad, grad_scale
// (1 when none) and the parameter (for sgd's or adam's decay), and return it.
Value scaled_grad(std::vector<Step>& s, bool maximize, std::uint32_t grad, std::uint32_t scale) {
  s.push_back(Step::binary(BinaryOp::div, f32, in(grad), in(scale)));
  if (maximize) s.push_back(Step::unary(isa::UnaryOp::neg, f32, st(static_cast<std::uint32_t>(s.size() - 1))));
  return st(static_cast<std::uint32_t>(s.size() - 1));
}

// The last step: the new value where found_inf is 0, else the old one.
void unless_inf(std::vector<Step>& s, std::uint32_t found_inf, std::uint32_t old) {
  const Value updated = st(static_cast<std::uint32_t>(s.size() - 1));
  s.push_back(Step::compare(isa::CompareOp::ne, f32, in(found_inf), k(0)));
  s.push_back(Step::select(f32, st(static_cast<std::uint32_t>(s.size() - 1)), in(old), updated));
}

struct Amp {
  at::Tensor scale, found_inf;
};
Amp amp_operands(const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf,
                 c10::Device device) {
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  Amp a;
  a.scale = grad_scale && grad_scale->defined() ? grad_scale->reshape({}).to(at::kFloat) : at::ones({}, options);
  a.found_inf = found_inf && found_inf->defined() ? found_inf->reshape({}).to(at::kFloat) : at::zeros({}, options);
  return a;
}

void adam_on_device(const char* name, bool adamw, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                    at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList steps, double lr,
                    double beta1, double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                    const Amp& amp) {
  const std::size_t n = params.size();
  // The device step counts (already incremented) as 0-d fp32 tensors.
  std::vector<at::Tensor> step(n);
  for (std::size_t i = 0; i < n; ++i) step[i] = steps[i].reshape({}).to(at::kFloat);
  // Phase by phase, every parameter's kernel of a phase in one launch (the group
  // launches a phase when the next reads what it wrote): the moments, then amsgrad's
  // maxima, then the parameters.
  PointwiseGroup group(name);
  // Inputs: 0 the state, 1 grad, 2 scale, 3 found_inf, 4 param.
  const auto moment = [&](std::size_t i, at::Tensor state, double beta, bool squared) {
    std::vector<Step> s;
    Value gg = scaled_grad(s, maximize, 1, 2);
    if (!adamw && weight_decay != 0) {
      s.push_back(Step::binary(BinaryOp::mul, f32, in(4), k(weight_decay)));
      s.push_back(Step::binary(BinaryOp::add, f32, gg, st(static_cast<std::uint32_t>(s.size() - 1))));
      gg = st(static_cast<std::uint32_t>(s.size() - 1));
    }
    if (squared) {
      s.push_back(Step::binary(BinaryOp::mul, f32, gg, gg));
      gg = st(static_cast<std::uint32_t>(s.size() - 1));
    }
    s.push_back(Step::binary(BinaryOp::mul, f32, k(beta), in(0)));
    const auto a = static_cast<std::uint32_t>(s.size() - 1);
    s.push_back(Step::binary(BinaryOp::mul, f32, k(1 - beta), gg));
    s.push_back(Step::binary(BinaryOp::add, f32, st(a), st(a + 1)));
    unless_inf(s, 3, 0);
    run_pointwise_into(name, state, {state, grads[i], amp.scale, amp.found_inf, params[i]}, s);
  };
  for (std::size_t i = 0; i < n; ++i) {
    moment(i, exp_avgs[i], beta1, false);
    moment(i, exp_avg_sqs[i], beta2, true);
  }
  if (amsgrad) {
    for (std::size_t i = 0; i < n; ++i) {
      at::Tensor vmax = max_exp_avg_sqs[i];
      std::vector<Step> s{Step::binary(BinaryOp::max, f32, in(0), in(1))};
      unless_inf(s, 2, 0);
      run_pointwise_into(name, vmax, {vmax, exp_avg_sqs[i], amp.found_inf}, s);
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    at::Tensor p = params[i];
    // Inputs: 0 param, 1 m, 2 v', 3 step, 4 found_inf. The bias corrections
    // 1 - beta^step come from the step count in the kernel (scalar steps).
    std::vector<Step> s{Step::binary(BinaryOp::pow, f32, k(beta1), in(3)),  // 0
                        Step::binary(BinaryOp::sub, f32, k(1), st(0)),      // 1: bc1
                        Step::binary(BinaryOp::pow, f32, k(beta2), in(3)),  // 2
                        Step::binary(BinaryOp::sub, f32, k(1), st(2))};     // 3: bc2
    Value param = in(0);
    if (adamw && weight_decay != 0) {
      s.push_back(Step::binary(BinaryOp::mul, f32, k(lr * weight_decay), in(0)));
      s.push_back(Step::binary(BinaryOp::sub, f32, in(0), st(4)));
      param = st(5);
    }
    const auto at = static_cast<std::uint32_t>(s.size());
    s.push_back(Step::unary(isa::UnaryOp::sqrt, f32, in(2)));            // at: sqrt(v')
    s.push_back(Step::unary(isa::UnaryOp::sqrt, f32, st(3)));            // at + 1: sqrt(bc2)
    s.push_back(Step::binary(BinaryOp::div, f32, st(at), st(at + 1)));
    s.push_back(Step::binary(BinaryOp::add, f32, st(at + 2), k(eps)));  // at + 3: the denominator
    s.push_back(Step::binary(BinaryOp::div, f32, k(lr), st(1)));          // at + 4: the step size
    s.push_back(Step::binary(BinaryOp::mul, f32, st(at + 4), in(1)));
    s.push_back(Step::binary(BinaryOp::div, f32, st(at + 5), st(at + 3)));
    s.push_back(Step::binary(BinaryOp::sub, f32, param, st(at + 6)));
    unless_inf(s, 4, 0);
    run_pointwise_into(name, p, {p, exp_avgs[i], amsgrad ? max_exp_avg_sqs[i] : exp_avg_sqs[i], step[i], amp.found_inf},
                       s);
  }
  group.close();
}

template <bool AdamW>
void fused_adam(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                at::TensorList max_exp_avg_sqs, at::TensorList steps, double lr, double beta1, double beta2,
                double weight_decay, double eps, bool amsgrad, bool maximize,
                const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const char* name = AdamW ? "aten::_fused_adamw_" : "aten::_fused_adam_";
  if (params.empty()) return;
  const c10::Device device = params[0].device();
  TORCH_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                  exp_avg_sqs.size() == params.size() && steps.size() == params.size() &&
                  (!amsgrad || max_exp_avg_sqs.size() == params.size()),
              name, ": expected one gradient, state and step per parameter (", params.size(), " parameters)");
  const bool ok = device_floats(params, device) && device_floats(grads, device) && device_floats(exp_avgs, device) &&
                  device_floats(exp_avg_sqs, device) && device_floats(steps, device) &&
                  (!amsgrad || device_floats(max_exp_avg_sqs, device));
  if (!ok) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, name, ": the fused step takes fp32/fp16/bf16 tensors on one spyre device; use "
                                "the optimizer's default (foreach) implementation for these");
  }
  const c10::DeviceGuard guard(device);
  adam_on_device(name, AdamW, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, amp_operands(grad_scale, found_inf, device));
}

void fused_sgd(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double weight_decay,
               double momentum, double lr, double dampening, bool nesterov, bool maximize, bool is_first_step,
               const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const char* name = "aten::_fused_sgd_";
  if (params.empty()) return;
  const c10::Device device = params[0].device();
  TORCH_CHECK(grads.size() == params.size() && (momentum == 0 || momentum_buffers.size() == params.size()), name,
              ": expected one gradient (and momentum buffer) per parameter (", params.size(), " parameters)");
  TORCH_CHECK_NOT_IMPLEMENTED(device_floats(params, device) && device_floats(grads, device) &&
                                  (momentum == 0 || device_floats(momentum_buffers, device)),
                              name, ": the fused step takes fp32/fp16/bf16 tensors on one spyre device; use the "
                              "optimizer's default (foreach) implementation for these");
  const c10::DeviceGuard guard(device);
  const Amp amp = amp_operands(grad_scale, found_inf, device);
  // g' = (maximize ? -g : g) / scale + wd p; inputs 0 grad, 1 scale, 2 param.
  const auto gradient = [&](std::vector<Step>& s) {
    Value gg = scaled_grad(s, maximize, 0, 1);
    if (weight_decay != 0) {
      s.push_back(Step::binary(BinaryOp::mul, f32, k(weight_decay), in(2)));
      s.push_back(Step::binary(BinaryOp::add, f32, gg, st(static_cast<std::uint32_t>(s.size() - 1))));
      gg = st(static_cast<std::uint32_t>(s.size() - 1));
    }
    return gg;
  };
  // The momentum buffer: inputs 0 grad, 1 scale, 2 param, 3 buffer, 4 found_inf.
  const auto buffer = [&](std::size_t i) {
    at::Tensor b = momentum_buffers[i];
    std::vector<Step> s;
    const Value gg = gradient(s);
    if (is_first_step) {
      s.push_back(Step::binary(BinaryOp::mul, f32, gg, k(1)));
    } else {
      s.push_back(Step::binary(BinaryOp::mul, f32, k(momentum), in(3)));
      const auto a = static_cast<std::uint32_t>(s.size() - 1);
      s.push_back(Step::binary(BinaryOp::mul, f32, k(1 - dampening), gg));
      s.push_back(Step::binary(BinaryOp::add, f32, st(a), st(a + 1)));
    }
    unless_inf(s, 4, 3);
    run_pointwise_into(name, b, {grads[i], amp.scale, params[i], b, amp.found_inf}, s);
  };
  const auto parameter = [&](std::size_t i) {
    at::Tensor p = params[i];
    if (momentum != 0) {
      // From the new buffer: inputs 0 grad, 1 scale, 2 param, 3 buffer, 4 found_inf.
      std::vector<Step> u;
      Value d = in(3);
      if (nesterov) {
        const Value g2 = gradient(u);
        u.push_back(Step::binary(BinaryOp::mul, f32, k(momentum), in(3)));
        u.push_back(Step::binary(BinaryOp::add, f32, g2, st(static_cast<std::uint32_t>(u.size() - 1))));
        d = st(static_cast<std::uint32_t>(u.size() - 1));
      }
      u.push_back(Step::binary(BinaryOp::mul, f32, k(lr), d));
      u.push_back(Step::binary(BinaryOp::sub, f32, in(2), st(static_cast<std::uint32_t>(u.size() - 1))));
      unless_inf(u, 4, 2);
      run_pointwise_into(name, p, {grads[i], amp.scale, p, momentum_buffers[i], amp.found_inf}, u);
      return;
    }
    // Inputs 0 grad, 1 scale, 2 param, 3 found_inf.
    std::vector<Step> s;
    const Value gg = gradient(s);
    s.push_back(Step::binary(BinaryOp::mul, f32, k(lr), gg));
    s.push_back(Step::binary(BinaryOp::sub, f32, in(2), st(static_cast<std::uint32_t>(s.size() - 1))));
    unless_inf(s, 3, 2);
    run_pointwise_into(name, p, {grads[i], amp.scale, p, amp.found_inf}, s);
  };
  // Every buffer in one launch, then every parameter in another (the group launches
  // the buffers when the first parameter's kernel reads one).
  PointwiseGroup group(name);
  if (momentum != 0) {
    for (std::size_t i = 0; i < params.size(); ++i) buffer(i);
  }
  for (std::size_t i = 0; i < params.size(); ++i) parameter(i);
  group.close();
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adamw_", fused_adam<true>);
  m.impl("_fused_adam_", fused_adam<false>);
  m.impl("_fused_sgd_", fused_sgd);
}

}  // namespace spyre::backend
