#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/gather.h"
#include "compiler/elementwise.h"
#include "spyre/isa/program.h"

using namespace spyre;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("given rows larger than half the scratchpad, a gather moves them in stick-multiple pieces") {
  // 1638 KiB of scratchpad: pieces of at most (1638 KiB - 64 indices) / 2, rounded down
  // to 128-byte sticks; a 2.8 MB row takes 4 pieces, the last one the remainder.
  const compiler::Target target{.cores = 4, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128};
  const compiler::GatherShape shape{.count = 3, .rows = 3, .row_bytes = 2'800'000, .wide_index = true};
  const isa::Program p(compiler::compile_gather(shape, target, "aten::index_select"));
  CHECK(p.num_streams() == 3);  // one index per core
  std::uint64_t moved = 0;
  std::uint32_t gathers = 0;
  for (std::uint32_t pc = 0; pc < p.stream_length(0); ++pc) {
    const isa::Decoded d = p.decode_at(0, pc);
    if (const auto* g = std::get_if<isa::DmaGather>(&*d.inst)) {
      ++gathers;
      moved += g->row_bytes;
      CHECK(g->row_bytes <= (1638 * 1024 - 64 * 8) / 2);
      CHECK((g->row_bytes % 128 == 0 || moved == shape.row_bytes));
    }
  }
  CHECK(gathers == 4);
  CHECK(moved == shape.row_bytes);
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 3}));
  CHECK_THROWS_WITH(compiler::compile_gather({.count = 0, .rows = 3, .row_bytes = 8}, target, "aten::index_select"),
                    ContainsSubstring("nothing to gather (0 indices"));
}
