// native_layer_norm on the device (nn.LayerNorm and F.layer_norm call it): the input
// viewed as rows of the normalised size, compiler/reduce.h compile_layer_norm per
// launch; mean and rstd come back in PyTorch's dtype and shape, so autograd's
// backward gets what it expects. native_layer_norm_backward is composed of device
// kernels in fp32 (the normalised input recomputed from mean and rstd, two row means,
// two column sums). Inputs the device cannot compute (float64, ...) run on the CPU,
// counted.
//
// rms_norm (nn.RMSNorm, F.rms_norm): PyTorch 2.6 has only its composite (an fp32
// upcast, pow, mean, add, rsqrt, mul, a cast back and the weight's mul: 8 kernels
// for fp16). Without gradients it is one kernel here (spyre::rms_norm, with a Meta
// kernel for tracing), reached from both the PrivateUse1 and the AutogradPrivateUse1
// keys; when a gradient is needed the composite runs (differentiable device ops).
#include <cstdio>

#include <ATen/ops/empty.h>
#include <ATen/ops/div.h>
#include <ATen/ops/native_batch_norm_backward.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/add.h>
#include <ATen/ops/native_batch_norm.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/native_group_norm.h>
#include <ATen/ops/native_group_norm_backward.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/native_layer_norm_backward.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/OpMathType.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/rms_norm.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <limits>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/pointwise.h"
#include "compiler/reduce.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

using Result = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

Result native_layer_norm(const at::Tensor& input, at::IntArrayRef normalized_shape,
                         const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
                         double eps) {
  static constexpr const char* kName = "aten::native_layer_norm";
  const at::Tensor weight = weight_opt.value_or(at::Tensor()), bias = bias_opt.value_or(at::Tensor());
  const auto n_dims = static_cast<std::int64_t>(normalized_shape.size());
  TORCH_CHECK(n_dims >= 1, "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one ",
              "element, but got normalized_shape = ", normalized_shape);
  TORCH_CHECK(!weight.defined() || weight.sizes().equals(normalized_shape), "Expected weight to be of same shape as ",
              "normalized_shape, but got weight of shape ", weight.sizes(), " and normalized_shape = ", normalized_shape);
  TORCH_CHECK(!bias.defined() || bias.sizes().equals(normalized_shape), "Expected bias to be of same shape as ",
              "normalized_shape, but got bias of shape ", bias.sizes(), " and normalized_shape = ", normalized_shape);
  const std::int64_t axis = input.dim() - n_dims;
  TORCH_CHECK(axis >= 0 && input.sizes().slice(static_cast<std::size_t>(axis)).equals(normalized_shape),
              "Given normalized_shape=", normalized_shape, ", expected input with shape [*, ",
              c10::Join(", ", normalized_shape), "], but got input of size", input.sizes());

  // PyTorch's dtypes: the output in the input's; mean and rstd in the parameters' when
  // a reduced-precision input has fp32 parameters, else in the input's.
  // PyTorch's rule: parameters of the input's dtype, or fp32 ones with an fp16/bf16
  // input ("mixed": then the statistics are fp32 too).
  const c10::ScalarType in_type = input.scalar_type();
  const bool reduced = in_type == at::kHalf || in_type == at::kBFloat16;
  const bool mixed = reduced && ((weight.defined() && weight.scalar_type() == at::kFloat) ||
                                 (bias.defined() && bias.scalar_type() == at::kFloat));
  const c10::ScalarType param_type = mixed ? at::kFloat : in_type;
  const auto name_of = [](const at::Tensor& t) { return t.defined() ? std::string(c10::toString(t.scalar_type())) : "-"; };
  TORCH_CHECK((!weight.defined() || weight.scalar_type() == param_type) &&
                  (!bias.defined() || bias.scalar_type() == param_type),
              "native_layer_norm: expected weight and bias of the input's dtype (", in_type,
              "), or Float with a Half or BFloat16 input; got weight ", name_of(weight), ", bias ", name_of(bias));
  const c10::ScalarType stat_type = param_type;
  std::vector<std::int64_t> stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
  stat_shape.insert(stat_shape.end(), static_cast<std::size_t>(n_dims), 1);

  const auto in_t = device_float_dtype(input.scalar_type());
  const auto stat_t = device_float_dtype(stat_type);
  const bool params_ok = (!weight.defined() || device_float_dtype(weight.scalar_type())) &&
                         (!bias.defined() || device_float_dtype(bias.scalar_type()));
  const bool same_device = (!weight.defined() || weight.device() == input.device()) &&
                           (!bias.defined() || bias.device() == input.device());
  const auto on_cpu = [&] {
    // Zero elements need no device work (PyTorch's results, e.g. NaN statistics for
    // empty rows, come from its own kernel); other dtypes, and rows too long for the
    // scratchpad, fall back, counted.
    if (input.numel() != 0) count_fallback(kName);
    const auto cpu = [](const at::Tensor& t) { return t.defined() ? t.cpu() : t; };
    auto [o, m, r] = at::native_layer_norm(input.cpu(), normalized_shape, cpu(weight), cpu(bias), eps);
    return std::tuple<at::Tensor, at::Tensor, at::Tensor>{o.to(input.device()), m.to(input.device()),
                                                          r.to(input.device())};
  };
  if (input.numel() == 0 || !in_t || !stat_t || !params_ok || !same_device) return on_cpu();

  compiler::LayerNormShape s;
  s.cols = static_cast<std::uint64_t>(c10::multiply_integers(normalized_shape));
  s.rows = static_cast<std::uint64_t>(input.numel()) / s.cols;
  s.in = *in_t;
  s.stats = *stat_t;
  if (weight.defined()) s.weight = *device_float_dtype(weight.scalar_type());
  if (bias.defined()) s.bias = *device_float_dtype(bias.scalar_type());
  s.eps = eps;
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options().memory_format(c10::MemoryFormat::Contiguous));
  at::Tensor mean = at::empty(stat_shape, input.options().dtype(stat_type));
  at::Tensor rstd = at::empty(stat_shape, input.options().dtype(stat_type));

  const c10::DeviceGuard guard(input.device());
  const c10::DeviceIndex device = input.device().index();
  char eps_text[32];
  std::snprintf(eps_text, sizeof eps_text, "%a", eps);  // exact
  const auto opt = [](const std::optional<isa::DType>& t) { return t ? std::string(isa::to_string(*t)) : "-"; };
  const std::string key = std::string(kName) + "|" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "|" +
                          std::string(isa::to_string(s.in)) + "," + opt(s.weight) + "," + opt(s.bias) + ">" +
                          std::string(isa::to_string(s.stats)) + "|" + eps_text;
  std::vector<std::uint64_t> args{device_address(x)};
  at::Tensor w, b;  // kept alive until the launch is queued
  if (weight.defined()) args.push_back(device_address(w = weight.contiguous()));
  if (bias.defined()) args.push_back(device_address(b = bias.contiguous()));
  args.insert(args.end(), {device_address(out), device_address(mean), device_address(rstd)});
  const auto bytes = [](const at::Tensor& t) {
    return t.defined() ? static_cast<std::uint64_t>(t.numel() * t.element_size()) : std::uint64_t{0};
  };
  const Traffic traffic{.read = bytes(x) + bytes(w) + bytes(b), .written = bytes(out) + bytes(mean) + bytes(rstd)};
  if (!run_cached_if_fits(device, key, [&](const compiler::Target& t) { return compiler::compile_layer_norm(s, t, kName); },
                          args, kName, traffic)) {
    return on_cpu();  // a row longer than the scratchpad holds
  }
  return {out, mean, rstd};
}

