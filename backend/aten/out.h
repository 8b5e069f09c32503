// Writing an op's result into an out= tensor (resized as PyTorch's out= rules say).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>

namespace spyre::backend {

// `result` itself when there is no out tensor, else out resized and written.
inline at::Tensor deliver(const at::Tensor& result, const at::Tensor& out) {
  if (!out.defined()) return result;
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

}  // namespace spyre::backend
