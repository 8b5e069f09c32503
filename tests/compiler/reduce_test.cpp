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

TEST_CASE("given fewer outputs than cores, the reduced range is split over the cores and the partials meet over the ring") {
  const compiler::Target target{.cores = 8, .scratchpad_bytes = 1 << 20, .stick_bytes = 128};
  // A full sum of 1 Mi fp16: one output chunk, 16 reduced chunks of 64 Ki -> 8 parts of
  // 2 chunks; cores 1..7 send 4 bytes (one fp32 partial) to core 0, which receives 7.
  const isa::Program p(compiler::compile_reduce({.outer = 1, .reduced = 1 << 20, .in = isa::DType::fp16,
                                                 .out = isa::DType::fp16}, target, "aten::sum"));
  REQUIRE(p.num_streams() == 8);
  int sends = 0, receives = 0, stores = 0, loads = 0;
  for (std::uint32_t s = 0; s < 8; ++s) {
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      if (const auto* send = std::get_if<isa::RingSend>(&*d.inst)) {
        ++sends;
        CHECK(send->dst_core == 0);
        CHECK(send->bytes == 4);
      }
      if (std::holds_alternative<isa::RingRecv>(*d.inst)) {
        ++receives;
        CHECK(s == 0);
      }
      if (std::holds_alternative<isa::DmaStore>(*d.inst)) {
        ++stores;
        CHECK(s == 0);
      }
      if (std::holds_alternative<isa::DmaLoad>(*d.inst)) ++loads;
    }
  }
  CHECK(sends == 7);
  CHECK(receives == 7);
  CHECK(stores == 1);
  CHECK(loads == 16);
  // Enough outputs for every core: no ring traffic.
  const isa::Program rows(compiler::compile_reduce({.outer = 64, .reduced = 1000, .outer_stride = 1000}, target, "aten::sum"));
  for (std::uint32_t s = 0; s < rows.num_streams(); ++s) {
    for (std::uint32_t pc = 0; pc < rows.stream_length(s); ++pc) {
      CHECK_FALSE(std::holds_alternative<isa::RingSend>(*rows.decode_at(s, pc).inst));
    }
  }
}