// PyTorch's rms_norm: eps (default: the input dtype's machine epsilon, as
// torch.finfo(dtype).eps) is first rounded to the input's dtype; the output dtype is
// the input's, promoted with the weight's.
double rms_eps(c10::ScalarType t, std::optional<double> eps) {
  const double e = eps ? *eps
                   : t == at::kHalf ? 0x1p-10
                   : t == at::kBFloat16 ? 0x1p-7
                   : t == at::kFloat ? double(std::numeric_limits<float>::epsilon())
                                     : std::numeric_limits<double>::epsilon();
  if (t == at::kHalf) return static_cast<float>(c10::Half(static_cast<float>(e)));
  if (t == at::kBFloat16) return static_cast<float>(c10::BFloat16(static_cast<float>(e)));
  if (t == at::kFloat) return static_cast<float>(e);
  return e;
}

c10::ScalarType rms_out_type(const at::Tensor& input, const std::optional<at::Tensor>& weight) {
  return weight && weight->defined() ? at::promote_types(input.scalar_type(), weight->scalar_type())
                                     : input.scalar_type();
}

void check_rms_args(const at::Tensor& input, at::IntArrayRef normalized_shape, const std::optional<at::Tensor>& weight) {
  const auto n = static_cast<std::int64_t>(normalized_shape.size());
  TORCH_CHECK(n >= 1, "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one ",
              "element, but got normalized_shape = ", normalized_shape);
  TORCH_CHECK(!weight || !weight->defined() || weight->sizes().equals(normalized_shape),
              "Expected weight to be of same shape as normalized_shape, but got weight of shape ", weight->sizes(),
              " and normalized_shape = ", normalized_shape);
  TORCH_CHECK(input.dim() >= n && input.sizes().slice(static_cast<std::size_t>(input.dim() - n)).equals(normalized_shape),
              "Given normalized_shape=", normalized_shape, ", expected input with shape [*, ",
              c10::Join(", ", normalized_shape), "], but got input of size", input.sizes());
}

