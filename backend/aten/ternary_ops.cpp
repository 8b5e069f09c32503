// Device kernels of addcmul, addcdiv and lerp (what the optimizers' foreach fallbacks
// call), each one pointwise kernel (aten/pointwise_kernels.h) in the CPU kernel's order
// of operations.
#include <ATen/ops/addcdiv.h>
#include <ATen/ops/addcmul.h>
#include <ATen/ops/lerp.h>
#include <torch/library.h>

#include "aten/pointwise_kernels.h"

namespace spyre::backend {
namespace {

using namespace pointwise_kernels;

// ---- addcmul, addcdiv, lerp (what the optimizers' foreach fallbacks call) -----------

// self + value x t1 x t2 and self + value x t1 / t2, one kernel each in the CPU
// kernel's order ((value x t1) x t2, then self +), fp16/bf16 in fp32 and rounded once;
// integer and bool tensors on the CPU (counted), which also makes PyTorch's checks of
// their value argument.
template <class Cpu>
at::Tensor ternary(const char* name, at::TensorBase out, const at::Tensor& self, const at::Tensor& t1,
                   const at::Tensor& t2, BinaryOp op, const c10::Scalar& value, Cpu&& cpu_op) {
  auto iter = at::TensorIteratorConfig()
                  .add_output(out)
                  .add_const_input(self)
                  .add_const_input(t1)
                  .add_const_input(t2)
                  .promote_inputs_to_common_dtype(true)
                  .cast_common_dtype_to_outputs(true)
                  .enforce_safe_casting_to_output(true)
                  .build();
  if (op == BinaryOp::div) {
    TORCH_CHECK(!at::isIntegralType(iter.common_dtype(), /*includeBool=*/true),
                "Integer division with addcdiv is no longer supported, and in a future release addcdiv will perform a "
                "true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
                "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + "
                "value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter "
                "implementation: (input + value * tensor1 / tensor2), for all dtypes.");
  }
  if (!at::isFloatingType(iter.common_dtype())) {  // integers and bool: the CPU's, with its checks
    count_fallback(name);
    at::Tensor result(iter.output());
    result.copy_(cpu_op(cpu(self), cpu(t1), cpu(t2)));
    return result;
  }
  const double v = value.toDouble();
  return finish(
      name, iter, iter.common_dtype(), 3,
      [&](isa::DType c) {
        return Steps{Step::binary(BinaryOp::mul, c, k(v), in(1)), Step::binary(op, c, st(0), in(2)),
                     Step::binary(BinaryOp::add, c, in(0), st(1))};
      },
      [&] { return cpu_op(cpu(self), cpu(t1), cpu(t2)); });
}
#define SPYRE_TERNARY(fn, op)                                                                               \
  at::Tensor fn(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& value) { \
    return ternary("aten::" #fn, at::TensorBase(), self, t1, t2, op, value,                                  \
                   [&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) { return at::fn(a, b, c, value); }); \
  }                                                                                                         \
  at::Tensor& fn##_(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& value) {  \
    ternary("aten::" #fn "_", self, self, t1, t2, op, value,                                                 \
            [&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) { return at::fn(a, b, c, value); }); \
    return self;                                                                                            \
  }                                                                                                         \
  at::Tensor& fn##_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2, const c10::Scalar& value, \
                       at::Tensor& out) {                                                                   \
    ternary("aten::" #fn ".out", out, self, t1, t2, op, value,                                              \
            [&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) { return at::fn(a, b, c, value); }); \
    return out;                                                                                             \
  }
SPYRE_TERNARY(addcmul, BinaryOp::mul)
SPYRE_TERNARY(addcdiv, BinaryOp::div)
#undef SPYRE_TERNARY

