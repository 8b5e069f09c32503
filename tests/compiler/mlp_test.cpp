#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/does_not_fit.h"
#include "compiler/mlp.h"
#include "spyre/isa/program.h"

using namespace spyre;
using Catch::Matchers::ContainsSubstring;

namespace {

compiler::Target chip(std::uint32_t cores) {
  return {.cores = cores, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128, .core_macs_per_s = 1.536e12,
          .dram_bytes_per_s = 149.504e9, .array_rows = 8, .array_cols = 8, .simd_depth = {2, 8, 8, 26, 0, 0}};
}

// What a program moves: DMA bytes per argument (loads and stores), and ring bytes per
// (source, destination, tag) as sent (and forwarded) and as received, in order.
struct Moves {
  std::map<std::uint16_t, std::uint64_t> loaded, stored;
  std::map<std::uint16_t, std::uint32_t> loading_streams;  // streams that load each argument
  using Key = std::tuple<std::uint32_t, std::uint32_t, std::uint16_t>;
  std::map<Key, std::vector<std::uint32_t>> sent, received;
};
Moves moves(const isa::Program& p) {
  Moves m;
  for (std::uint32_t st = 0; st < p.num_streams(); ++st) {
    std::map<std::uint16_t, bool> loads;
    for (std::uint32_t pc = 0; pc < p.stream_length(st); ++pc) {
      const isa::Decoded d = p.decode_at(st, pc);
      if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst)) {
        m.loaded[l->arg] += std::uint64_t{l->shape[0]} * l->shape[1] * l->shape[2] * isa::dtype_size(l->dtype);
        loads[l->arg] = true;
      } else if (const auto* s = std::get_if<isa::DmaStore>(&*d.inst)) {
        m.stored[s->arg] += std::uint64_t{s->shape[0]} * s->shape[1] * s->shape[2] * isa::dtype_size(s->dtype);
      } else if (const auto* send = std::get_if<isa::RingSend>(&*d.inst)) {
        m.sent[{st, send->dst_core, send->tag}].push_back(send->bytes);
      } else if (const auto* recv = std::get_if<isa::RingRecv>(&*d.inst)) {
        m.received[{recv->src_core, st, recv->tag}].push_back(recv->bytes);
        if (recv->forward_to != isa::RingRecv::kNoForward) m.sent[{st, recv->forward_to, recv->tag}].push_back(recv->bytes);
      }
    }
    for (const auto& [arg, yes] : loads) m.loading_streams[arg] += yes ? 1 : 0;
  }
  return m;
}

}  // namespace

TEST_CASE("given GPT-2's feed-forward half on the default chip, every weight byte and x are read once") {
  // m 512, d 2048, h 8192, fp16, with a LayerNorm prologue, both biases, GELU and the
  // residual. 32 cores take 8192 / 32 = 256 hidden units each; all 512 rows are one
  // block, so W1 and W2 are read once (2 x 2048 x 8192 x 2 bytes), x's panels once by
  // core 0 (512 x 2048 x 2) plus each core's 16-row segment for its statistics (the same
  // again in all), the residual once and y stored once (512 x 2048 x 2 each).
  compiler::MlpShape shape{.m = 512, .d = 2048, .h = 8192, .dtype = isa::DType::fp16, .bias1 = isa::DType::fp16,
                           .bias2 = isa::DType::fp16, .activation = isa::UnaryOp::gelu_tanh, .residual = true};
  shape.norm = compiler::MatmulShape::Norm{.rms = false, .eps = 1e-5, .weight = isa::DType::fp16,
                                           .bias = isa::DType::fp16};
  const std::optional<compiler::MlpPlan> plan = compiler::plan_mlp(shape, chip(32));
  REQUIRE(plan);
  CHECK(plan->cores == 32);
  CHECK(plan->hc == 256);
  CHECK(plan->mb == 512);
  CHECK(plan->blocks == 1);
  // K steps of 256 (after a first of 64): 512 fold passes of ceil(256 / 8) + 14 cycles
  // each on the 8 x 8 arrays (2 corelets: 128 of the 256 units each); 512 would not fit
  // (two 512 KiB x panels beside the 512 KiB accumulator). Chunks of 128 columns: 256
  // would not fit (two 512 KiB partials), 64 cost the same array cycles (phase 2's K is
  // the slice, 256, whatever the chunk) with twice the reduce-scatters.
  CHECK(plan->tk == 256);
  CHECK(plan->tn == 128);
  CHECK(plan->scratchpad_bytes <= 1638 * 1024);
  const isa::Program p(compiler::compile_mlp(shape, chip(32), "spyre::mlp[layer_norm,gelu_tanh,residual]"));
  CHECK(p.num_streams() == 32);
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 32}));
  const Moves m = moves(p);
  const std::uint64_t x = 512ull * 2048 * 2, w = 2048ull * 8192 * 2;
  CHECK(m.loaded.at(1) == w);
  CHECK(m.loaded.at(3) == w);
  CHECK(m.loaded.at(0) == 2 * x);
  CHECK(m.loaded.at(6) == x);  // the residual (arguments: 4 b1, 5 b2, 6 residual, 7 and 8 the norm's)
  CHECK(m.stored.at(2) == x);
  CHECK(m.loaded.at(4) == 8192ull * 2);       // each core its slice of b1
  CHECK(m.loaded.at(5) == 32ull * 2048 * 2);  // every core all of b2
  CHECK(m.loading_streams.at(1) == 32);
  CHECK(m.sent == m.received);
  // The reduce-scatter: per 128-column chunk, each core sends 31 of the 32 segments of
  // its partial (16 rows x 128 fp32 values) to its lower neighbour: 16 chunks x 31 x 8 KiB.
  CHECK(m.sent.at({5, 4, 1}).size() == 16 * 31);
  CHECK(m.sent.at({5, 4, 1}).front() == 16 * 128 * 4);
}

