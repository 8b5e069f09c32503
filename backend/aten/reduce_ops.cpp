// Device kernels for sum, mean, amax, amin (any dims, keepdim, dtype=, out=) and
// softmax / log_softmax (any dim, half_to_float, out=). The reduced dimensions are
// permuted last and coalesced into one strided 2-D view when the strides allow (else
// a device copy makes it contiguous first); compiler/reduce.h does the rest. Results
// the device cannot hold (int64 sums of integers) run on the CPU, counted.
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/_log_softmax_backward_data.h>
#include <ATen/ops/_softmax_backward_data.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/out.h"
#include "aten/pointwise.h"
#include "compiler/pointwise.h"
#include "compiler/reduce.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

std::uint64_t u64(std::int64_t v) { return static_cast<std::uint64_t>(v); }

// Dims [first, last) of t as one (size, stride), if they coalesce (size-1 dims skipped).
struct Run {
  std::int64_t size = 1, stride = 1;
  bool ok = true;
};
Run coalesce(const at::Tensor& t, std::int64_t first, std::int64_t last) {
  std::int64_t size = 1, stride = 1;
  bool any = false;
  for (std::int64_t d = last - 1; d >= first; --d) {
    if (t.size(d) == 1) continue;
    if (!any) {
      size = t.size(d);
      stride = t.stride(d);
      any = true;
    } else if (t.stride(d) == stride * size) {
      size *= t.size(d);
    } else {
      return Run{0, 0, false};
    }
  }
  return Run{size, any ? stride : 1, true};
}


