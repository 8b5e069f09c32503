#include "compiler/elementwise.h"

#include "compiler/pointwise.h"

namespace spyre::compiler {
namespace {

PointwiseKernel contiguous(std::uint32_t inputs, isa::DType dtype, std::uint64_t count) {
  PointwiseKernel k;
  k.shape = {count};
  k.inputs.assign(inputs, Operand{dtype, {1}});
  k.output = Operand{dtype, {1}};
  return k;
}

}  // namespace

std::vector<std::uint8_t> compile_binary(isa::BinaryOp op, isa::DType dtype, std::uint64_t count, const Target& target,
                                         const std::string& name) {
  PointwiseKernel k = contiguous(2, dtype, count);
  k.steps = {Step::binary(op, dtype, Value::input(0), Value::input(1))};
  return compile_pointwise(k, target, name);
}

std::vector<std::uint8_t> compile_unary(isa::UnaryOp op, isa::DType dtype, std::uint64_t count, const Target& target,
                                        const std::string& name) {
  PointwiseKernel k = contiguous(1, dtype, count);
  k.steps = {Step::unary(op, dtype, Value::input(0))};
  return compile_pointwise(k, target, name);
}

}  // namespace spyre::compiler
