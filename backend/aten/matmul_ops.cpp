// Device kernel for mm: 2-D fp32/fp16/bf16 spyre tensors, A contiguous, B contiguous
// or the transpose of a contiguous matrix (linear's weight.t()); anything else runs on
// the CPU and is counted.
#include <c10/core/DeviceGuard.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "compiler/matmul.h"
#include "runtime/driver.h"
#include "runtime/launch.h"

namespace spyre::backend {
namespace {

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  const bool b_plain = mat2.is_contiguous();
  const bool b_transposed = !b_plain && mat2.dim() == 2 && mat2.t().is_contiguous();
  const bool on_device = self.device().type() == c10::DeviceType::PrivateUse1 && mat2.device() == self.device() &&
                         self.dim() == 2 && mat2.dim() == 2 && self.size(1) == mat2.size(0) &&
                         self.scalar_type() == mat2.scalar_type() && device_float_dtype(self.scalar_type()) &&
                         self.is_contiguous() && (b_plain || b_transposed) && self.numel() > 0 && mat2.numel() > 0;
  if (!on_device) {
    count_fallback("aten::mm");
    return at::mm(self.cpu(), mat2.cpu()).to(self.device());
  }
  const c10::DeviceGuard guard(self.device());
  const c10::DeviceIndex device = self.device().index();
  compiler::MatmulShape shape;
  shape.m = static_cast<std::uint64_t>(self.size(0));
  shape.k = static_cast<std::uint64_t>(self.size(1));
  shape.n = static_cast<std::uint64_t>(mat2.size(1));
  shape.dtype = *device_float_dtype(self.scalar_type());
  shape.b_transposed = b_transposed;
  at::Tensor out = at::empty({self.size(0), mat2.size(1)}, self.options());
  const std::string key = "aten::mm|" + std::string(isa::to_string(shape.dtype)) + "|" + std::to_string(shape.m) + "x" +
                          std::to_string(shape.n) + "x" + std::to_string(shape.k) + (b_transposed ? "|bt" : "");
  const spyre_program_t program = cached_program(
      device, key, [&] { return compiler::compile_matmul(shape, target(device), "aten::mm"); }, "aten::mm");
  launch(device, program,
         {reinterpret_cast<std::uint64_t>(self.data_ptr()), reinterpret_cast<std::uint64_t>(mat2.data_ptr()),
          reinterpret_cast<std::uint64_t>(out.data_ptr())},
         "aten::mm");
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("mm", mm); }

}  // namespace spyre::backend