// spyre::rms_norm on the device: one kernel (compiler/reduce.h, LayerNormShape::rms).
at::Tensor spyre_rms_norm(const at::Tensor& input, at::IntArrayRef normalized_shape,
                          const std::optional<at::Tensor>& weight_opt, std::optional<double> eps) {
  static constexpr const char* kName = "aten::rms_norm";
  check_rms_args(input, normalized_shape, weight_opt);
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const c10::ScalarType out_type = rms_out_type(input, weight_opt);
  const auto in_t = device_float_dtype(input.scalar_type()), out_t = device_float_dtype(out_type);
  const bool weight_ok = !weight.defined() || (device_float_dtype(weight.scalar_type()) &&
                                               weight.device() == input.device());
  const auto on_cpu = [&] {
    if (input.numel() != 0) count_fallback(kName);
    const std::optional<at::Tensor> w = weight.defined() ? std::optional<at::Tensor>(weight.cpu()) : std::nullopt;
    return at::rms_norm(input.cpu(), normalized_shape, w, eps).to(input.device());
  };
  if (input.numel() == 0 || !in_t || !out_t || !weight_ok) return on_cpu();
  compiler::LayerNormShape s;
  s.rms = true;
  s.cols = static_cast<std::uint64_t>(c10::multiply_integers(normalized_shape));
  s.rows = static_cast<std::uint64_t>(input.numel()) / s.cols;
  s.in = *in_t;
  s.out = *out_t;
  if (weight.defined()) s.weight = *device_float_dtype(weight.scalar_type());
  s.eps = rms_eps(input.scalar_type(), eps);
  const at::Tensor x = input.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options().dtype(out_type).memory_format(c10::MemoryFormat::Contiguous));
  const c10::DeviceGuard guard(input.device());
  char eps_text[32];
  std::snprintf(eps_text, sizeof eps_text, "%a", s.eps);  // exact
  const std::string key = std::string(kName) + "|" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "|" +
                          std::string(isa::to_string(s.in)) + "," +
                          (s.weight ? std::string(isa::to_string(*s.weight)) : "-") + ">" +
                          std::string(isa::to_string(*s.out)) + "|" + eps_text;
  std::vector<std::uint64_t> args{device_address(x)};
  at::Tensor w;  // kept alive until the launch is queued
  if (weight.defined()) args.push_back(device_address(w = weight.contiguous()));
  args.push_back(device_address(out));
  const auto bytes = [](const at::Tensor& t) {
    return t.defined() ? static_cast<std::uint64_t>(t.numel() * t.element_size()) : std::uint64_t{0};
  };
  const Traffic traffic{.read = bytes(x) + bytes(w), .written = bytes(out)};
  if (!run_cached_if_fits(input.device().index(), key,
                          [&](const compiler::Target& t) { return compiler::compile_layer_norm(s, t, kName); }, args,
                          kName, traffic)) {
    return on_cpu();  // a row longer than the scratchpad holds
  }
  return out;
}

at::Tensor spyre_rms_norm_meta(const at::Tensor& input, at::IntArrayRef normalized_shape,
                               const std::optional<at::Tensor>& weight, std::optional<double>) {
  check_rms_args(input, normalized_shape, weight);
  return at::empty(input.sizes(), input.options().dtype(rms_out_type(input, weight)));
}

at::Tensor call_spyre_rms_norm(const at::Tensor& input, at::IntArrayRef normalized_shape,
                               const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("spyre::rms_norm", "").typed<decltype(spyre_rms_norm)>();
  const at::AutoDispatchBelowADInplaceOrView below_autograd;  // no gradient to record
  return op.call(input, normalized_shape, weight, eps);
}

// PyTorch 2.6's rms_norm composite, op for op (its own is not exported): the input in
// its op-math dtype, rsqrt(mean(x^2) + eps), the product cast back, then the weight.
at::Tensor rms_norm_composite(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                              const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  check_rms_args(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), weight);
  std::vector<std::int64_t> dims;
  for (auto d = input.dim() - static_cast<std::int64_t>(normalized_shape.size()); d < input.dim(); ++d) dims.push_back(d);
  const at::Tensor x = input.to(at::toOpMathType(input.scalar_type()));
  const at::Tensor r = at::rsqrt(x.pow(2).mean(dims, /*keepdim=*/true).add_(rms_eps(input.scalar_type(), eps)));
  at::Tensor result = x.mul(r).type_as(input);
  if (weight && weight->defined()) result = result.mul(*weight);
  return result;
}

// aten::rms_norm on spyre tensors. Without a gradient to record, the one kernel; with
// one, PyTorch's composite (its ops record their own backward).
at::Tensor rms_norm_autograd(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                             const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  const bool needs_grad =
      at::GradMode::is_enabled() && (input.requires_grad() || (weight && weight->defined() && weight->requires_grad()));
  if (needs_grad) return rms_norm_composite(input, normalized_shape, weight, eps);
  return call_spyre_rms_norm(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), weight, eps);
}

at::Tensor rms_norm_inference(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                              const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  return call_spyre_rms_norm(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), weight, eps);
}

