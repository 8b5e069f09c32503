// The _foreach ops (what torch.optim's default foreach implementations and
// clip_grad_norm_ call) as one launch per list of tensors, not one per tensor: CUDA's
// multi_tensor_apply, done here by horizontal fusion. Each op runs PyTorch's own
// per-tensor loop (at::native's *_slow kernels, which call the device's pointwise ops
// tensor by tensor) inside a PointwiseGroup (aten/pointwise.h), which takes the
// kernels those ops compile and gives them to the device together. The results are
// those of the per-tensor ops, bit for bit; a tensor that aliases another of the lists
// splits the launch where it must (the group sees the overlap).
//
// Lists that are not all spyre tensors of device dtypes (int64, float64, complex
// scalars, CPU tensors) run PyTorch's loop as it is, one op at a time, as they did
// before these registrations.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <type_traits>

#include <ATen/ops/_foreach_abs_native.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_clamp_max_native.h>
#include <ATen/ops/_foreach_clamp_min_native.h>
#include <ATen/ops/_foreach_cos_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_erf_native.h>
#include <ATen/ops/_foreach_exp_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_log_native.h>
#include <ATen/ops/_foreach_maximum_native.h>
#include <ATen/ops/_foreach_minimum_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_norm_native.h>
#include <ATen/ops/_foreach_reciprocal_native.h>
#include <ATen/ops/_foreach_rsqrt_native.h>
#include <ATen/ops/_foreach_sigmoid_native.h>
#include <ATen/ops/_foreach_sin_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/_foreach_tanh_native.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/kernel_cache.h"
#include "aten/pointwise.h"
#include "compiler/reduce.h"

namespace spyre::backend {
namespace {

// Whether every tensor argument is a spyre tensor of a device dtype on one device (a
// CPU tensor argument is a host value, e.g. addcdiv's scalars), and every scalar real.
struct Groupable {
  std::optional<c10::Device> device;
  bool ok = true;

