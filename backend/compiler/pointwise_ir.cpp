#include "compiler/pointwise_ir.h"

#include <stdexcept>

namespace spyre::compiler {

std::size_t arity(Step::Kind kind) {
  return kind == Step::Kind::unary || kind == Step::Kind::convert ? 1 : kind == Step::Kind::select ? 3 : 2;
}

std::string kind_name(Step::Kind kind) {
  static constexpr const char* names[] = {"unary", "binary", "compare", "select", "convert"};
  return names[static_cast<int>(kind)];
}

EncodedSteps encode_steps(const std::vector<Step>& steps) {
  EncodedSteps out;
  for (const Step& s : steps) {
    if (s.args.size() != arity(s.kind)) {
      throw std::invalid_argument("a " + kind_name(s.kind) + " step takes " + std::to_string(arity(s.kind)) +
                                  " argument(s), got " + std::to_string(s.args.size()));
    }
    out.words.insert(out.words.end(), {static_cast<std::int64_t>(s.kind), s.op, static_cast<std::int64_t>(s.dtype)});
    for (std::size_t a = 0; a < 3; ++a) {
      if (a >= s.args.size()) {
        out.words.insert(out.words.end(), {kNoArg, 0});
        continue;
      }
      const Value& v = s.args[a];
      std::int64_t index = v.index;
      if (v.kind == Value::Kind::constant) {
        index = static_cast<std::int64_t>(out.constants.size());
        out.constants.push_back(v.constant_value);
      } else if (v.kind == Value::Kind::random) {
        throw std::invalid_argument("the fused IR has no random values");
      }
      out.words.insert(out.words.end(), {static_cast<std::int64_t>(v.kind), index});
    }
  }
  return out;
}

namespace {

Step decode_step(const std::int64_t* w, std::size_t at, const std::vector<double>& constants, std::size_t inputs) {
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument("step " + std::to_string(at) + ": " + what);
  };
  if (w[0] < 0 || w[0] > static_cast<std::int64_t>(Step::Kind::convert)) {
    fail("kind " + std::to_string(w[0]) + " is not a step kind (0..4: unary, binary, compare, select, convert)");
  }
  Step step;
  step.kind = static_cast<Step::Kind>(w[0]);
  const std::int64_t ops = step.kind == Step::Kind::unary     ? isa::kNumUnaryOps
                           : step.kind == Step::Kind::binary  ? isa::kNumBinaryOps
                           : step.kind == Step::Kind::compare ? isa::kNumCompareOps
                                                              : 1;
  if (w[1] < 0 || w[1] >= ops) {
    fail(kind_name(step.kind) + " op " + std::to_string(w[1]) + " does not exist (0.." + std::to_string(ops - 1) + ")");
  }
  step.op = static_cast<std::uint8_t>(w[1]);
  if (w[2] < 0 || w[2] >= isa::kNumDTypes) fail("dtype " + std::to_string(w[2]) + " is not a device dtype");
  step.dtype = static_cast<isa::DType>(w[2]);
  for (std::size_t a = 0; a < 3; ++a) {
    const std::int64_t kind = w[3 + 2 * a], index = w[4 + 2 * a];
    const std::string which = "argument " + std::to_string(a);
    if (a >= arity(step.kind)) {
      if (kind != kNoArg) fail(which + ": a " + kind_name(step.kind) + " step takes " + std::to_string(arity(step.kind)));
      continue;
    }
    if (index < 0) fail(which + ": negative index " + std::to_string(index));
    const auto i = static_cast<std::uint64_t>(index);
    if (kind == static_cast<std::int64_t>(Value::Kind::input)) {
      if (i >= inputs) {
        fail(which + ": input " + std::to_string(i) + " does not exist: " + std::to_string(inputs) + " tensor input(s)");
      }
      step.args.push_back(Value::input(static_cast<std::uint32_t>(i)));
    } else if (kind == static_cast<std::int64_t>(Value::Kind::step)) {
      if (i >= at) fail(which + ": step " + std::to_string(i) + " is not an earlier step");
      step.args.push_back(Value::step(static_cast<std::uint32_t>(i)));
    } else if (kind == static_cast<std::int64_t>(Value::Kind::constant)) {
      if (i >= constants.size()) {
        fail(which + ": constant " + std::to_string(i) + " does not exist: " + std::to_string(constants.size()) +
             " constant(s)");
      }
      step.args.push_back(Value::constant(constants[i]));
    } else {
      fail(which + ": kind " + std::to_string(kind) + " is not input (0), step (1) or constant (2)");
    }
  }
  return step;
}

}  // namespace

std::vector<Step> decode_steps(const std::int64_t* words, std::size_t count, const std::vector<double>& constants,
                               std::size_t inputs) {
  if (count == 0) throw std::invalid_argument("the program has no steps");
  if (count % kStepWords != 0) {
    throw std::invalid_argument("the program has " + std::to_string(count) + " integers, expected " +
                                std::to_string(kStepWords) + " per step");
  }
  std::vector<Step> steps;
  for (std::size_t at = 0; at < count / kStepWords; ++at) {
    steps.push_back(decode_step(words + at * kStepWords, at, constants, inputs));
  }
  return steps;
}

}  // namespace spyre::compiler