// The gradients of y = (x - mean) * rstd * w + b over rows of N values, in fp32 on the
// device (each op below one device kernel), rounded once to the input's and the
// parameters' dtypes:
//   x_hat = (x - mean) * rstd,  g_w = dy * w
//   dx = rstd * (g_w - mean_row(g_w) - x_hat * mean_row(g_w * x_hat))
//   dw = sum_rows(dy * x_hat),  db = sum_rows(dy)
Result native_layer_norm_backward(const at::Tensor& grad_out, const at::Tensor& input, at::IntArrayRef normalized_shape,
                                  const at::Tensor& mean, const at::Tensor& rstd,
                                  const std::optional<at::Tensor>& weight_opt,
                                  const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> output_mask) {
  static constexpr const char* kName = "aten::native_layer_norm_backward";
  const at::Tensor weight = weight_opt.value_or(at::Tensor()), bias = bias_opt.value_or(at::Tensor());
  const auto on_spyre = [&](const at::Tensor& t) {
    return !t.defined() || (t.device() == input.device() && device_float_dtype(t.scalar_type()).has_value());
  };
  const auto n_dims = static_cast<std::int64_t>(normalized_shape.size());
  const std::int64_t axis = input.dim() - n_dims;
  const bool device = input.device().type() == c10::DeviceType::PrivateUse1 && on_spyre(input) &&
                      on_spyre(grad_out) && on_spyre(mean) && on_spyre(rstd) && on_spyre(weight) && on_spyre(bias) &&
                      n_dims >= 1 && axis >= 0 && grad_out.sizes().equals(input.sizes());
  if (!device || input.numel() == 0) {
    if (input.numel() != 0) count_fallback(kName);
    const auto cpu = [](const at::Tensor& t) { return t.defined() ? t.cpu() : t; };
    auto [dx, dw, db] = at::native_layer_norm_backward(grad_out.cpu(), input.cpu(), normalized_shape, mean.cpu(),
                                                       rstd.cpu(), cpu(weight), cpu(bias), output_mask);
    const auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
    return {back(dx), back(dw), back(db)};
  }
  const c10::DeviceGuard guard(input.device());
  const std::int64_t n = c10::multiply_integers(normalized_shape), m = input.numel() / n;
  const auto f32 = [](const at::Tensor& t) { return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat); };
  const at::Tensor x = f32(input.reshape({m, n})), dy = f32(grad_out.reshape({m, n}));
  const at::Tensor rs = f32(rstd.reshape({m, 1}));
  const at::Tensor x_hat = at::mul(at::sub(x, f32(mean.reshape({m, 1}))), rs);
  at::Tensor dx, dw, db;
  if (output_mask[0]) {
    const at::Tensor g = weight.defined() ? at::mul(dy, f32(weight.reshape({1, n}))) : dy;
    const at::Tensor a = at::mean(g, {1}, /*keepdim=*/true), b = at::mean(at::mul(g, x_hat), {1}, /*keepdim=*/true);
    dx = at::mul(at::sub(at::sub(g, a), at::mul(x_hat, b)), rs).to(input.scalar_type()).reshape(input.sizes());
  }
  if (output_mask[1] && weight.defined()) {
    dw = at::sum(at::mul(dy, x_hat), {0}).to(weight.scalar_type()).reshape(weight.sizes());
  }
  if (output_mask[2] && bias.defined()) db = at::sum(dy, {0}).to(bias.scalar_type()).reshape(bias.sizes());
  return {dx, dw, db};
}