  void tensor(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1 || !device_dtype(t.scalar_type()) ||
        (device && *device != t.device())) {
      ok = false;
      return;
    }
    device = t.device();
  }
  void operator()(at::TensorList list) {
    for (const at::Tensor& t : list) tensor(t);
  }
  void operator()(const at::Tensor& t) {
    if (t.defined() && t.device().is_cpu()) return;
    tensor(t);
  }
  void operator()(const at::Scalar& s) { ok = ok && !s.isComplex(); }
  void operator()(at::ArrayRef<at::Scalar> list) {
    for (const at::Scalar& s : list) (*this)(s);
  }
};

template <std::size_t N>
struct OpName {
  char text[N];
  constexpr OpName(const char (&s)[N]) { std::copy_n(s, N, text); }  // NOLINT(google-explicit-constructor)
};

// The kernel registered for op `Name`: PyTorch's per-tensor loop `Slow` in one group.
template <OpName Name, auto Slow, class = decltype(Slow)>
struct Grouped;
template <OpName Name, auto Slow, class R, class... A>
struct Grouped<Name, Slow, R (*)(A...)> {
  static R call(A... args) {
    Groupable g;
    (g(args), ...);
    if (!g.ok || !g.device) return Slow(args...);
    PointwiseGroup group(Name.text);
    if constexpr (std::is_void_v<R>) {
      Slow(args...);
      group.close();
    } else {
      R result = Slow(args...);
      group.close();
      return result;
    }
  }
};

// _foreach_norm (clip_grad_norm_'s per-parameter norms) of orders 1, 2 and inf: two
// launches per list (compiler/reduce.h's multi-tensor norm), whatever its length, and
// no intermediate tensors. Lists with other orders, empty or non-contiguous tensors,
// mixed result dtypes or a dtype= the device does not take run PyTorch's loop (one
// linalg_vector_norm per tensor, on the device), which also raises its errors.
constexpr std::size_t kNormTensorsPerLaunch = 200;

std::vector<at::Tensor> foreach_norm(at::TensorList self, const at::Scalar& ord, std::optional<at::ScalarType> dtype) {
  const auto slow = [&] { return at::native::foreach_tensor_norm_slow(self, ord, dtype); };
  if (self.empty() || ord.isComplex()) return slow();
  const double p = ord.toDouble();
  if (p != 1 && p != 2 && !std::isinf(p)) return slow();
  Groupable g;
  g(self);
  if (!g.ok) return slow();
  const c10::ScalarType out = dtype.value_or(self[0].scalar_type());
  if (!device_float_dtype(out)) return slow();
  for (const at::Tensor& t : self) {
    const bool widened = dtype && *dtype == at::kFloat && device_float_dtype(t.scalar_type());
    if (!device_float_dtype(t.scalar_type()) || !t.is_contiguous() || t.numel() == 0 ||
        (t.scalar_type() != out && !widened)) {
      return slow();
    }
  }
  const c10::DeviceGuard guard(*g.device);
  const c10::DeviceIndex device = g.device->index();
  std::vector<at::Tensor> norms;
  norms.reserve(self.size());
  for (std::size_t from = 0; from < self.size(); from += kNormTensorsPerLaunch) {
    const std::size_t to = std::min(self.size(), from + kNormTensorsPerLaunch);
    compiler::ForeachNormShape s;
    s.out = *device_dtype(out);
    s.ord = p;
    std::string key = std::string("aten::_foreach_norm|") + (std::isinf(p) ? "inf" : p == 1 ? "1" : "2") + ">" +
                      std::string(isa::to_string(s.out));
    std::vector<std::uint64_t> args;
    std::uint64_t bytes = 0;
    for (std::size_t i = from; i < to; ++i) {
      s.sizes.push_back(static_cast<std::uint64_t>(self[i].numel()));
      s.dtypes.push_back(*device_dtype(self[i].scalar_type()));
      key += "|" + std::to_string(s.sizes.back()) + std::string(isa::to_string(s.dtypes.back()));
      args.push_back(device_address(self[i]));
      bytes += s.sizes.back() * isa::dtype_size(s.dtypes.back());
    }
    const compiler::ForeachNormPlan plan = compiler::plan_foreach_norm(s, target(device));
    const at::Tensor partials = at::empty({static_cast<std::int64_t>(plan.partials)},
                                          self[from].options().dtype(at::kFloat));
    args.push_back(device_address(partials));
    const std::uint64_t partial_bytes = plan.partials * 4;
    run_cached(
        device, key + "|partials",
        [&](const compiler::Target& t) { return compiler::compile_foreach_norm_partials(s, t, "aten::_foreach_norm"); },
        args, "aten::_foreach_norm", {.read = bytes, .written = partial_bytes});
    std::vector<std::uint64_t> finish{device_address(partials)};
    for (std::size_t i = from; i < to; ++i) {
      norms.push_back(at::empty({}, self[i].options().dtype(out)));
      finish.push_back(device_address(norms.back()));
    }
    run_cached(
        device, key + "|finish",
        [&](const compiler::Target& t) { return compiler::compile_foreach_norm_finish(s, t, "aten::_foreach_norm"); },
        finish, "aten::_foreach_norm",
        {.read = partial_bytes, .written = (to - from) * isa::dtype_size(s.out)});
  }
  return norms;
}

}  // namespace

// Each op's functional and in-place forms, by overload (PyTorch 2.6's schemas).
#define SPYRE_FOREACH(schema, slow)                                                                  \
  m.impl("_foreach_" schema, TORCH_FN((Grouped<"aten::_foreach_" schema, &at::native::slow>::call)))
