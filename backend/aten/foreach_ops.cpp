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
#include <cstddef>
#include <optional>
#include <type_traits>

#include <ATen/ops/_foreach_abs_native.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_cos_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_erf_native.h>
#include <ATen/ops/_foreach_exp_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_log_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_reciprocal_native.h>
#include <ATen/ops/_foreach_rsqrt_native.h>
#include <ATen/ops/_foreach_sigmoid_native.h>
#include <ATen/ops/_foreach_sin_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/_foreach_tanh_native.h>
#include <torch/library.h>

#include "aten/kernel_cache.h"
#include "aten/pointwise.h"

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