// native_batch_norm (nn.BatchNorm1d/2d/3d, F.batch_norm) of device float inputs,
// composed of device kernels: in training the per-channel mean over every dim but
// the channels (fp32), the biased variance as the mean of the squared centred values
// (two passes, as the CPU's), and the running statistics updated in place with the
// CPU's formulas (momentum x new + (1 - momentum) x old, the variance unbiased by
// n / (n - 1)); in evaluation the running statistics. Then, as the CPU's transform,
// alpha = invstd x weight and beta = bias - mean x alpha per channel (in evaluation
// two small kernels from the running statistics), and y = x x alpha + beta as one
// kernel in fp32 with one rounding, keeping x's memory format.
// save_mean and save_invstd are the batch's (empty in evaluation), in fp32 when a
// half-precision input has fp32 parameters (the CPU's mixed type), else the input's
// dtype. (The schema does not mark the running statistics as written, so a CPU run
// would leave the device's copies unchanged: the bug this replaced.) Other dtypes run
// on CPU copies, the statistics copied back (counted).
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_on_cpu(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  count_fallback("aten::native_batch_norm");
  const auto cpu = [](const std::optional<at::Tensor>& t) {
    return t && t->defined() ? std::optional<at::Tensor>(t->cpu()) : std::optional<at::Tensor>();
  };
  const std::optional<at::Tensor> mean = cpu(running_mean), var = cpu(running_var);
  auto [out, save_mean, save_invstd] =
      at::native_batch_norm(input.cpu(), cpu(weight), cpu(bias), mean, var, training, momentum, eps);
  if (training) {
    if (mean) running_mean->copy_(*mean);
    if (var) running_var->copy_(*var);
  }
  const c10::Device device = input.device();
  return {out.to(device), save_mean.to(device), save_invstd.to(device)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_device(
    const at::Tensor& input, const std::optional<at::Tensor>& weight_in, const std::optional<at::Tensor>& bias_in,
    const std::optional<at::Tensor>& running_mean_in, const std::optional<at::Tensor>& running_var_in, bool training,
    double momentum, double eps) {
  const auto given = [](const std::optional<at::Tensor>& t) { return t && t->defined() ? *t : at::Tensor(); };
  const at::Tensor weight = given(weight_in), bias = given(bias_in), running_mean = given(running_mean_in),
                   running_var = given(running_var_in);
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected an input of at least 2 dims (batch, channels, ...), got ",
              input.dim(), "-D");
  const std::int64_t channels = input.size(1);
  TORCH_CHECK(training || (running_mean.defined() && running_var.defined()),
              "running_mean and running_var must be defined in evaluation mode");
  bool on_device = device_float_dtype(input.scalar_type()).has_value() && input.numel() > 0;
  bool mixed = false;
  for (const at::Tensor* t : {&weight, &bias, &running_mean, &running_var}) {
    if (!t->defined()) continue;
    TORCH_CHECK(t->dim() == 1 && t->size(0) == channels, "batch_norm: expected a parameter of ", channels,
                " values (the input's channels), got shape ", t->sizes());
    TORCH_CHECK(t->device() == input.device(), "Expected all tensors to be on the same device, but found at least two "
                "devices, ", input.device(), " and ", t->device(), "! (aten::native_batch_norm)");
    on_device = on_device && device_float_dtype(t->scalar_type()).has_value();
    mixed = mixed || (t->scalar_type() == at::kFloat && input.scalar_type() != at::kFloat);
  }
  if (!on_device) return batch_norm_on_cpu(input, weight_in, bias_in, running_mean_in, running_var_in, training,
                                           momentum, eps);
  const c10::DeviceGuard guard(input.device());
  const at::ScalarType stats_dtype = mixed ? at::kFloat : input.scalar_type();
  std::vector<std::int64_t> dims{0}, per_channel(static_cast<std::size_t>(input.dim()), 1);
  for (std::int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  per_channel[1] = channels;
  at::Tensor mean, invstd, save_mean, save_invstd;
  if (training) {
    const std::int64_t n = input.numel() / channels;
    mean = at::mean(input, dims, /*keepdim=*/false, at::kFloat);
    const at::Tensor centred = at::sub(input, mean.view(per_channel));  // fp32
    const at::Tensor var = at::mean(at::mul(centred, centred), dims);
    invstd = at::rsqrt(at::add(var, eps));
    save_mean = mean.to(stats_dtype);
    save_invstd = invstd.to(stats_dtype);
    if (running_mean.defined()) {
      running_mean.copy_(at::add(at::mul(mean, momentum), running_mean, 1 - momentum));
    }
    if (running_var.defined()) {
      const double unbias = n > 1 ? static_cast<double>(n) / static_cast<double>(n - 1) : 1.0;
      running_var.copy_(at::add(at::mul(var, momentum * unbias), running_var, 1 - momentum));
    }
  }
  using compiler::Step;
  using compiler::Value;
  at::Tensor alpha, beta;
  if (training) {
    alpha = weight.defined() ? at::mul(invstd, weight) : invstd;
    beta = bias.defined() ? at::sub(bias, at::mul(mean, alpha)) : at::neg(at::mul(mean, alpha));
  } else {
    // From the running statistics, the same fp32 ops in the same order as two small
    // kernels (a kernel has one output) rather than five: inputs var, mean, weight, bias.
    save_mean = at::empty({0}, input.options().dtype(stats_dtype));
    save_invstd = at::empty({0}, input.options().dtype(stats_dtype));
    constexpr auto f32 = isa::DType::fp32;
    std::vector<at::Tensor> inputs{running_var, running_mean};
    std::vector<Step> steps{Step::binary(isa::BinaryOp::add, f32, Value::input(0), Value::constant(eps)),
                            Step::unary(isa::UnaryOp::rsqrt, f32, Value::step(0))};  // invstd
    if (weight.defined()) {
      inputs.push_back(weight);
      steps.push_back(Step::binary(isa::BinaryOp::mul, f32, Value::step(1), Value::input(2)));
    }
    alpha = at::empty({channels}, input.options().dtype(at::kFloat));
    run_pointwise_into("aten::native_batch_norm (scale)", alpha, inputs, steps);
    const Value a = Value::step(static_cast<std::uint32_t>(steps.size() - 1));
    steps.push_back(Step::binary(isa::BinaryOp::mul, f32, Value::input(1), a));  // mean x alpha
    const Value m = Value::step(static_cast<std::uint32_t>(steps.size() - 1));
    if (bias.defined()) {
      inputs.push_back(bias);
      steps.push_back(Step::binary(isa::BinaryOp::sub, f32, Value::input(static_cast<std::uint32_t>(inputs.size() - 1)), m));
    } else {
      steps.push_back(Step::unary(isa::UnaryOp::neg, f32, m));
    }
    beta = at::empty({channels}, input.options().dtype(at::kFloat));
    run_pointwise_into("aten::native_batch_norm (shift)", beta, inputs, steps);
  }
  at::Tensor out = at::empty_like(input);
  at::TensorBase out_base = out;
  const at::Tensor alpha_c = alpha.view(per_channel), beta_c = beta.view(per_channel);
  auto iter = at::TensorIteratorConfig()
                  .check_all_same_dtype(false)
                  .add_output(out_base)
                  .add_const_input(input)
                  .add_const_input(alpha_c)
                  .add_const_input(beta_c)
                  .build();
  run_pointwise("aten::native_batch_norm", iter,
                {Step::binary(isa::BinaryOp::mul, isa::DType::fp32, Value::input(0), Value::input(1)),
                 Step::binary(isa::BinaryOp::add, isa::DType::fp32, Value::step(0), Value::input(2))});
  return {out, save_mean, save_invstd};
}

// native_batch_norm_backward on the device, in the CPU's formulas
// (batch_norm_backward_cpu_template), per channel over every dim but the channels, in
// fp32: dotp = sum (x - mean) dy and sum_dy = sum dy (two reductions); in training
//   dx = (dy - sum_dy / n - (x - mean) x dotp invstd^2 / n) x invstd x weight
// (one kernel), mean and invstd the forward's saved statistics; in evaluation
// dx = dy x invstd x weight with the running statistics (invstd = 1 / sqrt(var + eps));
// grad_weight = dotp x invstd, grad_bias = sum_dy, in the weight's dtype. Other dtypes
// run on the CPU, counted.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_device(
    const at::Tensor& dy, const at::Tensor& input, const std::optional<at::Tensor>& weight_in,
    const std::optional<at::Tensor>& running_mean_in, const std::optional<at::Tensor>& running_var_in,
    const std::optional<at::Tensor>& save_mean_in, const std::optional<at::Tensor>& save_invstd_in, bool train,
    double eps, std::array<bool, 3> mask) {
  const auto given = [](const std::optional<at::Tensor>& t) { return t && t->defined() ? *t : at::Tensor(); };
  const at::Tensor weight = given(weight_in), running_mean = given(running_mean_in),
                   running_var = given(running_var_in), save_mean = given(save_mean_in),
                   save_invstd = given(save_invstd_in);
  bool on_device = device_float_dtype(input.scalar_type()) && device_float_dtype(dy.scalar_type()) &&
                   input.numel() > 0 && dy.device() == input.device();
  for (const at::Tensor* t : {&weight, &running_mean, &running_var, &save_mean, &save_invstd}) {
    on_device = on_device && (!t->defined() || (device_float_dtype(t->scalar_type()) && t->device() == input.device()));
  }
  on_device = on_device && (train ? save_mean.defined() && save_invstd.defined()
                                  : running_mean.defined() && running_var.defined());
  if (!on_device) {
    count_fallback("aten::native_batch_norm_backward");
    const auto cpu = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t.cpu()) : std::nullopt; };
    auto [a, b, c] = at::native_batch_norm_backward(dy.cpu(), input.cpu(), cpu(weight), cpu(running_mean),
                                                    cpu(running_var), cpu(save_mean), cpu(save_invstd), train, eps, mask);
    const auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
    return {back(a), back(b), back(c)};
  }
  const c10::DeviceGuard guard(input.device());
  const std::int64_t channels = input.size(1), n = input.numel() / channels;
  std::vector<std::int64_t> dims{0}, per_channel(static_cast<std::size_t>(input.dim()), 1);
  for (std::int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  per_channel[1] = channels;
  const at::Tensor mean = (train ? save_mean : running_mean).to(at::kFloat);
  const at::Tensor invstd = train ? save_invstd.to(at::kFloat) : at::rsqrt(at::add(running_var.to(at::kFloat), eps));
  const at::Tensor sum_dy = at::sum(dy, dims, /*keepdim=*/false, at::kFloat);
  at::Tensor dotp;
  if (mask[1] || (mask[0] && train)) {
    dotp = at::sum(at::mul(dy, at::sub(input, mean.view(per_channel))), dims, /*keepdim=*/false, at::kFloat);
  }
  at::Tensor dx, dw, db;
  if (mask[0]) {
    const at::Tensor scale = weight.defined() ? at::mul(invstd, weight) : invstd;
    dx = at::empty_like(input);
    at::TensorBase dx_base = dx;
    using compiler::Step;
    using compiler::Value;
    constexpr auto f32 = isa::DType::fp32;
    const at::Tensor scale_c = scale.view(per_channel);
    if (train) {
      const at::Tensor mean_c = mean.view(per_channel);
      const at::Tensor k_c = at::div(at::mul(at::mul(dotp, invstd), invstd), static_cast<double>(n)).view(per_channel);
      const at::Tensor grad_mean_c = at::div(sum_dy, static_cast<double>(n)).view(per_channel);
      auto iter = at::TensorIteratorConfig()
                      .check_all_same_dtype(false)
                      .add_output(dx_base)
                      .add_const_input(dy)
                      .add_const_input(input)
                      .add_const_input(mean_c)
                      .add_const_input(k_c)
                      .add_const_input(grad_mean_c)
                      .add_const_input(scale_c)
                      .build();
      run_pointwise("aten::native_batch_norm_backward", iter,
                    {Step::binary(isa::BinaryOp::sub, f32, Value::input(1), Value::input(2)),   // 0: x - mean
                     Step::binary(isa::BinaryOp::mul, f32, Value::step(0), Value::input(3)),    // 1: x k
                     Step::binary(isa::BinaryOp::sub, f32, Value::input(0), Value::input(4)),   // 2: dy - grad_mean
                     Step::binary(isa::BinaryOp::sub, f32, Value::step(2), Value::step(1)),     // 3
                     Step::binary(isa::BinaryOp::mul, f32, Value::step(3), Value::input(5))});  // 4: x invstd w
    } else {
      auto iter = at::TensorIteratorConfig()
                      .check_all_same_dtype(false)
                      .add_output(dx_base)
                      .add_const_input(dy)
                      .add_const_input(scale_c)
                      .build();
      run_pointwise("aten::native_batch_norm_backward", iter,
                    {Step::binary(isa::BinaryOp::mul, f32, Value::input(0), Value::input(1))});
    }
  }
  const at::ScalarType param = weight.defined() ? weight.scalar_type() : input.scalar_type();
  if (mask[1]) dw = at::mul(dotp, invstd).to(param);
  if (mask[2]) db = sum_dy.to(param);
  return {dx, dw, db};
}

