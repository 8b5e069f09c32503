// Convolutions on the compute arrays: conv1d and conv2d (any stride, padding, dilation
// and groups, with or without a bias) in fp32, fp16 and bf16 as one implicit-GEMM
// kernel (compiler::MatmulShape::conv): C[pixels x out channels] = A[pixels x taps *
// channels] B, where A is never stored: each of its panels is gathered from the input by
// DMA. The kernel reads the input channels-last and padded, so an input that is not
// (PyTorch's default NCHW, or any padding) is first copied into a zero-bordered
// channels-last buffer by device copy kernels; the weights are copied to [out, kh, kw,
// in] (a view when they are channels-last already). The result is channels-last (NCHW
// sizes, NHWC strides), as the kernel writes it. Their gradients are convolutions too
// (convolution_backward, below). Transposed and 3-D convolutions and other dtypes run
// on the CPU, counted.
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/hardsigmoid.h>
#include <ATen/ops/hardswish.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/op_table.h"
#include "compiler/matmul.h"
#include "compiler/pointwise.h"
#include "runtime/derived.h"
#include "runtime/launch.h"
#include "runtime/streams.h"

namespace spyre::backend {
namespace {

bool is_spyre(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

at::Tensor on_cpu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                  c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                  c10::IntArrayRef output_padding, std::int64_t groups, bool has_kernel) {
  count_fallback("aten::convolution_overrideable", has_kernel);
  const auto cpu_bias = bias && bias->defined() ? std::optional<at::Tensor>(bias->cpu()) : std::nullopt;
  return at::convolution(input.cpu(), weight.cpu(), cpu_bias, stride, padding, dilation, transposed, output_padding,
                         groups)
      .to(input.device());
}

std::uint64_t u(std::int64_t v) { return static_cast<std::uint64_t>(v); }

std::string list(std::initializer_list<std::int64_t> v) {
  std::string out;
  for (const std::int64_t e : v) out += (out.empty() ? "" : ",") + std::to_string(e);
  return out;
}

std::uint64_t bytes(const at::Tensor& t) { return t.defined() ? u(t.numel()) * u(t.element_size()) : 0; }

// A 2-D convolution's sizes (a conv1d's height is 1): the input [images, channels, h,
// w] before padding, the weights [out, group_channels, kh, kw], the output ho x wo.
struct Geometry {
  std::int64_t images = 0, channels = 0, h = 0, w = 0, out = 0, group_channels = 0, kh = 1, kw = 1;
  std::int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1, ho = 0, wo = 0;
  std::int64_t og() const { return out / groups; }
  std::string key() const {
    return list({images, channels, h, w}) + "|" + list({out, group_channels, kh, kw}) + "|s" + list({sh, sw}) + "|p" +
           list({ph, pw}) + "|d" + list({dh, dw}) + "|g" + std::to_string(groups);
  }
};

// A conv1d's one value is its width's, its height's is `unit`.
std::int64_t param(c10::IntArrayRef v, bool one_d, int d, std::int64_t unit) {
  if (one_d) return d == 0 ? unit : v.at(0);
  return v.size() == 1 ? v[0] : v.at(static_cast<std::size_t>(d));
}

Geometry geometry(const at::Tensor& x, const at::Tensor& w, c10::IntArrayRef stride, c10::IntArrayRef padding,
                  c10::IntArrayRef dilation, std::int64_t groups, bool one_d) {
  Geometry g;
  g.images = x.size(0), g.channels = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.out = w.size(0), g.group_channels = w.size(1), g.kh = w.size(2), g.kw = w.size(3);
  g.sh = param(stride, one_d, 0, 1), g.sw = param(stride, one_d, 1, 1);
  g.ph = param(padding, one_d, 0, 0), g.pw = param(padding, one_d, 1, 0);
  g.dh = param(dilation, one_d, 0, 1), g.dw = param(dilation, one_d, 1, 1);
  g.groups = groups;
  TORCH_CHECK(groups > 0 && g.channels == g.group_channels * groups && g.out % groups == 0,
              "aten::convolution: expected an input of groups x weight.size(1) = ", groups, " x ", g.group_channels,
              " channels and out channels divisible by groups, got ", g.channels, " input and ", g.out,
              " out channels");
  TORCH_CHECK(g.sh > 0 && g.sw > 0 && g.dh > 0 && g.dw > 0 && g.ph >= 0 && g.pw >= 0,
              "aten::convolution: expected positive strides and dilations and non-negative padding");
  const std::int64_t hp = g.h + 2 * g.ph, wp = g.w + 2 * g.pw;
  TORCH_CHECK(hp >= g.dh * (g.kh - 1) + 1 && wp >= g.dw * (g.kw - 1) + 1, "aten::convolution: the kernel (", g.kh,
              "x", g.kw, ", dilation ", g.dh, "x", g.dw, ") is larger than the padded input (", hp, "x", wp, ")");
  g.ho = (hp - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.wo = (wp - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  return g;
}

// x (NCHW sizes, any strides) as the kernel reads it: channels-last with the padding
// in it. A view when x is channels-last and unpadded, else a zero-bordered copy.
at::Tensor padded_channels_last(const at::Tensor& x, std::int64_t ph, std::int64_t pw) {
  const at::Tensor nhwc = x.permute({0, 2, 3, 1});
  if (ph == 0 && pw == 0 && nhwc.is_contiguous()) return nhwc;
  at::Tensor xp = at::zeros({x.size(0), x.size(2) + 2 * ph, x.size(3) + 2 * pw, x.size(1)}, x.options());
  xp.narrow(1, ph, x.size(2)).narrow(2, pw, x.size(3)).copy_(nhwc);
  return xp;
}

// w [out, in / groups, kh, kw] as the kernel reads it, [out, kh, kw, in / groups]
// contiguous: a view of channels-last weights; of NCHW ones a device copy, kept
// (runtime/derived.h) until the weights are written, so a model's forwards permute
// each weight once, as a device stack that stores weights in its own layout would.
at::Tensor taps_last_weights(const at::Tensor& w) {
  const at::Tensor view = w.permute({0, 2, 3, 1});
  if (view.is_contiguous()) return view;
  const c10::Stream stream = current_stream(w.device().index());
  const std::string kind = "conv weights [out, kh, kw, in]|" + list({w.size(0), w.size(1), w.size(2), w.size(3)}) +
                           "|" + list({w.stride(0), w.stride(1), w.stride(2), w.stride(3)}) + "|" +
                           std::to_string(w.storage_offset()) + "|" + std::string(c10::toString(w.scalar_type()));
  if (auto kept = derived::find(w, kind, stream)) return *kept;
  at::Tensor wt = view.contiguous();
  derived::keep(w, kind, stream, wt);
  return wt;
}

// The implicit-GEMM kernel: y [images, ho, wo, out] = conv(xp, weights) (+ bias), xp the
// padded channels-last input [images, hp, wp, channels] (g.h, g.w and the padding are
// the unpadded input's: the kernel reads xp with no padding), wt the weights as
// [out, kh, kw, group_channels] contiguous. `traffic` is the op's least.
// An epilogue: y x channel_scale[c] + bias[c] (a folded batch norm; fp32 scale, needs
// the bias), then an activation, on the fp32 tiles before their one rounding.
struct ConvEpilogue {
  at::Tensor channel_scale;
  std::optional<isa::UnaryOp> activation;
};

at::Tensor run_conv(const char* name, const at::Tensor& xp, const at::Tensor& wt, const at::Tensor& bias,
                    const Geometry& g, const Traffic& traffic, const ConvEpilogue& epilogue = {}) {
  at::Tensor y = at::empty({g.images, g.ho, g.wo, g.out}, xp.options());
  compiler::MatmulShape s;
  s.m = u(g.images * g.ho * g.wo);
  s.n = u(g.og());
  s.k = u(g.kh * g.kw * g.group_channels);
  s.dtype = *device_float_dtype(xp.scalar_type());
  s.b_transposed = true;
  s.batch = u(g.groups);
  if (g.groups > 1) {
    s.a_batch_stride = u(g.group_channels);
    s.b_batch_stride = u(g.og()) * s.k;
    s.c_batch_stride = u(g.og());
    s.bias_batch_stride = bias.defined() ? u(g.og()) : 0;
  }
  s.ldc = u(g.out);
  if (bias.defined()) s.bias = *device_float_dtype(bias.scalar_type());
  s.channel_scale = epilogue.channel_scale.defined();
  s.activation = epilogue.activation;
  s.conv = compiler::MatmulShape::ConvA{.images = u(g.images), .h = u(xp.size(1)), .w = u(xp.size(2)),
                                        .channels = u(g.channels), .group_channels = u(g.group_channels),
                                        .kh = u(g.kh), .kw = u(g.kw), .sh = u(g.sh), .sw = u(g.sw), .dh = u(g.dh),
                                        .dw = u(g.dw), .ho = u(g.ho), .wo = u(g.wo)};
  const std::string key = std::string(name) + "|" + std::string(isa::to_string(s.dtype)) + "|" + g.key() + "|in" +
                          list({xp.size(1), xp.size(2)}) +
                          (bias.defined() ? "|+" + std::string(isa::to_string(*s.bias)) : "") +
                          (s.channel_scale ? "|xscale" : "") +
                          (s.activation ? "|" + std::string(isa::to_string(*s.activation)) : "");
  std::vector<std::uint64_t> args{device_address(xp), device_address(wt), device_address(y)};
  if (bias.defined()) args.push_back(device_address(bias));
  if (s.channel_scale) args.push_back(device_address(epilogue.channel_scale));
  run_cached(xp.device().index(), key, [&](const compiler::Target& t) { return compiler::compile_matmul(s, t, name); },
             args, name, traffic);
  return y;
}

// The least traffic of a convolution of x: the input pixels it reads (padding is not
// read), the weights and the bias once each, the result written.
std::uint64_t input_bytes_read(const Geometry& g, std::uint64_t element) {
  const std::uint64_t pixels = compiler::conv_positions_read(u(g.h), u(g.ho), u(g.kh), u(g.sh), u(g.dh), u(g.ph)) *
                               compiler::conv_positions_read(u(g.w), u(g.wo), u(g.kw), u(g.sw), u(g.dw), u(g.pw));
  return u(g.images * g.channels) * pixels * element;
}

// A conv1d or conv2d of device float tensors as one kernel (the caller checked them):
// the input made channels-last and padded, the weights taps-last, the result NCHW sizes
// with channels-last strides. `scale` (fp32, optional) and `activation` are the
// epilogue's (ConvEpilogue).
at::Tensor device_convolution(const char* name, const at::Tensor& input, const at::Tensor& weight,
                              const at::Tensor& bias_in, const at::Tensor& scale_in, c10::IntArrayRef stride,
                              c10::IntArrayRef padding, c10::IntArrayRef dilation, std::int64_t groups,
                              std::optional<isa::UnaryOp> activation) {
  const bool one_d = input.dim() == 3;
  const at::Tensor x = one_d ? input.unsqueeze(2) : input, w = one_d ? weight.unsqueeze(2) : weight;
  const Geometry g = geometry(x, w, stride, padding, dilation, groups, one_d);
  const c10::DeviceGuard guard(x.device());
  const at::Tensor xp = padded_channels_last(x, g.ph, g.pw);
  const at::Tensor wt = taps_last_weights(w);
  const at::Tensor bias = bias_in.defined() ? bias_in.reshape({-1}).contiguous() : at::Tensor();
  const at::Tensor scale = scale_in.defined() ? scale_in.reshape({-1}).contiguous() : at::Tensor();
  const at::Tensor y = run_conv(name, xp, wt, bias, g,
                                {.read = input_bytes_read(g, u(x.element_size())) + bytes(w) + bytes(bias) + bytes(scale),
                                 .written = u(g.images * g.ho * g.wo * g.out) * u(x.element_size())},
                                {.channel_scale = scale, .activation = activation});
  at::Tensor out = y.permute({0, 3, 1, 2});  // NCHW sizes, channels-last strides
  return one_d ? out.squeeze(2) : out;
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias_in,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, std::int64_t groups) {
  const bool has_bias = bias_in && bias_in->defined();
  for (const at::Tensor* t : {&weight, has_bias ? &*bias_in : nullptr}) {
    TORCH_CHECK(t == nullptr || t->device() == input.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ", input.device(),
                " and ", t->device(), "! (aten::convolution)");
  }
  const auto dtype = device_float_dtype(input.scalar_type());
  const bool device_path = !transposed && (input.dim() == 3 || input.dim() == 4) && dtype && is_spyre(input) &&
                           weight.scalar_type() == input.scalar_type() &&
                           (!has_bias || device_float_dtype(bias_in->scalar_type())) && input.numel() > 0 &&
                           weight.numel() > 0;
  if (!device_path) {
    return on_cpu(input, weight, bias_in, stride, padding, dilation, transposed, output_padding, groups,
                  /*has_kernel=*/true);
  }
  return device_convolution("aten::convolution", input, weight, has_bias ? *bias_in : at::Tensor(), at::Tensor(),
                            stride, padding, dilation, groups, std::nullopt);
}

// spyre::conv_epilogue(input, weight, bias, scale, stride, padding, dilation, groups,
// activation): activation(conv(input, weight) x scale[c] + bias[c]) as one kernel, the
// epilogue on the fp32 tiles before their one rounding. What the torch.compile backend
// puts in place of a convolution followed by an inference batch norm (folded: scale
// gamma / sqrt(var + eps), bias beta - mean x scale, both fp32) and/or an activation.
at::Tensor conv_epilogue(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias_in,
                         const std::optional<at::Tensor>& scale_in, c10::IntArrayRef stride, c10::IntArrayRef padding,
                         c10::IntArrayRef dilation, std::int64_t groups, c10::string_view activation) {
  constexpr const char* kName = "spyre::conv_epilogue";
  std::optional<isa::UnaryOp> act;
  if (!activation.empty()) {
    act = epilogue_activation(std::string_view(activation.data(), activation.size()));
    TORCH_CHECK(act.has_value(), kName, ": unknown activation '", activation, "' (expected ",
                epilogue_activation_names(), ")");
  }
  TORCH_CHECK((input.dim() == 3 || input.dim() == 4) && weight.dim() == input.dim(), kName,
              ": expected a 3-D or 4-D input and weights of the same rank, got ", input.dim(), "-D and ", weight.dim(),
              "-D");
  TORCH_CHECK(is_spyre(input) && weight.device() == input.device() && device_float_dtype(input.scalar_type()) &&
                  weight.scalar_type() == input.scalar_type(),
              kName, ": input and weight must be float tensors of one dtype on one spyre device, got ",
              input.scalar_type(), " on ", input.device(), " and ", weight.scalar_type(), " on ", weight.device());
  const std::int64_t out_channels = weight.size(0);
  const bool has_bias = bias_in && bias_in->defined(), has_scale = scale_in && scale_in->defined();
  if (has_bias) {
    TORCH_CHECK(bias_in->device() == input.device() && device_float_dtype(bias_in->scalar_type()) &&
                    bias_in->numel() == out_channels,
                kName, ": the bias must be ", out_channels, " float values on ", input.device(), ", got shape ",
                bias_in->sizes(), " ", bias_in->scalar_type(), " on ", bias_in->device());
  }
  if (has_scale) {
    TORCH_CHECK(has_bias, kName, ": a scale needs a bias (the folded batch norm's shift)");
    TORCH_CHECK(scale_in->device() == input.device() && scale_in->scalar_type() == at::kFloat &&
                    scale_in->numel() == out_channels,
                kName, ": the scale must be ", out_channels, " float32 values on ", input.device(), ", got shape ",
                scale_in->sizes(), " ", scale_in->scalar_type(), " on ", scale_in->device());
  }
  if (input.numel() == 0 || weight.numel() == 0) {  // nothing for a kernel: the eager ops
    at::Tensor y = at::convolution(input, weight, std::nullopt, stride, padding, dilation, false, {0}, groups);
    const std::vector<std::int64_t> channel = input.dim() == 4 ? std::vector<std::int64_t>{-1, 1, 1}
                                                               : std::vector<std::int64_t>{-1, 1};
    if (has_scale) y = y * scale_in->reshape(channel);
    if (has_bias) y = y + bias_in->reshape(channel);
    if (!act) return y;
    switch (*act) {
      case isa::UnaryOp::relu: return at::relu(y);
      case isa::UnaryOp::gelu: return at::gelu(y);
      case isa::UnaryOp::gelu_tanh: return at::gelu(y, "tanh");
      case isa::UnaryOp::silu: return at::silu(y);
      case isa::UnaryOp::sigmoid: return at::sigmoid(y);
      case isa::UnaryOp::hardswish: return at::hardswish(y);
      case isa::UnaryOp::hardsigmoid: return at::hardsigmoid(y);
      default: return at::tanh(y);
    }
  }
  std::string parts = has_scale ? "bn" : has_bias ? "bias" : "";
  if (act) parts += (parts.empty() ? "" : ",") + std::string(activation);
  const std::string name = "spyre::conv[" + parts + "]";
  return device_convolution(name.c_str(), input, weight, has_bias ? *bias_in : at::Tensor(),
                            has_scale ? *scale_in : at::Tensor(), stride, padding, dilation, groups, act);
}

// The weights of the convolution that gives a convolution's input gradient, as
// run_conv takes them: wt2[c][ky][kx][og] = w[g x og' + og][cg][kh - 1 - ky][kw - 1 - kx]
// for c = g x cg' + cg (each group's in and out channels swapped, the taps reversed).
// One device copy kernel reading w through negative strides.
at::Tensor flipped_transposed_weights(const at::Tensor& w, const Geometry& g) {
  at::Tensor out = at::empty({g.channels, g.kh, g.kw, g.og()}, w.options());
  compiler::PointwiseKernel k;
  const isa::DType dt = *device_float_dtype(w.scalar_type());
  // Innermost first: og, kx, ky, cg, group.
  k.shape = {u(g.og()), u(g.kw), u(g.kh), u(g.group_channels), u(g.groups)};
  compiler::Operand in{.dtype = dt, .strides = {w.stride(0), -w.stride(3), -w.stride(2), w.stride(1), g.og() * w.stride(0)}};
  const std::int64_t first = (g.kh - 1) * w.stride(2) + (g.kw - 1) * w.stride(3);  // element (0, 0, kh-1, kw-1)
  const std::int64_t plane = g.kh * g.kw * g.og();
  k.output = compiler::Operand{.dtype = dt, .strides = {1, g.og(), g.kw * g.og(), plane, g.group_channels * plane}};
  k.inputs = {in};
  const std::int64_t low = compiler::lowest_offset(k.shape, in.strides);
  const auto size = static_cast<std::int64_t>(isa::dtype_size(dt));
  const std::vector<std::uint64_t> args{
      reinterpret_cast<std::uint64_t>(static_cast<const char*>(w.const_data_ptr()) + (first + low) * size),
      device_address(out)};
  const std::string name = "aten::convolution_backward (weights flipped)";
  run_cached(w.device().index(), name + "|" + k.key(),
             [&](const compiler::Target& t) { return compiler::compile_pointwise(k, t, name); }, args, name,
             {.read = bytes(w), .written = bytes(out)});
  return out;
}

// convolution_backward_overrideable: the gradients of a device convolution on the
// device, each a convolution kernel or a reduction.
//   input:  a convolution of the output gradient, dilated by the stride (zeros between
//           its pixels) and bordered by d (k - 1) - p zeros (plus the rows and columns
//           the forward's last window did not reach), with each group's weights
//           transposed and their taps reversed; stride 1, the forward's dilation.
//   weight: per group, dW[(ky, kx, c)][o] = sum over pixels of A[p][(ky, kx, c)] x
//           dY[p][o]: the forward's implicit im2col matrix A, transposed, times the output
//           gradient channels-last; one GEMM whose A^T panels are gathered from the
//           padded input as the forward's are.
//   bias:   the output gradient summed over images and pixels.
// Transposed convolutions, other dtypes, and paddings wider than the kernel's reach
// (d (k - 1) < p) run on the CPU, counted.
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    std::int64_t groups, std::array<bool, 3> output_mask) {
  const auto dtype = device_float_dtype(input.scalar_type());
  const bool one_d = input.dim() == 3;
  bool device_path = !transposed && (input.dim() == 3 || input.dim() == 4) && dtype && is_spyre(input) &&
                     weight.scalar_type() == input.scalar_type() && grad_output.scalar_type() == input.scalar_type() &&
                     weight.device() == input.device() && grad_output.device() == input.device() &&
                     input.numel() > 0 && weight.numel() > 0 && grad_output.numel() > 0;
  Geometry g;
  at::Tensor x, w, dy;
  if (device_path) {
    x = one_d ? input.unsqueeze(2) : input;
    w = one_d ? weight.unsqueeze(2) : weight;
    dy = one_d ? grad_output.unsqueeze(2) : grad_output;
    g = geometry(x, w, stride, padding, dilation, groups, one_d);
    device_path = g.dh * (g.kh - 1) >= g.ph && g.dw * (g.kw - 1) >= g.pw && dy.size(2) == g.ho && dy.size(3) == g.wo &&
                  dy.size(1) == g.out && dy.size(0) == g.images;
  }
  if (!device_path) {
    count_fallback("aten::convolution_backward_overrideable");
    const std::vector<std::int64_t> bias_sizes{grad_output.size(1)};
    auto [gi, gw, gb] = at::convolution_backward(grad_output.cpu(), input.cpu(), weight.cpu(), bias_sizes, stride,
                                                 padding, dilation, transposed, output_padding, groups, output_mask);
    const auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
    return {back(gi), back(gw), back(gb)};
  }
  const c10::DeviceGuard guard(x.device());
  const std::uint64_t element = u(x.element_size());
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) {
    // The dilated, bordered output gradient, channels-last: rows (ho - 1) sh + 1 + the
    // two borders + the rows the forward never reached (so the result has h rows).
    const std::int64_t bh = g.dh * (g.kh - 1) - g.ph, bw = g.dw * (g.kw - 1) - g.pw;
    const std::int64_t rh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) % g.sh;
    const std::int64_t rw = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) % g.sw;
    const std::int64_t hb = (g.ho - 1) * g.sh + 1 + 2 * bh + rh, wb = (g.wo - 1) * g.sw + 1 + 2 * bw + rw;
    at::Tensor b = dy.permute({0, 2, 3, 1});
    if (g.sh != 1 || g.sw != 1 || bh != 0 || bw != 0 || rh != 0 || rw != 0 || !b.is_contiguous()) {
      b = at::zeros({g.images, hb, wb, g.out}, dy.options());
      b.slice(1, bh, bh + (g.ho - 1) * g.sh + 1, g.sh).slice(2, bw, bw + (g.wo - 1) * g.sw + 1, g.sw)
          .copy_(dy.permute({0, 2, 3, 1}));
    }
    Geometry t;  // the gradient's convolution, over b with no padding
    t.images = g.images, t.channels = g.out, t.h = hb, t.w = wb, t.out = g.channels, t.group_channels = g.og();
    t.kh = g.kh, t.kw = g.kw, t.dh = g.dh, t.dw = g.dw, t.groups = g.groups, t.ho = g.h, t.wo = g.w;
    const at::Tensor wt2 = flipped_transposed_weights(w, g);
    const at::Tensor dx = run_conv("aten::convolution_backward (input)", b, wt2, at::Tensor(), t,
                                   {.read = bytes(dy) + bytes(w), .written = bytes(x)});
    grad_input = dx.permute({0, 3, 1, 2});
    if (one_d) grad_input = grad_input.squeeze(2);
  }
  if (output_mask[1]) {
    const at::Tensor xp = padded_channels_last(x, g.ph, g.pw);
    const at::Tensor dyc = dy.permute({0, 2, 3, 1}).contiguous();  // [pixels, out]
    at::Tensor dw2 = at::empty({g.groups, g.kh, g.kw, g.group_channels, g.og()}, x.options());
    compiler::MatmulShape s;
    s.m = u(g.kh * g.kw * g.group_channels);
    s.n = u(g.og());
    s.k = u(g.images * g.ho * g.wo);
    s.dtype = *dtype;
    s.a_transposed = true;
    s.ldb = u(g.out);
    s.batch = u(g.groups);
    if (g.groups > 1) {
      s.a_batch_stride = u(g.group_channels);
      s.b_batch_stride = u(g.og());
    }
    s.conv = compiler::MatmulShape::ConvA{.images = u(g.images), .h = u(xp.size(1)), .w = u(xp.size(2)),
                                          .channels = u(g.channels), .group_channels = u(g.group_channels),
                                          .kh = u(g.kh), .kw = u(g.kw), .sh = u(g.sh), .sw = u(g.sw), .dh = u(g.dh),
                                          .dw = u(g.dw), .ho = u(g.ho), .wo = u(g.wo)};
    const std::string name = "aten::convolution_backward (weight)";
    const std::string key = name + "|" + std::string(isa::to_string(s.dtype)) + "|" + g.key();
    const std::vector<std::uint64_t> args{device_address(xp), device_address(dyc), device_address(dw2)};
    run_cached(x.device().index(), key, [&](const compiler::Target& tg) { return compiler::compile_matmul(s, tg, name); },
               args, name, {.read = input_bytes_read(g, element) + bytes(dy), .written = bytes(w)});
    // [groups, kh, kw, cg, og] -> the weights' [out, cg, kh, kw].
    grad_weight = dw2.permute({0, 4, 3, 1, 2}).reshape({g.out, g.group_channels, g.kh, g.kw});
    if (one_d) grad_weight = grad_weight.squeeze(2);
  }
  if (output_mask[2]) grad_bias = at::sum(grad_output, one_d ? std::vector<std::int64_t>{0, 2} : std::vector<std::int64_t>{0, 2, 3});
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(spyre, m) {
  m.def("conv_epilogue(Tensor input, Tensor weight, Tensor? bias, Tensor? scale, int[] stride, int[] padding, "
        "int[] dilation, int groups, str activation) -> Tensor");
}
TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("conv_epilogue", conv_epilogue); }
TORCH_LIBRARY_IMPL(spyre, Autograd, m) { m.impl("conv_epilogue", torch::autograd::autogradNotImplementedFallback()); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
}

}  // namespace spyre::backend