// lerp with a scalar weight, as the CPU's: |w| < 0.5 ? self + w (end - self) : end -
// (end - self) (1 - w), the branch chosen on the host.
at::Tensor lerp_scalar(const char* name, at::TensorBase out, const at::Tensor& self, const at::Tensor& end,
                       const c10::Scalar& weight) {
  auto iter = at::TensorIteratorConfig()
                  .add_output(out)
                  .add_const_input(self)
                  .add_const_input(end)
                  .promote_inputs_to_common_dtype(true)
                  .cast_common_dtype_to_outputs(true)
                  .enforce_safe_casting_to_output(true)
                  .build();
  TORCH_CHECK(at::isFloatingType(iter.common_dtype()) || at::isComplexType(iter.common_dtype()),
              "lerp_kernel_scalar not implemented for '", iter.common_dtype(), "'");
  if (!device_dtype(iter.common_dtype()) || weight.isComplex()) {  // complex, float64: the CPU's
    count_fallback(name);
    at::Tensor result(iter.output());
    result.copy_(at::lerp(cpu(self), cpu(end), weight));
    return result;
  }
  const double w = weight.toDouble();
  const bool small = std::abs(w) < 0.5;
  return finish(
      name, iter, iter.common_dtype(), 3,
      [&](isa::DType c) {
        if (small) {
          return Steps{Step::binary(BinaryOp::sub, c, in(1), in(0)), Step::binary(BinaryOp::mul, c, k(w), st(0)),
                       Step::binary(BinaryOp::add, c, in(0), st(1))};
        }
        return Steps{Step::binary(BinaryOp::sub, c, in(1), in(0)), Step::binary(BinaryOp::mul, c, st(0), k(1 - w)),
                     Step::binary(BinaryOp::sub, c, in(1), st(1))};
      },
      [&] { return at::lerp(cpu(self), cpu(end), weight); });
}
// lerp with a tensor weight, as the CPU's: the same two formulas, chosen per element
// by |w| < 0.5 (both computed, then selected). One kernel.
at::Tensor lerp_tensor(const char* name, at::TensorBase out, const at::Tensor& self, const at::Tensor& end,
                       const at::Tensor& weight) {
  TORCH_CHECK(self.dtype() == end.dtype(), "expected dtype ", self.dtype(), " for `end` but got dtype ", end.dtype());
  TORCH_CHECK(self.dtype() == weight.dtype(), "expected dtype ", self.dtype(), " for `weight` but got dtype ",
              weight.dtype());
  // A 0-d weight on the host (as CUDA allows): its value, the scalar form.
  if (weight.dim() == 0 && weight.device().is_cpu() && !self.device().is_cpu()) {
    return lerp_scalar(name, out, self, end, weight.item());
  }
  auto iter = at::TensorIteratorConfig()
                  .add_output(out)
                  .add_const_input(self)
                  .add_const_input(end)
                  .add_const_input(weight)
                  .build();
  TORCH_CHECK(at::isFloatingType(iter.common_dtype()) || at::isComplexType(iter.common_dtype()),
              "lerp_kernel_tensor not implemented for '", iter.common_dtype(), "'");
  if (!device_dtype(iter.common_dtype())) {  // complex, float64: the CPU's
    count_fallback(name);
    at::Tensor result(iter.output());
    result.copy_(at::lerp(cpu(self), cpu(end), cpu(weight)));
    return result;
  }
  return finish(
      name, iter, iter.common_dtype(), 9,
      [&](isa::DType c) {
        return Steps{Step::binary(BinaryOp::sub, c, in(1), in(0)),           // 0: end - self
                     Step::unary(UnaryOp::abs, c, in(2)),                     // 1: |w|
                     Step::compare(CompareOp::lt, c, st(1), k(0.5)),          // 2: |w| < 0.5
                     Step::binary(BinaryOp::mul, c, in(2), st(0)),            // 3: w (end - self)
                     Step::binary(BinaryOp::add, c, in(0), st(3)),            // 4: self + w (end - self)
                     Step::binary(BinaryOp::sub, c, k(1), in(2)),             // 5: 1 - w
                     Step::binary(BinaryOp::mul, c, st(0), st(5)),            // 6: (end - self)(1 - w)
                     Step::binary(BinaryOp::sub, c, in(1), st(6)),            // 7: end - (end - self)(1 - w)
                     Step::select(c, st(2), st(4), st(7))};
      },
      [&] { return at::lerp(cpu(self), cpu(end), cpu(weight)); });
}
at::Tensor lerp_tensor_fn(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  return lerp_tensor("aten::lerp.Tensor", at::TensorBase(), self, end, weight);
}
at::Tensor& lerp_tensor_in_place(at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
  lerp_tensor("aten::lerp_.Tensor", self, self, end, weight);
  return self;
}
at::Tensor& lerp_tensor_out(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight, at::Tensor& out) {
  lerp_tensor("aten::lerp.Tensor_out", out, self, end, weight);
  return out;
}
at::Tensor lerp_fn(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight) {
  return lerp_scalar("aten::lerp.Scalar", at::TensorBase(), self, end, weight);
}
at::Tensor& lerp_in_place(at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight) {
  lerp_scalar("aten::lerp_.Scalar", self, self, end, weight);
  return self;
}
at::Tensor& lerp_out(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight, at::Tensor& out) {
  lerp_scalar("aten::lerp.Scalar_out", out, self, end, weight);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("addcmul", addcmul);
  m.impl("addcmul_", addcmul_);
  m.impl("addcmul.out", addcmul_out);
  m.impl("addcdiv", addcdiv);
  m.impl("addcdiv_", addcdiv_);
  m.impl("addcdiv.out", addcdiv_out);
  m.impl("lerp.Scalar", lerp_fn);
  m.impl("lerp_.Scalar", lerp_in_place);
  m.impl("lerp.Scalar_out", lerp_out);
  m.impl("lerp.Tensor", lerp_tensor_fn);
  m.impl("lerp_.Tensor", lerp_tensor_in_place);
  m.impl("lerp.Tensor_out", lerp_tensor_out);
}

}  // namespace spyre::backend
