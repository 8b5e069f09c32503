// spyre::fused_pointwise: one device kernel for a whole elementwise expression, the op
// the torch.compile backend (python/spyre_sim/dynamo/) puts in place of a chain of
// aten pointwise ops. The expression is a small serialised IR of pointwise steps
// (compiler/pointwise_ir.h: kStepWords integers per step, C++ callers write it with
// encode_steps), validated once here. Python takes the codes from
// torch.ops.spyre.pointwise_codes (never copied into Python). The inputs broadcast to one shape as PyTorch's do; the
// result (the last step, converted to `dtype`) is a new tensor.
//
// With `split` = h > 0 the kernel computes in a space where the result's last dim, 2h,
// is split into (2, h), and `halves` says per input how it enters that space: -1 whole
// (its last dim, 2h or 1, split or kept), 0 or 1 only that half of its last dim
// (broadcast over both halves), 2 as given (already in the split space, e.g. a [2, 1]
// mask telling the halves apart). Rotary embeddings' rotate_half(x) = cat(-x2, x1) is
// then select(first half, -x[half 1], x[half 0]), fused with the multiply-adds around it.
// The result is contiguous.
#include <string>
#include <utility>
#include <vector>

#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include "aten/kernel_cache.h"
#include "aten/pointwise.h"
#include "compiler/pointwise_ir.h"

namespace spyre::backend {
namespace {

using compiler::kind_name;
using compiler::kStepWords;
using compiler::Step;
using compiler::Value;

// Decodes and checks the program; every error names the step and the field.
std::vector<Step> decode_program(c10::IntArrayRef program, c10::ArrayRef<double> constants, std::size_t inputs) {
  try {
    return compiler::decode_steps(program.data(), program.size(), constants.vec(), inputs);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "spyre::fused_pointwise: ", e.what());
  }
}

// The IR's codes by name ("kind.unary", "unary.exp", "binary.add", "compare.eq",
// "dtype.fp32", "arg.input", ...), for the Python side that writes programs.
c10::Dict<std::string, std::int64_t> pointwise_codes() {
  c10::Dict<std::string, std::int64_t> codes;
  for (int k = 0; k <= static_cast<int>(Step::Kind::convert); ++k) codes.insert("kind." + kind_name(static_cast<Step::Kind>(k)), k);
  for (std::uint8_t i = 0; i < isa::kNumUnaryOps; ++i) codes.insert("unary." + std::string(isa::to_string(static_cast<isa::UnaryOp>(i))), i);
  for (std::uint8_t i = 0; i < isa::kNumBinaryOps; ++i) codes.insert("binary." + std::string(isa::to_string(static_cast<isa::BinaryOp>(i))), i);
  for (std::uint8_t i = 0; i < isa::kNumCompareOps; ++i) codes.insert("compare." + std::string(isa::to_string(static_cast<isa::CompareOp>(i))), i);
  for (std::uint8_t i = 0; i < isa::kNumDTypes; ++i) codes.insert("dtype." + std::string(isa::to_string(static_cast<isa::DType>(i))), i);
  codes.insert("arg.input", static_cast<std::int64_t>(Value::Kind::input));
  codes.insert("arg.step", static_cast<std::int64_t>(Value::Kind::step));
  codes.insert("arg.constant", static_cast<std::int64_t>(Value::Kind::constant));
  codes.insert("arg.none", compiler::kNoArg);
  codes.insert("step_words", static_cast<std::int64_t>(kStepWords));
  return codes;
}

// The inputs as the split space sees them (see the top of the file), and the result's
// shape before the split.
std::pair<std::vector<at::Tensor>, std::vector<std::int64_t>> split_inputs(at::TensorList inputs, std::int64_t split,
                                                                         c10::IntArrayRef halves) {
  TORCH_CHECK(halves.size() == inputs.size(), "spyre::fused_pointwise: halves has ", halves.size(),
              " entries, expected one per tensor input (", inputs.size(), ")");
  const std::int64_t d = 2 * split;
  std::vector<std::int64_t> shape;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(halves[i] >= -1 && halves[i] <= 2, "spyre::fused_pointwise: input ", i, ": halves entry ", halves[i],
                " is not -1 (whole), 0 or 1 (that half) or 2 (as given)");
    if (halves[i] != 2) shape = at::infer_size(shape, inputs[i].sizes());
  }
  TORCH_CHECK(!shape.empty() && shape.back() == d, "spyre::fused_pointwise: split ", split,
              " needs a result whose last dim is ", d, ", the inputs broadcast to ", c10::IntArrayRef(shape));
  std::vector<at::Tensor> split_in;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (halves[i] == 2 || (halves[i] == -1 && t.dim() == 0)) {
      split_in.push_back(t);
    } else if (halves[i] == -1) {
      split_in.push_back(t.size(-1) == 1 ? t.unsqueeze(-1) : t.unflatten(-1, {2, split}));
    } else {
      TORCH_CHECK(t.dim() > 0 && t.size(-1) == d, "spyre::fused_pointwise: input ", i, " (half ", halves[i],
                  ") has shape ", t.sizes(), ", expected a last dim of ", d);
      split_in.push_back(t.unflatten(-1, {2, split}).narrow(-2, halves[i], 1));
    }
  }
  return {std::move(split_in), std::move(shape)};
}

