// spyre::fused_pointwise: one device kernel for a whole elementwise expression, the op
// the torch.compile backend (python/spyre_sim/dynamo.py) puts in place of a chain of
// aten pointwise ops. The expression is a small text program of pointwise steps
// (compiler/pointwise.h), one per ';':
//
//   unary <op> <dtype> <a>          op: copy neg abs exp log sqrt rsqrt reciprocal tanh
//                                       erf sigmoid relu gelu gelu_tanh silu
//   binary <op> <dtype> <a> <b>     op: add sub mul div max min
//   compare <op> <dtype> <a> <b>    op: eq ne lt le gt ge (result bool)
//   select <dtype> <cond> <a> <b>
//   convert <dtype> <a>
//
// dtype: fp32 fp16 bf16 int32 int8 bool; an argument is i<N> (the N-th tensor input),
// s<N> (the N-th step's result) or c<number> (a constant). The inputs broadcast to one
// shape as PyTorch's do; the result (the last step, converted to `dtype`) is a new
// contiguous tensor of that shape.
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "aten/kernel_cache.h"
#include "aten/pointwise.h"

namespace spyre::backend {
namespace {

using compiler::Step;
using compiler::Value;

template <class Op, std::uint8_t N>
std::optional<Op> find_op(const std::string& name) {
  for (std::uint8_t i = 0; i < N; ++i) {
    if (isa::to_string(static_cast<Op>(i)) == name) return static_cast<Op>(i);
  }
  return std::nullopt;
}

std::optional<isa::DType> find_dtype(const std::string& name) {
  for (std::uint8_t i = 0; i < isa::kNumDTypes; ++i) {
    if (isa::to_string(static_cast<isa::DType>(i)) == name) return static_cast<isa::DType>(i);
  }
  return std::nullopt;
}

// Parses the program; every error names the step, the word and what was expected.
std::vector<Step> parse_program(const std::string& program, std::size_t inputs) {
  std::vector<Step> steps;
  std::stringstream all(program);
  std::string text;
  while (std::getline(all, text, ';')) {
    std::istringstream in(text);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (words.empty()) continue;
    text = text.substr(text.find_first_not_of(" \t\n"));
    text = text.substr(0, text.find_last_not_of(" \t\n") + 1);
    const std::size_t at = steps.size();
    const auto fail = [&](const std::string& what) {
      TORCH_CHECK(false, "spyre::fused_pointwise: step ", at, " ('", text, "'): ", what);
    };
    const std::string& kind = words[0];
    const std::size_t args = kind == "unary" || kind == "convert" ? 1 : kind == "select" ? 3 : 2;
    const std::size_t head = kind == "select" || kind == "convert" ? 2 : 3;  // words before the arguments
    if (kind != "unary" && kind != "binary" && kind != "compare" && kind != "select" && kind != "convert") {
      fail("expected a step kind (unary, binary, compare, select, convert), found '" + kind + "'");
    }
    if (words.size() != head + args) {
      fail("expected " + std::to_string(head + args) + " words, found " + std::to_string(words.size()));
    }
    const auto dtype = find_dtype(words[head - 1]);
    if (!dtype) fail("expected a dtype (fp32, fp16, bf16, int32, int8, bool), found '" + words[head - 1] + "'");
    std::vector<Value> values;
    for (std::size_t a = head; a < words.size(); ++a) {
      const std::string& w = words[a];
      char* end = nullptr;
      if (w.size() >= 2 && w[0] == 'c') {
        const double v = std::strtod(w.c_str() + 1, &end);
        if (*end != '\0') fail("expected a number after 'c', found '" + w + "'");
        values.push_back(Value::constant(v));
        continue;
      }
      const unsigned long n = w.size() >= 2 ? std::strtoul(w.c_str() + 1, &end, 10) : 0;
      if (w.size() < 2 || *end != '\0' || (w[0] != 'i' && w[0] != 's')) {
        fail("expected an argument i<N>, s<N> or c<number>, found '" + w + "'");
      }
      if (w[0] == 'i' && n >= inputs) {
        fail("input " + std::to_string(n) + " does not exist: " + std::to_string(inputs) + " tensor input(s)");
      }
      if (w[0] == 's' && n >= at) fail("step " + std::to_string(n) + " is not an earlier step");
      values.push_back(w[0] == 'i' ? Value::input(static_cast<std::uint32_t>(n)) : Value::step(static_cast<std::uint32_t>(n)));
    }
    const std::string& op = words[1];
    if (kind == "unary") {
      const auto u = find_op<isa::UnaryOp, isa::kNumUnaryOps>(op);
      if (!u) fail("unknown unary op '" + op + "'");
      steps.push_back(Step::unary(*u, *dtype, values[0]));
    } else if (kind == "binary") {
      const auto b = find_op<isa::BinaryOp, isa::kNumBinaryOps>(op);
      if (!b) fail("unknown binary op '" + op + "'");
      steps.push_back(Step::binary(*b, *dtype, values[0], values[1]));
    } else if (kind == "compare") {
      const auto c = find_op<isa::CompareOp, isa::kNumCompareOps>(op);
      if (!c) fail("unknown comparison '" + op + "'");
      steps.push_back(Step::compare(*c, *dtype, values[0], values[1]));
    } else if (kind == "select") {
      steps.push_back(Step::select(*dtype, values[0], values[1], values[2]));
    } else {
      steps.push_back(Step::convert(*dtype, values[0]));
    }
  }
  TORCH_CHECK(!steps.empty(), "spyre::fused_pointwise: the program has no steps");
  return steps;
}

at::Tensor fused_pointwise(c10::string_view name, c10::string_view program, at::TensorList inputs,
                           c10::ScalarType dtype) {
  TORCH_CHECK(!inputs.empty(), "spyre::fused_pointwise: needs at least one tensor input");
  TORCH_CHECK(device_dtype(dtype).has_value(), "spyre::fused_pointwise: the result dtype ", dtype,
              " is not one the device computes (float, half, bfloat16, int, int8, bool)");
  const std::vector<Step> steps = parse_program(std::string(program), inputs.size());
  c10::Device device = inputs[0].device();
  for (const auto& t : inputs) {
    if (t.device().type() == c10::DeviceType::PrivateUse1) device = t.device();
  }
  at::TensorBase out;
  at::TensorIteratorConfig config;
  config.add_output(out)
      .check_all_same_dtype(false)
      .declare_static_dtype_and_device(dtype, device)
      .allow_cpu_scalars(true)
      .promote_inputs_to_common_dtype(false);
  for (const auto& t : inputs) config.add_const_input(t);
  auto iter = config.build();
  TORCH_CHECK(device_can_run(iter), "spyre::fused_pointwise '", name,
              "': every tensor input must be on one spyre device in a device dtype (CPU 0-d tensors allowed)");
  run_pointwise(std::string(name).c_str(), iter, steps);
  return iter.output();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(spyre, m) {
  m.def("fused_pointwise(str name, str program, Tensor[] inputs, ScalarType dtype) -> Tensor");
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("fused_pointwise", fused_pointwise); }

// Not differentiable itself: AOTAutograd calls it inside its compiled forward and
// backward; called directly on tensors that need gradients, backward raises.
TORCH_LIBRARY_IMPL(spyre, Autograd, m) {
  m.impl("fused_pointwise", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace spyre::backend
