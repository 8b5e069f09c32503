// 2-D pooling on the device: max_pool2d_with_indices (what nn.MaxPool2d and
// F.max_pool2d call) and avg_pool2d, fp32/fp16/bf16, any kernel, stride, padding,
// dilation, ceil mode and memory format. Each is a pointwise kernel over the window's
// taps, the taps being strided views of the input (read by DMA descriptors; nothing is
// gathered into a new tensor); padding comes from a copy of the input with a border of
// -inf (max) or zeros (average), made only when the windows reach past the input.
//   max: the CPU's scan, tap by tap in row-major order from -inf: a tap replaces the
//        maximum when it is greater or NaN; the index is the tap's input position (a
//        window that never replaces it keeps its first tap inside the input, as the
//        CPU's). Values and indices are two kernels (a kernel has one output), the
//        indices written as int32 into the low words of the int64 result; the values
//        kernel is a chain of max ops (the same maxima, a quarter of the steps).
//   average: the taps summed in row-major order in fp32, divided by the CPU's divisor
//        for that output position (divisor_override; the window clipped to the padded
//        input when count_include_pad; else its taps inside the input).
// Per-position tensors (first index, divisor) are made on the host once per shape and
// kept on the device. avg_pool2d_backward adds each window's share tap by tap (as max
// pooling's backward); _adaptive_avg_pool2d and its backward with output sizes that
// divide the input's are these average pools. max_pool2d without a gradient to record
// runs the values kernel alone (spyre::max_pool2d; no indices kernel). Uneven adaptive
// windows are two matmuls by window matrices and a division. Windows of more than 64 taps and other
// dtypes run on the CPU, counted.
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/Pool.h>
#include <ATen/ops/_adaptive_avg_pool2d.h>
#include <ATen/ops/_adaptive_avg_pool2d_backward.h>
#include <ATen/ops/avg_pool2d.h>
#include <ATen/ops/avg_pool2d_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/div.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/outer.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/max_pool2d_with_indices.h>
#include <ATen/ops/max_pool2d_with_indices_backward.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/out.h"
#include "aten/pointwise.h"