TEST_CASE("given MLPs of many shapes and core counts, every ring message sent is received, in order and size") {
  // Rows fewer than cores (a decode step: segments of no rows), ragged K steps and
  // chunks, a hidden width that leaves the last core a short slice, one core; with a
  // projection before, p's width leaving some cores no columns (dp 24 on 32 cores).
  for (const std::uint32_t cores : {1u, 4u, 32u}) {
    for (const std::uint64_t m : {1ull, 7ull, 300ull}) {
      for (const std::uint64_t h : {40ull, 1000ull}) {
        for (const int variant : {0, 1, 2, 3, 4}) {  // (3 and 4: 1 and 2 gated)
          const bool norm = variant == 1 || variant == 3, projection = variant == 2 || variant == 4;
          compiler::MlpShape shape{.m = m, .d = 200, .h = h, .dtype = isa::DType::bf16,
                                   .activation = isa::UnaryOp::relu, .residual = norm, .gated = variant >= 3};
          if (variant > 0) shape.norm = compiler::MatmulShape::Norm{.rms = true, .eps = 1e-6};
          if (projection) shape.projection = compiler::MlpShape::Projection{.dp = 24, .bias = isa::DType::bf16};
          if (projection && !compiler::plan_mlp(shape, chip(cores))) continue;  // (all rows in one block, or none)
          INFO("cores=" << cores << " m=" << m << " h=" << h << " variant=" << variant);
          if (shape.gated && cores == 1 && m == 300 && h == 1000) {
            // Two accumulators: blocks of 75 rows, W1, W3 and W2 read 4 times (3 x 3 x
            // 200 x 1000 values more) against the 2 x 300 x 1000 of hidden activation saved.
            CHECK(compiler::plan_mlp(shape, chip(cores))->mb == 75);
            CHECK_THROWS_AS(compiler::compile_mlp(shape, chip(cores), "spyre::mlp"), compiler::DoesNotFit);
            continue;
          }
          const isa::Program p(compiler::compile_mlp(shape, chip(cores), "spyre::mlp"));
          CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = p.num_streams()}));
          const Moves mv = moves(p);
          CHECK(mv.sent == mv.received);
          // The weights once per block of rows (one core, 1000 hidden units: blocks of 150
          // of the 300 rows, so twice).
          const std::uint64_t blocks = compiler::plan_mlp(shape, chip(cores))->blocks;
          CHECK(blocks == (cores == 1 && m == 300 && h == 1000 ? 2 : 1));
          CHECK(mv.loaded.at(1) == blocks * h * 200 * 2);
          CHECK(mv.loaded.at(3) == blocks * h * 200 * 2);
          if (shape.gated) CHECK(mv.loaded.rbegin()->second == blocks * h * 200 * 2);  // W3, the last argument
          CHECK(mv.stored.at(2) == m * 200 * 2);
        }
      }
    }
  }
}

