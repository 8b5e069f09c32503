#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/elementwise.h"
#include "spyre/isa/program.h"

using namespace spyre;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("given an elementwise op, the program validates and spreads the work over the cores") {
  const compiler::Target target{.cores = 4, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128};
  // 4097 fp32 values = 129 sticks of 32: ceil(129 / 4) = 33 sticks = 1056 values per core.
  const isa::Program p(compiler::compile_binary(isa::BinaryOp::add, isa::DType::fp32, 4097, target, "aten::add"));
  CHECK(p.name() == "aten::add");
  CHECK(p.num_streams() == 4);
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 4}));
  const isa::Decoded decoded = p.decode_at(3, 0);
  const auto* first = std::get_if<isa::DmaLoad>(&*decoded.inst);
  REQUIRE(first != nullptr);
  CHECK(first->offset == 3 * 1056 * 4);  // core 3 starts at element 3168
  CHECK(first->shape[0] == 4097 - 3 * 1056);
}

TEST_CASE("given fewer sticks than cores, only the cores with work get instructions") {
  const compiler::Target target{.cores = 32, .scratchpad_bytes = 1 << 20, .stick_bytes = 128};
  const isa::Program p(compiler::compile_binary(isa::BinaryOp::mul, isa::DType::fp16, 7, target, "aten::mul"));
  CHECK(p.num_streams() == 1);  // 7 fp16 values: one stick
}

TEST_CASE("given a scratchpad too small for any tile, compilation fails naming the bytes") {
  const compiler::Target tiny{.cores = 1, .scratchpad_bytes = 512, .stick_bytes = 128};
  CHECK_THROWS_WITH(compiler::compile_binary(isa::BinaryOp::add, isa::DType::fp32, 100, tiny, "aten::add"),
                    ContainsSubstring("aten::add: 100 fp32 elements need at least 768 bytes of scratchpad, the "
                                      "device has 512"));
}

TEST_CASE("given a unary op, the program uses four buffers and validates") {
  const compiler::Target target{.cores = 2, .scratchpad_bytes = 4 * 256, .stick_bytes = 128};
  // 4 buffers x 64 fp32 values (2 sticks) fit 1024 bytes: tiles of 64 values.
  const isa::Program p(compiler::compile_unary(isa::UnaryOp::exp, isa::DType::fp32, 256, target, "aten::exp"));
  CHECK(p.num_streams() == 2);
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1024, .num_streams = 2}));
  const isa::Decoded compute = p.decode_at(0, 2);  // load 0, load 1, wait, exp
  REQUIRE(compute.inst);
  const isa::Decoded op = p.decode_at(0, 3);
  REQUIRE(std::holds_alternative<isa::VUnary>(*op.inst));
  CHECK(std::get<isa::VUnary>(*op.inst).count == 64);
}
