// Random ops on the device: uniform_, normal_, exponential_, bernoulli (of a
// probability or of a tensor of them), native_dropout and multinomial, as pointwise kernels that draw counter-based
// random numbers (vrandom, include/spyre/isa/isa.h) from the spyre generator
// (runtime/generator.h). Their numbers depend on the generator's seed and offset alone,
// not on how many cores the chip has nor on the CPU's generator. Dtypes the device
// does not compute (float64) run on the CPU with a CPU generator seeded from the spyre
// one, so they too follow torch.spyre.manual_seed.
#include <limits>

#include <ATen/TensorIterator.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/multinomial_native.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

#include "aten/cpu_fallback.h"
#include "aten/kernel_cache.h"
#include "aten/pointwise.h"
#include "runtime/generator.h"

namespace spyre::backend {
namespace {

using compiler::Step;
using compiler::Value;

constexpr auto kUniform = isa::RandomDist::uniform;
constexpr auto kNormal = isa::RandomDist::normal;

bool on_device(const at::Tensor& t) { return device_dtype(t.scalar_type()).has_value() && t.is_floating_point(); }

// `op` on a CPU copy of self with a CPU generator seeded from the spyre one, copied back.
template <class Op>
at::Tensor& on_cpu(const char* name, at::Tensor& self, const std::optional<at::Generator>& gen, Op&& op) {
  count_fallback(name, /*has_kernel=*/true);
  at::Tensor cpu = self.cpu();
  op(cpu, std::optional<at::Generator>(cpu_generator_for(gen, self.device())));
  self.copy_(cpu);
  return self;
}

// self = steps over self's elements (Value::random draws), written in self's dtype.
void fill_random(const char* name, at::Tensor& self, const std::vector<Step>& steps,
                 const std::optional<at::Generator>& gen) {
  auto iter = at::TensorIteratorConfig().add_output(self).resize_outputs(false).check_all_same_dtype(false).build();
  run_random_pointwise(name, iter, steps, gen);
}

// PyTorch's bounds for uniform_ (check_uniform_bounds): from and to within the dtype,
// from <= to, and to - from representable.
void check_uniform_bounds(const at::Tensor& self, double& from, double& to) {
  double max = 0;
  switch (self.scalar_type()) {
    case at::kHalf: max = 65504.0; break;
    case at::kBFloat16: max = 3.3895313892515355e38; break;
    case at::kFloat: max = std::numeric_limits<float>::max(); break;
    default: max = std::numeric_limits<double>::max(); break;
  }
  TORCH_CHECK(from >= -max && from <= max, "from is out of bounds for ", self.dtype());
  TORCH_CHECK(to >= -max && to <= max, "to is out of bounds for ", self.dtype());
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  TORCH_CHECK(to - from <= max, "uniform_ expects to-from <= std::numeric_limits<", self.scalar_type(),
              ">::max(), but found to=", to, " and from=", from, " which result in to-from to exceed the limit");
}

at::Tensor& uniform(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  if (self.is_floating_point()) check_uniform_bounds(self, from, to);
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  if (!on_device(self)) {
    return on_cpu("aten::uniform_", self, gen, [&](at::Tensor& t, auto g) { t.uniform_(from, to, g); });
  }
  // from + (to - from) * u in fp32, rounded once to self's dtype.
  fill_random("aten::uniform_", self,
              {Step::binary(isa::BinaryOp::mul, isa::DType::fp32, Value::random(kUniform), Value::constant(to - from)),
               Step::binary(isa::BinaryOp::add, isa::DType::fp32, Value::step(0), Value::constant(from))},
              gen);
  return self;
}

at::Tensor& normal(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  if (!on_device(self)) {
    return on_cpu("aten::normal_", self, gen, [&](at::Tensor& t, auto g) { t.normal_(mean, std, g); });
  }
  fill_random("aten::normal_", self,
              {Step::binary(isa::BinaryOp::mul, isa::DType::fp32, Value::random(kNormal), Value::constant(std)),
               Step::binary(isa::BinaryOp::add, isa::DType::fp32, Value::step(0), Value::constant(mean))},
              gen);
  return self;
}

at::Tensor& exponential(at::Tensor& self, double lambd, std::optional<at::Generator> gen) {
  TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  if (!on_device(self)) {
    return on_cpu("aten::exponential_", self, gen, [&](at::Tensor& t, auto g) { t.exponential_(lambd, g); });
  }
  // -ln(1 - u) / lambda in fp32 (1 - u in (0, 1] exactly: never infinite), rounded once.
  const isa::DType f32 = isa::DType::fp32;
  fill_random("aten::exponential_", self,
              {Step::binary(isa::BinaryOp::sub, f32, Value::constant(1), Value::random(kUniform)),
               Step::unary(isa::UnaryOp::log, f32, Value::step(0)),
               Step::binary(isa::BinaryOp::mul, f32, Value::step(1), Value::constant(-1.0 / lambd))},
              gen);
  return self;
}

// multinomial: PyTorch's own composite (at::native::multinomial) on device kernels: one
// sample, or samples without replacement, as the top of p / q for q ~ Exp(1)
// (exponential_, div, argmax or topk); samples with replacement through the dispatch
// stub below.
at::Tensor multinomial(const at::Tensor& self, std::int64_t n, bool replacement, std::optional<at::Generator> gen) {
  return at::native::multinomial(self, n, replacement, std::move(gen));
}
at::Tensor& multinomial_out(const at::Tensor& self, std::int64_t n, bool replacement, std::optional<at::Generator> gen,
                            at::Tensor& out) {
  return at::native::multinomial_out(self, n, replacement, std::move(gen), out);
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  if (!device_dtype(self.scalar_type())) {
    return on_cpu("aten::bernoulli_.float", self, gen, [&](at::Tensor& t, auto g) { t.bernoulli_(p, g); });
  }
  // 1 where u < p (u in [0, 1): p = 0 never, p = 1 always), in self's dtype.
  fill_random("aten::bernoulli_", self,
              {Step::compare(isa::CompareOp::lt, isa::DType::fp32, Value::random(kUniform), Value::constant(p))}, gen);
  return self;
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  if (!device_dtype(self.scalar_type()) || !on_device(p) || p.device() != self.device()) {
    return on_cpu("aten::bernoulli_.Tensor", self, gen,
                  [&](at::Tensor& t, auto g) { t.bernoulli_(p.to(at::kCPU), g); });
  }
  auto iter = at::TensorIteratorConfig()
                  .add_output(self)
                  .add_const_input(p)
                  .resize_outputs(false)
                  .check_all_same_dtype(false)
                  .build();
  run_random_pointwise("aten::bernoulli_", iter,
                       {Step::compare(isa::CompareOp::lt, isa::DType::fp32, Value::random(kUniform), Value::input(0))},
                       gen);
  return self;
}

at::Tensor bernoulli(const at::Tensor& self, std::optional<at::Generator> gen) {
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Preserve);
  bernoulli_tensor(out, self, std::move(gen));
  return out;
}

// x * mask * scale in x's dtype (dropout and its gradient), on the CPU when the device
// does not take the operands (counted).
at::Tensor masked_scale(const char* name, const at::Tensor& x, const at::Tensor& mask, double scale) {
  at::Tensor out = at::empty_like(x);
  auto iter =
      at::TensorIteratorConfig().add_output(out).add_const_input(x).add_const_input(mask).check_all_same_dtype(false).build();
  if (!on_device(x) || !device_can_run(iter)) {
    count_fallback(name, /*has_kernel=*/true);
    return (x.cpu() * mask.cpu() * scale).to(x.device());
  }
  run_pointwise(name, iter,
                {Step::binary(isa::BinaryOp::mul, isa::DType::fp32, Value::input(0), Value::input(1)),
                 Step::binary(isa::BinaryOp::mul, isa::DType::fp32, Value::step(0), Value::constant(scale))});
  return out;
}

// PyTorch's definition: mask = bernoulli(1 - p), output = input * mask / (1 - p) (0 when
// p = 1); in eval mode the input and a mask of ones.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  TORCH_CHECK(0 <= p && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  if (input.numel() == 0) return {input, at::empty_like(input)};
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  // Scaling by 1 / (1 - p) needs a floating result: PyTorch's CPU and CUDA refuse others too.
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(input.scalar_type()), "\"native_dropout_spyre\" not implemented for '",
                              c10::toString(input.scalar_type()), "'");
  const double keep = 1 - p, scale = keep == 0 ? 0 : 1 / keep;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  bernoulli_float(mask, keep, std::nullopt);
  return {masked_scale("aten::native_dropout", input, mask, scale), mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  return masked_scale("aten::native_dropout_backward", grad, mask, scale);
}