TEST_CASE("given Llama's gated feed-forward half on the default chip, W1, W3 and W2 are read once") {
  // m 512, d 2048, h 5632, fp16, an RMSNorm prologue with its weight, SiLU on the gate and
  // the residual. 32 cores take ceil(5632 / 32) = 176 hidden units each (a multiple of
  // 8); the two fp32 accumulators take 2 x 512 x 176 x 4 = 704 KiB, so a K step of 256
  // would not fit beside them (two 256 KiB x panels and three W panels of gate and up
  // rows, 3 x 2 x 176 x 256 x 2 = 528 KiB: 1760 KiB in all, over 1638). 192 does, with
  // statistics pieces of 4 rows: 704 + 2 x 192 (x) + 3 x 132 (W) = 1484 KiB, and the
  // norm's fp32 work rows and their load buffers 4 x 2048 x (4 + 2 x 2) = 64 KiB (8 rows
  // would be 128 KiB: 1640 KiB in all with the rest, over 1638). All rows are one block:
  // each weight is read once (2048 x 5632 x 2 bytes), x twice (core 0's panels and the
  // statistics' rows), the residual once, y stored once.
  compiler::MlpShape shape{.m = 512, .d = 2048, .h = 5632, .dtype = isa::DType::fp16,
                           .activation = isa::UnaryOp::silu, .residual = true, .gated = true};
  shape.norm = compiler::MatmulShape::Norm{.rms = true, .eps = 1e-6, .weight = isa::DType::fp16};
  const std::optional<compiler::MlpPlan> plan = compiler::plan_mlp(shape, chip(32));
  REQUIRE(plan);
  CHECK(plan->hc == 176);
  CHECK(plan->mb == 512);
  CHECK(plan->tk == 192);
  CHECK(plan->norm_rows == 4);
  const isa::Program p(compiler::compile_mlp(shape, chip(32), "spyre::mlp[rms_norm,gated_silu,residual]"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 32}));
  const Moves m = moves(p);
  const std::uint64_t x = 512ull * 2048 * 2, w = 2048ull * 5632 * 2;
  // Arguments: 4 the residual, 5 the norm's weight, 6 W3.
  CHECK(m.loaded.at(1) == w);
  CHECK(m.loaded.at(3) == w);
  CHECK(m.loaded.at(6) == w);
  CHECK(m.loaded.at(0) == 2 * x);
  CHECK(m.loaded.at(4) == x);
  CHECK(m.stored.at(2) == x);
  CHECK(m.sent == m.received);
  // Every K step's panel feeds two matmuls (gate and up) per core: 1 + 2048 / 128 = 17
  // steps (a first of 64, 15 of 128, a last of 64) on each of the 32 cores, then phase 2's.
  std::uint64_t matmuls = 0;
  for (std::uint32_t pc = 0; pc < p.stream_length(7); ++pc) {
    matmuls += std::holds_alternative<isa::Matmul>(*p.decode_at(7, pc).inst) ? 1 : 0;
  }
  CHECK(matmuls >= 2 * 17);
  compiler::MlpShape biased = shape;
  biased.bias1 = isa::DType::fp16;
  CHECK_THROWS_WITH(compiler::compile_mlp(biased, chip(32), "spyre::mlp"), ContainsSubstring("takes no b1"));
}