at::Tensor reduce(const char* name, isa::ReduceOp op, bool mean, at::Tensor out, const at::Tensor& self,
                  at::OptionalIntArrayRef dims, bool keepdim, std::optional<c10::ScalarType> dtype) {
  c10::ScalarType result_type = self.scalar_type();
  // sum and mean take their dtype from out= when none is given; amax/amin keep the
  // input's, and out must match it exactly.
  const OutDtype rule = op == isa::ReduceOp::sum ? (mean ? OutDtype::cast_safely : OutDtype::any) : OutDtype::exact;
  if (dtype) {
    result_type = *dtype;
  } else if (out.defined() && op == isa::ReduceOp::sum) {
    result_type = out.scalar_type();
  } else if (op == isa::ReduceOp::sum && !mean && at::isIntegralType(self.scalar_type(), /*includeBool=*/true)) {
    result_type = at::kLong;
  }
  if (mean) {
    // (Complex means have no device kernel: they take the CPU path below, counted.)
    TORCH_CHECK(at::isFloatingType(result_type) || at::isComplexType(result_type), "mean(): could not infer output dtype. ",
                dtype ? "Optional" : "Input", " dtype must be either a floating point or complex dtype. Got: ", result_type);
  }
  if (dtype && out.defined()) {  // sum and mean: dtype= and out= must agree, as on the CPU
    TORCH_CHECK(out.scalar_type() == *dtype, "Expected out tensor to have dtype ", c10::scalarTypeToTypeMeta(*dtype),
                ", but got ", out.dtype(), " instead");
  }
  if (op != isa::ReduceOp::sum && out.defined()) {
    TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Expected the dtype for input and out to match, but got ",
                self.scalar_type(), " for input's dtype and ", out.scalar_type(), " for out's dtype.");
  }
  const std::int64_t ndim = self.dim();
  const auto mask = at::native::make_dim_mask(dims, std::max<std::int64_t>(ndim, 1));
  std::vector<std::int64_t> kept, reduced, shape;
  for (std::int64_t d = 0; d < ndim; ++d) {
    (mask[d] ? reduced : kept).push_back(d);
    if (!mask[d]) {
      shape.push_back(self.size(d));
    } else if (keepdim) {
      shape.push_back(1);
    }
  }
  const auto cpu_result = [&] {
    at::Tensor c = self.cpu();
    if (op == isa::ReduceOp::max) return at::amax(c, dims.value_or(at::IntArrayRef{}), keepdim);
    if (op == isa::ReduceOp::min) return at::amin(c, dims.value_or(at::IntArrayRef{}), keepdim);
    // In result_type (from dtype= or out=): the CPU converts the input first, then sums.
    return mean ? at::mean(c, dims, keepdim, result_type) : at::sum(c, dims, keepdim, result_type);
  };
  const auto in_t = device_dtype(self.scalar_type()), out_t = device_dtype(result_type);
  const bool reducible = in_t && out_t && *in_t != isa::DType::boolean && *out_t != isa::DType::int8 &&
                         (isa::is_float(*in_t) || !isa::is_float(*out_t) || op != isa::ReduceOp::sum) &&
                         (isa::is_float(*in_t) == isa::is_float(*out_t));
  if (self.numel() == 0) {
    // Nothing to read: sum is 0, mean NaN; amax/amin raise (or return empty) as on the CPU.
    if (op != isa::ReduceOp::sum) return deliver(cpu_result().to(self.device()), out, rule);
    at::Tensor r = at::empty(shape, self.options().dtype(result_type));
    r.fill_(mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return deliver(r, out, rule);
  }
  if (!reducible) {
    count_fallback(name);
    return deliver(cpu_result().to(self.device()), out, rule);
  }
  // Kept dims first, reduced last: one strided 2-D view if the strides coalesce.
  std::vector<std::int64_t> perm = kept;
  perm.insert(perm.end(), reduced.begin(), reduced.end());
  at::Tensor v = ndim == 0 ? self.reshape({1}) : self.permute(perm);
  const auto nk = static_cast<std::int64_t>(kept.size());
  auto a = coalesce(v, 0, nk), r = coalesce(v, nk, v.dim());
  if (!a.ok || !r.ok) {
    v = v.contiguous();
    a = coalesce(v, 0, nk);
    r = coalesce(v, nk, v.dim());
  }
  TORCH_INTERNAL_ASSERT(a.ok && r.ok, "spyre: a contiguous tensor's dims coalesce");
  compiler::ReduceShape s;
  s.outer = u64(a.size);
  s.reduced = u64(r.size);
  s.outer_stride = a.stride;
  s.reduced_stride = r.stride;
  s.in = *in_t;
  s.out = *out_t;
  s.op = op;
  s.scale = mean ? 1.0 / static_cast<double>(s.reduced) : 1.0;
  const c10::DeviceGuard guard(self.device());
  const c10::DeviceIndex device = self.device().index();
  at::Tensor result = at::empty(shape, self.options().dtype(result_type));
  const std::string key = std::string(name) + "|" + std::to_string(s.outer) + "x" + std::to_string(s.reduced) + "|" +
                          std::to_string(s.outer_stride) + "," + std::to_string(s.reduced_stride) + "|" +
                          std::string(isa::to_string(s.in)) + ">" + std::string(isa::to_string(s.out)) +
                          (mean ? "|mean" : "");
  const std::int64_t low = compiler::lowest_offset({s.outer, s.reduced}, {s.outer_stride, s.reduced_stride});
  run_cached(device, key, [&](const compiler::Target& t) { return compiler::compile_reduce(s, t, name); },
             {reinterpret_cast<std::uint64_t>(static_cast<char*>(v.data_ptr()) + low * v.element_size()),
              device_address(result)},
             name, {.read = s.outer * s.reduced * isa::dtype_size(s.in), .written = s.outer * isa::dtype_size(s.out)});
  return deliver(result, out, rule);
}