namespace spyre::backend {
namespace {

using compiler::Step;
using compiler::Value;
using isa::BinaryOp;
using isa::CompareOp;

constexpr std::int64_t kMaxTaps = 64;

struct Window {
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  std::int64_t h = 0, w = 0, ho = 0, wo = 0;
  std::int64_t taps() const { return kh * kw; }
  // Rows and columns of the padded input the windows read.
  std::int64_t rows() const { return std::max(h + 2 * ph, (ho - 1) * sh + (kh - 1) * dh + 1); }
  std::int64_t cols() const { return std::max(w + 2 * pw, (wo - 1) * sw + (kw - 1) * dw + 1); }
  std::string key() const {
    std::string k;
    for (const std::int64_t v : {kh, kw, sh, sw, ph, pw, dh, dw, h, w, ho, wo}) k += std::to_string(v) + ",";
    return k;
  }
};

std::pair<std::int64_t, std::int64_t> pair_of(c10::IntArrayRef v, const char* op, const char* what,
                                              std::pair<std::int64_t, std::int64_t> omitted) {
  TORCH_CHECK(v.size() == 1 || v.size() == 2 || (v.empty() && omitted.first > 0), op, ": ", what,
              " must either be ", v.empty() || omitted.first > 0 ? "omitted, " : "", "a single int, or a tuple of two ints");
  if (v.empty()) return omitted;
  return {v[0], v.size() == 1 ? v[0] : v[1]};
}

// PyTorch's argument checks and output size (ATen/native/Pool.h).
Window window(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride, c10::IntArrayRef padding,
              c10::IntArrayRef dilation, bool ceil_mode, const char* op) {
  Window win;
  std::tie(win.kh, win.kw) = pair_of(kernel, op, "kernel_size", {0, 0});
  std::tie(win.sh, win.sw) = pair_of(stride, op, "stride", {win.kh, win.kw});
  std::tie(win.ph, win.pw) = pair_of(padding, op, "padding", {0, 0});
  std::tie(win.dh, win.dw) = pair_of(dilation, op, "dilation", {0, 0});
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, op, ": expected a 3-D or 4-D input, got ", self.dim(), "-D");
  win.h = self.size(-2);
  win.w = self.size(-1);
  win.ho = at::native::pooling_output_shape<std::int64_t>(win.h, win.kh, win.ph, win.sh, win.dh, ceil_mode);
  win.wo = at::native::pooling_output_shape<std::int64_t>(win.w, win.kw, win.pw, win.sw, win.dw, ceil_mode);
  at::native::pool2d_shape_check(self, win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.dh, win.dw, self.size(-3),
                                 win.h, win.w, win.ho, win.wo, self.suggest_memory_format());
  return win;
}

bool on_device(const at::Tensor& self, const Window& win) {
  return self.device().type() == c10::DeviceType::PrivateUse1 && device_float_dtype(self.scalar_type()) &&
         win.taps() <= kMaxTaps && self.numel() > 0;
}

// The input as the windows read it: with a border of `value` where they reach past it.
at::Tensor padded(const at::Tensor& x, const Window& win, double value) {
  if (win.ph == 0 && win.pw == 0 && win.rows() == win.h && win.cols() == win.w) return x;
  std::vector<std::int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes[sizes.size() - 2] = win.rows();
  sizes.back() = win.cols();
  at::Tensor p = at::empty(sizes, x.options().memory_format(x.suggest_memory_format()));
  p.fill_(value);
  p.narrow(-2, win.ph, win.h).narrow(-1, win.pw, win.w).copy_(x);
  return p;
}

// Tap (ky, kx) of every window: a strided view of the padded input, the output's shape.
at::Tensor tap(const at::Tensor& p, const Window& win, std::int64_t ky, std::int64_t kx) {
  return p.slice(-2, ky * win.dh, ky * win.dh + (win.ho - 1) * win.sh + 1, win.sh)
      .slice(-1, kx * win.dw, kx * win.dw + (win.wo - 1) * win.sw + 1, win.sw);
}

std::vector<at::Tensor> all_taps(const at::Tensor& p, const Window& win) {
  std::vector<at::Tensor> taps;
  for (std::int64_t t = 0; t < win.taps(); ++t) taps.push_back(tap(p, win, t / win.kw, t % win.kw));
  return taps;
}

// A per-position [ho, wo] tensor made on the host by `fill(oy, ox)`, uploaded once per
// device, kind and window, and kept.
template <class Fill>
at::Tensor per_position(c10::Device device, const std::string& kind, const Window& win, c10::ScalarType dtype,
                               Fill&& fill) {
  static std::mutex mutex;
  static std::map<std::string, at::Tensor> kept;
  const std::string key = kind + "|" + std::to_string(device.index()) + "|" + win.key();
  const std::lock_guard lock(mutex);
  auto it = kept.find(key);
  if (it != kept.end()) return it->second;
  at::Tensor host = at::empty({win.ho, win.wo}, at::TensorOptions().dtype(dtype));
  for (std::int64_t oy = 0; oy < win.ho; ++oy) {
    for (std::int64_t ox = 0; ox < win.wo; ++ox) {
      if (dtype == at::kInt) {
        host.data_ptr<std::int32_t>()[oy * win.wo + ox] = static_cast<std::int32_t>(fill(oy, ox));
      } else {
        host.data_ptr<float>()[oy * win.wo + ox] = static_cast<float>(fill(oy, ox));
      }
    }
  }
  return kept.emplace(key, host.to(device)).first->second;
}

// The first tap inside the input of the window at (oy, ox), along one dim.
std::int64_t first_inside(std::int64_t o, std::int64_t s, std::int64_t p, std::int64_t d) {
  std::int64_t i = o * s - p;
  while (i < 0) i += d;
  return i;
}

// The least traffic: the input read once, the outputs written once.
Traffic least(const at::Tensor& x, std::initializer_list<const at::Tensor*> outs) {
  Traffic t{.read = static_cast<std::uint64_t>(x.numel() * x.element_size()), .written = 0};
  for (const at::Tensor* o : outs) t.written += static_cast<std::uint64_t>(o->numel() * o->element_size());
  return t;
}

std::vector<std::int64_t> out_sizes(const at::Tensor& x, const Window& win) {
  std::vector<std::int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes[sizes.size() - 2] = win.ho;
  sizes.back() = win.wo;
  return sizes;
}

// A backward's zeroed buffer the size of the padded input (the taps' views add into it),
// and the result: its inside.
at::Tensor gradient_buffer(const at::Tensor& self, const Window& win) {
  std::vector<std::int64_t> sizes(self.sizes().begin(), self.sizes().end());
  sizes[sizes.size() - 2] = win.rows();
  sizes.back() = win.cols();
  return at::zeros(sizes, self.options().memory_format(self.suggest_memory_format()));
}
at::Tensor inside(const at::Tensor& buffer, const at::Tensor& self, const Window& win) {
  if (win.ph == 0 && win.pw == 0 && win.rows() == win.h && win.cols() == win.w) return buffer;
  at::Tensor out = at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
  out.copy_(buffer.narrow(-2, win.ph, win.h).narrow(-1, win.pw, win.w));
  return out;
}

// ---- max_pool2d_with_indices --------------------------------------------------------

// The maxima: a chain of NaN-propagating max ops from -inf, max(best, tap) keeping best
// unless the tap is greater (the CPU's scan: its values, ties and signed zeros alike).
void max_pool_values(const char* name, const at::Tensor& x, const at::Tensor& p, const Window& win, at::Tensor& out,
                     const Traffic& traffic) {
  const isa::DType c = *device_float_dtype(x.scalar_type());
  std::vector<Step> values;
  Value best = Value::constant(-std::numeric_limits<double>::infinity());
  for (std::uint32_t t = 0; t < static_cast<std::uint32_t>(win.taps()); ++t) {
    values.push_back(Step::binary(BinaryOp::max, c, best, Value::input(t)));
    best = Value::step(t);
  }
  const std::vector<at::Tensor> taps = all_taps(p, win);  // (the iterator borrows them)
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).add_output(out);
  for (const at::Tensor& t : taps) config.add_const_input(t);
  auto iter = config.build();
  run_pointwise_with_traffic(name, iter, values, traffic);
}