TEST_CASE("given a decode step's feed-forward half, the cores take whole sticks of the weights; a prefill's, even shares") {
  // Llama's gated half with its output projection before (d 2048, h 5632, fp16) on the
  // default chip's 32 cores. Even shares give each core 176 hidden units, 352 bytes of
  // every W2 row: the 32 runs touch 112 sticks of each 11264-byte row's 88 (those they
  // straddle read by two cores), 3072 bytes more a row, 6.3 MB in all. At one row the kernel's time is the
  // weights' (about 78 MB at 149.5 GB/s against a few microseconds of arrays), so the
  // plan takes slices of whole sticks instead: 192 units on 30 cores (the last 64), and
  // p's 2048 columns in 128s (ceil(2048 / 30) = 69, rounded up to a stick of 64) on 16
  // of them; W2 and Wp are then read once, byte for byte. At 512 rows the arrays set the
  // time, and the even 176 stays.
  compiler::Target target = chip(32);
  target.clock_hz = 1.5e9;  // (the default chip's: 2 corelets of 8 x 8 PEs, 8 MACs deep, 1.536 T MAC/s a core)
  target.corelets = 2;
  compiler::MlpShape shape{.m = 1, .d = 2048, .h = 5632, .dtype = isa::DType::fp16,
                           .activation = isa::UnaryOp::silu, .gated = true};
  shape.norm = compiler::MatmulShape::Norm{.rms = true, .eps = 1e-6, .weight = isa::DType::fp16};
  shape.projection = compiler::MlpShape::Projection{.dp = 2048};
  const std::optional<compiler::MlpPlan> plan = compiler::plan_mlp(shape, target);
  REQUIRE(plan);
  CHECK(plan->hc == 192);
  CHECK(plan->cores == 30);
  CHECK(plan->pc == 128);
  const isa::Program p(compiler::compile_mlp(shape, target, "spyre::mlp[linear,residual,rms_norm,gated_silu,residual]"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 30}));
  const Moves m = moves(p);
  const std::uint64_t w = 2048ull * 5632 * 2;
  // Arguments: 4 the norm's weight, 5 p, 6 Wp, 7 W3.
  CHECK(m.loaded.at(1) == w);
  CHECK(m.loaded.at(3) == w);
  CHECK(m.loaded.at(7) == w);
  CHECK(m.loaded.at(6) == 2048ull * 2048 * 2);
  CHECK(m.sent == m.received);
  shape.m = 512;
  const std::optional<compiler::MlpPlan> prefill = compiler::plan_mlp(shape, target);
  REQUIRE(prefill);
  CHECK(prefill->hc == 176);
  CHECK(prefill->cores == 32);
  CHECK(prefill->pc == 64);
}

TEST_CASE("given a fused feed-forward half estimated slower than its separate kernels, the compiler refuses it") {
  // Llama-3-8B's prefill on one of 2 cards of tensor parallelism: 512 rows, d 4096, the
  // card's 7168 hidden units, gated. 224 units a core need two fp32 accumulators of
  // 512 x 224 x 4 = 448 KiB each: beside them only K steps and chunks of 64 fit, and at
  // 64 a fold streams 8 cycles against the array's 14 of fill. The separate kernels
  // (plan_matmul's predictions) are estimated faster, so the op runs them instead.
  compiler::Target target = chip(32);
  target.clock_hz = 1.5e9;  // (the default chip's)
  target.corelets = 2;
  compiler::MlpShape shape{.m = 512, .d = 4096, .h = 7168, .dtype = isa::DType::fp16,
                           .activation = isa::UnaryOp::silu, .gated = true};
  shape.norm = compiler::MatmulShape::Norm{.rms = true, .eps = 1e-6, .weight = isa::DType::fp16};
  const std::optional<compiler::MlpPlan> plan = compiler::plan_mlp(shape, target);
  REQUIRE(plan);
  CHECK(plan->mb == 512);
  CHECK(plan->tk == 64);
  CHECK(plan->estimated_s > compiler::estimate_unfused_s(shape, target));
  CHECK_THROWS_AS(compiler::compile_mlp(shape, target, "spyre::mlp"), compiler::DoesNotFit);
  CHECK_THROWS_WITH(compiler::compile_mlp(shape, target, "spyre::mlp"), ContainsSubstring("for the separate kernels"));
  // Without the target's rates nothing is estimated, and the kernel compiles.
  CHECK_NOTHROW(compiler::compile_mlp(shape, chip(32), "spyre::mlp"));
}