at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                   std::optional<c10::ScalarType> dtype) {
  return reduce("aten::sum", isa::ReduceOp::sum, false, at::Tensor(), self, dims, keepdim, dtype);
}
at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                    std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  reduce("aten::sum.out", isa::ReduceOp::sum, false, out, self, dims, keepdim, dtype);
  return out;
}
at::Tensor sum(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return reduce("aten::sum", isa::ReduceOp::sum, false, at::Tensor(), self, std::nullopt, false, dtype);
}
at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                    std::optional<c10::ScalarType> dtype) {
  return reduce("aten::mean", isa::ReduceOp::sum, true, at::Tensor(), self, dims, keepdim, dtype);
}
at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                     std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  reduce("aten::mean.out", isa::ReduceOp::sum, true, out, self, dims, keepdim, dtype);
  return out;
}
at::Tensor mean(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
  return reduce("aten::mean", isa::ReduceOp::sum, true, at::Tensor(), self, std::nullopt, false, dtype);
}
at::Tensor amax(const at::Tensor& self, at::IntArrayRef dims, bool keepdim) {
  return reduce("aten::amax", isa::ReduceOp::max, false, at::Tensor(), self, dims, keepdim, std::nullopt);
}
at::Tensor& amax_out(const at::Tensor& self, at::IntArrayRef dims, bool keepdim, at::Tensor& out) {
  reduce("aten::amax.out", isa::ReduceOp::max, false, out, self, dims, keepdim, std::nullopt);
  return out;
}
at::Tensor amin(const at::Tensor& self, at::IntArrayRef dims, bool keepdim) {
  return reduce("aten::amin", isa::ReduceOp::min, false, at::Tensor(), self, dims, keepdim, std::nullopt);
}
at::Tensor& amin_out(const at::Tensor& self, at::IntArrayRef dims, bool keepdim, at::Tensor& out) {
  reduce("aten::amin.out", isa::ReduceOp::min, false, out, self, dims, keepdim, std::nullopt);
  return out;
}
// max() / min() of every element: amax / amin over all dims (NaN wins, as both).
at::Tensor max_all(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "max(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                                "reduction dim with the 'dim' argument.");
  return reduce("aten::max", isa::ReduceOp::max, false, at::Tensor(), self, at::IntArrayRef{}, false, std::nullopt);
}
at::Tensor min_all(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "min(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                                "reduction dim with the 'dim' argument.");
  return reduce("aten::min", isa::ReduceOp::min, false, at::Tensor(), self, at::IntArrayRef{}, false, std::nullopt);
}