void max_pool_on_device(const at::Tensor& x, const Window& win, at::Tensor& out, at::Tensor& indices) {
  const c10::DeviceGuard guard(x.device());
  const at::Tensor p = padded(x, win, -std::numeric_limits<double>::infinity());
  const isa::DType c = *device_float_dtype(x.scalar_type());
  constexpr isa::DType i32 = isa::DType::int32;
  // The indices: tap by tap, replace when greater or NaN (the CPU's test), tracking the
  // tap's position. Inputs: the taps, then each window's base position and first index.
  std::vector<Step> positions;
  const auto taps = static_cast<std::uint32_t>(win.taps());
  Value best = Value::constant(-std::numeric_limits<double>::infinity()), index = Value::input(taps + 1);
  for (std::uint32_t t = 0; t < taps; ++t) {
    const std::int64_t ky = t / win.kw, kx = t % win.kw;
    const auto at = static_cast<std::uint32_t>(positions.size());
    positions.push_back(Step::compare(CompareOp::gt, c, Value::input(t), best));            // at
    positions.push_back(Step::compare(CompareOp::ne, c, Value::input(t), Value::input(t)));  // at + 1: NaN
    positions.push_back(Step::binary(BinaryOp::max, isa::DType::boolean, Value::step(at), Value::step(at + 1)));
    positions.push_back(Step::select(c, Value::step(at + 2), Value::input(t), best));        // at + 3
    best = Value::step(at + 3);
    positions.push_back(Step::binary(BinaryOp::add, i32, Value::input(taps),
                                     Value::constant(static_cast<double>(ky * win.dh * win.w + kx * win.dw))));
    positions.push_back(Step::select(i32, Value::step(at + 2), Value::step(at + 4), index));
    index = Value::step(at + 5);
  }
  const Traffic traffic = least(x, {&out, &indices});
  max_pool_values("aten::max_pool2d_with_indices", x, p, win, out,
                  {.read = traffic.read, .written = static_cast<std::uint64_t>(out.numel() * out.element_size())});
  // The base of each window's positions (its top-left tap, which may lie in the
  // padding) and its first tap inside the input.
  const at::Tensor base = per_position(x.device(), "pool-base", win, at::kInt, [&](std::int64_t oy, std::int64_t ox) {
    return (oy * win.sh - win.ph) * win.w + (ox * win.sw - win.pw);
  });
  const at::Tensor first = per_position(x.device(), "pool-first", win, at::kInt, [&](std::int64_t oy, std::int64_t ox) {
    return first_inside(oy, win.sh, win.ph, win.dh) * win.w + first_inside(ox, win.sw, win.pw, win.dw);
  });
  // indices' low words as int32 (the high words are zero: positions are non-negative).
  indices.zero_();
  at::Tensor low = int64_word(indices, 0);
  const std::vector<at::Tensor> taps_of = all_taps(p, win);  // (the iterator borrows them)
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).add_output(low);
  for (const at::Tensor& t : taps_of) config.add_const_input(t);
  config.add_const_input(base).add_const_input(first);
  auto iter = config.build();
  run_pointwise_with_traffic("aten::max_pool2d_with_indices (indices)", iter, positions,
                             {.read = traffic.read, .written = static_cast<std::uint64_t>(indices.numel() * 8)});
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_indices_device(const at::Tensor& self, c10::IntArrayRef kernel,
                                                           c10::IntArrayRef stride, c10::IntArrayRef padding,
                                                           c10::IntArrayRef dilation, bool ceil_mode) {
  const Window win = window(self, kernel, stride, padding, dilation, ceil_mode, "max_pool2d");
  if (!on_device(self, win)) {
    count_fallback("aten::max_pool2d_with_indices");
    auto [o, i] = at::max_pool2d_with_indices(self.cpu(), kernel, stride, padding, dilation, ceil_mode);
    return {o.to(self.device()), i.to(self.device())};
  }
  const auto format = self.suggest_memory_format();
  at::Tensor out = at::empty(out_sizes(self, win), self.options().memory_format(format));
  at::Tensor indices = at::empty(out_sizes(self, win), self.options().dtype(at::kLong).memory_format(format));
  max_pool_on_device(self, win, out, indices);
  return {out, indices};
}

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_indices_device_out(const at::Tensor& self, c10::IntArrayRef kernel,
                                                                 c10::IntArrayRef stride, c10::IntArrayRef padding,
                                                                 c10::IntArrayRef dilation, bool ceil_mode,
                                                                 at::Tensor& out, at::Tensor& indices) {
  auto [o, i] = max_pool2d_indices_device(self, kernel, stride, padding, dilation, ceil_mode);
  deliver(o, out);
  deliver(i, indices);
  return {out, indices};
}