#define SPYRE_FOREACH_BOTH(op, overload, slow)          \
  SPYRE_FOREACH(#op "." overload, slow);                \
  SPYRE_FOREACH(#op "_." overload, slow##_)
#define SPYRE_FOREACH_UNARY(op)                  \
  SPYRE_FOREACH(#op, foreach_tensor_##op##_slow); \
  SPYRE_FOREACH(#op "_", foreach_tensor_##op##_slow_)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  SPYRE_FOREACH_BOTH(add, "Scalar", foreach_tensor_add_scalar_kernel_slow);
  SPYRE_FOREACH_BOTH(add, "List", foreach_tensor_add_list_kernel_slow);
  SPYRE_FOREACH_BOTH(add, "ScalarList", foreach_tensor_add_scalarlist_kernel_slow);
  SPYRE_FOREACH_BOTH(add, "Tensor", foreach_tensor_add_tensor_kernel_slow);
  SPYRE_FOREACH_BOTH(sub, "Scalar", foreach_tensor_sub_scalar_kernel_slow);
  SPYRE_FOREACH_BOTH(sub, "List", foreach_tensor_sub_list_kernel_slow);
  SPYRE_FOREACH_BOTH(sub, "ScalarList", foreach_tensor_sub_scalarlist_kernel_slow);
  SPYRE_FOREACH_BOTH(mul, "Scalar", foreach_tensor_mul_scalar_kernel_slow);
  SPYRE_FOREACH_BOTH(mul, "List", foreach_tensor_mul_list_kernel_slow);
  SPYRE_FOREACH_BOTH(mul, "ScalarList", foreach_tensor_mul_scalarlist_kernel_slow);
  SPYRE_FOREACH_BOTH(mul, "Tensor", foreach_tensor_mul_tensor_kernel_slow);
  SPYRE_FOREACH_BOTH(div, "Scalar", foreach_tensor_div_scalar_kernel_slow);
  SPYRE_FOREACH_BOTH(div, "List", foreach_tensor_div_list_kernel_slow);
  SPYRE_FOREACH_BOTH(div, "ScalarList", foreach_tensor_div_scalarlist_kernel_slow);
  SPYRE_FOREACH_BOTH(div, "Tensor", foreach_tensor_div_tensor_kernel_slow);
  SPYRE_FOREACH_BOTH(addcmul, "Scalar", foreach_tensor_addcmul_scalar_slow);
  SPYRE_FOREACH_BOTH(addcmul, "ScalarList", foreach_tensor_addcmul_scalarlist_slow);
  SPYRE_FOREACH_BOTH(addcmul, "Tensor", foreach_tensor_addcmul_tensor_slow);
  SPYRE_FOREACH_BOTH(addcdiv, "Scalar", foreach_tensor_addcdiv_scalar_slow);
  SPYRE_FOREACH_BOTH(addcdiv, "ScalarList", foreach_tensor_addcdiv_scalarlist_slow);
  SPYRE_FOREACH_BOTH(addcdiv, "Tensor", foreach_tensor_addcdiv_tensor_slow);
  SPYRE_FOREACH_BOTH(lerp, "List", foreach_tensor_ternary_lerp_slow);
  SPYRE_FOREACH_BOTH(lerp, "Scalar", foreach_tensor_lerp_list_kernel_slow);
  SPYRE_FOREACH_BOTH(lerp, "ScalarList", foreach_tensor_lerp_scalarlist_kernel_slow);
  SPYRE_FOREACH_BOTH(maximum, "Scalar", foreach_tensor_clamp_min_scalar_kernel_slow);
  SPYRE_FOREACH_BOTH(maximum, "List", foreach_tensor_clamp_min_list_kernel_slow);
  SPYRE_FOREACH_BOTH(maximum, "ScalarList", foreach_tensor_clamp_min_scalarlist_kernel_slow);
  SPYRE_FOREACH_BOTH(minimum, "Scalar", foreach_tensor_clamp_max_scalar_kernel_slow);
  SPYRE_FOREACH_BOTH(minimum, "List", foreach_tensor_clamp_max_list_kernel_slow);
  SPYRE_FOREACH_BOTH(minimum, "ScalarList", foreach_tensor_clamp_max_scalarlist_kernel_slow);
  SPYRE_FOREACH_BOTH(clamp_min, "Scalar", foreach_tensor_clamp_min_scalar_kernel_slow);
  SPYRE_FOREACH_BOTH(clamp_min, "List", foreach_tensor_clamp_min_list_kernel_slow);
  SPYRE_FOREACH_BOTH(clamp_min, "ScalarList", foreach_tensor_clamp_min_scalarlist_kernel_slow);
  SPYRE_FOREACH_BOTH(clamp_max, "Scalar", foreach_tensor_clamp_max_scalar_kernel_slow);
  SPYRE_FOREACH_BOTH(clamp_max, "List", foreach_tensor_clamp_max_list_kernel_slow);
  SPYRE_FOREACH_BOTH(clamp_max, "ScalarList", foreach_tensor_clamp_max_scalarlist_kernel_slow);
  m.impl("_foreach_norm.Scalar", TORCH_FN(foreach_norm));
  SPYRE_FOREACH_UNARY(neg);
  SPYRE_FOREACH_UNARY(abs);
  SPYRE_FOREACH_UNARY(exp);
  SPYRE_FOREACH_UNARY(log);
  SPYRE_FOREACH_UNARY(sqrt);
  SPYRE_FOREACH_UNARY(rsqrt);
  SPYRE_FOREACH_UNARY(reciprocal);
  SPYRE_FOREACH_UNARY(sigmoid);
  SPYRE_FOREACH_UNARY(tanh);
  SPYRE_FOREACH_UNARY(erf);
  SPYRE_FOREACH_UNARY(sin);
  SPYRE_FOREACH_UNARY(cos);
}

}  // namespace spyre::backend
