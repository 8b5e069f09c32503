#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/pointwise.h"
#include "compiler/elementwise.h"
#include "spyre/isa/program.h"

using namespace spyre;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("given a row-broadcast operand, only its row is loaded and the vector op broadcasts it") {
  const compiler::Target target{.cores = 1, .scratchpad_bytes = 1 << 20, .stick_bytes = 128};
  // [3 x 100] + [100]: shape {100, 3}, b's stride along dim 1 is 0.
  compiler::PointwiseKernel k;
  k.shape = {100, 3};
  k.inputs = {{isa::DType::fp32, {1, 100}}, {isa::DType::fp32, {1, 0}}};
  k.output = {isa::DType::fp32, {1, 100}};
  k.steps = {compiler::Step::binary(isa::BinaryOp::add, isa::DType::fp32, compiler::Value::input(0),
                                    compiler::Value::input(1))};
  const isa::Program p(compiler::compile_pointwise(k, target, "aten::add"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1 << 20, .num_streams = 1}));
  const auto b_load = std::get<isa::DmaLoad>(*p.decode_at(0, 1).inst);
  CHECK(b_load.arg == 1);
  CHECK(b_load.shape == std::array<std::uint32_t, 3>{100, 1, 1});  // one row, not 3
  bool broadcast = false;
  for (std::uint32_t pc = 0; pc < p.stream_length(0); ++pc) {
    const isa::Decoded d = p.decode_at(0, pc);
    if (const auto* v = std::get_if<isa::VBinary>(&*d.inst)) {
      broadcast = v->bcast == isa::Broadcast::row && v->rows == 3 && v->cols == 100;
    }
  }
  CHECK(broadcast);
}
