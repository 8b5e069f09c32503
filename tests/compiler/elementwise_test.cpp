#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/elementwise.h"
#include "compiler/gather.h"
#include "compiler/matmul.h"
#include "compiler/pointwise.h"
#include "compiler/reduce.h"
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

TEST_CASE("given a matmul, tiles fit the scratchpad and too small a scratchpad is a clear error") {
  const compiler::Target target{.cores = 4, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128};
  const compiler::MatmulShape shape{.m = 300, .n = 513, .k = 17, .dtype = isa::DType::fp16, .b_transposed = false};
  const isa::Program p(compiler::compile_matmul(shape, target, "aten::mm"));
  CHECK(p.num_streams() == 4);
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 4}));
  const compiler::Target tiny{.cores = 1, .scratchpad_bytes = 256, .stick_bytes = 128};
  // The smallest tiling, 8x8x8 fp16: 2 x (64 + 64) x 2 + 64 x 4 + 64 x 2 = 896 bytes.
  CHECK_THROWS_WITH(compiler::compile_matmul(shape, tiny, "aten::mm"),
                    ContainsSubstring("aten::mm 300x513x17: the smallest tiling needs 896 bytes of scratchpad, the "
                                      "device has 256"));
}

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

TEST_CASE("given a 2048-cubed fp16 GEMM on the default chip, panels are shared so DRAM reads A and B once") {
  // 32 cores, 1638 KiB usable scratchpad, 1536 fp16 MAC/ns per core, 149.5 GB/s.
  const compiler::Target target{.cores = 32, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128,
                                .core_macs_per_s = 1.536e12, .dram_bytes_per_s = 149.504e9,
                                .array_rows = 8, .array_cols = 8, .simd_depth = {2, 8, 8, 26, 0, 0}};
  const compiler::MatmulShape shape{.m = 2048, .n = 2048, .k = 2048, .dtype = isa::DType::fp16};
  const compiler::MatmulPlan plan = compiler::plan_matmul(shape, target);
  // 256x256 tiles, two per core stacked along M: a 4x8 grid covers 2048x2048 at once,
  // so A and B are each read once, 2 x 2048 x 2048 x 2 bytes, plus the first K step's
  // B panels again (the second tile runs a step behind): 2048 x 512 x 2 bytes.
  CHECK(plan.tm == 256);
  CHECK(plan.rows_per_core == 2);
  CHECK(plan.grid_rows * plan.grid_cols == 32);
  CHECK(plan.super_blocks == 1);
  CHECK(plan.tk == 512);
  CHECK(plan.dram_read_bytes == 2ull * 2048 * 2048 * 2 + 2048ull * 512 * 2);
  const isa::Program p(compiler::compile_matmul(shape, target, "aten::mm"));
  CHECK(p.num_streams() == 32);
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 32}));
  std::uint32_t receives = 0;
  for (std::uint32_t pc = 0; pc < p.stream_length(31); ++pc) {
    receives += std::holds_alternative<isa::RingRecv>(*p.decode_at(31, pc).inst) ? 1 : 0;
  }
  CHECK(receives > 0);  // the last core of the grid gets its panels over the ring
}

TEST_CASE("given two tiles per core and at least four K steps, the second tile runs a K step behind") {
  // The CI chip (4 cores) and the shape tests/python/test_matmul.py checks against the
  // CPU: 2 tiles per core and K = 2200 in steps of 512 (4 full and a ragged 152).
  // (The plan: 64x64 tiles, a 1x4 grid, 27 super-blocks.)
  const compiler::Target target{.cores = 4, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128,
                                .core_macs_per_s = 1.536e12, .dram_bytes_per_s = 149.504e9,
                                .array_rows = 8, .array_cols = 8, .simd_depth = {2, 8, 8, 26, 0, 0}};
  const compiler::MatmulShape shape{.m = 1152, .n = 700, .k = 2200, .dtype = isa::DType::fp16};
  const compiler::MatmulPlan plan = compiler::plan_matmul(shape, target);
  REQUIRE(plan.rows_per_core == 2);
  REQUIRE(plan.tk == 512);
  REQUIRE(shape.m % (2 * plan.tm) == 0);  // every block has two whole tiles
  REQUIRE(plan.tm >= 32);                   // the last matmul splits into 4 pieces of 8-row folds
  const isa::Program p(compiler::compile_matmul(shape, target, "aten::mm"));
  // Stream 0's first block: tile 0 alone on K step 0, both tiles on steps 1..4, tile 1
  // on step 0 last; each tile's first matmul starts its accumulator.
  std::vector<std::pair<std::uint32_t, bool>> matmuls;  // (k, accumulate)
  std::string tail;  // M for each matmul, S for each store, in order
  for (std::uint32_t pc = 0; pc < p.stream_length(0); ++pc) {
    const isa::Decoded d = p.decode_at(0, pc);
    if (const auto* mm = std::get_if<isa::Matmul>(&*d.inst)) matmuls.emplace_back(mm->k, mm->accumulate);
    if (std::holds_alternative<isa::Matmul>(*d.inst)) tail += 'M';
    if (std::holds_alternative<isa::DmaStore>(*d.inst)) tail += 'S';
  }
  REQUIRE(matmuls.size() >= 10);
  const std::vector<std::pair<std::uint32_t, bool>> first_block = {
      {512, false}, {512, true}, {512, false}, {512, true}, {512, true},
      {512, true},  {512, true}, {152, true},  {152, true}, {512, true}};
  CHECK(std::vector(matmuls.begin(), matmuls.begin() + 10) == first_block);
  // The core's last matmul runs in 4 row pieces, each stored before the next computes.
  REQUIRE(tail.size() >= 8);
  CHECK(tail.substr(tail.size() - 8) == "MSMSMSMS");
}