// _assert_async (PyTorch's composites check their arguments with it, multinomial's
// among them): the one value read back (a synchronizing read, where CUDA's is not).
void assert_async_msg(const at::Tensor& self, c10::string_view msg) {
  TORCH_CHECK(self.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
  TORCH_CHECK(self.is_nonzero(), msg.empty() ? std::string("Assertion is failed") : std::string(msg));
}
void assert_async(const at::Tensor& self) { assert_async_msg(self, ""); }

// ---- softmax ---------------------------------------------------------------------

// Softmax-like ops: _softmax / _log_softmax (half_to_float) and _safe_softmax (dtype).
struct SoftmaxKind {
  bool log = false, safe = false, half_to_float = false;
  std::optional<c10::ScalarType> dtype = std::nullopt;
};

at::Tensor softmax(const char* name, SoftmaxKind kind, at::Tensor out, const at::Tensor& self, std::int64_t dim) {
  const bool half_to_float = kind.half_to_float, log = kind.log;
  const c10::ScalarType result_type = kind.dtype ? *kind.dtype : half_to_float ? at::kFloat : self.scalar_type();
  TORCH_CHECK(!half_to_float || self.scalar_type() == at::kHalf,
              "conversion is supported for Half type only");
  const std::int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const auto in_t = device_float_dtype(self.scalar_type()), out_t = device_float_dtype(result_type);
  if (!in_t || !out_t) {
    count_fallback(name);
    at::Tensor c = self.cpu();
    at::Tensor r = kind.safe ? at::_safe_softmax(c, dim, kind.dtype)
                   : log     ? at::_log_softmax(c, dim, half_to_float)
                             : at::_softmax(c, dim, half_to_float);
    return deliver(r.to(self.device()), out, OutDtype::exact);
  }
  at::Tensor result = at::empty(self.sizes(), self.options().dtype(result_type));
  if (self.numel() == 0) return deliver(result, out, OutDtype::exact);
  // Rows along `dim`, contiguous: move dim last and make that layout dense.
  at::Tensor x = self.dim() == 0 ? self.reshape({1, 1}) : self.movedim(d, -1).contiguous();
  at::Tensor y = self.dim() == 0 ? result.reshape({1, 1}) : at::empty(x.sizes(), x.options().dtype(result_type));
  compiler::SoftmaxShape s;
  s.cols = u64(x.size(-1));
  s.rows = u64(x.numel()) / s.cols;
  s.row_stride = static_cast<std::int64_t>(s.cols);
  s.in = *in_t;
  s.out = *out_t;
  s.log = log;
  s.safe = kind.safe;
  const c10::DeviceGuard guard(self.device());
  const c10::DeviceIndex device = self.device().index();
  const std::string key = std::string(name) + "|" + std::to_string(s.rows) + "x" + std::to_string(s.cols) + "|" +
                          std::string(isa::to_string(s.in)) + ">" + std::string(isa::to_string(s.out));
  run_cached(device, key, [&](const compiler::Target& t) { return compiler::compile_softmax(s, t, name); },
             {device_address(x), device_address(y)}, name,
             {.read = s.rows * s.cols * isa::dtype_size(s.in), .written = s.rows * s.cols * isa::dtype_size(s.out)});
  if (self.dim() > 0 && d != self.dim() - 1) {
    result.copy_(y.movedim(-1, d));
  } else if (self.dim() > 0) {
    result = y;
  }
  return deliver(result, out, OutDtype::exact);
}

at::Tensor softmax_fn(const at::Tensor& self, std::int64_t dim, bool half_to_float) {
  return softmax("aten::_softmax", {.half_to_float = half_to_float}, at::Tensor(), self, dim);
}
at::Tensor& softmax_out(const at::Tensor& self, std::int64_t dim, bool half_to_float, at::Tensor& out) {
  softmax("aten::_softmax.out", {.half_to_float = half_to_float}, out, self, dim);
  return out;
}
at::Tensor log_softmax_fn(const at::Tensor& self, std::int64_t dim, bool half_to_float) {
  return softmax("aten::_log_softmax", {.log = true, .half_to_float = half_to_float}, at::Tensor(), self, dim);
}
at::Tensor& log_softmax_out(const at::Tensor& self, std::int64_t dim, bool half_to_float, at::Tensor& out) {
  softmax("aten::_log_softmax.out", {.log = true, .half_to_float = half_to_float}, out, self, dim);
  return out;
}
// Attention's softmax (scaled_dot_product_attention's math path): rows that are all
// -inf (fully masked) give zeros.
at::Tensor safe_softmax_fn(const at::Tensor& self, std::int64_t dim, std::optional<c10::ScalarType> dtype) {
  return softmax("aten::_safe_softmax", {.safe = true, .dtype = dtype}, at::Tensor(), self, dim);
}

// ---- mode -------------------------------------------------------------------------

// mode refuses devices other than CPU, CUDA and XPU by itself: on CPU copies (counted).
std::tuple<at::Tensor, at::Tensor> mode(const at::Tensor& self, std::int64_t dim, bool keepdim) {
  count_fallback("aten::mode", /*has_kernel=*/false);
  auto [values, indices] = at::mode(self.cpu(), dim, keepdim);
  return {values.to(self.device()), indices.to(self.device())};
}

std::tuple<at::Tensor&, at::Tensor&> mode_out(const at::Tensor& self, std::int64_t dim, bool keepdim,
                                              at::Tensor& values, at::Tensor& indices) {
  count_fallback("aten::mode.values", /*has_kernel=*/false);
  at::Tensor v = values.cpu(), i = indices.cpu();  // their dtypes, for the CPU's checks
  at::mode_out(v, i, self.cpu(), dim, keepdim);
  at::native::resize_output(values, v.sizes());
  at::native::resize_output(indices, i.sizes());
  values.copy_(v);
  indices.copy_(i);
  return {values, indices};
}

// ---- any / all ------------------------------------------------------------------

// any: some element nonzero; all: none zero. Two device kernels and a reduction: the
// bool "hit" mask (x != 0, or x == 0 for all), its int8 view summed into int32 counts
// over the dims, then count != 0 (any) or == 0 (all). uint8 inputs (PyTorch answers
// in uint8) run on the CPU, counted.
at::Tensor any_all(const char* name, bool all, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                   const at::Tensor& out) {
  if (out.defined()) {  // PyTorch's check and words (check_result_is_bytebool)
    TORCH_CHECK(out.scalar_type() == at::kBool || out.scalar_type() == at::kByte, all ? "all" : "any",
                " only supports bool tensor for result, got: ", out.scalar_type());
  }
  if (self.scalar_type() == at::kByte || !device_dtype(self.scalar_type())) {
    count_fallback(name);
    const at::Tensor c = self.cpu();
    return deliver((all ? at::all(c, dims, keepdim) : at::any(c, dims, keepdim)).to(self.device()), out,
                   OutDtype::exact);
  }
  const bool boolean = self.scalar_type() == at::kBool;
  if (dims && dims->empty()) {
    // dim=[] reduces nothing (unlike sum's): each element's truth, in the input's shape.
    return deliver(boolean ? self.clone() : at::ne(self, 0), out, OutDtype::exact);
  }
  const at::Tensor hit = all ? at::logical_not(self) : boolean ? self : at::ne(self, 0);
  const at::Tensor count = at::sum(hit.view(at::kChar), dims, keepdim, at::kInt);
  return deliver(all ? at::eq(count, 0) : at::ne(count, 0), out, OutDtype::exact);
}

at::Tensor any_fn(const at::Tensor& self) { return any_all("aten::any", false, self, std::nullopt, false, {}); }
at::Tensor any_dim(const at::Tensor& self, std::int64_t dim, bool keepdim) {
  return any_all("aten::any.dim", false, self, at::IntArrayRef{dim}, keepdim, {});
}
at::Tensor any_dims(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim) {
  return any_all("aten::any.dims", false, self, dims, keepdim, {});
}
at::Tensor& any_out(const at::Tensor& self, std::int64_t dim, bool keepdim, at::Tensor& out) {
  any_all("aten::any.out", false, self, at::IntArrayRef{dim}, keepdim, out);
  return out;
}
at::Tensor& any_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::Tensor& out) {
  any_all("aten::any.dims_out", false, self, dims, keepdim, out);
  return out;
}
at::Tensor& any_all_out(const at::Tensor& self, at::Tensor& out) {
  any_all("aten::any.all_out", false, self, std::nullopt, false, out);
  return out;
}
at::Tensor all_fn(const at::Tensor& self) { return any_all("aten::all", true, self, std::nullopt, false, {}); }
at::Tensor all_dim(const at::Tensor& self, std::int64_t dim, bool keepdim) {
  return any_all("aten::all.dim", true, self, at::IntArrayRef{dim}, keepdim, {});
}
at::Tensor all_dims(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim) {
  return any_all("aten::all.dims", true, self, dims, keepdim, {});
}
at::Tensor& all_out(const at::Tensor& self, std::int64_t dim, bool keepdim, at::Tensor& out) {
  any_all("aten::all.out", true, self, at::IntArrayRef{dim}, keepdim, out);
  return out;
}
at::Tensor& all_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, at::Tensor& out) {
  any_all("aten::all.dims_out", true, self, dims, keepdim, out);
  return out;
}
at::Tensor& all_all_out(const at::Tensor& self, at::Tensor& out) {
  any_all("aten::all.all_out", true, self, std::nullopt, false, out);
  return out;
}

