// Convolutions on the compute arrays: conv1d and conv2d (any stride, padding, dilation
// and groups, with or without a bias) in fp32, fp16 and bf16 as one implicit-GEMM
// kernel (compiler::MatmulShape::conv): C[pixels x out channels] = A[pixels x taps *
// channels] B, where A is never stored: each of its panels is gathered from the input by
// DMA. The kernel reads the input channels-last and padded, so an input that is not
// (PyTorch's default NCHW, or any padding) is first copied into a zero-bordered
// channels-last buffer by device copy kernels; the weights are copied to [out, kh, kw,
// in] (a view when they are channels-last already). The result is channels-last (NCHW
// sizes, NHWC strides), as the kernel writes it. Transposed and 3-D convolutions and
// other dtypes run on the CPU, counted.
#include <ATen/ops/convolution.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "compiler/matmul.h"
#include "runtime/launch.h"

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

// A convolution parameter for spatial dim `d` (0 = height, 1 = width) of a 2-D
// convolution; a conv1d's one value is its width's, its height's is `unit`.
std::int64_t param(c10::IntArrayRef v, bool one_d, int d, std::int64_t unit) {
  if (one_d) return d == 0 ? unit : v.at(0);
  return v.size() == 1 ? v[0] : v.at(static_cast<std::size_t>(d));
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
  const bool one_d = input.dim() == 3;
  const at::Tensor x = one_d ? input.unsqueeze(2) : input, w = one_d ? weight.unsqueeze(2) : weight;
  const std::int64_t images = x.size(0), channels = x.size(1), h = x.size(2), wd = x.size(3);
  const std::int64_t out_channels = w.size(0), group_channels = w.size(1), kh = w.size(2), kw = w.size(3);
  const std::int64_t sh = param(stride, one_d, 0, 1), sw = param(stride, one_d, 1, 1);
  const std::int64_t ph = param(padding, one_d, 0, 0), pw = param(padding, one_d, 1, 0);
  const std::int64_t dh = param(dilation, one_d, 0, 1), dw = param(dilation, one_d, 1, 1);
  TORCH_CHECK(groups > 0 && channels == group_channels * groups && out_channels % groups == 0,
              "aten::convolution: expected an input of groups x weight.size(1) = ", groups, " x ", group_channels,
              " channels and out channels divisible by groups, got ", channels, " input and ", out_channels,
              " out channels");
  TORCH_CHECK(sh > 0 && sw > 0 && dh > 0 && dw > 0 && ph >= 0 && pw >= 0,
              "aten::convolution: expected positive strides and dilations and non-negative padding");
  const std::int64_t hp = h + 2 * ph, wp = wd + 2 * pw;
  const std::int64_t ho = (hp - dh * (kh - 1) - 1) / sh + 1, wo = (wp - dw * (kw - 1) - 1) / sw + 1;
  TORCH_CHECK(hp >= dh * (kh - 1) + 1 && wp >= dw * (kw - 1) + 1,
              "aten::convolution: the kernel (", kh, "x", kw, ", dilation ", dh, "x", dw,
              ") is larger than the padded input (", hp, "x", wp, ")");
  const c10::DeviceGuard guard(x.device());
  // The input as the kernel reads it: channels-last, padding included.
  const at::Tensor nhwc = x.permute({0, 2, 3, 1});
  at::Tensor xp = nhwc;
  if (ph != 0 || pw != 0 || !nhwc.is_contiguous()) {
    xp = at::zeros({images, hp, wp, channels}, x.options());
    xp.narrow(1, ph, h).narrow(2, pw, wd).copy_(nhwc);
  }
  const at::Tensor wt = w.permute({0, 2, 3, 1}).contiguous();  // [out, kh, kw, in / groups]
  const at::Tensor bias = has_bias ? bias_in->reshape({-1}).contiguous() : at::Tensor();
  at::Tensor y = at::empty({images, ho, wo, out_channels}, x.options());
  const std::int64_t og = out_channels / groups;
  compiler::MatmulShape s;
  s.m = static_cast<std::uint64_t>(images * ho * wo);
  s.n = static_cast<std::uint64_t>(og);
  s.k = static_cast<std::uint64_t>(kh * kw * group_channels);
  s.dtype = *dtype;
  s.b_transposed = true;
  s.batch = static_cast<std::uint64_t>(groups);
  if (groups > 1) {
    s.a_batch_stride = static_cast<std::uint64_t>(group_channels);
    s.b_batch_stride = static_cast<std::uint64_t>(og) * s.k;
    s.c_batch_stride = static_cast<std::uint64_t>(og);
    s.bias_batch_stride = has_bias ? static_cast<std::uint64_t>(og) : 0;
  }
  s.ldc = static_cast<std::uint64_t>(out_channels);
  if (has_bias) s.bias = *device_float_dtype(bias.scalar_type());
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  s.conv = compiler::MatmulShape::ConvA{.images = u(images), .h = u(hp), .w = u(wp), .channels = u(channels),
                                        .group_channels = u(group_channels), .kh = u(kh), .kw = u(kw), .sh = u(sh),
                                        .sw = u(sw), .dh = u(dh), .dw = u(dw), .ho = u(ho), .wo = u(wo)};
  const auto list = [](std::initializer_list<std::int64_t> v) {
    std::string out;
    for (const std::int64_t e : v) out += (out.empty() ? "" : ",") + std::to_string(e);
    return out;
  };
  const std::string key = "aten::convolution|" + std::string(isa::to_string(s.dtype)) + "|" +
                          list({images, channels, hp, wp}) + "|" + list({out_channels, group_channels, kh, kw}) + "|s" +
                          list({sh, sw}) + "|d" + list({dh, dw}) + "|g" + std::to_string(groups) +
                          (has_bias ? "|+" + std::string(isa::to_string(*s.bias)) : "");
  std::vector<std::uint64_t> args{device_address(xp), device_address(wt), device_address(y)};
  if (has_bias) args.push_back(device_address(bias));
  // The least traffic: the input pixels the convolution reads, the weights and the bias
  // once each, the result written.
  const auto bytes = [&](const at::Tensor& t) { return t.defined() ? u(t.numel()) * u(t.element_size()) : 0; };
  const std::uint64_t pixels_read = compiler::conv_positions_read(u(h), u(ho), u(kh), u(sh), u(dh), u(ph)) *
                                    compiler::conv_positions_read(u(wd), u(wo), u(kw), u(sw), u(dw), u(pw));
  const Traffic traffic{.read = u(images * channels) * pixels_read * u(x.element_size()) + bytes(w) + bytes(bias),
                        .written = bytes(y)};
  run_cached(x.device().index(), key,
             [&](const compiler::Target& t) { return compiler::compile_matmul(s, t, "aten::convolution"); }, args,
             "aten::convolution", traffic);
  at::Tensor out = y.permute({0, 3, 1, 2});  // NCHW sizes, channels-last strides
  return one_d ? out.squeeze(2) : out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("convolution_overrideable", convolution); }

}  // namespace spyre::backend
