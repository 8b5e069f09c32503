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

TEST_CASE("given a list of tensors, the multi-tensor norm shares their elements evenly and each tensor's partials are adjacent") {
  const compiler::Target target{.cores = 4, .scratchpad_bytes = 1 << 20, .stick_bytes = 128};
  // 10000 + 100 + 30000 = 40100 fp32 elements, 8192 per core at least -> 5 cores, at
  // most 4: shares [0, 10025), [10025, 20050), [20050, 30075), [30075, 40100). Tensor 0
  // [0, 10000) is core 0's; tensor 1 [10000, 10100) cores 0 and 1; tensor 2
  // [10100, 40100) cores 1, 2, 3. Slots: 0 | 1, 2 | 3, 4, 5.
  const compiler::ForeachNormShape s{.sizes = {10000, 100, 30000},
                                     .dtypes = {isa::DType::fp32, isa::DType::fp32, isa::DType::fp16}};
  const auto plan = compiler::plan_foreach_norm(s, target);
  CHECK(plan.partials == 6);
  REQUIRE(plan.slots.size() == 3);
  CHECK(std::make_pair(plan.slots[0].first, plan.slots[0].count) == std::make_pair<std::uint64_t, std::uint64_t>(0, 1));
  CHECK(std::make_pair(plan.slots[1].first, plan.slots[1].count) == std::make_pair<std::uint64_t, std::uint64_t>(1, 2));
  CHECK(std::make_pair(plan.slots[2].first, plan.slots[2].count) == std::make_pair<std::uint64_t, std::uint64_t>(3, 3));
  // Tiles: 1 MiB - 256 bytes over 2 x 4 + 4 bytes an element = 87359 -> 64 Ki.
  CHECK(plan.tile == 64 * 1024);
  const isa::Program p(compiler::compile_foreach_norm_partials(s, target, "aten::_foreach_norm"));
  CHECK(p.num_streams() == 4);
  // Each core stores one partial per tensor it reaches, at its slot of argument 3.
  std::vector<std::uint64_t> stored;
  for (std::uint32_t c = 0; c < 4; ++c) {
    for (std::uint32_t pc = 0; pc < p.stream_length(c); ++pc) {
      const isa::Decoded d = p.decode_at(c, pc);
      if (const auto* st = std::get_if<isa::DmaStore>(&*d.inst)) {
        CHECK(st->arg == 3);
        stored.push_back(st->offset / 4);
      }
    }
  }
  CHECK(stored == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5});
  const isa::Program finish(compiler::compile_foreach_norm_finish(s, target, "aten::_foreach_norm"));
  CHECK(finish.num_streams() == 1);
  CHECK_THROWS_WITH(compiler::plan_foreach_norm({.sizes = {5}, .dtypes = {isa::DType::fp32}, .ord = 3}, target),
                    ContainsSubstring("orders 1, 2 and inf, found 3"));
  CHECK_THROWS_WITH(compiler::plan_foreach_norm({.sizes = {5, 0}, .dtypes = {isa::DType::fp32, isa::DType::fp32}}, target),
                    ContainsSubstring("tensor 1 must be a non-empty fp32, fp16 or bf16 tensor, found 0 fp32"));
}
