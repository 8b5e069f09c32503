// nll_loss_forward and nll_loss_backward on the device (F.nll_loss, and so
// F.cross_entropy after its log_softmax), for fp32/fp16/bf16 log-probabilities [N, C]
// or [C] with int64 targets, any class weights, reduction none/sum/mean and
// ignore_index, in the CPU's formulas:
//   loss_i = -w[t_i] x self[i, t_i] (0 where t_i == ignore_index)
//   none: loss; sum: sum_i loss_i; mean: sum_i loss_i / sum_i w[t_i], the total weight.
//   grad_input[i, c] = c == t_i ? -w[t_i] x g_i : 0, g the output gradient (divided by
//   the total weight for mean).
// The targets' int64 words are read as int32 (a class index fits one): the ignored
// ones found by comparing both words, the others' positions i x C + t_i made in one
// kernel; self[i, t_i] and w[t_i] are then index_select gathers (a target outside
// [0, C) is a device fault naming the index, as CUDA's assert), the losses one kernel,
// the sums device reductions; the gradient one kernel comparing each column with the
// row's target. nll_loss2d (log-probabilities [N, C, H, W], targets [N, H, W]: a
// segmentation's cross_entropy) is the same with one sample per pixel, the classes
// moved last (a copy unless the input is channels-last). Other dtypes and shapes run on
// the CPU, counted. mse_loss and its backward are below.
#include <ATen/TensorIterator.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/mse_loss_backward.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/nll_loss2d_backward.h>
#include <ATen/ops/nll_loss2d_forward.h>
#include <ATen/ops/nll_loss_backward.h>
#include <ATen/ops/nll_loss_forward.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/div.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/out.h"
#include "aten/pointwise.h"

namespace spyre::backend {
namespace {

using compiler::Step;
using compiler::Value;
constexpr auto i32 = isa::DType::int32;
constexpr auto f32 = isa::DType::fp32;

// PyTorch's check of the class weights, before either path.
void check_weight(const at::Tensor& self, const at::Tensor& weight) {
  const std::int64_t classes = self.dim() == 0 ? 1 : self.size(-1);
  TORCH_CHECK(!weight.defined() || (weight.dim() <= 1 && weight.numel() == classes),
              "weight tensor should be defined either for all ", classes,
              " classes or no classes but got weight tensor of shape: ", weight.sizes());
}

bool on_device(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight) {
  check_weight(self, weight);
  return self.device().type() == c10::DeviceType::PrivateUse1 && device_float_dtype(self.scalar_type()) &&
         (self.dim() == 1 || self.dim() == 2) && target.scalar_type() == at::kLong &&
         target.device() == self.device() && target.dim() == self.dim() - 1 && self.numel() > 0 &&
         (!weight.defined() || (weight.device() == self.device() && device_float_dtype(weight.scalar_type()))) &&
         self.size(-1) < (1ll << 24) && self.numel() < (1ll << 31);
}

void pointwise(const char* name, at::Tensor& out, std::initializer_list<at::Tensor> inputs,
               const std::vector<Step>& steps) {
  run_pointwise_into(name, out, std::vector<at::Tensor>(inputs), steps);
}

// Per sample: whether its target is ignored, and its class (0 when ignored), int32.
struct Targets {
  at::Tensor ignored, cls;
};
Targets targets(const char* name, const at::Tensor& target, std::int64_t ignore_index) {
  const at::Tensor t = target.reshape({-1});
  const at::Tensor lo = int64_word(t, 0), hi = int64_word(t, 1);
  const auto ig = static_cast<std::uint64_t>(ignore_index);
  const auto ig_lo = static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(ig)));
  const auto ig_hi = static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(ig >> 32)));
  Targets r;
  r.ignored = at::empty({t.numel()}, t.options().dtype(at::kBool));
  pointwise(name, r.ignored, {lo, hi},
            {Step::compare(isa::CompareOp::eq, i32, Value::input(0), Value::constant(ig_lo)),
             Step::compare(isa::CompareOp::eq, i32, Value::input(1), Value::constant(ig_hi)),
             Step::binary(isa::BinaryOp::min, isa::DType::boolean, Value::step(0), Value::step(1))});
  r.cls = at::empty({t.numel()}, t.options().dtype(at::kInt));
  pointwise(name, r.cls, {lo, r.ignored}, {Step::select(i32, Value::input(1), Value::constant(0), Value::input(0))});
  return r;
}

