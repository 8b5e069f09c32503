#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/reduce.h"
#include "compiler/elementwise.h"
#include "spyre/isa/program.h"

using namespace spyre;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("given a reduction, softmax or layer-norm row too big for the scratchpad, compilation names the bytes") {
  const compiler::Target tiny{.cores = 1, .scratchpad_bytes = 256, .stick_bytes = 128};
  CHECK_THROWS_WITH(compiler::compile_softmax({.rows = 2, .cols = 1000, .row_stride = 1000}, tiny, "aten::_softmax"),
                    ContainsSubstring("aten::_softmax: a row of 1000 fp32 values needs"));
  CHECK_THROWS_WITH(compiler::compile_reduce({.outer = 1, .reduced = 10}, tiny, "aten::sum"),
                    ContainsSubstring("the device has 256"));
  CHECK_THROWS_WITH(compiler::compile_layer_norm({.rows = 2, .cols = 1000}, tiny, "aten::native_layer_norm"),
                    ContainsSubstring("aten::native_layer_norm: a row of 1000 fp32 values needs"));
}
