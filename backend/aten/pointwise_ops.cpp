// Device kernels for the pointwise ops, functional, in-place and out= forms: the rows
// of the op table (op_table.h: unary ops, add/sub/mul/div/maximum/minimum, the
// comparisons), plus abs, gelu, where, clamp and pow. (The activations' gradients and
// the hard activations: activation_ops.cpp; addcmul, addcdiv, lerp: ternary_ops.cpp;
// the predicates and logical ops: logical_ops.cpp.) PyTorch's TensorIterator decides
// broadcasting, type promotion and the output;
// the kernel (compiler/pointwise.h) reads every operand through its own strides and
// converts dtypes on the device. Operands in dtypes the device does not compute
// (int64, float64, ...) run the op on CPU copies, counted as fallbacks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/TypeProperties.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/out.h"
#include "aten/op_table.h"
#include "aten/pointwise.h"
#include "aten/pointwise_kernels.h"
#include "compiler/pointwise_ir.h"

namespace spyre::backend {
namespace {

using namespace pointwise_kernels;


// ---- binary arithmetic ---------------------------------------------------------

// int64 a + alpha x b and a - alpha x b (a counter such as BatchNorm's
// num_batches_tracked, positions): the device stores an int64 as two int32 words, low
// first, and has no 64-bit arithmetic, so the words are added as the hardware's carry
// chain would: lo = a_lo + b_lo (wrapping), carry = lo <u a_lo (unsigned: both offset
// by -2^31, then compared signed), hi = a_hi + b_hi + carry; subtraction borrows
// instead (a_lo <u b_lo). Two kernels, the high words first so an in-place add reads
// the low words it needs before they change. b is an int64 tensor (alpha 1) or a
// scalar (any alpha; alpha x b computed on the host, wrapping as the CPU's). False when
// the operands do not fit that (the caller runs the op another way).
bool int64_add(const char* name, at::TensorIteratorBase& iter, BinaryOp op, const c10::Scalar& alpha) {
  if (op != BinaryOp::add && op != BinaryOp::sub) return false;
  if (iter.common_dtype() != at::kLong || iter.dtype(0) != at::kLong || iter.numel() == 0) return false;
  const bool b_scalar = iter.is_cpu_scalar(2);
  if (!b_scalar && !alpha.equal(1)) return false;
  if (iter.is_cpu_scalar(1)) return false;
  for (int arg = 0; arg < 3; ++arg) {
    if (arg == 2 && b_scalar) continue;
    if (iter.dtype(arg) != at::kLong || iter.device(arg).type() != c10::DeviceType::PrivateUse1 ||
        iter.device(arg) != iter.device(0)) {
      return false;
    }
  }
  const at::Tensor out(iter.output());
  // An operand's words as int32 tensors of the result's shape (broadcast: stride 0).
  const auto words = [&](int arg, std::int64_t word) {
    return int64_word(at::Tensor(iter.tensor(arg)).expand(out.sizes()), word);
  };
  constexpr isa::DType i32 = isa::DType::int32;
  constexpr double kMin = -2147483648.0;
  const bool add = op == BinaryOp::add;
  at::Tensor a_lo = words(1, 0), a_hi = words(1, 1), out_lo = words(0, 0), out_hi = words(0, 1);
  std::vector<at::Tensor> hi_inputs{a_lo, a_hi}, lo_inputs{a_lo};
  Value b_lo = Value::input(2), b_hi = Value::input(3), b_lo_in_lo = Value::input(1);
  if (b_scalar) {
    const std::int64_t v = static_cast<std::int64_t>(static_cast<std::uint64_t>(iter.scalar_value<std::int64_t>(2)) *
                                                     static_cast<std::uint64_t>(alpha.toLong()));
    b_lo = b_lo_in_lo = Value::constant(static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint32_t>(v))));
    b_hi = Value::constant(static_cast<double>(static_cast<std::int32_t>(static_cast<std::uint64_t>(v) >> 32)));
  } else {
    hi_inputs.push_back(words(2, 0));
    hi_inputs.push_back(words(2, 1));
    lo_inputs.push_back(hi_inputs[2]);
  }
  const BinaryOp wop = add ? BinaryOp::add : BinaryOp::sub;
  const auto run_words = [&](const char* what, at::Tensor& dst, const std::vector<at::Tensor>& inputs,
                             const Steps& steps) {
    at::TensorIteratorConfig config;
    config.add_output(dst).resize_outputs(false).check_all_same_dtype(false);
    for (const at::Tensor& t : inputs) config.add_const_input(t);
    auto words_iter = config.build();
    run_pointwise(what, words_iter, steps);
  };
  // carry (add): lo + 2^31 offset < a_lo + offset; borrow (sub): a_lo < b_lo, unsigned.
  const Steps hi_steps{Step::binary(wop, i32, Value::input(0), b_lo),                       // 0: lo
                       Step::binary(BinaryOp::add, i32, add ? Value::step(0) : Value::input(0), Value::constant(kMin)),
                       Step::binary(BinaryOp::add, i32, add ? Value::input(0) : b_lo, Value::constant(kMin)),
                       Step::compare(CompareOp::lt, i32, Value::step(1), Value::step(2)),  // 3: carry / borrow
                       Step::binary(wop, i32, Value::input(1), b_hi),                       // 4
                       Step::select(i32, Value::step(3), Value::constant(1), Value::constant(0)),
                       Step::binary(wop, i32, Value::step(4), Value::step(5))};
  run_words(name, out_hi, hi_inputs, hi_steps);
  run_words(name, out_lo, lo_inputs, {Step::binary(wop, i32, Value::input(0), b_lo_in_lo)});
  return true;
}