// linalg_vector_norm (torch.linalg.vector_norm, Tensor.norm, clip_grad_norm_'s
// per-tensor norms) of any order for fp32/fp16/bf16 inputs over any dims: |x| (squared
// for ord 2, |x|^p for other finite orders, x != 0 for ord 0) in fp32 by one kernel,
// then a device sum (and its square root, or its 1/p power), amax (inf) or amin (-inf),
// in the result's dtype (dtype=, else the input's). Other dtypes run on the CPU, counted.
at::Tensor vector_norm_impl(const char* name, const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
                            bool keepdim, std::optional<c10::ScalarType> dtype, at::Tensor out) {
  const double p = ord.toDouble();
  const bool supported = std::isfinite(p) || std::isinf(p);  // not NaN
  const c10::ScalarType result = dtype.value_or(self.scalar_type());
  if (self.numel() == 0 && self.device().type() == c10::DeviceType::PrivateUse1) {
    // No values to read: PyTorch's result (zeros, or its error for the orders with no
    // identity) from an empty CPU tensor of the same shape; nothing is copied.
    const c10::DeviceGuard guard(self.device());
    at::Tensor r = at::linalg_vector_norm(at::empty(self.sizes(), self.options().device(c10::kCPU)), ord, dim, keepdim,
                                          dtype)
                       .to(self.device());
    if (!out.defined()) return r;
    return deliver(r, out);
  }
  if (!supported || !device_float_dtype(self.scalar_type()) || !device_float_dtype(result) ||
      self.device().type() != c10::DeviceType::PrivateUse1) {
    count_fallback(name);
    at::Tensor r = at::linalg_vector_norm(self.cpu(), ord, dim, keepdim, dtype).to(self.device());
    if (!out.defined()) return r;
    return deliver(r, out);
  }
  const c10::DeviceGuard guard(self.device());
  at::Tensor magnitude = at::empty(self.sizes(), self.options().dtype(at::kFloat));
  {
    at::TensorBase base = magnitude;
    auto iter = at::TensorIteratorConfig().check_all_same_dtype(false).add_output(base).add_const_input(self).build();
    using compiler::Step;
    using compiler::Value;
    constexpr auto f32 = isa::DType::fp32;
    std::vector<Step> steps;
    if (p == 2) {
      steps = {Step::binary(isa::BinaryOp::mul, f32, Value::input(0), Value::input(0))};
    } else if (p == 0) {  // the count of non-zeros
      steps = {Step::compare(isa::CompareOp::ne, f32, Value::input(0), Value::constant(0)),
               Step::select(f32, Value::step(0), Value::constant(1), Value::constant(0))};
    } else if (p == 1 || std::isinf(p)) {
      steps = {Step::unary(isa::UnaryOp::abs, f32, Value::input(0))};
    } else {  // |x|^p (0^p is inf for p < 0, which the root takes to 0, as the CPU's)
      steps = {Step::unary(isa::UnaryOp::abs, f32, Value::input(0)),
               Step::binary(isa::BinaryOp::pow, f32, Value::step(0), Value::constant(p))};
    }
    run_pointwise(name, iter, steps);
  }
  const std::vector<std::int64_t> dims = dim ? std::vector<std::int64_t>(dim->begin(), dim->end())
                                             : std::vector<std::int64_t>{};
  at::Tensor r = !std::isinf(p) ? at::sum(magnitude, dims, keepdim)
                 : p > 0         ? at::amax(magnitude, dims, keepdim)
                                 : at::amin(magnitude, dims, keepdim);
  if (p == 2) {
    r = at::sqrt(r);
  } else if (p != 0 && p != 1 && !std::isinf(p)) {
    r = at::pow(r, 1.0 / p);
  }
  r = r.to(result);
  if (!out.defined()) return r;
  return deliver(r, out);
}
at::Tensor vector_norm(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<c10::ScalarType> dtype) {
  return vector_norm_impl("aten::linalg_vector_norm", self, ord, dim, keepdim, dtype, at::Tensor());
}
at::Tensor& vector_norm_out(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                            std::optional<c10::ScalarType> dtype, at::Tensor& out) {
  vector_norm_impl("aten::linalg_vector_norm.out", self, ord, dim, keepdim, dtype, out);
  return out;
}

