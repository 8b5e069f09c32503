#include "spyre/isa/isa.h"

#include <iterator>

namespace spyre::isa {

std::string_view to_string(DType t) {
  static constexpr std::string_view names[] = {"fp32", "fp16", "bf16", "int8", "int32", "bool", "fp8_e4m3", "fp8_e5m2"};
  const auto i = static_cast<std::uint8_t>(t);
  return i < kNumDTypes ? names[i] : "dtype?";
}

std::string_view to_string(Opcode op) {
  static constexpr std::string_view names[] = {
      "end",     "nop",     "dma_load", "dma_store", "wait",  "matmul",    "vunary",    "vbinary",
      "vcompare", "vselect", "vreduce",  "vconvert",  "vfill", "ring_send", "ring_recv", "barrier",
      "dma_gather", "vtranspose", "vrandom"};
  const auto i = static_cast<std::uint8_t>(op);
  return i < kNumOpcodes ? names[i] : "opcode?";
}

namespace {
// The unary ops: the name (disassembly, fused programs) and the vector-unit cost class
// the op is charged as.
struct UnaryInfo {
  std::string_view name;
  VectorCost cost;
};
using C = VectorCost;
constexpr UnaryInfo kUnaryInfo[] = {
    {"copy", C::copy},     {"neg", C::neg},         {"abs", C::abs},     {"exp", C::exp},
    {"log", C::log},       {"sqrt", C::sqrt},       {"rsqrt", C::rsqrt}, {"reciprocal", C::reciprocal},
    {"tanh", C::tanh},     {"erf", C::erf},         {"sigmoid", C::sigmoid}, {"relu", C::relu},
    {"gelu", C::gelu},     {"gelu_tanh", C::gelu},  {"silu", C::silu},   {"sin", C::sin},
    {"cos", C::cos},       {"hardswish", C::hardswish}, {"hardsigmoid", C::hardsigmoid}};
static_assert(std::size(kUnaryInfo) == kNumUnaryOps, "one row per isa::UnaryOp");
constexpr VectorCost kBinaryCost[] = {C::add, C::sub, C::mul, C::div, C::max, C::min, C::pow};
static_assert(std::size(kBinaryCost) == kNumBinaryOps, "one cost per isa::BinaryOp");
constexpr std::string_view kCostNames[] = {
#define SPYRE_ISA_COST_NAME(name) #name,
    SPYRE_ISA_VECTOR_COSTS(SPYRE_ISA_COST_NAME)
#undef SPYRE_ISA_COST_NAME
};
}  // namespace

std::string_view to_string(UnaryOp op) {
  const auto i = static_cast<std::uint8_t>(op);
  return i < kNumUnaryOps ? kUnaryInfo[i].name : "unary?";
}

std::string_view to_string(VectorCost c) {
  const auto i = static_cast<std::uint8_t>(c);
  return i < kNumVectorCosts ? kCostNames[i] : "cost?";
}

VectorCost vector_cost(UnaryOp op) {
  const auto i = static_cast<std::uint8_t>(op);
  return i < kNumUnaryOps ? kUnaryInfo[i].cost : VectorCost::copy;
}

VectorCost vector_cost(BinaryOp op) {
  const auto i = static_cast<std::uint8_t>(op);
  return i < kNumBinaryOps ? kBinaryCost[i] : VectorCost::copy;
}

std::string_view to_string(BinaryOp op) {
  static constexpr std::string_view names[] = {"add", "sub", "mul", "div", "max", "min", "pow"};
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

std::string_view to_string(RandomDist d) {
  static constexpr std::string_view names[] = {"uniform", "normal"};
  const auto i = static_cast<std::uint8_t>(d);
  return i < kNumRandomDists ? names[i] : "dist?";
}

Opcode opcode_of(const Instruction& inst) {
  // The variant's alternatives are listed in opcode order.
  return static_cast<Opcode>(inst.index());
}

}  // namespace spyre::isa