// The forms torch.compile's graphs call (AOTAutograd's decompositions): the same
// kernel, with the running statistics given (updated in training) or not.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit(const at::Tensor& input,
                                                                const std::optional<at::Tensor>& weight,
                                                                const std::optional<at::Tensor>& bias,
                                                                at::Tensor& running_mean, at::Tensor& running_var,
                                                                bool training, double momentum, double eps) {
  return batch_norm_device(input, weight, bias, running_mean, running_var, training, momentum, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_stats(const at::Tensor& input,
                                                                         const std::optional<at::Tensor>& weight,
                                                                         const std::optional<at::Tensor>& bias,
                                                                         bool training, double momentum, double eps) {
  return batch_norm_device(input, weight, bias, std::nullopt, std::nullopt, training, momentum, eps);
}

// native_group_norm (nn.GroupNorm, F.group_norm): each (sample, group) block of
// C / group x HxW values is one row of a layer norm without weights (the same device
// kernel: mean, biased variance, rstd), then one kernel applies the per-channel weight
// and bias; mean and rstd come back [N, group] in the input's dtype, as the CPU's.
// native_group_norm_backward: dX is the layer norm's backward over those rows of
// dY x weight; dweight = sum over samples and pixels of dY x x_hat (x_hat recomputed
// from mean and rstd) and dbias = sum of dY, device reductions in fp32. Other dtypes
// run on the CPU, counted.
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_device(const at::Tensor& input,
                                                                const std::optional<at::Tensor>& weight_opt,
                                                                const std::optional<at::Tensor>& bias_opt,
                                                                c10::SymInt n_sym, c10::SymInt c_sym, c10::SymInt hw_sym,
                                                                std::int64_t group, double eps) {
  const std::int64_t n = n_sym.expect_int(), c = c_sym.expect_int(), hw = hw_sym.expect_int();
  const at::Tensor weight = weight_opt.value_or(at::Tensor()), bias = bias_opt.value_or(at::Tensor());
  const auto on_spyre = [&](const at::Tensor& t) {
    return !t.defined() || (t.device() == input.device() && t.scalar_type() == input.scalar_type());
  };
  TORCH_CHECK(group > 0 && c % group == 0, "Expected number of channels in input to be divisible by num_groups, but "
              "got input of shape ", input.sizes(), " and num_groups=", group);
  if (input.device().type() != c10::DeviceType::PrivateUse1 || !device_float_dtype(input.scalar_type()) ||
      !on_spyre(weight) || !on_spyre(bias) || input.numel() == 0 || input.numel() != n * c * hw) {
    count_fallback("aten::native_group_norm");
    const auto cpu = [](const at::Tensor& t) { return t.defined() ? std::optional(t.cpu()) : std::nullopt; };
    auto [y, mean, rstd] = at::native_group_norm(input.cpu(), cpu(weight), cpu(bias), n, c, hw, group, eps);
    return {y.to(input.device()), mean.to(input.device()), rstd.to(input.device())};
  }
  const c10::DeviceGuard guard(input.device());
  const std::int64_t rows = n * group, row = c / group * hw;
  // fp16/bf16 normalise in fp32, so the weight and bias apply to unrounded values and
  // the result is rounded once, as the CPU's kernel does.
  const bool affine = weight.defined() || bias.defined();
  at::Tensor x = input.contiguous().reshape({rows, row});
  if (affine && x.scalar_type() != at::kFloat) x = x.to(at::kFloat);
  auto [normed, mean, rstd] = at::native_layer_norm(x, {row}, {}, {}, eps);
  at::Tensor y = normed.reshape({n, c, hw});
  if (affine) {
    using compiler::Step;
    using compiler::Value;
    constexpr auto f32 = isa::DType::fp32;
    at::Tensor out = at::empty({n, c, hw}, input.options().memory_format(at::MemoryFormat::Contiguous));
    std::vector<at::Tensor> inputs{y};
    std::vector<Step> steps;
    Value v = Value::input(0);
    if (weight.defined()) {
      inputs.push_back(weight.reshape({1, c, 1}));
      steps.push_back(Step::binary(isa::BinaryOp::mul, f32, v, Value::input(1)));
      v = Value::step(0);
    }
    if (bias.defined()) {
      inputs.push_back(bias.reshape({1, c, 1}));
      steps.push_back(Step::binary(isa::BinaryOp::add, f32, v, Value::input(static_cast<std::uint32_t>(inputs.size() - 1))));
    }
    run_pointwise_into("aten::native_group_norm", out, inputs, steps);
    y = out;
  }
  return {y.reshape(input.sizes()), mean.reshape({n, group}).to(input.scalar_type()),
          rstd.reshape({n, group}).to(input.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_backward_device(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight_opt, c10::SymInt n_sym, c10::SymInt c_sym, c10::SymInt hw_sym,
    std::int64_t group, std::array<bool, 3> output_mask) {
  const std::int64_t n = n_sym.expect_int(), c = c_sym.expect_int(), hw = hw_sym.expect_int();
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const auto on_spyre = [&](const at::Tensor& t) {
    return !t.defined() || (t.device() == input.device() && device_float_dtype(t.scalar_type()).has_value());
  };
  if (input.device().type() != c10::DeviceType::PrivateUse1 || !on_spyre(input) || !on_spyre(grad) ||
      !on_spyre(mean) || !on_spyre(rstd) || !on_spyre(weight) || input.numel() == 0 || group <= 0 || c % group != 0 ||
      input.numel() != n * c * hw || !grad.sizes().equals(input.sizes())) {
    count_fallback("aten::native_group_norm_backward");
    const auto cpu = [](const at::Tensor& t) { return t.defined() ? std::optional(t.cpu()) : std::nullopt; };
    auto [dx, dw, db] = at::native_group_norm_backward(grad.cpu(), input.cpu(), mean.cpu(), rstd.cpu(), cpu(weight),
                                                       n, c, hw, group, output_mask);
    const auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
    return {back(dx), back(dw), back(db)};
  }
  const c10::DeviceGuard guard(input.device());
  const std::int64_t rows = n * group, row = c / group * hw;
  const auto f32 = [](const at::Tensor& t) { return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat); };
  const at::Tensor dy = f32(grad.contiguous().reshape({n, c, hw}));
  at::Tensor dx, dw, db;
  if (output_mask[0]) {
    const at::Tensor g = weight.defined() ? at::mul(dy, f32(weight).reshape({1, c, 1})) : dy;
    auto [d, unused_w, unused_b] = at::native_layer_norm_backward(g.reshape({rows, row}), input.contiguous().reshape({rows, row}),
                                                                  {row}, mean.reshape({rows, 1}), rstd.reshape({rows, 1}),
                                                                  {}, {}, {true, false, false});
    dx = d.to(input.scalar_type()).reshape(input.sizes());
  }
  if (output_mask[1] && weight.defined()) {
    const at::Tensor x = f32(input.contiguous().reshape({rows, row}));
    const at::Tensor x_hat = at::mul(at::sub(x, f32(mean.reshape({rows, 1}))), f32(rstd.reshape({rows, 1})));
    dw = at::sum(at::mul(dy, x_hat.reshape({n, c, hw})), at::IntArrayRef{0, 2}).to(weight.scalar_type());
  }
  if (output_mask[2]) db = at::sum(dy, at::IntArrayRef{0, 2}).to(weight.defined() ? weight.scalar_type() : grad.scalar_type());
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_native_batch_norm_legit", batch_norm_legit);
  m.impl("_native_batch_norm_legit.no_stats", batch_norm_legit_no_stats);
  m.impl("native_layer_norm", native_layer_norm);
  m.impl("native_layer_norm_backward", native_layer_norm_backward);
  m.impl("native_batch_norm", batch_norm_device);
  m.impl("native_batch_norm_backward", batch_norm_backward_device);
  m.impl("native_group_norm", group_norm_device);
  m.impl("native_group_norm_backward", group_norm_backward_device);
  m.impl("rms_norm", rms_norm_inference);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("rms_norm", rms_norm_autograd); }

TORCH_LIBRARY_FRAGMENT(spyre, m) {
  m.def("rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("rms_norm", spyre_rms_norm); }
TORCH_LIBRARY_IMPL(spyre, Meta, m) { m.impl("rms_norm", spyre_rms_norm_meta); }
// Not differentiable itself (aten::rms_norm takes the composite when a gradient is needed).
TORCH_LIBRARY_IMPL(spyre, Autograd, m) { m.impl("rms_norm", torch::autograd::autogradNotImplementedFallback()); }

}  // namespace spyre::backend