// Softmax gradients (what autograd calls after softmax, log_softmax and so
// cross_entropy), in fp32, the result in the forward input's dtype:
//   log_softmax: grad - exp(output) x sum(grad)         along dim
//   softmax:     output x (grad - sum(grad x output))
// the sum a device reduction (keepdim), the rest one pointwise kernel. Other dtypes run
// on the CPU, counted.
at::Tensor softmax_grad(const char* name, bool log, const at::Tensor& grad, const at::Tensor& output, std::int64_t dim,
                        c10::ScalarType input_dtype, at::Tensor out) {
  const bool on_device = device_float_dtype(grad.scalar_type()) && device_float_dtype(output.scalar_type()) &&
                         device_float_dtype(input_dtype) && grad.device() == output.device() && grad.numel() > 0 &&
                         grad.sizes() == output.sizes();
  if (!on_device) {
    count_fallback(name);
    at::Tensor r = log ? at::_log_softmax_backward_data(grad.cpu(), output.cpu(), dim, input_dtype)
                       : at::_softmax_backward_data(grad.cpu(), output.cpu(), dim, input_dtype);
    if (!out.defined()) return r.to(grad.device());
    return deliver(r.to(grad.device()), out);
  }
  const c10::DeviceGuard guard(grad.device());
  const std::int64_t d = at::maybe_wrap_dim(dim, grad.dim());
  // The sum in fp32; along the last dim rounded to the gradient's dtype before it is
  // used, as the CPU's last-dim kernels do for fp16/bf16 (its kernel for other dims
  // keeps it in fp32). Checked against both over random rows: exactly equal.
  at::Tensor summed = grad;
  if (!log) {  // grad x output, in fp32 (not rounded to a half-precision dtype)
    summed = at::empty(grad.sizes(), grad.options().dtype(at::kFloat));
    run_pointwise_into(name, summed, {grad, output},
                       {compiler::Step::binary(isa::BinaryOp::mul, isa::DType::fp32, compiler::Value::input(0),
                                               compiler::Value::input(1))});
  }
  at::Tensor sum = at::sum(summed, {d}, /*keepdim=*/true, at::kFloat);
  if (d == grad.dim() - 1) sum = sum.to(grad.scalar_type());
  if (!out.defined()) out = at::empty_like(grad, grad.options().dtype(input_dtype));
  at::native::resize_output(out, grad.sizes());
  at::TensorBase base = out;
  auto iter = at::TensorIteratorConfig()
                  .check_all_same_dtype(false)
                  .add_output(base)
                  .add_const_input(grad)
                  .add_const_input(output)
                  .add_const_input(sum)
                  .build();
  using compiler::Step;
  using compiler::Value;
  constexpr auto f32 = isa::DType::fp32;
  const std::vector<Step> steps =
      log ? std::vector<Step>{Step::unary(isa::UnaryOp::exp, f32, Value::input(1)),
                              Step::binary(isa::BinaryOp::mul, f32, Value::step(0), Value::input(2)),
                              Step::binary(isa::BinaryOp::sub, f32, Value::input(0), Value::step(1))}
          : std::vector<Step>{Step::binary(isa::BinaryOp::sub, f32, Value::input(0), Value::input(2)),
                              Step::binary(isa::BinaryOp::mul, f32, Value::input(1), Value::step(0))};
  run_pointwise(name, iter, steps);
  return out;
}
at::Tensor log_softmax_backward(const at::Tensor& grad, const at::Tensor& output, std::int64_t dim,
                                c10::ScalarType input_dtype) {
  return softmax_grad("aten::_log_softmax_backward_data", true, grad, output, dim, input_dtype, at::Tensor());
}
at::Tensor& log_softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, std::int64_t dim,
                                     c10::ScalarType input_dtype, at::Tensor& out) {
  softmax_grad("aten::_log_softmax_backward_data.out", true, grad, output, dim, input_dtype, out);
  return out;
}
at::Tensor softmax_backward(const at::Tensor& grad, const at::Tensor& output, std::int64_t dim,
                            c10::ScalarType input_dtype) {
  return softmax_grad("aten::_softmax_backward_data", false, grad, output, dim, input_dtype, at::Tensor());
}
at::Tensor& softmax_backward_out(const at::Tensor& grad, const at::Tensor& output, std::int64_t dim,
                                 c10::ScalarType input_dtype, at::Tensor& out) {
  softmax_grad("aten::_softmax_backward_data.out", false, grad, output, dim, input_dtype, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_vector_norm", vector_norm);
  m.impl("linalg_vector_norm.out", vector_norm_out);
  m.impl("_log_softmax_backward_data", log_softmax_backward);
  m.impl("_log_softmax_backward_data.out", log_softmax_backward_out);
  m.impl("_softmax_backward_data", softmax_backward);
  m.impl("_softmax_backward_data.out", softmax_backward_out);
  m.impl("sum.dim_IntList", sum_dim);
  m.impl("sum.IntList_out", sum_out);
  m.impl("sum", sum);
  m.impl("mean.dim", mean_dim);
  m.impl("mean.out", mean_out);
  m.impl("mean", mean);
  m.impl("amax", amax);
  m.impl("amax.out", amax_out);
  m.impl("amin", amin);
  m.impl("amin.out", amin_out);
  m.impl("max", max_all);
  m.impl("min", min_all);
  m.impl("_assert_async", assert_async);
  m.impl("_assert_async.msg", assert_async_msg);
  m.impl("_softmax", softmax_fn);
  m.impl("_softmax.out", softmax_out);
  m.impl("_log_softmax", log_softmax_fn);
  m.impl("_log_softmax.out", log_softmax_out);
  m.impl("_safe_softmax", safe_softmax_fn);
  m.impl("mode", mode);
  m.impl("mode.values", mode_out);
  m.impl("any", any_fn);
  m.impl("any.dim", any_dim);
  m.impl("any.dims", any_dims);
  m.impl("any.out", any_out);
  m.impl("any.dims_out", any_dims_out);
  m.impl("any.all_out", any_all_out);
  m.impl("all", all_fn);
  m.impl("all.dim", all_dim);
  m.impl("all.dims", all_dims);
  m.impl("all.out", all_out);
  m.impl("all.dims_out", all_dims_out);
  m.impl("all.all_out", all_all_out);
}

}  // namespace spyre::backend
