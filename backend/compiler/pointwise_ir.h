// The fused pointwise kernel's serialised IR: the form in which a whole elementwise
// expression (compiler/pointwise.h's steps) reaches spyre::fused_pointwise, written by
// the torch.compile backend (python/spyre_sim/dynamo/ir.py, with the codes
// torch.ops.spyre.pointwise_codes publishes) and by C++ callers through encode_steps.
// kStepWords integers per step:
//
//   kind op dtype  a.kind a.index  b.kind b.index  c.kind c.index
//
// kind: Step::Kind; op: the ISA op of that kind (isa::UnaryOp / BinaryOp / CompareOp; 0
// for select and convert); dtype: isa::DType, the step's compute dtype (convert: the
// target); an argument is (input, i) the i-th tensor input, (step, s) an earlier step's
// result, (constant, c) constants[c], or (kNoArg, 0) past the kind's arity (unary and
// convert 1, binary and compare 2, select 3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/pointwise.h"

namespace spyre::compiler {

inline constexpr std::size_t kStepWords = 9;
inline constexpr std::int64_t kNoArg = -1;

// The arguments a step of this kind takes, and its name ("unary", "select", ...).
std::size_t arity(Step::Kind kind);
std::string kind_name(Step::Kind kind);

// Steps as the IR: the integers, and the constants the steps use (in the order met).
struct EncodedSteps {
  std::vector<std::int64_t> words;
  std::vector<double> constants;
};
EncodedSteps encode_steps(const std::vector<Step>& steps);

// The IR read back and checked against `inputs` tensor inputs: std::invalid_argument
// naming the step and the field ("step 2: argument 1: step 3 is not an earlier step").
std::vector<Step> decode_steps(const std::int64_t* words, std::size_t count, const std::vector<double>& constants,
                               std::size_t inputs);

}  // namespace spyre::compiler