at::Tensor fused_pointwise(c10::string_view name, c10::IntArrayRef program, c10::ArrayRef<double> constants,
                           at::TensorList inputs, c10::ScalarType dtype, std::int64_t split, c10::IntArrayRef halves) {
  TORCH_CHECK(!inputs.empty(), "spyre::fused_pointwise: needs at least one tensor input");
  TORCH_CHECK(split >= 0, "spyre::fused_pointwise: split must be 0 (none) or half the last dim, got ", split);
  TORCH_CHECK(split > 0 || halves.empty(), "spyre::fused_pointwise: halves given without a split");
  TORCH_CHECK(device_dtype(dtype).has_value(), "spyre::fused_pointwise: the result dtype ", dtype,
              " is not one the device computes (float, half, bfloat16, int, int8, bool)");
  const std::vector<Step> steps = decode_program(program, constants, inputs.size());
  c10::Device device = inputs[0].device();
  for (const auto& t : inputs) {
    if (t.device().type() == c10::DeviceType::PrivateUse1) device = t.device();
  }
  std::vector<at::Tensor> split_in;
  at::Tensor result;
  at::TensorBase out;
  if (split > 0) {
    auto [tensors, shape] = split_inputs(inputs, split, halves);
    split_in = std::move(tensors);
    result = at::empty(shape, at::TensorOptions().dtype(dtype).device(device));
    out = result.unflatten(-1, {2, split});
  }
  at::TensorIteratorConfig config;
  config.add_output(out)
      .check_all_same_dtype(false)
      .declare_static_dtype_and_device(dtype, device)
      .allow_cpu_scalars(true)
      .promote_inputs_to_common_dtype(false)
      .resize_outputs(split == 0);
  for (const auto& t : split > 0 ? at::TensorList(split_in) : inputs) config.add_const_input(t);
  auto iter = config.build();
  TORCH_CHECK(device_can_run(iter), "spyre::fused_pointwise '", name,
              "': every tensor input must be on one spyre device in a device dtype (CPU 0-d tensors allowed)");
  run_pointwise(std::string(name).c_str(), iter, steps);
  return split > 0 ? result : iter.output();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(spyre, m) {
  m.def("fused_pointwise(str name, int[] program, float[] constants, Tensor[] inputs, ScalarType dtype, int split=0, "
        "int[] halves=[]) -> Tensor");
  m.def("pointwise_codes() -> Dict(str, int)", pointwise_codes);
}

TORCH_LIBRARY_IMPL(spyre, PrivateUse1, m) { m.impl("fused_pointwise", fused_pointwise); }

// Not differentiable itself: AOTAutograd calls it inside its compiled forward and
// backward; called directly on tensors that need gradients, backward raises.
TORCH_LIBRARY_IMPL(spyre, Autograd, m) {
  m.impl("fused_pointwise", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace spyre::backend
