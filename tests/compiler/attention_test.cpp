#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <stdexcept>

#include "compiler/attention.h"
#include "compiler/does_not_fit.h"
#include "spyre/isa/program.h"

using namespace spyre;
using Catch::Matchers::ContainsSubstring;

namespace {

compiler::AttentionShape heads(std::uint64_t q_heads, std::uint64_t kv_heads, std::uint64_t q_len, std::uint64_t kv_len,
                               std::uint64_t dim) {
  compiler::AttentionShape a;
  a.q_heads = q_heads;
  a.kv_heads = kv_heads;
  a.q_len = q_len;
  a.kv_len = kv_len;
  a.head_dim = a.value_dim = dim;
  // Contiguous [1, H, L, E].
  a.q_stride = {static_cast<std::int64_t>(q_heads * q_len * dim), static_cast<std::int64_t>(q_len * dim),
                static_cast<std::int64_t>(dim)};
  a.k_stride = {static_cast<std::int64_t>(kv_heads * kv_len * dim), static_cast<std::int64_t>(kv_len * dim),
                static_cast<std::int64_t>(dim)};
  a.v_stride = a.k_stride;
  return a;
}

// Per stream: {query-key multiplies, loads of argument `arg`}.
std::vector<std::pair<int, int>> count(const isa::Program& p, std::uint16_t arg) {
  std::vector<std::pair<int, int>> out;
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    int qk = 0, loads = 0;
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      if (const auto* m = std::get_if<isa::Matmul>(&*d.inst)) qk += m->trans_b ? 1 : 0;
      if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst)) loads += l->arg == arg ? 1 : 0;
    }
    out.emplace_back(qk, loads);
  }
  return out;
}

const compiler::Target kChip{.cores = 8, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128};

}  // namespace

TEST_CASE("given a decode step with grouped heads, each key block is read once for the whole group") {
  // 8 query heads in 2 groups, one query each, 1024 keys: a block holds a group's 4
  // rows; 2 items (one per group) on 2 cores, each loading its 2 key blocks of 512 once.
  const auto a = heads(8, 2, 1, 1024, 64);
  const compiler::AttentionPlan plan = compiler::plan_attention(a, kChip);
  CHECK(plan.grouped);
  CHECK(plan.block_q == 4);
  CHECK(plan.block_k == 512);
  CHECK(plan.items == 2);
  const isa::Program p(compiler::compile_attention(a, kChip, "sdpa"));
  REQUIRE(p.num_streams() == 2);
  for (const auto& [qk, key_loads] : count(p, 1)) {
    CHECK(qk == 2);
    CHECK(key_loads == 2);  // (one item per group: nothing to share)
  }
}

TEST_CASE("given causal attention, each core takes query blocks from both ends so the work is even") {
  // 4 heads of 1024 on 8 cores: 512 rows per core = 2 blocks of 256; causal blocks see
  // 1, 2, 3 and 4 key blocks, so the items pair blocks 0 and 3, 1 and 2: 5 each.
  auto a = heads(4, 4, 1024, 1024, 64);
  a.causal = true;
  const compiler::AttentionPlan plan = compiler::plan_attention(a, kChip);
  CHECK(plan.block_q == 256);
  CHECK(plan.block_k == 256);
  CHECK(plan.sub_blocks == 2);
  const isa::Program p(compiler::compile_attention(a, kChip, "sdpa"));
  REQUIRE(p.num_streams() == 8);
  int loads = 0;
  for (const auto& [qk, key_loads] : count(p, 1)) {
    CHECK(qk == 5);
    loads += key_loads;
  }
  // Each head's two cores share the key blocks both need (0-2) over the ring, taking
  // turns to read them; block 3 only the first pair's core needs: 4 reads per head.
  CHECK(loads == 4 * 4);
  int sends = 0;
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      sends += std::holds_alternative<isa::RingSend>(*p.decode_at(s, pc).inst) ? 1 : 0;
    }
  }
  CHECK(sends == 4 * 3);
}

TEST_CASE("given attention the kernel cannot take, compilation says what it found") {
  CHECK_THROWS_WITH(compiler::plan_attention(heads(6, 4, 8, 8, 16), kChip),
                    ContainsSubstring("6 query heads do not divide into groups of 4 key/value heads"));
  auto ints = heads(2, 2, 8, 8, 16);
  ints.dtype = isa::DType::int8;
  CHECK_THROWS_WITH(compiler::plan_attention(ints, kChip), ContainsSubstring("found int8"));
  const compiler::Target tiny{.cores = 1, .scratchpad_bytes = 4096, .stick_bytes = 128};
  CHECK_THROWS_AS(compiler::plan_attention(heads(1, 1, 8, 8, 256), tiny), compiler::DoesNotFit);
  CHECK_THROWS_WITH(compiler::plan_attention(heads(1, 1, 8, 8, 256), tiny), ContainsSubstring("the device has 4096"));
}

TEST_CASE("given causal grouped-query prefill, a key block is read once for every core that needs it") {
  // 4 query heads on 1 key/value head, 512 positions, on 8 cores: a group's 2048 rows
  // do not fit one block, so each core takes one 256-row block of one head (8 items).
  // Key blocks are 256 long: block 0 all 8 cores need (each head's first and second
  // query block), block 1 only the 4 second blocks. Each is read from DRAM once and
  // sent over the ring to the others that need it: 7 + 3 sends. (Sharing only the
  // blocks every member needs read block 1 four times: 5 reads.)
  auto a = heads(4, 1, 512, 512, 64);
  a.causal = true;
  const compiler::AttentionPlan plan = compiler::plan_attention(a, kChip);
  CHECK_FALSE(plan.grouped);
  CHECK(plan.block_q == 256);
  CHECK(plan.block_k == 256);
  CHECK(plan.sub_blocks == 1);
  CHECK(plan.items == 8);
  const isa::Program p(compiler::compile_attention(a, kChip, "sdpa"));
  REQUIRE(p.num_streams() == 8);
  int key_reads = 0, value_reads = 0, sends = 0, receives = 0;
  for (const auto& [qk, key_loads] : count(p, 1)) key_reads += key_loads;
  for (const auto& [qk, value_loads] : count(p, 2)) value_reads += value_loads;
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      sends += std::holds_alternative<isa::RingSend>(*p.decode_at(s, pc).inst) ? 1 : 0;
      receives += std::holds_alternative<isa::RingRecv>(*p.decode_at(s, pc).inst) ? 1 : 0;
    }
  }
  CHECK(key_reads == 2);
  CHECK(value_reads == 2);
  CHECK(sends == 7 + 3);
  CHECK(receives == sends);
}
