#include "spyre/isa/isa.h"

namespace spyre::isa {

std::string_view to_string(DType t) {
  static constexpr std::string_view names[] = {"fp32", "fp16", "bf16", "int8", "int32", "bool"};
  const auto i = static_cast<std::uint8_t>(t);
  return i < kNumDTypes ? names[i] : "dtype?";
}

std::string_view to_string(Opcode op) {
  static constexpr std::string_view names[] = {
      "end",     "nop",     "dma_load", "dma_store", "wait",  "matmul",    "vunary",    "vbinary",
      "vcompare", "vselect", "vreduce",  "vconvert",  "vfill", "ring_send", "ring_recv", "barrier",
      "dma_gather"};
  const auto i = static_cast<std::uint8_t>(op);
  return i < kNumOpcodes ? names[i] : "opcode?";
}

std::string_view to_string(UnaryOp op) {
  static constexpr std::string_view names[] = {"copy", "neg",     "abs",  "exp",  "log",
                                               "sqrt", "rsqrt",   "reciprocal", "tanh", "erf",
                                               "sigmoid", "relu", "gelu", "gelu_tanh", "silu",
                                               "sin",  "cos"};
  const auto i = static_cast<std::uint8_t>(op);
  return i < kNumUnaryOps ? names[i] : "unary?";
}

std::string_view to_string(BinaryOp op) {
  static constexpr std::string_view names[] = {"add", "sub", "mul", "div", "max", "min"};
  const auto i = static_cast<std::uint8_t>(op);
  return i < kNumBinaryOps ? names[i] : "binary?";
}

std::string_view to_string(CompareOp op) {
  static constexpr std::string_view names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  const auto i = static_cast<std::uint8_t>(op);
  return i < kNumCompareOps ? names[i] : "compare?";
}

std::string_view to_string(ReduceOp op) {
  static constexpr std::string_view names[] = {"sum", "max", "min"};
  const auto i = static_cast<std::uint8_t>(op);
  return i < kNumReduceOps ? names[i] : "reduce?";
}

std::string_view to_string(Broadcast b) {
  static constexpr std::string_view names[] = {"none", "row", "col", "scalar", "imm"};
  const auto i = static_cast<std::uint8_t>(b);
  return i < kNumBroadcasts ? names[i] : "bcast?";
}

Opcode opcode_of(const Instruction& inst) {
  // The variant's alternatives are listed in opcode order.
  return static_cast<Opcode>(inst.index());
}

}  // namespace spyre::isa
