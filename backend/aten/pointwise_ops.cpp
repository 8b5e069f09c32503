// Device kernels for the pointwise ops, functional, in-place and out= forms: add, sub
// (alpha), mul, div, maximum, minimum, the comparisons, where, clamp, and the unary
// ops. PyTorch's TensorIterator decides broadcasting, type promotion and the output;
// the kernel (compiler/pointwise.h) reads every operand through its own strides and
// converts dtypes on the device. Operands in dtypes the device does not compute
// (int64, float64, ...) run the op on CPU copies, counted as fallbacks.
#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/TypeProperties.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/out.h"
#include "aten/pointwise.h"

namespace spyre::backend {
namespace {

using compiler::Step;
using compiler::Value;
using isa::BinaryOp;
using isa::CompareOp;
using isa::UnaryOp;
using Steps = std::vector<Step>;

// Runs the built iterator on the device, or `cpu()` (the op on CPU copies) into its
// output when the device cannot; returns the output.
template <class MakeSteps, class Cpu>
at::Tensor finish(const char* name, at::TensorIteratorBase& iter, c10::ScalarType common, std::size_t steps,
                  MakeSteps&& make, Cpu&& cpu, std::optional<c10::ScalarType> round_scalars = std::nullopt) {
  at::Tensor out(iter.output());
  if (iter.numel() == 0) return out;
  if (device_can_run(iter) && device_dtype(common)) {
    run_pointwise(name, iter, make(compute_dtype(common, steps)), round_scalars);
  } else {
    count_fallback(name);
    out.copy_(cpu());
  }
  return out;
}

at::Tensor cpu(const at::Tensor& t) { return t.defined() ? t.cpu() : t; }

// ---- binary arithmetic ---------------------------------------------------------

at::Tensor binary(const char* name, BinaryOp op, bool float_op, at::TensorBase out, const at::Tensor& a,
                  const at::Tensor& b, const c10::Scalar& alpha,
                  at::Tensor (*cpu_op)(const at::Tensor&, const at::Tensor&, const c10::Scalar&)) {
  auto iter = float_op ? at::TensorIterator::binary_float_op(out, a, b) : at::TensorIterator::binary_op(out, a, b);
  const bool scaled = !alpha.equal(1);
  if (scaled) at::native::alpha_check(iter.common_dtype(), alpha);
  return finish(
      name, iter, iter.common_dtype(), scaled ? 2 : 1,
      [&](isa::DType c) {
        if (!scaled) return Steps{Step::binary(op, c, Value::input(0), Value::input(1))};
        return Steps{Step::binary(BinaryOp::mul, c, Value::input(1), Value::constant(alpha.toDouble())),
                     Step::binary(op, c, Value::input(0), Value::step(0))};
      },
      [&] { return cpu_op(cpu(a), cpu(b), alpha); });
}

at::Tensor cpu_add(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) { return at::add(a, b, alpha); }
at::Tensor cpu_sub(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) { return at::sub(a, b, alpha); }
at::Tensor cpu_mul(const at::Tensor& a, const at::Tensor& b, const c10::Scalar&) { return at::mul(a, b); }
at::Tensor cpu_div(const at::Tensor& a, const at::Tensor& b, const c10::Scalar&) { return at::div(a, b); }
at::Tensor cpu_maximum(const at::Tensor& a, const at::Tensor& b, const c10::Scalar&) { return at::maximum(a, b); }
at::Tensor cpu_minimum(const at::Tensor& a, const at::Tensor& b, const c10::Scalar&) { return at::minimum(a, b); }

#define SPYRE_BINARY_ALPHA(fn, op, float_op, check)                                                             \
  at::Tensor fn(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {                           \
    check;                                                                                                      \
    return binary("aten::" #fn, op, float_op, at::TensorBase(), a, b, alpha, cpu_##fn);                         \
  }                                                                                                             \
  at::Tensor& fn##_(at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {                             \
    check;                                                                                                      \
    binary("aten::" #fn "_", op, float_op, a, a, b, alpha, cpu_##fn);                                           \
    return a;                                                                                                   \
  }                                                                                                             \
  at::Tensor& fn##_out(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out) {   \
    check;                                                                                                      \
    binary("aten::" #fn ".out", op, float_op, out, a, b, alpha, cpu_##fn);                                      \
    return out;                                                                                                 \
  }
SPYRE_BINARY_ALPHA(add, BinaryOp::add, false, (void)0)
SPYRE_BINARY_ALPHA(sub, BinaryOp::sub, false, at::native::sub_check(a, b))
#undef SPYRE_BINARY_ALPHA

#define SPYRE_BINARY(fn, op, float_op)                                                                  \
  at::Tensor fn(const at::Tensor& a, const at::Tensor& b) {                                             \
    return binary("aten::" #fn, op, float_op, at::TensorBase(), a, b, 1, cpu_##fn);                     \
  }                                                                                                     \
  at::Tensor& fn##_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {                     \
    binary("aten::" #fn ".out", op, float_op, out, a, b, 1, cpu_##fn);                                  \
    return out;                                                                                         \
  }
#define SPYRE_BINARY_INPLACE(fn, op, float_op)                                                          \
  SPYRE_BINARY(fn, op, float_op)                                                                        \
  at::Tensor& fn##_(at::Tensor& a, const at::Tensor& b) {                                               \
    binary("aten::" #fn "_", op, float_op, a, a, b, 1, cpu_##fn);                                       \
    return a;                                                                                           \
  }
SPYRE_BINARY_INPLACE(mul, BinaryOp::mul, false)
SPYRE_BINARY_INPLACE(div, BinaryOp::div, true)
SPYRE_BINARY(maximum, BinaryOp::max, false)
SPYRE_BINARY(minimum, BinaryOp::min, false)
#undef SPYRE_BINARY_INPLACE
#undef SPYRE_BINARY

// ---- comparisons ---------------------------------------------------------------

at::Tensor compare(const char* name, CompareOp op, at::Tensor out, const at::Tensor& a, const at::Tensor& b,
                   at::Tensor (*cpu_op)(const at::Tensor&, const at::Tensor&)) {
  if (!out.defined()) out = at::empty({0}, a.options().dtype(at::kBool));
  at::TensorBase base = out;
  auto iter = at::TensorIterator::comparison_op(base, a, b);
  // The CPU compares a scalar rounded to the common dtype; so do we.
  return finish(
      name, iter, iter.common_dtype(), 1,
      [&](isa::DType c) { return Steps{Step::compare(op, c, Value::input(0), Value::input(1))}; },
      [&] { return cpu_op(cpu(a), cpu(b)); }, iter.common_dtype());
}

#define SPYRE_COMPARE(fn, op)                                                                                  \
  at::Tensor cpu_##fn(const at::Tensor& a, const at::Tensor& b) { return at::fn(a, b); }                      \
  at::Tensor fn##_tensor(const at::Tensor& a, const at::Tensor& b) {                                           \
    return compare("aten::" #fn, op, at::Tensor(), a, b, cpu_##fn);                                            \
  }                                                                                                            \
  at::Tensor fn##_scalar(const at::Tensor& a, const c10::Scalar& b) {                                          \
    return compare("aten::" #fn, op, at::Tensor(), a, at::native::wrapped_scalar_tensor(b), cpu_##fn);         \
  }                                                                                                            \
  at::Tensor& fn##_tensor_(at::Tensor& a, const at::Tensor& b) {                                               \
    compare("aten::" #fn "_", op, a, a, b, cpu_##fn);                                                          \
    return a;                                                                                                  \
  }                                                                                                            \
  at::Tensor& fn##_scalar_(at::Tensor& a, const c10::Scalar& b) {                                              \
    compare("aten::" #fn "_", op, a, a, at::native::wrapped_scalar_tensor(b), cpu_##fn);                       \
    return a;                                                                                                  \
  }                                                                                                            \
  at::Tensor& fn##_tensor_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {                     \
    compare("aten::" #fn ".out", op, out, a, b, cpu_##fn);                                                     \
    return out;                                                                                                \
  }                                                                                                            \
  at::Tensor& fn##_scalar_out(const at::Tensor& a, const c10::Scalar& b, at::Tensor& out) {                    \
    compare("aten::" #fn ".out", op, out, a, at::native::wrapped_scalar_tensor(b), cpu_##fn);                  \
    return out;                                                                                                \
  }
SPYRE_COMPARE(eq, CompareOp::eq)
SPYRE_COMPARE(ne, CompareOp::ne)
SPYRE_COMPARE(lt, CompareOp::lt)
SPYRE_COMPARE(le, CompareOp::le)
SPYRE_COMPARE(gt, CompareOp::gt)
SPYRE_COMPARE(ge, CompareOp::ge)
#undef SPYRE_COMPARE

// ---- where and clamp -----------------------------------------------------------

c10::Device device_of(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts) {
    if (t->defined() && t->device().type() == c10::DeviceType::PrivateUse1) return t->device();
  }
  return (*ts.begin())->device();
}

// A 0-d CPU operand of a device op moves to the device (as PyTorch's where does).
at::Tensor on(const at::Tensor& t, c10::Device device) {
  return t.dim() == 0 && t.is_cpu() && device.type() == c10::DeviceType::PrivateUse1 ? t.to(device) : t;
}

at::Tensor where(at::Tensor out, const at::Tensor& cond_in, const at::Tensor& a_in, const at::Tensor& b_in) {
  const c10::Device device = device_of({&out, &cond_in, &a_in, &b_in});
  const at::Tensor cond = on(cond_in, device), a = on(a_in, device), b = on(b_in, device);
  TORCH_CHECK(cond.scalar_type() == at::kBool, "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              cond.scalar_type());
  const c10::ScalarType dtype = at::result_type(a, b);
  if (out.defined()) check_out(out, device, dtype, OutDtype::exact);  // as the CPU's where
  if (!out.defined()) out = at::empty({0}, a.options().dtype(dtype).device(device));
  auto iter = at::TensorIteratorConfig()
                  .check_all_same_dtype(false)
                  .add_output(out)
                  .add_const_input(cond)
                  .add_const_input(a)
                  .add_const_input(b)
                  .build();
  return finish(
      "aten::where", iter, dtype, 1,
      [&](isa::DType c) { return Steps{Step::select(c, Value::input(0), Value::input(1), Value::input(2))}; },
      [&] { return at::where(cpu(cond), cpu(a), cpu(b)); });
}

at::Tensor where_self(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b) {
  return where(at::Tensor(), cond, a, b);
}
at::Tensor& where_out(const at::Tensor& cond, const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  where(out, cond, a, b);
  return out;
}

// clamp with scalar bounds: max(x, min) then min(., max), NaN propagating as torch.clamp.
at::Tensor clamp_scalar(const char* name, at::Tensor out, const at::Tensor& self, const std::optional<c10::Scalar>& lo,
                        const std::optional<c10::Scalar>& hi) {
  TORCH_CHECK(lo || hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  at::native::ResultTypeState state;
  state = at::native::update_result_type_state(self, state);
  if (lo) state = at::native::update_result_type_state(*lo, state);
  if (hi) state = at::native::update_result_type_state(*hi, state);
  if (out.defined()) check_out(out, self.device(), at::native::result_type(state), OutDtype::exact);  // as the CPU's clamp
  const c10::ScalarType dtype = out.defined() ? out.scalar_type() : at::native::result_type(state);
  if (!out.defined()) out = at::empty({0}, self.options().dtype(dtype));
  auto iter = at::TensorIteratorConfig().check_all_same_dtype(false).add_output(out).add_const_input(self).build();
  return finish(
      name, iter, at::native::result_type(state), (lo ? 1 : 0) + (hi ? 1 : 0),
      [&](isa::DType c) {
        Steps s;
        if (lo) s.push_back(Step::binary(BinaryOp::max, c, Value::input(0), Value::constant(lo->toDouble())));
        if (hi) {
          s.push_back(Step::binary(BinaryOp::min, c, lo ? Value::step(0) : Value::input(0), Value::constant(hi->toDouble())));
        }
        return s;
      },
      [&] { return at::clamp(cpu(self), lo, hi); }, at::native::result_type(state));
}

at::Tensor clamp_tensor(const char* name, at::Tensor out, const at::Tensor& self, const std::optional<at::Tensor>& lo,
                        const std::optional<at::Tensor>& hi) {
  const bool has_lo = lo && lo->defined(), has_hi = hi && hi->defined();
  TORCH_CHECK(has_lo || has_hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  at::native::ResultTypeState state;
  state = at::native::update_result_type_state(self, state);
  if (has_lo) state = at::native::update_result_type_state(*lo, state);
  if (has_hi) state = at::native::update_result_type_state(*hi, state);
  const c10::ScalarType dtype = at::native::result_type(state);
  if (out.defined()) check_out(out, self.device(), dtype, OutDtype::exact);
  if (!out.defined()) out = at::empty({0}, self.options().dtype(dtype));
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).add_output(out).add_const_input(self);
  if (has_lo) config.add_const_input(*lo);
  if (has_hi) config.add_const_input(*hi);
  auto iter = config.build();
  return finish(
      name, iter, dtype, (has_lo ? 1 : 0) + (has_hi ? 1 : 0),
      [&](isa::DType c) {
        Steps s;
        if (has_lo) s.push_back(Step::binary(BinaryOp::max, c, Value::input(0), Value::input(1)));
        if (has_hi) {
          s.push_back(Step::binary(BinaryOp::min, c, has_lo ? Value::step(0) : Value::input(0),
                                   Value::input(has_lo ? 2 : 1)));
        }
        return s;
      },
      [&] {
        return at::clamp(cpu(self), has_lo ? std::optional<at::Tensor>(cpu(*lo)) : std::nullopt,
                         has_hi ? std::optional<at::Tensor>(cpu(*hi)) : std::nullopt);
      });
}

at::Tensor clamp(const at::Tensor& self, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
  return clamp_scalar("aten::clamp", at::Tensor(), self, lo, hi);
}
at::Tensor& clamp_(at::Tensor& self, const std::optional<c10::Scalar>& lo, const std::optional<c10::Scalar>& hi) {
  clamp_scalar("aten::clamp_", self, self, lo, hi);
  return self;
}
at::Tensor& clamp_out(const at::Tensor& self, const std::optional<c10::Scalar>& lo,
                      const std::optional<c10::Scalar>& hi, at::Tensor& out) {
  clamp_scalar("aten::clamp.out", out, self, lo, hi);
  return out;
}
at::Tensor clamp_t(const at::Tensor& self, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi) {
  return clamp_tensor("aten::clamp.Tensor", at::Tensor(), self, lo, hi);
}
at::Tensor& clamp_t_(at::Tensor& self, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi) {
  clamp_tensor("aten::clamp_.Tensor", self, self, lo, hi);
  return self;
}
at::Tensor& clamp_t_out(const at::Tensor& self, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi,
                        at::Tensor& out) {
  clamp_tensor("aten::clamp.Tensor_out", out, self, lo, hi);
  return out;
}

// ---- unary ---------------------------------------------------------------------

template <class Cpu>
at::Tensor unary(const char* name, UnaryOp op, bool float_op, at::TensorBase out, const at::Tensor& self, Cpu&& cpu_op) {
  auto iter = float_op ? at::TensorIterator::unary_float_op(out, self) : at::TensorIterator::unary_op(out, self);
  return finish(
      name, iter, iter.common_dtype(), 1, [&](isa::DType c) { return Steps{Step::unary(op, c, Value::input(0))}; },
      [&] { return cpu_op(cpu(self)); });
}

void check_not_bool(const at::Tensor& self, const char* what) {
  TORCH_CHECK(self.scalar_type() != at::kBool, what, " on a bool tensor is not supported.");
}

#define SPYRE_UNARY(fn, op, float_op, check)                                                                  \
  at::Tensor fn(const at::Tensor& self) {                                                                     \
    check;                                                                                                    \
    return unary("aten::" #fn, op, float_op, at::TensorBase(), self, [](const at::Tensor& t) { return at::fn(t); }); \
  }                                                                                                           \
  at::Tensor& fn##_(at::Tensor& self) {                                                                       \
    check;                                                                                                    \
    unary("aten::" #fn "_", op, float_op, self, self, [](const at::Tensor& t) { return at::fn(t); });         \
    return self;                                                                                              \
  }                                                                                                           \
  at::Tensor& fn##_out(const at::Tensor& self, at::Tensor& out) {                                             \
    check;                                                                                                    \
    unary("aten::" #fn ".out", op, float_op, out, self, [](const at::Tensor& t) { return at::fn(t); });       \
    return out;                                                                                               \
  }
SPYRE_UNARY(neg, UnaryOp::neg, false, check_not_bool(self, "Negation, the `-` operator,"))
// abs: a complex input's magnitude is real (float), which a same-dtype unary kernel
// cannot produce; complex has no device kernels, so it runs on the CPU (counted).
at::Tensor abs(const at::Tensor& self) {
  if (self.is_complex()) {
    count_fallback("aten::abs");
    const c10::DeviceGuard guard(self.device());
    return at::abs(self.cpu()).to(self.device());
  }
  return unary("aten::abs", UnaryOp::abs, false, at::TensorBase(), self, [](const at::Tensor& t) { return at::abs(t); });
}
at::Tensor& abs_(at::Tensor& self) {
  TORCH_CHECK(!self.is_complex(), "In-place abs is not supported for complex tensors.");
  unary("aten::abs_", UnaryOp::abs, false, self, self, [](const at::Tensor& t) { return at::abs(t); });
  return self;
}
at::Tensor& abs_out(const at::Tensor& self, at::Tensor& out) {
  if (self.is_complex()) {
    count_fallback("aten::abs.out");
    const c10::DeviceGuard guard(self.device());
    deliver(at::abs(self.cpu()).to(self.device()), out);  // out= checks, resize, write
    return out;
  }
  unary("aten::abs.out", UnaryOp::abs, false, out, self, [](const at::Tensor& t) { return at::abs(t); });
  return out;
}
SPYRE_UNARY(exp, UnaryOp::exp, true, (void)0)
SPYRE_UNARY(log, UnaryOp::log, true, (void)0)
SPYRE_UNARY(sqrt, UnaryOp::sqrt, true, (void)0)
SPYRE_UNARY(rsqrt, UnaryOp::rsqrt, true, (void)0)
SPYRE_UNARY(reciprocal, UnaryOp::reciprocal, true, (void)0)
SPYRE_UNARY(sigmoid, UnaryOp::sigmoid, true, (void)0)
SPYRE_UNARY(tanh, UnaryOp::tanh, true, (void)0)
SPYRE_UNARY(erf, UnaryOp::erf, true, (void)0)
SPYRE_UNARY(silu, UnaryOp::silu, false, (void)0)
SPYRE_UNARY(sin, UnaryOp::sin, true, (void)0)
SPYRE_UNARY(cos, UnaryOp::cos, true, (void)0)
#undef SPYRE_UNARY

at::Tensor relu(const at::Tensor& self) {
  check_not_bool(self, "relu");
  return unary("aten::relu", UnaryOp::relu, false, at::TensorBase(), self, [](const at::Tensor& t) { return at::relu(t); });
}
at::Tensor& relu_(at::Tensor& self) {
  check_not_bool(self, "relu");
  unary("aten::relu_", UnaryOp::relu, false, self, self, [](const at::Tensor& t) { return at::relu(t); });
  return self;
}

UnaryOp gelu_op(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "approximate argument must be either none or tanh.");
  return approximate == "tanh" ? UnaryOp::gelu_tanh : UnaryOp::gelu;
}
at::Tensor gelu(const at::Tensor& self, c10::string_view approximate) {
  return unary("aten::gelu", gelu_op(approximate), false, at::TensorBase(), self,
               [&](const at::Tensor& t) { return at::gelu(t, approximate); });
}
at::Tensor& gelu_(at::Tensor& self, c10::string_view approximate) {
  unary("aten::gelu_", gelu_op(approximate), false, self, self,
        [&](const at::Tensor& t) { return at::gelu(t, approximate); });
  return self;
}
at::Tensor& gelu_out(const at::Tensor& self, c10::string_view approximate, at::Tensor& out) {
  unary("aten::gelu.out", gelu_op(approximate), false, out, self,
        [&](const at::Tensor& t) { return at::gelu(t, approximate); });
  return out;
}

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
#define SPYRE_COMPARE_SELF(fn, op, b, floats_only)                                                   \
  at::Tensor cpu_##fn(const at::Tensor& t) { return at::fn(t); }                                     \
  at::Tensor fn(const at::Tensor& self) {                                                            \
    return compare_self("aten::" #fn, op, b, floats_only, at::Tensor(), self, cpu_##fn);             \
  }                                                                                                  \
  [[maybe_unused]] at::Tensor& fn##_out(const at::Tensor& self, at::Tensor& out) {                   \
    compare_self("aten::" #fn ".out", op, b, floats_only, out, self, cpu_##fn);                      \
    return out;                                                                                      \
  }
SPYRE_COMPARE_SELF(isneginf, CompareOp::eq, Value::constant(-kInf), true)
SPYRE_COMPARE_SELF(isposinf, CompareOp::eq, Value::constant(kInf), true)
SPYRE_COMPARE_SELF(isnan, CompareOp::ne, Value::input(0), true)
SPYRE_COMPARE_SELF(logical_not, CompareOp::eq, Value::constant(0), false)
#undef SPYRE_COMPARE_SELF

// ---- pow with a scalar exponent ---------------------------------------------------

// x ** e for the exponents models use (squares in norms, square roots, reciprocals),
// as steps of exact device operations; other exponents (and integer bases with
// negative ones, which PyTorch refuses) run on the CPU, counted.
// The one list of exponents with device steps: torch.compile's fusion reads it
// (torch.ops.spyre.pow_exponents) instead of keeping a copy.
constexpr double kPowExponents[] = {1, 2, 3, 0.5, -0.5, -1, -2};

std::optional<Steps> pow_steps(double e, isa::DType c) {
  if (std::find(std::begin(kPowExponents), std::end(kPowExponents), e) == std::end(kPowExponents)) {
    return std::nullopt;
  }
  const Value x = Value::input(0);
  if (e == 1) return Steps{Step::unary(UnaryOp::copy, c, x)};
  if (e == 2) return Steps{Step::binary(BinaryOp::mul, c, x, x)};
  if (e == 3) return Steps{Step::binary(BinaryOp::mul, c, x, x), Step::binary(BinaryOp::mul, c, Value::step(0), x)};
  if (!isa::is_float(c)) return std::nullopt;
  if (e == 0.5) return Steps{Step::unary(UnaryOp::sqrt, c, x)};
  if (e == -0.5) return Steps{Step::unary(UnaryOp::rsqrt, c, x)};
  if (e == -1) return Steps{Step::unary(UnaryOp::reciprocal, c, x)};
  if (e == -2) return Steps{Step::binary(BinaryOp::mul, c, x, x), Step::unary(UnaryOp::reciprocal, c, Value::step(0))};
  return std::nullopt;
}

}  // namespace

std::vector<double> pow_device_exponents() { return {std::begin(kPowExponents), std::end(kPowExponents)}; }

namespace {

at::Tensor pow_scalar(const char* name, at::TensorBase out, const at::Tensor& self, const c10::Scalar& exponent) {
  // PyTorch's promotion for pow(Tensor, Scalar): the result type of the two.
  auto iter = at::TensorIterator::binary_op(out, self, at::native::wrapped_scalar_tensor(exponent));
  const bool real = exponent.isFloatingPoint() || exponent.isIntegral(false);  // not bool, not complex
  const auto steps = real && device_dtype(iter.common_dtype())
                         ? pow_steps(exponent.toDouble(), compute_dtype(iter.common_dtype(), 2))
                         : std::nullopt;
  at::Tensor result(iter.output());
  if (iter.numel() == 0) return result;
  if (steps && device_can_run(iter)) {
    run_pointwise(name, iter, *steps);
  } else {
    count_fallback(name);
    result.copy_(at::pow(cpu(self), exponent));
  }
  return result;
}
at::Tensor pow_ts(const at::Tensor& self, const c10::Scalar& exponent) {
  return pow_scalar("aten::pow", at::TensorBase(), self, exponent);
}
at::Tensor& pow_ts_(at::Tensor& self, const c10::Scalar& exponent) {
  pow_scalar("aten::pow_", self, self, exponent);
  return self;
}
at::Tensor& pow_ts_out(const at::Tensor& self, const c10::Scalar& exponent, at::Tensor& out) {
  pow_scalar("aten::pow.Tensor_Scalar_out", out, self, exponent);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", add);
  m.impl("add_.Tensor", add_);
  m.impl("add.out", add_out);
  m.impl("sub.Tensor", sub);
  m.impl("sub_.Tensor", sub_);
  m.impl("sub.out", sub_out);
  m.impl("mul.Tensor", mul);
  m.impl("mul_.Tensor", mul_);
  m.impl("mul.out", mul_out);
  m.impl("div.Tensor", div);
  m.impl("div_.Tensor", div_);
  m.impl("div.out", div_out);
  m.impl("maximum", maximum);
  m.impl("maximum.out", maximum_out);
  m.impl("minimum", minimum);
  m.impl("minimum.out", minimum_out);
#define SPYRE_REGISTER_COMPARE(fn)         \
  m.impl(#fn ".Tensor", fn##_tensor);      \
  m.impl(#fn ".Scalar", fn##_scalar);      \
  m.impl(#fn "_.Tensor", fn##_tensor_);    \
  m.impl(#fn "_.Scalar", fn##_scalar_);    \
  m.impl(#fn ".Tensor_out", fn##_tensor_out); \
  m.impl(#fn ".Scalar_out", fn##_scalar_out);
  SPYRE_REGISTER_COMPARE(eq)
  SPYRE_REGISTER_COMPARE(ne)
  SPYRE_REGISTER_COMPARE(lt)
  SPYRE_REGISTER_COMPARE(le)
  SPYRE_REGISTER_COMPARE(gt)
  SPYRE_REGISTER_COMPARE(ge)
#undef SPYRE_REGISTER_COMPARE
  m.impl("where.self", where_self);
  m.impl("where.self_out", where_out);
  m.impl("clamp", clamp);
  m.impl("clamp_", clamp_);
  m.impl("clamp.out", clamp_out);
  m.impl("clamp.Tensor", clamp_t);
  m.impl("clamp_.Tensor", clamp_t_);
  m.impl("clamp.Tensor_out", clamp_t_out);
#define SPYRE_REGISTER_UNARY(fn) \
  m.impl(#fn, fn);               \
  m.impl(#fn "_", fn##_);        \
  m.impl(#fn ".out", fn##_out);
  SPYRE_REGISTER_UNARY(neg)
  SPYRE_REGISTER_UNARY(abs)
  SPYRE_REGISTER_UNARY(exp)
  SPYRE_REGISTER_UNARY(log)
  SPYRE_REGISTER_UNARY(sqrt)
  SPYRE_REGISTER_UNARY(rsqrt)
  SPYRE_REGISTER_UNARY(reciprocal)
  SPYRE_REGISTER_UNARY(sigmoid)
  SPYRE_REGISTER_UNARY(tanh)
  SPYRE_REGISTER_UNARY(erf)
  SPYRE_REGISTER_UNARY(silu)
  SPYRE_REGISTER_UNARY(sin)
  SPYRE_REGISTER_UNARY(cos)
  SPYRE_REGISTER_UNARY(gelu)
#undef SPYRE_REGISTER_UNARY
  m.impl("relu", relu);
  m.impl("relu_", relu_);
  m.impl("isneginf", isneginf);
  m.impl("isneginf.out", isneginf_out);
  m.impl("isposinf", isposinf);
  m.impl("isposinf.out", isposinf_out);
  m.impl("logical_not", logical_not);
  m.impl("logical_not.out", logical_not_out);
  m.impl("isnan", isnan);
  m.impl("pow.Tensor_Scalar", pow_ts);
  m.impl("pow_.Scalar", pow_ts_);
  m.impl("pow.Tensor_Scalar_out", pow_ts_out);
}

}  // namespace spyre::backend
