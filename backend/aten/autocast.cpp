// torch.autocast("spyre", dtype=torch.float16 | torch.bfloat16): PyTorch's own autocast
// policy lists (ATen/autocast_mode.h publishes them for backends to reuse) registered
// for the PrivateUse1 autocast key, so an op casts its inputs as it would under CUDA's
// autocast: matmuls and convolutions to the lower precision, losses and reductions to
// fp32, mixed inputs promoted. Other ops fall through to their spyre kernels.
// (torch.spyre.get_amp_supported_dtype lists the two dtypes.)
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace spyre::backend {
namespace {

// (The lists' signatures name these unqualified, as inside namespace at.)
using at::Dimname;
using at::DimnameList;
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define SPYRE_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(SPYRE_AUTOCAST_LOWER)
#undef SPYRE_AUTOCAST_LOWER
#define SPYRE_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(SPYRE_AUTOCAST_FP32)
#undef SPYRE_AUTOCAST_FP32
#define SPYRE_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(SPYRE_AUTOCAST_FP32_SET_OPT_DTYPE)
#undef SPYRE_AUTOCAST_FP32_SET_OPT_DTYPE
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define SPYRE_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(SPYRE_AUTOCAST_PROMOTE)
#undef SPYRE_AUTOCAST_PROMOTE
}

}  // namespace
}  // namespace spyre::backend