TEST_CASE("given a reduction, softmax or layer-norm row too big for the scratchpad, compilation names the bytes") {
  const compiler::Target tiny{.cores = 1, .scratchpad_bytes = 256, .stick_bytes = 128};
  CHECK_THROWS_WITH(compiler::compile_softmax({.rows = 2, .cols = 1000, .row_stride = 1000}, tiny, "aten::_softmax"),
                    ContainsSubstring("aten::_softmax: a row of 1000 fp32 values needs"));
  CHECK_THROWS_WITH(compiler::compile_reduce({.outer = 1, .reduced = 10}, tiny, "aten::sum"),
                    ContainsSubstring("the device has 256"));
  CHECK_THROWS_WITH(compiler::compile_layer_norm({.rows = 2, .cols = 1000}, tiny, "aten::native_layer_norm"),
                    ContainsSubstring("aten::native_layer_norm: a row of 1000 fp32 values needs"));
}

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

TEST_CASE("given GEMMs of many shapes, every ring message sent is received, in order and size") {
  // B panels travel down grid columns and A panels along grid rows; a core that skips
  // or adds one (e.g. a single-tile edge block under a two-tile K-step schedule) leaves
  // a message behind or takes the wrong one. Per (source, destination, tag), the byte
  // counts of the sends (and forwards) must equal those of the receives, in order.
  const compiler::Target ci{.cores = 4, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128,
                            .core_macs_per_s = 1.536e12, .dram_bytes_per_s = 37.376e9,
                                .array_rows = 8, .array_cols = 8, .simd_depth = {2, 8, 8, 26, 0, 0}};
  const compiler::Target chip{.cores = 32, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128,
                              .core_macs_per_s = 1.536e12, .dram_bytes_per_s = 149.504e9,
                                .array_rows = 8, .array_cols = 8, .simd_depth = {2, 8, 8, 26, 0, 0}};
  for (const auto& target : {ci, chip}) {
    for (const std::uint64_t m : {768ull, 1280ull, 700ull, 2048ull}) {
      for (const std::uint64_t n : {512ull, 2048ull, 300ull}) {
        for (const std::uint64_t batch : {1ull, 3ull}) {
          compiler::MatmulShape shape{.m = m, .n = n, .k = 2200, .dtype = isa::DType::fp16};
          shape.batch = batch;
          shape.a_batch_stride = m * 2200;
          shape.b_batch_stride = 2200 * n;
          const isa::Program p(compiler::compile_matmul(shape, target, "aten::bmm"));
          using Key = std::tuple<std::uint32_t, std::uint32_t, std::uint16_t>;  // (from, to, tag)
          std::map<Key, std::vector<std::uint32_t>> sent, received;
          for (std::uint32_t st = 0; st < p.num_streams(); ++st) {
            for (std::uint32_t pc = 0; pc < p.stream_length(st); ++pc) {
              const isa::Decoded d = p.decode_at(st, pc);
              if (const auto* send = std::get_if<isa::RingSend>(&*d.inst)) {
                sent[{st, send->dst_core, send->tag}].push_back(send->bytes);
              } else if (const auto* recv = std::get_if<isa::RingRecv>(&*d.inst)) {
                received[{recv->src_core, st, recv->tag}].push_back(recv->bytes);
                if (recv->forward_to != isa::RingRecv::kNoForward) {
                  sent[{st, recv->forward_to, recv->tag}].push_back(recv->bytes);
                }
              }
            }
          }
          INFO("m=" << m << " n=" << n << " batch=" << batch << " cores=" << target.cores);
          CHECK(sent == received);
        }
      }
    }
  }
}

TEST_CASE("given twice the scratchpad, a 4096-cubed GEMM takes K chunks of 1024, a 2048-cubed one keeps 512") {
  // configs/whatif-big-scratchpad.yaml: 3276 KiB usable. 256x256 tiles, two per core:
  // 2 x (256x1024 + 1024x256) x 2 B + 2 x 256x256 x 4 B = 2.5 MiB fits; K = 4096 is 4
  // chunks of 1024 (fold: 128 + 14 cycles instead of 64 + 14), K = 2048 would be only 2.
  const compiler::Target big{.cores = 32, .scratchpad_bytes = 3276 * 1024, .stick_bytes = 128,
                             .core_macs_per_s = 1.536e12, .dram_bytes_per_s = 149.504e9,
                                .array_rows = 8, .array_cols = 8, .simd_depth = {2, 8, 8, 26, 0, 0}};
  CHECK(compiler::plan_matmul({.m = 4096, .n = 4096, .k = 4096, .dtype = isa::DType::fp16}, big).tk == 1024);
  CHECK(compiler::plan_matmul({.m = 2048, .n = 2048, .k = 2048, .dtype = isa::DType::fp16}, big).tk == 512);
  const compiler::Target chip{.cores = 32, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128,
                              .core_macs_per_s = 1.536e12, .dram_bytes_per_s = 149.504e9,
                                .array_rows = 8, .array_cols = 8, .simd_depth = {2, 8, 8, 26, 0, 0}};
  CHECK(compiler::plan_matmul({.m = 4096, .n = 4096, .k = 4096, .dtype = isa::DType::fp16}, chip).tk == 512);
}