TEST_CASE("given a projection before GPT-2's feed-forward half, x1 is computed on chip and never read back") {
  // x1 = attn Wo^T + bo + x for attn [512 x 2048], Wo [2048 x 2048]: each of the 32 cores
  // reads its 64 columns of attn (512 x 64 x 2 bytes) and of Wo (2048 x 64 x 2), and its
  // 16-row segment of x for the residual: attn, Wo and x once in all. x1's statistics
  // and panels come from the cores' segments over the ring: nothing else reads argument
  // 0, and the only store is y's.
  compiler::MlpShape shape{.m = 512, .d = 2048, .h = 8192, .dtype = isa::DType::fp16, .bias1 = isa::DType::fp16,
                           .bias2 = isa::DType::fp16, .activation = isa::UnaryOp::gelu_tanh};
  shape.norm = compiler::MatmulShape::Norm{.rms = false, .eps = 1e-5, .weight = isa::DType::fp16,
                                           .bias = isa::DType::fp16};
  shape.projection = compiler::MlpShape::Projection{.dp = 2048, .bias = isa::DType::fp16};
  const std::optional<compiler::MlpPlan> plan = compiler::plan_mlp(shape, chip(32));
  REQUIRE(plan);
  CHECK(plan->mb == 512);
  CHECK(plan->tk == 256);
  const isa::Program p(compiler::compile_mlp(shape, chip(32), "spyre::mlp[linear,bias,residual,layer_norm,...]"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 32}));
  const Moves m = moves(p);
  const std::uint64_t x = 512ull * 2048 * 2, w = 2048ull * 8192 * 2;
  // Arguments: 4 b1, 5 b2, 6 and 7 the norm's weight and bias, 8 attn, 9 Wo, 10 bo.
  CHECK(m.loaded.at(0) == x);
  CHECK(m.loaded.at(8) == x);
  CHECK(m.loaded.at(9) == 2048ull * 2048 * 2);
  CHECK(m.loaded.at(1) == w);
  CHECK(m.loaded.at(3) == w);
  CHECK(m.stored.size() == 1);
  CHECK(m.stored.at(2) == x);
  CHECK(m.sent == m.received);
  // Phase 1's panels: per K step each core's 16 rows go round the ring, 31 hops: a core
  // sends its own and forwards 30 (the last it receives has been everywhere).
  CHECK(m.sent.at({5, 6, 0}).size() == 9 * 31);  // 9 K steps (64, then 256 x 7, then 192)
  const compiler::MlpShape both{.m = 8, .d = 64, .h = 64, .residual = true,
                                .projection = compiler::MlpShape::Projection{.dp = 64}};
  CHECK_THROWS_WITH(compiler::compile_mlp(both, chip(4), "spyre::mlp"),
                    ContainsSubstring("no residual (x1 is the residual)"));
}

TEST_CASE("given an MLP whose rows would need blocks that re-read the weights, the compiler refuses it") {
  // 4096 hidden units on 4 cores: 1024 each. All 512 rows would take a 2 MiB fp32
  // accumulator; blocks of 256 fit 1638 KiB (a 1 MiB accumulator, the hidden slice
  // rounded in place, two 32 KiB x panels of 64 columns, three 128 KiB W panels). The
  // weights (2 x 512 x 4096 x 2 bytes = 8 MiB) would then be read twice, 8 MiB more,
  // against the 8 MiB of hidden activation (512 x 4096 x 2, written and read) the fusion
  // saves: refused, and the backend runs the two linears.
  const compiler::MlpShape shape{.m = 512, .d = 512, .h = 4096, .dtype = isa::DType::fp16};
  const std::optional<compiler::MlpPlan> plan = compiler::plan_mlp(shape, chip(4));
  REQUIRE(plan);
  CHECK(plan->mb == 256);
  CHECK(plan->tk == 64);
  CHECK_THROWS_AS(compiler::compile_mlp(shape, chip(4), "spyre::mlp[none]"), compiler::DoesNotFit);
  CHECK_THROWS_WITH(compiler::compile_mlp(shape, chip(4), "spyre::mlp[none]"),
                    ContainsSubstring("blocks of 256 rows read the weights 2 times"));
  // Rows of 16384 fp32 values over 4096 hidden units a core: not one row's accumulator,
  // hidden slice and W panels fit.
  const compiler::MlpShape big{.m = 4096, .d = 16384, .h = 16384, .dtype = isa::DType::fp32};
  CHECK_THROWS_WITH(compiler::compile_mlp(big, chip(4), "spyre::mlp[none]"),
                    ContainsSubstring("no blocking fits the scratchpad's 1677312 bytes"));
  const compiler::MlpShape rms_bias{.m = 8, .d = 64, .h = 64, .norm = compiler::MatmulShape::Norm{
                                                                        .rms = true, .bias = isa::DType::fp16}};
  CHECK_THROWS_WITH(compiler::compile_mlp(rms_bias, chip(4), "spyre::mlp"),
                    ContainsSubstring("an RMSNorm prologue takes no bias"));
  const compiler::MlpShape pitch{.m = 8, .d = 64, .h = 64, .ld1 = 32};
  CHECK_THROWS_WITH(compiler::compile_mlp(pitch, chip(4), "spyre::mlp"), ContainsSubstring("W1's row pitch 32"));
}