// Samples with replacement: each draw u (uniform, times the row's total) picks the first
// category whose running sum (cumsum, fp32) exceeds it: argmax of (cdf > u), on the
// device. (PyTorch's with-replacement stub; the CPU's own checks of the probabilities.)
void multinomial_with_replacement(at::Tensor& result, const at::Tensor& self, const std::int64_t n_sample,
                                  std::optional<at::Generator> gen) {
  const at::Tensor p = (self.dim() == 1 ? self.unsqueeze(0) : self).to(at::kFloat);
  TORCH_CHECK((p.min() >= 0).item<bool>(), "invalid multinomial distribution (encountering probability entry < 0)");
  TORCH_CHECK(p.isfinite().all().item<bool>(),
              "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
  const at::Tensor cdf = at::cumsum(p, -1);
  const at::Tensor total = cdf.narrow(-1, p.size(-1) - 1, 1);
  TORCH_CHECK((total > 0).all().item<bool>(), "invalid multinomial distribution (sum of probabilities <= 0)");
  at::Tensor u = at::empty({p.size(0), n_sample}, p.options());
  uniform(u, 0, 1, std::move(gen));
  u.mul_(total);
  const at::Tensor picks = at::argmax(at::gt(cdf.unsqueeze(1), u.unsqueeze(2)).to(at::kChar), -1);
  result.copy_(self.dim() == 1 ? picks.squeeze(0) : picks);
}

}  // namespace

}  // namespace spyre::backend

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(multinomial_with_replacement_stub, &spyre::backend::multinomial_with_replacement)
}  // namespace at::native

namespace spyre::backend {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("exponential_", exponential);
  m.impl("multinomial", multinomial);
  m.impl("multinomial.out", multinomial_out);
  m.impl("uniform_", uniform);
  m.impl("normal_", normal);
  m.impl("bernoulli_.float", bernoulli_float);
  m.impl("bernoulli_.Tensor", bernoulli_tensor);
  m.impl("bernoulli", bernoulli);
  m.impl("native_dropout", native_dropout);
  m.impl("native_dropout_backward", native_dropout_backward);
}

}  // namespace spyre::backend
