// torch.amp.GradScaler's two ops on the device, as CUDA has them: unscaling the
// gradients while noting whether any is inf or NaN, and updating the scale. Both are
// written with the device's pointwise and reduction kernels, on tensors that stay on
// the device: no value is read back to the host, so a training step does not wait for
// the device here (the scaler reads found_inf once per step, as it does for CUDA).
#include <ATen/ops/any.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace spyre::backend {
namespace {

void check_one_float(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.numel() == 1, what, " must be a 1-element tensor.");
  TORCH_CHECK(t.scalar_type() == at::kFloat, what, " must be a float tensor.");
}

// True (a bool 0-d tensor on the device) if `t` holds an inf or a NaN: t * 0 is 0 for
// every finite value and NaN for inf and NaN.
at::Tensor any_non_finite(const at::Tensor& t) { return at::isnan(at::mul(t, 0)).any(); }

// aten::_amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] self, Tensor(b!) found_inf, Tensor inv_scale)
// Each gradient is multiplied by inv_scale; found_inf becomes 1.0 if any gradient held
// an inf or a NaN (and is left as it was otherwise, so it accumulates over calls).
void non_finite_check_and_unscale(at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  check_one_float(inv_scale, "inv_scale");
  check_one_float(found_inf, "found_inf");
  TORCH_CHECK(inv_scale.device() == found_inf.device(), "inv_scale and found_inf must be on the same device, got ",
              inv_scale.device(), " and ", found_inf.device(), ".");
  const c10::DeviceGuard guard(found_inf.device());
  for (const at::Tensor& g : grads) {
    TORCH_CHECK(g.device() == found_inf.device(), "a gradient is on ", g.device(), " but found_inf is on ",
                found_inf.device(), "; GradScaler unscales the gradients of one device at a time.");
    TORCH_CHECK(g.layout() == at::kStrided, "one of the gradients is not a strided tensor (", g.layout(), ").");
    if (g.numel() == 0) continue;
    at::maximum_out(found_inf, found_inf, any_non_finite(g).to(at::kFloat).reshape(found_inf.sizes()));
    const_cast<at::Tensor&>(g).mul_(inv_scale);  // a TensorList's tensors are the caller's, updated in place
  }
}

// aten::_amp_update_scale_(Tensor(a!) self, Tensor(b!) growth_tracker, Tensor found_inf,
//                          float scale_growth_factor, float scale_backoff_factor, int growth_interval)
// After an inf/NaN step: scale *= backoff, tracker = 0. Otherwise the tracker counts
// the step; at growth_interval steps in a row the scale grows (unless that would make it
// inf) and the tracker restarts at 0.
at::Tensor& update_scale(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                         double growth_factor, double backoff_factor, std::int64_t growth_interval) {
  check_one_float(scale, "current_scale");
  check_one_float(found_inf, "found_inf");
  TORCH_CHECK(growth_tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  TORCH_CHECK(growth_tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
  TORCH_CHECK(scale.device() == growth_tracker.device() && scale.device() == found_inf.device(),
              "current_scale, growth_tracker and found_inf must be on the same device, got ", scale.device(), ", ",
              growth_tracker.device(), " and ", found_inf.device(), ".");
  const c10::DeviceGuard guard(scale.device());
  const at::Tensor found = at::ne(found_inf, 0);
  const at::Tensor successful = growth_tracker + 1;
  const at::Tensor reached = at::ge(successful, growth_interval);
  const at::Tensor grown = at::mul(scale, growth_factor);
  const at::Tensor grown_or_kept = at::where(any_non_finite(grown), scale, grown);
  const at::Tensor new_scale =
      at::where(found, at::mul(scale, backoff_factor), at::where(reached, grown_or_kept, scale));
  const at::Tensor zero = at::zeros_like(growth_tracker);
  const at::Tensor new_tracker = at::where(found, zero, at::where(reached, zero, successful));
  scale.copy_(new_scale);
  growth_tracker.copy_(new_tracker);
  return scale;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", non_finite_check_and_unscale);
  m.impl("_amp_update_scale_", update_scale);
}

}  // namespace spyre::backend
