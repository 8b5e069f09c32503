// Writing an op's result into an out= tensor (resized as PyTorch's out= rules say).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

namespace spyre::backend {

// What an op accepts as its out= tensor's dtype (PyTorch's rule for that op).
enum class OutDtype {
  any,          // any dtype: the result is converted (sum)
  cast_safely,  // any dtype the result casts to without loss of kind (at::canCast)
  exact,        // exactly the result's (matmuls, index_select, amax/amin, any/all)
};

// PyTorch's out= checks: the out tensor is on the result's device (a CPU out with spyre
// inputs is refused) and its dtype follows `rule`.
inline void check_out(const at::Tensor& out, c10::Device device, c10::ScalarType result, OutDtype rule) {
  TORCH_CHECK(out.device() == device, "Expected out tensor to have device ", device, ", but got ", out.device(),
              " instead");
  if (rule == OutDtype::any) return;
  if (rule == OutDtype::exact) {
    TORCH_CHECK(out.scalar_type() == result, "Expected out tensor to have dtype ", result, ", but got ",
                out.scalar_type(), " instead");
  } else {
    TORCH_CHECK(at::canCast(result, out.scalar_type()), "result type ", result,
                " can't be cast to the desired output type ", out.scalar_type());
  }
}

// `result` itself when there is no out tensor, else out checked, resized and written.
inline at::Tensor deliver(const at::Tensor& result, const at::Tensor& out, OutDtype rule = OutDtype::cast_safely) {
  if (!out.defined()) return result;
  check_out(out, result.device(), result.scalar_type(), rule);
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

}  // namespace spyre::backend
