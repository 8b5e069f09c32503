// The one table of the device's elementwise aten ops, one array per family. From it
// come: the aten registrations of the unary, binary and comparison kernels
// (pointwise_ops.cpp), and the set of ops torch.compile fuses
// (torch.ops.spyre.fusible_ops, read by python/spyre_sim/dynamo/ops.py). The ISA op's
// name and vector-unit cost class live with the ISA (isa::to_string,
// isa::vector_cost). Adding a unary op is one row here plus its math in
// sim/functional/numeric.cpp (docs/ARCHITECTURE.md, "The op table").
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "spyre/isa/isa.h"

namespace spyre::backend {

// aten::<name>(Tensor) -> Tensor, with <name>_ and <name>.out: one device instruction.
struct UnaryRow {
  const char* aten;
  isa::UnaryOp op;
  bool float_op;        // integer inputs compute (and return) floats, as exp does
  const char* no_bool;  // non-null: refuse bool inputs with this message (PyTorch's words)
  bool own_kernel = false;  // registered by hand (abs: complex inputs run on the CPU)
};

inline constexpr UnaryRow kUnaryOps[] = {
    {"neg", isa::UnaryOp::neg, false,
     "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, use the `~` "
     "or `logical_not()` operator instead."},
    {"abs", isa::UnaryOp::abs, false, nullptr, true},
    {"exp", isa::UnaryOp::exp, true, nullptr},
    {"log", isa::UnaryOp::log, true, nullptr},
    {"sqrt", isa::UnaryOp::sqrt, true, nullptr},
    {"rsqrt", isa::UnaryOp::rsqrt, true, nullptr},
    {"reciprocal", isa::UnaryOp::reciprocal, true, nullptr},
    {"sigmoid", isa::UnaryOp::sigmoid, true, nullptr},
    {"tanh", isa::UnaryOp::tanh, true, nullptr},
    {"erf", isa::UnaryOp::erf, true, nullptr},
    {"silu", isa::UnaryOp::silu, false, nullptr},
    {"sin", isa::UnaryOp::sin, true, nullptr},
    {"cos", isa::UnaryOp::cos, true, nullptr},
    {"relu", isa::UnaryOp::relu, false, "Boolean inputs not supported for relu"},
};

// aten::<name>.Tensor / <name> (a, b): one device instruction.
struct BinaryRow {
  const char* aten;
  isa::BinaryOp op;
  bool float_op;  // integer inputs compute floats (true division)
  bool alpha;     // the add/sub form: (a, b, *, alpha), b scaled by alpha
  bool overload;  // registered as <name>.Tensor (else <name>), with <name>_.Tensor
};

inline constexpr BinaryRow kBinaryOps[] = {
    {"add", isa::BinaryOp::add, false, true, true},
    {"sub", isa::BinaryOp::sub, false, true, true},
    {"mul", isa::BinaryOp::mul, false, false, true},
    {"div", isa::BinaryOp::div, true, false, true},
    {"maximum", isa::BinaryOp::max, false, false, false},
    {"minimum", isa::BinaryOp::min, false, false, false},
};

// aten::<name>.Tensor / .Scalar (and in-place, out=): a bool result.
struct CompareRow {
  const char* aten;
  isa::CompareOp op;
};

inline constexpr CompareRow kCompareOps[] = {
    {"eq", isa::CompareOp::eq}, {"ne", isa::CompareOp::ne}, {"lt", isa::CompareOp::lt},
    {"le", isa::CompareOp::le}, {"gt", isa::CompareOp::gt}, {"ge", isa::CompareOp::ge},
};

// Pointwise ops with their own kernels (several steps, or arguments beyond tensors)
// that torch.compile also fuses; the Python side writes their steps, one emitter each.
// analytic: smooth wherever it is defined (see analytic below).
struct CompositeRow {
  const char* aten;
  bool analytic;
};

inline constexpr CompositeRow kCompositeFusibleOps[] = {
    {"gelu.default", true},       {"rsub.Scalar", true},        {"clamp.default", false},
    {"clamp_min.default", false}, {"clamp_max.default", false}, {"pow.Tensor_Scalar", true},
    {"where.self", false},        {"_to_copy.default", false},
};

// Whether an op is analytic, smooth wherever it is defined: torch.compile recognises an
// activation written out in such ops (Hugging Face's gelu_new, x * sigmoid(x)) by its
// values on sample points, which for analytic ops is agreeing everywhere. Every op is
// classified here: a new one does not build until it is.
constexpr bool analytic(isa::UnaryOp op) {
  switch (op) {
    case isa::UnaryOp::copy:
    case isa::UnaryOp::neg:
    case isa::UnaryOp::exp:
    case isa::UnaryOp::log:
    case isa::UnaryOp::sqrt:
    case isa::UnaryOp::rsqrt:
    case isa::UnaryOp::reciprocal:
    case isa::UnaryOp::tanh:
    case isa::UnaryOp::erf:
    case isa::UnaryOp::sigmoid:
    case isa::UnaryOp::gelu:
    case isa::UnaryOp::gelu_tanh:
    case isa::UnaryOp::silu:
    case isa::UnaryOp::sin:
    case isa::UnaryOp::cos: return true;
    case isa::UnaryOp::abs:
    case isa::UnaryOp::relu:
    case isa::UnaryOp::hardswish:
    case isa::UnaryOp::hardsigmoid: return false;
  }
  return false;
}
constexpr bool analytic(isa::BinaryOp op) {
  switch (op) {
    case isa::BinaryOp::add:
    case isa::BinaryOp::sub:
    case isa::BinaryOp::mul:
    case isa::BinaryOp::div:
    case isa::BinaryOp::pow: return true;
    case isa::BinaryOp::max:
    case isa::BinaryOp::min: return false;
  }
  return false;
}

// What torch.compile fuses, as "<family> <aten overload> <isa op>" ("composite" rows
// have no isa op): every row of the tables above, each overload once.
std::vector<std::string> fusible_ops();

// The aten overloads of the fusible ops that are analytic (torch.ops.spyre.analytic_ops).
std::vector<std::string> analytic_ops();

// The activations a matmul or convolution epilogue applies to its fp32 tiles
// (spyre::matmul_epilogue, spyre::conv_epilogue, spyre::mlp), by the names torch.compile's
// passes give them, with the aten op each stands for (gelu_tanh is gelu.default with
// approximate="tanh") and whether spyre::linear_gated takes it as its gate's activation.
// torch.compile reads the table through torch.ops.spyre.epilogue_activations.
struct EpilogueActivation {
  std::string_view name;
  isa::UnaryOp op;
  std::string_view aten;
  bool gate;
};

inline constexpr EpilogueActivation kEpilogueActivations[] = {
    {"relu", isa::UnaryOp::relu, "relu.default", true},
    {"gelu", isa::UnaryOp::gelu, "gelu.default", true},
    {"gelu_tanh", isa::UnaryOp::gelu_tanh, "gelu.default", true},
    {"silu", isa::UnaryOp::silu, "silu.default", true},
    {"sigmoid", isa::UnaryOp::sigmoid, "sigmoid.default", true},
    {"tanh", isa::UnaryOp::tanh, "tanh.default", true},
    {"hardswish", isa::UnaryOp::hardswish, "hardswish.default", false},
    {"hardsigmoid", isa::UnaryOp::hardsigmoid, "hardsigmoid.default", false},
};

// The ISA op of an epilogue activation (of a gate's, with `gate`); nullopt for any other name.
inline std::optional<isa::UnaryOp> epilogue_activation(std::string_view name, bool gate = false) {
  for (const auto& row : kEpilogueActivations) {
    if (name == row.name && (row.gate || !gate)) return row.op;
  }
  return std::nullopt;
}

// "relu, gelu, ... or none": the names an error message lists (a gate's, with `gate`).
std::string epilogue_activation_names(bool gate = false);

// The table as "<name> <aten overload> <gate 0|1>" rows (torch.ops.spyre.epilogue_activations).
std::vector<std::string> epilogue_activation_rows();

}  // namespace spyre::backend