// aten::max_pool2d without a gradient to record: the maxima only (no indices kernel).
// spyre::max_pool2d is this values-only pool (with a Meta kernel, so torch.compile can
// trace it); aten::max_pool2d reaches it from the PrivateUse1 and AutogradPrivateUse1
// keys when no gradient is needed, and max_pool2d_with_indices otherwise (PyTorch's
// composite does the latter always on non-CPU devices).
at::Tensor spyre_max_pool2d(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                            c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
  const Window win = window(self, kernel, stride, padding, dilation, ceil_mode, "max_pool2d");
  if (!on_device(self, win)) return std::get<0>(max_pool2d_indices_device(self, kernel, stride, padding, dilation, ceil_mode));
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty(out_sizes(self, win), self.options().memory_format(self.suggest_memory_format()));
  const at::Tensor p = padded(self, win, -std::numeric_limits<double>::infinity());
  max_pool_values("aten::max_pool2d", self, p, win, out, least(self, {&out}));
  return out;
}

at::Tensor spyre_max_pool2d_meta(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                                 c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
  const Window win = window(self, kernel, stride, padding, dilation, ceil_mode, "max_pool2d");
  return at::empty(out_sizes(self, win), self.options().memory_format(self.suggest_memory_format()));
}

at::Tensor call_spyre_max_pool2d(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                                 c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("spyre::max_pool2d", "")
                             .typed<at::Tensor(const at::Tensor&, c10::IntArrayRef, c10::IntArrayRef,
                                               c10::IntArrayRef, c10::IntArrayRef, bool)>();
  return op.call(self, kernel, stride, padding, dilation, ceil_mode);
}

