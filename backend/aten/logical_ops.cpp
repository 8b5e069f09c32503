// Device kernels of the predicates (isneginf, isposinf, isnan) and the logical and
// bitwise ops, each one pointwise kernel (aten/pointwise_kernels.h); integer bitwise
// ops the device has no instruction for run on the CPU, counted.
#include <torch/library.h>

#include "aten/pointwise_kernels.h"

namespace spyre::backend {
namespace {

using namespace pointwise_kernels;

// ---- isneginf, isposinf, isnan, logical_not ---------------------------------------

// A bool (or out=-typed) result of comparing self with `b`: -inf, +inf, self itself
// (x != x: NaN) or 0. `floats_only`: integer and bool inputs are never infinite or
// NaN, so their answer is all false without a kernel.
at::Tensor compare_self(const char* name, CompareOp op, Value b, bool floats_only, at::Tensor out,
                        const at::Tensor& self, at::Tensor (*cpu_op)(const at::Tensor&)) {
  if (!out.defined()) out = at::empty({0}, self.options().dtype(at::kBool));
  at::TensorBase base = out;
  auto iter = at::TensorIteratorConfig()
                  .check_all_same_dtype(false)
                  .add_output(base)
                  .add_const_input(self)
                  .build();
  const c10::ScalarType in = self.scalar_type();
  if (floats_only && at::isIntegralType(in, /*includeBool=*/true)) {
    at::Tensor result(iter.output());
    if (result.numel() > 0) result.fill_(false);
    return result;
  }
  return finish(
      name, iter, in, 2,
      [&](isa::DType c) {
        return Steps{Step::compare(op, isa::is_float(c) ? isa::DType::fp32 : c, Value::input(0), b)};
      },
      [&] { return cpu_op(cpu(self)); });
}

constexpr double kInf = std::numeric_limits<double>::infinity();
// `bool_out`: out= must be bool (isposinf, isneginf), as PyTorch requires.
#define SPYRE_COMPARE_SELF(fn, op, b, floats_only, bool_out)                                         \
  at::Tensor cpu_##fn(const at::Tensor& t) { return at::fn(t); }                                     \
  at::Tensor fn(const at::Tensor& self) {                                                            \
    return compare_self("aten::" #fn, op, b, floats_only, at::Tensor(), self, cpu_##fn);             \
  }                                                                                                  \
  [[maybe_unused]] at::Tensor& fn##_out(const at::Tensor& self, at::Tensor& out) {                   \
    TORCH_CHECK(!(bool_out) || out.scalar_type() == at::kBool, #fn " does not support non-boolean outputs."); \
    compare_self("aten::" #fn ".out", op, b, floats_only, out, self, cpu_##fn);                      \
    return out;                                                                                      \
  }
SPYRE_COMPARE_SELF(isneginf, CompareOp::eq, Value::constant(-kInf), true, true)
SPYRE_COMPARE_SELF(isposinf, CompareOp::eq, Value::constant(kInf), true, true)
SPYRE_COMPARE_SELF(isnan, CompareOp::ne, Value::input(0), true, false)
SPYRE_COMPARE_SELF(logical_not, CompareOp::eq, Value::constant(0), false, false)
#undef SPYRE_COMPARE_SELF

// ---- logical and bitwise ops ---------------------------------------------------

// logical_and / _or / _xor of any device dtypes, and bitwise_and / _or / _xor / _not of
// bool tensors (generation's masks): both sides compared with 0, then the two bools
// combined: min (and), max (or), != (xor). The result is bool, or out='s dtype.
// Bitwise ops of integers need bit instructions the vector units do not have: CPU,
// counted.
enum class Logic { and_, or_, xor_ };

at::Tensor logical(const char* name, Logic kind, bool bitwise, at::Tensor out, const at::Tensor& a_in,
                   const at::Tensor& b_in) {
  const c10::Device device = device_of({&out, &a_in, &b_in});
  if (bitwise && (a_in.scalar_type() != at::kBool || b_in.scalar_type() != at::kBool)) {
    // On CPU copies (a scalar operand keeps its wrapped-number promotion), PyTorch's
    // own result type and out= cast check.
    count_fallback(name);
    const at::Tensor x = cpu(a_in), y = cpu(b_in);
    const auto op = [&](const at::Tensor& u, const at::Tensor& v) {
      return kind == Logic::and_ ? at::bitwise_and(u, v) : kind == Logic::or_ ? at::bitwise_or(u, v) : at::bitwise_xor(u, v);
    };
    at::Tensor r = op(x, y);
    if (!out.defined()) return r.to(device);
    return deliver(r.to(device), out);
  }
  const at::Tensor a = on(a_in, device), b = on(b_in, device);
  if (out.defined()) check_out(out, device, at::kBool, OutDtype::any);
  if (!out.defined()) out = at::empty({0}, a.options().dtype(at::kBool).device(device));
  at::TensorBase base = out;
  auto iter = at::TensorIterator::comparison_op(base, a, b);
  return finish(
      name, iter, iter.common_dtype(), 3,
      [&](isa::DType c) {
        const auto boolean = isa::DType::boolean;
        Step last = kind == Logic::xor_ ? Step::compare(CompareOp::ne, boolean, Value::step(0), Value::step(1))
                                        : Step::binary(kind == Logic::and_ ? BinaryOp::min : BinaryOp::max, boolean,
                                                       Value::step(0), Value::step(1));
        return Steps{Step::compare(CompareOp::ne, c, Value::input(0), Value::constant(0)),
                     Step::compare(CompareOp::ne, c, Value::input(1), Value::constant(0)), last};
      },
      [&] {
        const at::Tensor x = cpu(a_in), y = cpu(b_in);
        if (bitwise) {
          return kind == Logic::and_ ? at::bitwise_and(x, y) : kind == Logic::or_ ? at::bitwise_or(x, y) : at::bitwise_xor(x, y);
        }
        return kind == Logic::and_ ? at::logical_and(x, y) : kind == Logic::or_ ? at::logical_or(x, y) : at::logical_xor(x, y);
      },
      iter.common_dtype());
}

#define SPYRE_LOGIC(fn, aten_name, kind, bitwise)                                                        \
  at::Tensor fn(const at::Tensor& a, const at::Tensor& b) {                                              \
    return logical("aten::" aten_name, kind, bitwise, at::Tensor(), a, b);                               \
  }                                                                                                      \
  at::Tensor& fn##_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {                      \
    logical("aten::" aten_name ".out", kind, bitwise, out, a, b);                                        \
    return out;                                                                                          \
  }                                                                                                      \
  at::Tensor& fn##_inplace(at::Tensor& a, const at::Tensor& b) {                                         \
    logical("aten::" aten_name "_", kind, bitwise, a, a, b);                                             \
    return a;                                                                                            \
  }
SPYRE_LOGIC(logical_and, "logical_and", Logic::and_, false)
SPYRE_LOGIC(logical_or, "logical_or", Logic::or_, false)
SPYRE_LOGIC(logical_xor, "logical_xor", Logic::xor_, false)
SPYRE_LOGIC(bitwise_and, "bitwise_and", Logic::and_, true)
SPYRE_LOGIC(bitwise_or, "bitwise_or", Logic::or_, true)
SPYRE_LOGIC(bitwise_xor, "bitwise_xor", Logic::xor_, true)
#undef SPYRE_LOGIC

// bitwise_not: logical_not for bool; integers on the CPU, counted.
at::Tensor& bitwise_not_into(const at::Tensor& self, at::Tensor& out) {
  if (self.scalar_type() == at::kBool) {
    compare_self("aten::bitwise_not.out", CompareOp::eq, Value::constant(0), false, out, self, cpu_logical_not);
    return out;
  }
  count_fallback("aten::bitwise_not.out");
  deliver(at::bitwise_not(cpu(self)).to(self.device()), out);
  return out;
}
at::Tensor& bitwise_not_out(const at::Tensor& self, at::Tensor& out) { return bitwise_not_into(self, out); }
at::Tensor bitwise_not(const at::Tensor& self) {
  at::Tensor out = at::empty({0}, self.options());
  return bitwise_not_into(self, out);
}
at::Tensor& bitwise_not_(at::Tensor& self) { return bitwise_not_into(self, self); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("isneginf", isneginf);
  m.impl("isneginf.out", isneginf_out);
  m.impl("isposinf", isposinf);
  m.impl("isposinf.out", isposinf_out);
  m.impl("logical_not", logical_not);
  m.impl("logical_not.out", logical_not_out);
  m.impl("logical_and", logical_and);
  m.impl("logical_and.out", logical_and_out);
  m.impl("logical_and_", logical_and_inplace);
  m.impl("logical_or", logical_or);
  m.impl("logical_or.out", logical_or_out);
  m.impl("logical_or_", logical_or_inplace);
  m.impl("logical_xor", logical_xor);
  m.impl("logical_xor.out", logical_xor_out);
  m.impl("logical_xor_", logical_xor_inplace);
  m.impl("bitwise_and.Tensor", bitwise_and);
  m.impl("bitwise_and.Tensor_out", bitwise_and_out);
  m.impl("bitwise_and_.Tensor", bitwise_and_inplace);
  m.impl("bitwise_or.Tensor", bitwise_or);
  m.impl("bitwise_or.Tensor_out", bitwise_or_out);
  m.impl("bitwise_or_.Tensor", bitwise_or_inplace);
  m.impl("bitwise_xor.Tensor", bitwise_xor);
  m.impl("bitwise_xor.Tensor_out", bitwise_xor_out);
  m.impl("bitwise_xor_.Tensor", bitwise_xor_inplace);
  m.impl("bitwise_not", bitwise_not);
  m.impl("bitwise_not.out", bitwise_not_out);
  m.impl("bitwise_not_", bitwise_not_);
  m.impl("isnan", isnan);
}

}  // namespace spyre::backend