template <class Cpu>
at::Tensor binary(const char* name, BinaryOp op, bool float_op, at::TensorBase out, const at::Tensor& a,
                  const at::Tensor& b, const c10::Scalar& alpha, Cpu&& cpu_op) {
  auto iter = float_op ? at::TensorIterator::binary_float_op(out, a, b) : at::TensorIterator::binary_op(out, a, b);
  // Checked whatever its value, as PyTorch does (alpha=True or 1.0 on integers is refused).
  at::native::alpha_check(iter.common_dtype(), alpha);
  if (int64_add(name, iter, op, alpha)) return at::Tensor(iter.output());
  const bool scaled = !alpha.equal(1);
  return finish(
      name, iter, iter.common_dtype(), scaled ? 2 : 1,
      [&](isa::DType c) {
        if (!scaled) return Steps{Step::binary(op, c, Value::input(0), Value::input(1))};
        return Steps{Step::binary(BinaryOp::mul, c, Value::input(1), Value::constant(alpha.toDouble())),
                     Step::binary(op, c, Value::input(0), Value::step(0))};
      },
      [&] { return cpu_op(cpu(a), cpu(b), alpha); });
}

// ---- comparisons ---------------------------------------------------------------

template <class Cpu>
at::Tensor compare(const char* name, CompareOp op, at::Tensor out, const at::Tensor& a, const at::Tensor& b,
                   Cpu&& cpu_op) {
  if (!out.defined()) out = at::empty({0}, a.options().dtype(at::kBool));
  at::TensorBase base = out;
  auto iter = at::TensorIterator::comparison_op(base, a, b);
  // The CPU compares a scalar rounded to the common dtype; so do we.
  return finish(
      name, iter, iter.common_dtype(), 1,
      [&](isa::DType c) { return Steps{Step::compare(op, c, Value::input(0), Value::input(1))}; },
      [&] { return cpu_op(cpu(a), cpu(b)); }, iter.common_dtype());
}


// The error PyTorch's dtype dispatch gives a kernel that has no case for a dtype
// ("abs_cpu" not implemented for 'Bool'), named for spyre.
void check_has_dtype(c10::ScalarType dtype, c10::ScalarType missing, const char* kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(dtype != missing, "\"", kernel, "_spyre\" not implemented for '", c10::toString(missing), "'");
}