// w[t_i], 0 for an ignored target (fp32).
at::Tensor sample_weights(const char* name, const Targets& t, const at::Tensor& weight) {
  at::Tensor w = at::empty({t.cls.numel()}, t.cls.options().dtype(at::kFloat));
  if (weight.defined()) {
    const at::Tensor picked = at::index_select(weight, 0, t.cls);
    pointwise(name, w, {picked, t.ignored}, {Step::select(f32, Value::input(1), Value::constant(0), Value::input(0))});
  } else {
    pointwise(name, w, {t.ignored}, {Step::select(f32, Value::input(0), Value::constant(0), Value::constant(1))});
  }
  return w;
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward_device(const at::Tensor& self, const at::Tensor& target,
                                                           const std::optional<at::Tensor>& weight_in,
                                                           std::int64_t reduction, std::int64_t ignore_index) {
  const at::Tensor weight = weight_in && weight_in->defined() ? *weight_in : at::Tensor();
  const char* name = "aten::nll_loss_forward";
  if (!on_device(self, target, weight) || (self.dim() == 2 && self.size(0) != target.size(0))) {
    count_fallback(name);
    auto [o, t] = at::nll_loss_forward(self.cpu(), target.cpu(), weight.defined() ? std::optional(weight.cpu()) : std::nullopt,
                                       reduction, ignore_index);
    return {o.to(self.device()), t.to(self.device())};
  }
  const c10::DeviceGuard guard(self.device());
  const std::int64_t classes = self.size(-1), n = self.dim() == 2 ? self.size(0) : 1;
  const Targets t = targets(name, target, ignore_index);
  const at::Tensor w = sample_weights(name, t, weight);
  // Positions i x C + t_i in the flattened log-probabilities, then their values.
  const at::Tensor rows = at::arange(n, self.options().dtype(at::kInt));
  at::Tensor flat = at::empty({n}, rows.options());
  pointwise(name, flat, {rows, t.cls},
            {Step::binary(isa::BinaryOp::mul, i32, Value::input(0), Value::constant(static_cast<double>(classes))),
             Step::binary(isa::BinaryOp::add, i32, Value::step(0), Value::input(1))});
  const at::Tensor picked = at::index_select(self.reshape({-1}), 0, flat);
  at::Tensor losses = at::empty({n}, self.options().dtype(reduction == at::Reduction::None ? self.scalar_type() : at::kFloat));
  pointwise(name, losses, {picked, w},
            {Step::binary(isa::BinaryOp::mul, f32, Value::input(0), Value::input(1)),
             Step::unary(isa::UnaryOp::neg, f32, Value::step(0))});
  if (reduction == at::Reduction::None) {
    return {self.dim() == 1 ? losses.reshape({}) : losses, at::zeros({}, self.options())};
  }
  const at::Tensor total = at::sum(w);
  at::Tensor sum = at::sum(losses);
  if (reduction == at::Reduction::Mean) sum = at::div(sum, total);
  return {sum.to(self.scalar_type()), total.to(self.scalar_type())};
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_out(const at::Tensor& self, const at::Tensor& target,
                                                          const std::optional<at::Tensor>& weight,
                                                          std::int64_t reduction, std::int64_t ignore_index,
                                                          at::Tensor& output, at::Tensor& total_weight) {
  auto [o, t] = nll_loss_forward_device(self, target, weight, reduction, ignore_index);
  deliver(o, output);
  deliver(t, total_weight);
  return {output, total_weight};
}

at::Tensor nll_loss_backward_device(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                    const std::optional<at::Tensor>& weight_in, std::int64_t reduction,
                                    std::int64_t ignore_index, const at::Tensor& total_weight) {
  const at::Tensor weight = weight_in && weight_in->defined() ? *weight_in : at::Tensor();
  const char* name = "aten::nll_loss_backward";
  if (!on_device(self, target, weight) || grad_output.device() != self.device() ||
      !device_float_dtype(grad_output.scalar_type()) || !device_float_dtype(total_weight.scalar_type())) {
    count_fallback(name);
    return at::nll_loss_backward(grad_output.cpu(), self.cpu(), target.cpu(),
                                 weight.defined() ? std::optional(weight.cpu()) : std::nullopt, reduction,
                                 ignore_index, total_weight.cpu())
        .to(self.device());
  }
  const c10::DeviceGuard guard(self.device());
  const std::int64_t classes = self.size(-1), n = self.dim() == 2 ? self.size(0) : 1;
  const Targets t = targets(name, target, ignore_index);
  const at::Tensor w = sample_weights(name, t, weight);
  // g_i: the output gradient per sample (none), or the one value, / the total weight (mean).
  const at::Tensor g = reduction == at::Reduction::None ? grad_output.reshape({n}) : grad_output.reshape({1});
  at::Tensor v = at::empty({n}, w.options());
  if (reduction == at::Reduction::Mean) {
    const at::Tensor total = total_weight.reshape({1});
    pointwise(name, v, {w, g, total},
              {Step::binary(isa::BinaryOp::mul, f32, Value::input(0), Value::input(1)),
               Step::binary(isa::BinaryOp::div, f32, Value::step(0), Value::input(2)),
               Step::unary(isa::UnaryOp::neg, f32, Value::step(1))});
  } else {
    pointwise(name, v, {w, g},
              {Step::binary(isa::BinaryOp::mul, f32, Value::input(0), Value::input(1)),
               Step::unary(isa::UnaryOp::neg, f32, Value::step(0))});
  }
  const at::Tensor columns = at::arange(classes, self.options().dtype(at::kInt)).reshape({1, classes});
  at::Tensor grad = at::empty({n, classes}, self.options());
  pointwise(name, grad, {columns, t.cls.reshape({n, 1}), v.reshape({n, 1})},
            {Step::compare(isa::CompareOp::eq, i32, Value::input(0), Value::input(1)),
             Step::select(f32, Value::step(0), Value::input(2), Value::constant(0))});
  return self.dim() == 1 ? grad.reshape({classes}) : grad;
}

at::Tensor& nll_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                  const std::optional<at::Tensor>& weight, std::int64_t reduction,
                                  std::int64_t ignore_index, const at::Tensor& total_weight, at::Tensor& grad_input) {
  deliver(nll_loss_backward_device(grad_output, self, target, weight, reduction, ignore_index, total_weight),
          grad_input);
  return grad_input;
}

// nll_loss2d as nll_loss over pixels: [N, C, H, W] -> [N x H x W, C], targets flat;
// nullopt (the CPU's op, with its shape errors) when the shapes do not pair up or the
// pixels' problem is not one the device takes.
struct Pixels {
  at::Tensor self, target;
};
std::optional<Pixels> pixels(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight) {
  if (self.dim() != 4 || target.dim() != 3 || target.size(0) != self.size(0) || target.size(1) != self.size(2) ||
      target.size(2) != self.size(3)) {
    return std::nullopt;
  }
  Pixels p{self.permute({0, 2, 3, 1}).reshape({-1, self.size(1)}), target.reshape({-1})};
  if (!on_device(p.self, p.target, weight)) return std::nullopt;
  return p;
}

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward_device(const at::Tensor& self, const at::Tensor& target,
                                                             const std::optional<at::Tensor>& weight_in,
                                                             std::int64_t reduction, std::int64_t ignore_index) {
  const at::Tensor weight = weight_in && weight_in->defined() ? *weight_in : at::Tensor();
  const auto p = self.device() == target.device() ? pixels(self, target, weight) : std::nullopt;
  if (!p) {
    count_fallback("aten::nll_loss2d_forward");
    auto [o, t] = at::nll_loss2d_forward(self.cpu(), target.cpu(),
                                         weight.defined() ? std::optional(weight.cpu()) : std::nullopt, reduction,
                                         ignore_index);
    return {o.to(self.device()), t.to(self.device())};
  }
  auto [o, t] = nll_loss_forward_device(p->self, p->target, weight_in, reduction, ignore_index);
  return {reduction == at::Reduction::None ? o.reshape(target.sizes()) : o, t};
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss2d_forward_out(const at::Tensor& self, const at::Tensor& target,
                                                            const std::optional<at::Tensor>& weight,
                                                            std::int64_t reduction, std::int64_t ignore_index,
                                                            at::Tensor& output, at::Tensor& total_weight) {
  auto [o, t] = nll_loss2d_forward_device(self, target, weight, reduction, ignore_index);
  deliver(o, output);
  deliver(t, total_weight);
  return {output, total_weight};
}

at::Tensor nll_loss2d_backward_device(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                      const std::optional<at::Tensor>& weight_in, std::int64_t reduction,
                                      std::int64_t ignore_index, const at::Tensor& total_weight) {
  const at::Tensor weight = weight_in && weight_in->defined() ? *weight_in : at::Tensor();
  const auto p = self.device() == target.device() ? pixels(self, target, weight) : std::nullopt;
  const bool grad_fits = reduction == at::Reduction::None ? grad_output.sizes() == target.sizes() : grad_output.numel() == 1;
  if (!p || !grad_fits) {
    count_fallback("aten::nll_loss2d_backward");
    return at::nll_loss2d_backward(grad_output.cpu(), self.cpu(), target.cpu(),
                                   weight.defined() ? std::optional(weight.cpu()) : std::nullopt, reduction,
                                   ignore_index, total_weight.cpu())
        .to(self.device());
  }
  const at::Tensor g = reduction == at::Reduction::None ? grad_output.reshape({-1}) : grad_output;
  const at::Tensor grad = nll_loss_backward_device(g, p->self, p->target, weight_in, reduction, ignore_index, total_weight);
  // [N x H x W, C] back to [N, C, H, W] sizes (channels-last strides).
  return grad.reshape({self.size(0), self.size(2), self.size(3), self.size(1)}).permute({0, 3, 1, 2});
}

at::Tensor& nll_loss2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                    const std::optional<at::Tensor>& weight, std::int64_t reduction,
                                    std::int64_t ignore_index, const at::Tensor& total_weight, at::Tensor& grad_input) {
  deliver(nll_loss2d_backward_device(grad_output, self, target, weight, reduction, ignore_index, total_weight),
          grad_input);
  return grad_input;
}

// ---- mse_loss ------------------------------------------------------------------------

// (input - target)^2 per element (input and target broadcast, as the CPU's), one kernel
// computing in the dtype as the CPU's kernel does (fp16/bf16: the difference rounded,
// then its square); then the device's mean or sum. The gradient is one kernel:
// (norm x (input - target)) x grad, norm 2 / numel for mean and 2 otherwise held in the
// dtype, in the CPU kernel's order and roundings. Other dtypes and devices run on the
// CPU, counted.
bool mse_on_device(std::initializer_list<const at::Tensor*> ts) {
  const at::Tensor& first = **ts.begin();
  for (const at::Tensor* t : ts) {
    if (t->device() != first.device() || t->scalar_type() != first.scalar_type()) return false;
  }
  return first.device().type() == c10::DeviceType::PrivateUse1 && device_float_dtype(first.scalar_type()).has_value();
}

at::Tensor mse_loss_device(const at::Tensor& self, const at::Tensor& target, std::int64_t reduction) {
  if (!mse_on_device({&self, &target})) {
    count_fallback("aten::mse_loss");
    return at::mse_loss(self.cpu(), target.cpu(), reduction).to(self.device());
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor squares = at::empty(at::infer_size(self.sizes(), target.sizes()), self.options());
  const isa::DType c = *device_float_dtype(self.scalar_type());
  if (squares.numel() > 0) {
    pointwise("aten::mse_loss", squares, {self, target},
              {Step::binary(isa::BinaryOp::sub, c, Value::input(0), Value::input(1)),
               Step::binary(isa::BinaryOp::mul, c, Value::step(0), Value::step(0))});
  }
  if (reduction == at::Reduction::Mean) return at::mean(squares);
  if (reduction == at::Reduction::Sum) return at::sum(squares);
  return squares;
}

at::Tensor& mse_loss_device_out(const at::Tensor& self, const at::Tensor& target, std::int64_t reduction,
                                at::Tensor& out) {
  deliver(mse_loss_device(self, target, reduction), out);
  return out;
}

at::Tensor mse_loss_backward_device(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                    std::int64_t reduction) {
  if (!mse_on_device({&self, &target, &grad}) || at::infer_size(self.sizes(), target.sizes()) != self.sizes() ||
      (grad.dim() > 0 && grad.sizes() != self.sizes())) {
    count_fallback("aten::mse_loss_backward");
    return at::mse_loss_backward(grad.cpu(), self.cpu(), target.cpu(), reduction).to(self.device());
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
  if (out.numel() == 0) return out;
  // norm as the CPU kernel holds it: a value of the input's dtype.
  const double norm = at::scalar_tensor(reduction == at::Reduction::Mean ? 2.0 / static_cast<double>(self.numel()) : 2.0,
                                        at::TensorOptions().dtype(self.scalar_type()))
                          .item<double>();
  const isa::DType c = *device_float_dtype(self.scalar_type());
  pointwise("aten::mse_loss_backward", out, {self, target, grad},
            {Step::binary(isa::BinaryOp::sub, c, Value::input(0), Value::input(1)),
             Step::binary(isa::BinaryOp::mul, c, Value::constant(norm), Value::step(0)),
             Step::binary(isa::BinaryOp::mul, c, Value::step(1), Value::input(2))});
  return out;
}

at::Tensor& mse_loss_backward_device_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                         std::int64_t reduction, at::Tensor& grad_input) {
  deliver(mse_loss_backward_device(grad, self, target, reduction), grad_input);
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mse_loss", mse_loss_device);
  m.impl("mse_loss.out", mse_loss_device_out);
  m.impl("mse_loss_backward", mse_loss_backward_device);
  m.impl("mse_loss_backward.grad_input", mse_loss_backward_device_out);
  m.impl("nll_loss2d_forward", nll_loss2d_forward_device);
  m.impl("nll_loss2d_forward.output", nll_loss2d_forward_out);
  m.impl("nll_loss2d_backward", nll_loss2d_backward_device);
  m.impl("nll_loss2d_backward.grad_input", nll_loss2d_backward_out);
  m.impl("nll_loss_forward", nll_loss_forward_device);
  m.impl("nll_loss_forward.output", nll_loss_forward_out);
  m.impl("nll_loss_backward", nll_loss_backward_device);
  m.impl("nll_loss_backward.grad_input", nll_loss_backward_out);
}

}  // namespace spyre::backend