at::Tensor max_pool2d_autograd(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
  if (at::GradMode::is_enabled() && self.requires_grad()) {
    return std::get<0>(at::max_pool2d_with_indices(self, kernel, stride, padding, dilation, ceil_mode));
  }
  return call_spyre_max_pool2d(self, kernel, stride, padding, dilation, ceil_mode);
}

// max_pool2d_with_indices_backward: the gradient of each window goes to the input
// position its index names. Tap by tap, the positions the tap covers in every window
// are a strided view of a (padded) gradient buffer, and one kernel adds to it the
// output gradient where the window's index is that tap's position: kh x kw kernels
// into a zeroed buffer, overlapping windows accumulating one tap after another (the
// CPU adds them in output order: sums of several windows' gradients may differ in the
// last bit). The buffer's inside is the result.
at::Tensor max_pool_backward_device(const at::Tensor& grad, const at::Tensor& self, c10::IntArrayRef kernel,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool ceil_mode, const at::Tensor& indices) {
  const Window win = window(self, kernel, stride, padding, dilation, ceil_mode, "max_pool2d_with_indices_backward");
  const bool fits = on_device(self, win) && grad.device() == self.device() && indices.device() == self.device() &&
                    grad.scalar_type() == self.scalar_type() && indices.scalar_type() == at::kLong &&
                    grad.sizes() == indices.sizes() && grad.size(-2) == win.ho && grad.size(-1) == win.wo;
  if (!fits) {
    count_fallback("aten::max_pool2d_with_indices_backward");
    return at::max_pool2d_with_indices_backward(grad.cpu(), self.cpu(), kernel, stride, padding, dilation, ceil_mode,
                                                indices.cpu())
        .to(self.device());
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor buffer = gradient_buffer(self, win);
  at::Tensor low = int64_word(indices, 0);
  const at::Tensor base = per_position(self.device(), "pool-base", win, at::kInt, [&](std::int64_t oy, std::int64_t ox) {
    return (oy * win.sh - win.ph) * win.w + (ox * win.sw - win.pw);
  });
  const isa::DType c = isa::DType::fp32;
  for (std::int64_t t = 0; t < win.taps(); ++t) {
    const std::int64_t ky = t / win.kw, kx = t % win.kw;
    at::Tensor into = tap(buffer, win, ky, kx);
    at::TensorIteratorConfig config;
    config.check_all_same_dtype(false).add_output(into).add_const_input(into).add_const_input(low)
        .add_const_input(base).add_const_input(grad);
    auto iter = config.build();
    // into += (index == base + the tap's offset) ? grad : 0
    run_pointwise("aten::max_pool2d_with_indices_backward", iter,
                  {Step::binary(BinaryOp::add, isa::DType::int32, Value::input(2),
                                Value::constant(static_cast<double>(ky * win.dh * win.w + kx * win.dw))),
                   Step::compare(CompareOp::eq, isa::DType::int32, Value::input(1), Value::step(0)),
                   Step::select(c, Value::step(1), Value::input(3), Value::constant(0)),
                   Step::binary(BinaryOp::add, c, Value::input(0), Value::step(2))});
  }
  return inside(buffer, self, win);
}

at::Tensor& max_pool_backward_device_out(const at::Tensor& grad, const at::Tensor& self, c10::IntArrayRef kernel,
                                         c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                         bool ceil_mode, const at::Tensor& indices, at::Tensor& grad_input) {
  deliver(max_pool_backward_device(grad, self, kernel, stride, padding, dilation, ceil_mode, indices), grad_input);
  return grad_input;
}

// ---- avg_pool2d ---------------------------------------------------------------------

// The CPU's divisor for the window at (oy, ox).
double divisor(const Window& win, std::int64_t oy, std::int64_t ox, bool count_include_pad,
               std::optional<std::int64_t> divisor_override) {
  if (divisor_override) return static_cast<double>(*divisor_override);
  std::int64_t y0 = oy * win.sh - win.ph, x0 = ox * win.sw - win.pw;
  std::int64_t y1 = std::min(y0 + win.kh, win.h + win.ph), x1 = std::min(x0 + win.kw, win.w + win.pw);
  const std::int64_t padded_size = (y1 - y0) * (x1 - x0);
  if (count_include_pad) return static_cast<double>(padded_size);
  y0 = std::max<std::int64_t>(y0, 0), x0 = std::max<std::int64_t>(x0, 0);
  y1 = std::min(y1, win.h), x1 = std::min(x1, win.w);
  return static_cast<double>((y1 - y0) * (x1 - x0));
}

// Every window's divisor, kept on the device.
at::Tensor divisors(const at::Tensor& self, const Window& win, bool count_include_pad,
                    std::optional<std::int64_t> divisor_override) {
  return per_position(self.device(),
                      "avg-divisor|" + std::to_string(count_include_pad) + "|" + std::to_string(divisor_override.value_or(0)),
                      win, at::kFloat, [&](std::int64_t oy, std::int64_t ox) {
                        return divisor(win, oy, ox, count_include_pad, divisor_override);
                      });
}

at::Tensor avg_pool2d_device(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                      c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                      std::optional<std::int64_t> divisor_override) {
  TORCH_CHECK(!divisor_override || *divisor_override != 0, "divisor must be not zero");
  const Window win = window(self, kernel, stride, padding, {1}, ceil_mode, "avg_pool2d");
  if (!on_device(self, win)) {
    count_fallback("aten::avg_pool2d");
    return at::avg_pool2d(self.cpu(), kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
        .to(self.device());
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor out = at::empty(out_sizes(self, win), self.options().memory_format(self.suggest_memory_format()));
  const at::Tensor p = padded(self, win, 0);
  const at::Tensor div = divisors(self, win, count_include_pad, divisor_override);
  constexpr isa::DType f32 = isa::DType::fp32;
  const auto taps = static_cast<std::uint32_t>(win.taps());
  const std::vector<at::Tensor> taps_of = all_taps(p, win);
  std::vector<Step> steps;
  Value sum = Value::input(0);
  for (std::uint32_t t = 1; t < taps; ++t) {
    steps.push_back(Step::binary(BinaryOp::add, f32, sum, Value::input(t)));
    sum = Value::step(static_cast<std::uint32_t>(steps.size() - 1));
  }
  steps.push_back(Step::binary(BinaryOp::div, f32, sum, Value::input(taps)));
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).add_output(out);
  for (const at::Tensor& t : taps_of) config.add_const_input(t);
  config.add_const_input(div);
  auto iter = config.build();
  run_pointwise_with_traffic("aten::avg_pool2d", iter, steps, least(self, {&out}));
  return out;
}

at::Tensor& avg_pool2d_device_out(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                           c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           std::optional<std::int64_t> divisor_override, at::Tensor& out) {
  deliver(avg_pool2d_device(self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override), out);
  return out;
}

// avg_pool2d_backward: each window's gradient divided by its divisor goes to every
// position it covers. Tap by tap, as max pooling's backward: one kernel per tap adds
// grad / divisor into the tap's strided view of a zeroed (padded) buffer.
at::Tensor avg_pool_backward_device(const at::Tensor& grad, const at::Tensor& self, c10::IntArrayRef kernel,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding, bool ceil_mode,
                                    bool count_include_pad, std::optional<std::int64_t> divisor_override) {
  TORCH_CHECK(!divisor_override || *divisor_override != 0, "divisor must be not zero");
  const Window win = window(self, kernel, stride, padding, {1}, ceil_mode, "avg_pool2d_backward");
  const bool fits = on_device(self, win) && grad.device() == self.device() &&
                    grad.scalar_type() == self.scalar_type() && grad.dim() == self.dim() &&
                    grad.size(-2) == win.ho && grad.size(-1) == win.wo;
  if (!fits) {
    count_fallback("aten::avg_pool2d_backward");
    return at::avg_pool2d_backward(grad.cpu(), self.cpu(), kernel, stride, padding, ceil_mode, count_include_pad,
                                   divisor_override)
        .to(self.device());
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor buffer = gradient_buffer(self, win);
  const at::Tensor div = divisors(self, win, count_include_pad, divisor_override);
  constexpr isa::DType f32 = isa::DType::fp32;
  for (std::int64_t t = 0; t < win.taps(); ++t) {
    at::Tensor into = tap(buffer, win, t / win.kw, t % win.kw);
    at::TensorIteratorConfig config;
    config.check_all_same_dtype(false).add_output(into).add_const_input(into).add_const_input(grad).add_const_input(div);
    auto iter = config.build();
    run_pointwise("aten::avg_pool2d_backward", iter,
                  {Step::binary(BinaryOp::div, f32, Value::input(1), Value::input(2)),
                   Step::binary(BinaryOp::add, f32, Value::input(0), Value::step(0))});
  }
  return inside(buffer, self, win);
}

at::Tensor& avg_pool_backward_device_out(const at::Tensor& grad, const at::Tensor& self, c10::IntArrayRef kernel,
                                         c10::IntArrayRef stride, c10::IntArrayRef padding, bool ceil_mode,
                                         bool count_include_pad, std::optional<std::int64_t> divisor_override,
                                         at::Tensor& grad_input) {
  deliver(avg_pool_backward_device(grad, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override),
          grad_input);
  return grad_input;
}

// ---- adaptive_avg_pool2d ------------------------------------------------------------

// Output sizes that divide the input's make every adaptive window the same
// (H / oh) x (W / ow) block at that stride: an avg_pool2d, which sums the same taps in the
// same order as the CPU's adaptive kernel. (A 1x1 output never gets here: PyTorch's
// adaptive_avg_pool2d takes a mean then.) Uneven windows: separable_pool, below.
std::optional<std::pair<std::int64_t, std::int64_t>> even_block(const at::Tensor& self, c10::IntArrayRef output_size) {
  if (output_size.size() != 2 || (self.dim() != 3 && self.dim() != 4) || output_size[0] <= 0 || output_size[1] <= 0 ||
      self.size(-2) % output_size[0] != 0 || self.size(-1) % output_size[1] != 0) {
    return std::nullopt;
  }
  return std::pair{self.size(-2) / output_size[0], self.size(-1) / output_size[1]};
}

// Uneven windows (output sizes that do not divide the input's): window i of a dim of
// `in` positions pooled to `out` covers [floor(i in / out), ceil((i + 1) in / out)), so
// windows overlap and differ in length. A window's sum is separable: S = R_h X R_w^T
// for each image and channel, R[i][j] = 1 for j in window i; then S / (len_h x len_w)
// rounded once to the input's dtype, as the CPU divides each window's fp32 sum by its
// size. Two matmuls and one division on the device, in fp32 (half inputs converted
// first: their sums are exact, so the results are the CPU's bit for bit).
// R [out, in] for a dim.
at::Tensor window_matrix(std::int64_t in, std::int64_t out) {
  at::Tensor r = at::zeros({out, in}, at::TensorOptions().dtype(at::kFloat));
  auto a = r.accessor<float, 2>();
  for (std::int64_t i = 0; i < out; ++i) {
    for (std::int64_t j = i * in / out; j < ((i + 1) * in + out - 1) / out; ++j) a[i][j] = 1;
  }
  return r;
}

bool uneven_on_device(const at::Tensor& self, c10::IntArrayRef output_size) {
  return output_size.size() == 2 && (self.dim() == 3 || self.dim() == 4) && output_size[0] > 0 && output_size[1] > 0 &&
         on_device(self, Window{});
}

// The window matrices of the input's last two dims and the windows' sizes [oh, ow], on
// the input's device.
struct UnevenWindows {
  at::Tensor rows, cols, sizes;
};
UnevenWindows uneven_windows(const at::Tensor& self, std::int64_t oh, std::int64_t ow) {
  const at::Tensor rows = window_matrix(self.size(-2), oh), cols = window_matrix(self.size(-1), ow);
  const at::Tensor sizes = at::outer(rows.sum(1), cols.sum(1));
  const c10::Device d = self.device();
  return {rows.to(d), cols.to(d), sizes.to(d)};
}

at::Tensor in_memory_format_of(const at::Tensor& t, const at::Tensor& like) {
  return t.contiguous(like.dim() == 4 ? like.suggest_memory_format() : at::MemoryFormat::Contiguous);
}

at::Tensor uneven_pool(const at::Tensor& self, std::int64_t oh, std::int64_t ow) {
  const c10::DeviceGuard guard(self.device());
  const UnevenWindows w = uneven_windows(self, oh, ow);
  const at::Tensor x = self.scalar_type() == at::kFloat ? self : self.to(at::kFloat);
  const at::Tensor sums = at::matmul(at::matmul(w.rows, x), w.cols.t());
  at::Tensor out = at::empty(sums.sizes(), sums.options().dtype(self.scalar_type()));
  at::div_out(out, sums, w.sizes);
  return in_memory_format_of(out, self);
}

// The backward: each window's gradient over its size, added to every input position the
// window covers: dX = R_h^T (dY / sizes) R_w.
at::Tensor uneven_pool_backward(const at::Tensor& grad, const at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  const UnevenWindows w = uneven_windows(self, grad.size(-2), grad.size(-1));
  const at::Tensor share = at::div(grad.scalar_type() == at::kFloat ? grad : grad.to(at::kFloat), w.sizes);
  return in_memory_format_of(at::matmul(at::matmul(w.rows.t(), share), w.cols).to(self.scalar_type()), self);
}

at::Tensor adaptive_avg_pool2d_device(const at::Tensor& self, c10::SymIntArrayRef output_size_sym) {
  const auto output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  const auto block = even_block(self, output_size);
  if ((!block || block->first * block->second > kMaxTaps) && uneven_on_device(self, output_size)) {
    return uneven_pool(self, output_size[0], output_size[1]);
  }
  if (!block || block->first * block->second > kMaxTaps || !on_device(self, Window{})) {
    count_fallback("aten::_adaptive_avg_pool2d");
    return at::_adaptive_avg_pool2d(self.cpu(), output_size).to(self.device());
  }
  const std::int64_t k[2] = {block->first, block->second};
  return avg_pool2d_device(self, k, k, {0}, false, true, std::nullopt);
}

at::Tensor adaptive_avg_pool2d_backward_device(const at::Tensor& grad, const at::Tensor& self) {
  const std::int64_t out[2] = {grad.dim() >= 2 ? grad.size(-2) : 0, grad.dim() >= 2 ? grad.size(-1) : 0};
  const auto block = even_block(self, out);
  if ((!block || block->first * block->second > kMaxTaps) && grad.dim() == self.dim() && uneven_on_device(self, out) &&
      grad.device() == self.device() && grad.scalar_type() == self.scalar_type()) {
    return uneven_pool_backward(grad, self);
  }
  if (!block || block->first * block->second > kMaxTaps || grad.dim() != self.dim() || !on_device(self, Window{})) {
    count_fallback("aten::_adaptive_avg_pool2d_backward");
    return at::_adaptive_avg_pool2d_backward(grad.cpu(), self.cpu()).to(self.device());
  }
  const std::int64_t k[2] = {block->first, block->second};
  return avg_pool_backward_device(grad, self, k, k, {0}, false, true, std::nullopt);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max_pool2d", call_spyre_max_pool2d);
  m.impl("max_pool2d_with_indices", max_pool2d_indices_device);
  m.impl("max_pool2d_with_indices.out", max_pool2d_indices_device_out);
  m.impl("max_pool2d_with_indices_backward", max_pool_backward_device);
  m.impl("max_pool2d_with_indices_backward.grad_input", max_pool_backward_device_out);
  m.impl("avg_pool2d", avg_pool2d_device);
  m.impl("avg_pool2d.out", avg_pool2d_device_out);
  m.impl("avg_pool2d_backward", avg_pool_backward_device);
  m.impl("avg_pool2d_backward.grad_input", avg_pool_backward_device_out);
  m.impl("_adaptive_avg_pool2d", adaptive_avg_pool2d_device);
  m.impl("_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward_device);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("max_pool2d", max_pool2d_autograd); }

TORCH_LIBRARY_FRAGMENT(spyre, m) {
  m.def("max_pool2d(Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, "
        "bool ceil_mode) -> Tensor");
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("max_pool2d", spyre_max_pool2d); }
TORCH_LIBRARY_IMPL(spyre, Meta, m) { m.impl("max_pool2d", spyre_max_pool2d_meta); }
// Not differentiable itself (aten::max_pool2d takes max_pool2d_with_indices when a
// gradient is needed).
TORCH_LIBRARY_IMPL(spyre, Autograd, m) { m.impl("max_pool2d", torch::autograd::autogradNotImplementedFallback()); }

}  // namespace spyre::backend