// ---- where and clamp -----------------------------------------------------------

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
  // The CPU's and CUDA's scalar clamp kernels have no bool case.
  check_has_dtype(at::native::result_type(state), at::kBool, lo && hi ? "clamp_scalar" : lo ? "clamp_min_scalar"
                                                                                            : "clamp_max_scalar");
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

// `rule`: clamp's out= takes the result's dtype exactly; clamp_min's and clamp_max's
// (binary ops) any dtype it casts to safely.
at::Tensor clamp_tensor(const char* name, at::Tensor out, const at::Tensor& self, const std::optional<at::Tensor>& lo,
                        const std::optional<at::Tensor>& hi, OutDtype rule = OutDtype::exact) {
  const bool has_lo = lo && lo->defined(), has_hi = hi && hi->defined();
  TORCH_CHECK(has_lo || has_hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
  at::native::ResultTypeState state;
  state = at::native::update_result_type_state(self, state);
  if (has_lo) state = at::native::update_result_type_state(*lo, state);
  if (has_hi) state = at::native::update_result_type_state(*hi, state);
  const c10::ScalarType dtype = at::native::result_type(state);
  // The CPU's and CUDA's clamp with both bounds has no bool case (one bound is a
  // maximum or minimum, which has).
  if (has_lo && has_hi) check_has_dtype(dtype, at::kBool, "clamp");
  if (out.defined()) check_out(out, self.device(), dtype, rule);
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

// clamp_min / clamp_max: clamp with one bound (what _foreach_maximum / _foreach_minimum
// call per tensor).
at::Tensor clamp_min(const at::Tensor& self, const c10::Scalar& lo) {
  return clamp_scalar("aten::clamp_min", at::Tensor(), self, lo, std::nullopt);
}
at::Tensor& clamp_min_(at::Tensor& self, const c10::Scalar& lo) {
  clamp_scalar("aten::clamp_min_", self, self, lo, std::nullopt);
  return self;
}
at::Tensor& clamp_min_out(const at::Tensor& self, const c10::Scalar& lo, at::Tensor& out) {
  clamp_scalar("aten::clamp_min.out", out, self, lo, std::nullopt);
  return out;
}
at::Tensor clamp_min_t(const at::Tensor& self, const at::Tensor& lo) {
  return clamp_tensor("aten::clamp_min.Tensor", at::Tensor(), self, lo, std::nullopt);
}
at::Tensor& clamp_min_t_(at::Tensor& self, const at::Tensor& lo) {
  clamp_tensor("aten::clamp_min_.Tensor", self, self, lo, std::nullopt);
  return self;
}
at::Tensor& clamp_min_t_out(const at::Tensor& self, const at::Tensor& lo, at::Tensor& out) {
  clamp_tensor("aten::clamp_min.Tensor_out", out, self, lo, std::nullopt, OutDtype::cast_safely);
  return out;
}
at::Tensor clamp_max(const at::Tensor& self, const c10::Scalar& hi) {
  return clamp_scalar("aten::clamp_max", at::Tensor(), self, std::nullopt, hi);
}
at::Tensor& clamp_max_(at::Tensor& self, const c10::Scalar& hi) {
  clamp_scalar("aten::clamp_max_", self, self, std::nullopt, hi);
  return self;
}
at::Tensor& clamp_max_out(const at::Tensor& self, const c10::Scalar& hi, at::Tensor& out) {
  clamp_scalar("aten::clamp_max.out", out, self, std::nullopt, hi);
  return out;
}
at::Tensor clamp_max_t(const at::Tensor& self, const at::Tensor& hi) {
  return clamp_tensor("aten::clamp_max.Tensor", at::Tensor(), self, std::nullopt, hi);
}
at::Tensor& clamp_max_t_(at::Tensor& self, const at::Tensor& hi) {
  clamp_tensor("aten::clamp_max_.Tensor", self, self, std::nullopt, hi);
  return self;
}
at::Tensor& clamp_max_t_out(const at::Tensor& self, const at::Tensor& hi, at::Tensor& out) {
  clamp_tensor("aten::clamp_max.Tensor_out", out, self, std::nullopt, hi, OutDtype::cast_safely);
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

void check_not_bool(const at::Tensor& self, const char* message) {
  TORCH_CHECK(self.scalar_type() != at::kBool, message);
}

// abs: a complex input's magnitude is real (float), which a same-dtype unary kernel
// cannot produce; complex has no device kernels, so it runs on the CPU (counted).
at::Tensor abs(const at::Tensor& self) {
  if (self.is_complex()) {
    count_fallback("aten::abs");
    const c10::DeviceGuard guard(self.device());
    return at::abs(self.cpu()).to(self.device());
  }
  check_has_dtype(self.scalar_type(), at::kBool, "abs");  // as the CPU's and CUDA's abs
  return unary("aten::abs", UnaryOp::abs, false, at::TensorBase(), self, [](const at::Tensor& t) { return at::abs(t); });
}
at::Tensor& abs_(at::Tensor& self) {
  TORCH_CHECK(!self.is_complex(), "In-place abs is not supported for complex tensors.");
  check_has_dtype(self.scalar_type(), at::kBool, "abs");
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
  check_has_dtype(self.scalar_type(), at::kBool, "abs");
  unary("aten::abs.out", UnaryOp::abs, false, out, self, [](const at::Tensor& t) { return at::abs(t); });
  return out;
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

// ---- pow ---------------------------------------------------------------------------

// x ** e with a scalar exponent: the exponents models use (squares in norms, cubes,
// square roots, reciprocals) as steps of exact device operations, the rest as the
// vector unit's pow (isa::BinaryOp::pow).
// The one list of exponents with their own steps: torch.compile's fusion reads it
// (torch.ops.spyre.pow_exponents) instead of keeping a copy; other exponents run as
// the eager kernel inside compiled graphs.
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

std::vector<std::int64_t> pow_program(double exponent) {
  const std::optional<Steps> steps = pow_steps(exponent, isa::DType::fp32);
  return steps ? compiler::encode_steps(*steps).words : std::vector<std::int64_t>{};
}

namespace {

at::Tensor pow_scalar(const char* name, at::TensorBase out, const at::Tensor& self, const c10::Scalar& exponent) {
  // PyTorch's check (its meta function's), then its promotion for pow(Tensor, Scalar):
  // the result type of the two.
  TORCH_CHECK(!(at::isIntegralType(self.scalar_type(), true) && exponent.isIntegral(true) && exponent.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
  auto iter = at::TensorIterator::binary_op(out, self, at::native::wrapped_scalar_tensor(exponent));
  const bool real = exponent.isFloatingPoint() || exponent.isIntegral(false);  // not bool, not complex
  const c10::ScalarType common = iter.common_dtype();
  std::optional<Steps> steps;
  if (real && common != at::kBool && device_dtype(common)) {
    steps = pow_steps(exponent.toDouble(), compute_dtype(common, 2));
    if (!steps) {
      steps = Steps{Step::binary(BinaryOp::pow, compute_dtype(common, 1), Value::input(0),
                                 Value::constant(exponent.toDouble()))};
    }
  }
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

// pow(Scalar base, Tensor exponent) (rotary embeddings' base ** (2i / d)): the vector
// unit's pow with the base as a constant; bool and complex on the CPU, counted.
at::Tensor pow_base(const char* name, at::TensorBase out, const c10::Scalar& base, const at::Tensor& exponent) {
  auto iter = at::TensorIterator::binary_op(out, at::native::wrapped_scalar_tensor(base), exponent);
  at::Tensor result(iter.output());
  if (iter.numel() == 0) return result;
  const bool real = base.isFloatingPoint() || base.isIntegral(false);
  const c10::ScalarType common = iter.common_dtype();
  if (real && common != at::kBool && device_dtype(common) && device_can_run(iter)) {
    run_pointwise(name, iter,
                  Steps{Step::binary(BinaryOp::pow, compute_dtype(common, 1), Value::constant(base.toDouble()),
                                     Value::input(1))});
  } else {
    count_fallback(name);
    result.copy_(at::pow(base, cpu(exponent)));
  }
  return result;
}
at::Tensor pow_st(const c10::Scalar& base, const at::Tensor& exponent) {
  return pow_base("aten::pow.Scalar", at::TensorBase(), base, exponent);
}
at::Tensor& pow_st_out(const c10::Scalar& base, const at::Tensor& exponent, at::Tensor& out) {
  pow_base("aten::pow.Scalar_out", out, base, exponent);
  return out;
}

// pow(Tensor, Tensor): the vector unit's pow (C's rules for floats; PyTorch's integer
// pow, wrapping, for int32/int8). Other dtypes (bool, int64, float64, complex) on the
// CPU, counted.
at::Tensor pow_tensor(const char* name, at::TensorBase out, const at::Tensor& self, const at::Tensor& exponent) {
  auto iter = at::TensorIterator::binary_op(out, self, exponent);
  at::Tensor result(iter.output());
  if (iter.numel() == 0) return result;
  const c10::ScalarType common = iter.common_dtype();
  if (common != at::kBool && device_dtype(common) && device_can_run(iter)) {
    run_pointwise(name, iter,
                  Steps{Step::binary(BinaryOp::pow, compute_dtype(common, 1), Value::input(0), Value::input(1))});
  } else {
    count_fallback(name);
    result.copy_(at::pow(cpu(self), cpu(exponent)));
  }
  return result;
}
at::Tensor pow_tt(const at::Tensor& self, const at::Tensor& exponent) {
  return pow_tensor("aten::pow.Tensor_Tensor", at::TensorBase(), self, exponent);
}
at::Tensor& pow_tt_(at::Tensor& self, const at::Tensor& exponent) {
  pow_tensor("aten::pow_.Tensor", self, self, exponent);
  return self;
}
at::Tensor& pow_tt_out(const at::Tensor& self, const at::Tensor& exponent, at::Tensor& out) {
  pow_tensor("aten::pow.Tensor_Tensor_out", out, self, exponent);
  return out;
}

// ---- the op table's families (op_table.h) ------------------------------------------

// The name a kernel is launched (and counted) under: "aten::exp", "aten::exp_", ...
template <class Row>
const char* kernel_name(const Row& row, const char* suffix) {
  static std::mutex mutex;
  static std::map<std::pair<const Row*, std::string>, std::string> names;
  const std::lock_guard lock(mutex);
  auto& n = names[{&row, suffix}];
  if (n.empty()) n = std::string("aten::") + row.aten + suffix;
  return n.c_str();
}

// aten's own operator, for the CPU copies of operands the device cannot compute.
template <class Sig>
c10::TypedOperatorHandle<Sig> aten_op(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow((std::string("aten::") + name).c_str(), overload).typed<Sig>();
}

template <std::size_t I>
struct Unary {
  static constexpr const UnaryRow& row = kUnaryOps[I];
  static at::Tensor on_cpu(const at::Tensor& t) {
    static const auto op = aten_op<at::Tensor(const at::Tensor&)>(row.aten, "");
    return op.call(t);
  }
  static void check(const at::Tensor& self) {
    if constexpr (row.no_bool != nullptr) check_not_bool(self, row.no_bool);
  }
  static at::Tensor fn(const at::Tensor& self) {
    check(self);
    return unary(kernel_name(row, ""), row.op, row.float_op, at::TensorBase(), self, on_cpu);
  }
  static at::Tensor& fn_(at::Tensor& self) {
    check(self);
    unary(kernel_name(row, "_"), row.op, row.float_op, self, self, on_cpu);
    return self;
  }
  static at::Tensor& out(const at::Tensor& self, at::Tensor& result) {
    check(self);
    unary(kernel_name(row, ".out"), row.op, row.float_op, result, self, on_cpu);
    return result;
  }
  static void add(torch::Library& m) {
    if constexpr (!row.own_kernel) {
      static const std::string name = row.aten, inplace = name + "_", out_name = name + ".out";
      m.impl(name.c_str(), TORCH_FN(fn));
      m.impl(inplace.c_str(), TORCH_FN(fn_));
      m.impl(out_name.c_str(), TORCH_FN(out));
    }
  }
};

template <std::size_t I>
struct Binary {
  static constexpr const BinaryRow& row = kBinaryOps[I];
  static at::Tensor on_cpu(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    if constexpr (row.alpha) {
      static const auto op = aten_op<at::Tensor(const at::Tensor&, const at::Tensor&, const c10::Scalar&)>(row.aten, "Tensor");
      return op.call(a, b, alpha);
    } else {
      static const auto op = aten_op<at::Tensor(const at::Tensor&, const at::Tensor&)>(row.aten, row.overload ? "Tensor" : "");
      return op.call(a, b);
    }
  }
  static at::Tensor run(const char* suffix, at::TensorBase out, const at::Tensor& a, const at::Tensor& b,
                        const c10::Scalar& alpha) {
    if constexpr (row.op == BinaryOp::sub) at::native::sub_check(a, b);
    return binary(kernel_name(row, suffix), row.op, row.float_op, std::move(out), a, b, alpha, on_cpu);
  }
  // add/sub: (a, b, *, alpha)
  static at::Tensor fn_alpha(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    return run("", at::TensorBase(), a, b, alpha);
  }
  static at::Tensor& fn_alpha_(at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    run("_", a, a, b, alpha);
    return a;
  }
  static at::Tensor& out_alpha(const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out) {
    run(".out", out, a, b, alpha);
    return out;
  }
  static at::Tensor fn(const at::Tensor& a, const at::Tensor& b) { return run("", at::TensorBase(), a, b, 1); }
  static at::Tensor& fn_(at::Tensor& a, const at::Tensor& b) {
    run("_", a, a, b, 1);
    return a;
  }
  static at::Tensor& out(const at::Tensor& a, const at::Tensor& b, at::Tensor& result) {
    run(".out", result, a, b, 1);
    return result;
  }
  static void add(torch::Library& m) {
    static const std::string name = row.aten, tensor = name + ".Tensor", inplace = name + "_.Tensor",
                             out_name = name + ".out";
    if constexpr (row.alpha) {
      m.impl(tensor.c_str(), TORCH_FN(fn_alpha));
      m.impl(inplace.c_str(), TORCH_FN(fn_alpha_));
      m.impl(out_name.c_str(), TORCH_FN(out_alpha));
    } else if constexpr (row.overload) {
      m.impl(tensor.c_str(), TORCH_FN(fn));
      m.impl(inplace.c_str(), TORCH_FN(fn_));
      m.impl(out_name.c_str(), TORCH_FN(out));
    } else {
      m.impl(name.c_str(), TORCH_FN(fn));
      m.impl(out_name.c_str(), TORCH_FN(out));
    }
  }
};

template <std::size_t I>
struct Compare {
  static constexpr const CompareRow& row = kCompareOps[I];
  static at::Tensor on_cpu(const at::Tensor& a, const at::Tensor& b) {
    static const auto op = aten_op<at::Tensor(const at::Tensor&, const at::Tensor&)>(row.aten, "Tensor");
    return op.call(a, b);
  }
  static at::Tensor scalar(const c10::Scalar& b) { return at::native::wrapped_scalar_tensor(b); }
  static at::Tensor tensor(const at::Tensor& a, const at::Tensor& b) {
    return compare(kernel_name(row, ""), row.op, at::Tensor(), a, b, on_cpu);
  }
  static at::Tensor scalar_(const at::Tensor& a, const c10::Scalar& b) { return tensor(a, scalar(b)); }
  static at::Tensor& tensor_inplace(at::Tensor& a, const at::Tensor& b) {
    compare(kernel_name(row, "_"), row.op, a, a, b, on_cpu);
    return a;
  }
  static at::Tensor& scalar_inplace(at::Tensor& a, const c10::Scalar& b) { return tensor_inplace(a, scalar(b)); }
  static at::Tensor& tensor_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
    compare(kernel_name(row, ".out"), row.op, out, a, b, on_cpu);
    return out;
  }
  static at::Tensor& scalar_out(const at::Tensor& a, const c10::Scalar& b, at::Tensor& out) {
    return tensor_out(a, scalar(b), out);
  }
  static void add(torch::Library& m) {
    static const std::string n = row.aten, t = n + ".Tensor", s = n + ".Scalar", ti = n + "_.Tensor",
                             si = n + "_.Scalar", to = n + ".Tensor_out", so = n + ".Scalar_out";
    m.impl(t.c_str(), TORCH_FN(tensor));
    m.impl(s.c_str(), TORCH_FN(scalar_));
    m.impl(ti.c_str(), TORCH_FN(tensor_inplace));
    m.impl(si.c_str(), TORCH_FN(scalar_inplace));
    m.impl(to.c_str(), TORCH_FN(tensor_out));
    m.impl(so.c_str(), TORCH_FN(scalar_out));
  }
};

template <template <std::size_t> class Family, std::size_t... I>
void register_rows(torch::Library& m, std::index_sequence<I...>) {
  (Family<I>::add(m), ...);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // The op table's families (op_table.h), one registration per row.
  register_rows<Binary>(m, std::make_index_sequence<std::size(kBinaryOps)>());
  register_rows<Compare>(m, std::make_index_sequence<std::size(kCompareOps)>());
  register_rows<Unary>(m, std::make_index_sequence<std::size(kUnaryOps)>());
  m.impl("abs", abs);
  m.impl("abs_", abs_);
  m.impl("abs.out", abs_out);
  m.impl("where.self", where_self);
  m.impl("where.self_out", where_out);
  m.impl("clamp", clamp);
  m.impl("clamp_", clamp_);
  m.impl("clamp.out", clamp_out);
  m.impl("clamp.Tensor", clamp_t);
  m.impl("clamp_.Tensor", clamp_t_);
  m.impl("clamp.Tensor_out", clamp_t_out);
  m.impl("clamp_min", clamp_min);
  m.impl("clamp_min_", clamp_min_);
  m.impl("clamp_min.out", clamp_min_out);
  m.impl("clamp_min.Tensor", clamp_min_t);
  m.impl("clamp_min_.Tensor", clamp_min_t_);
  m.impl("clamp_min.Tensor_out", clamp_min_t_out);
  m.impl("clamp_max", clamp_max);
  m.impl("clamp_max_", clamp_max_);
  m.impl("clamp_max.out", clamp_max_out);
  m.impl("clamp_max.Tensor", clamp_max_t);
  m.impl("clamp_max_.Tensor", clamp_max_t_);
  m.impl("clamp_max.Tensor_out", clamp_max_t_out);
  m.impl("gelu", gelu);
  m.impl("gelu_", gelu_);
  m.impl("gelu.out", gelu_out);
  m.impl("pow.Tensor_Scalar", pow_ts);
  m.impl("pow_.Scalar", pow_ts_);
  m.impl("pow.Tensor_Scalar_out", pow_ts_out);
  m.impl("pow.Scalar", pow_st);
  m.impl("pow.Scalar_out", pow_st_out);
  m.impl("pow.Tensor_Tensor", pow_tt);
  m.impl("pow_.Tensor", pow_tt_);
  m.impl("pow.Tensor_Tensor_out", pow_tt_out);
}

}  // namespace spyre::backend
