#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "compiler/cost.h"
#include "compiler/group.h"
#include "compiler/pointwise.h"
#include "compiler/pointwise_ir.h"
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

TEST_CASE("given a streaming kernel, the predicted time is its bytes or its vector work, plus two latencies") {
  // 2 cores, 1 GB/s of DRAM, 1e9 vector elements per second per core, 100 ns of DRAM
  // latency and no DMA setup. An fp32 add of 2^20 elements moves 3 x 4 MiB =
  // 12582912 B = 12.582912 ms; each core's 2^19 adds at one cycle per vector take
  // 0.524288 ms: DRAM-bound, plus 2 x 100 ns.
  compiler::Target t{.cores = 2, .scratchpad_bytes = 1 << 20, .stick_bytes = 128, .dram_bytes_per_s = 1e9};
  t.vector_elements_per_s = 1e9;
  t.dram_latency_s = 100e-9;
  compiler::PointwiseKernel add;
  add.shape = {1 << 20};
  add.inputs = {{isa::DType::fp32, {1}}, {isa::DType::fp32, {1}}};
  add.output = {isa::DType::fp32, {1}};
  add.steps = {compiler::Step::binary(isa::BinaryOp::add, isa::DType::fp32, compiler::Value::input(0),
                                      compiler::Value::input(1))};
  CHECK(compiler::predict_pointwise_s(add, t) == Catch::Approx(12.582912e-3 + 200e-9));
  // Exp at 4 cycles a vector, on a vector unit 100 times slower: 2^19 x 4 / 1e7 =
  // 0.2097152 s of vector work per core, now the longer of the two.
  t.vector_elements_per_s = 1e7;
  t.vector_op_cycles[static_cast<std::size_t>(isa::VectorCost::exp)] = 4;
  add.steps.push_back(compiler::Step::unary(isa::UnaryOp::exp, isa::DType::fp32, compiler::Value::step(0)));
  CHECK(compiler::predict_pointwise_s(add, t) == Catch::Approx((1 << 19) * 5 / 1e7 + 200e-9));
}

TEST_CASE("given a copy from a transposed source, blocks are loaded by rows, transposed on the vector unit and stored by rows") {
  const compiler::Target target{.cores = 2, .scratchpad_bytes = 1 << 20, .stick_bytes = 128};
  // x.t().contiguous() of a 300 x 500 fp16 x: shape {300, 500} (innermost first), the
  // source walks dimension 0 with stride 500 and dimension 1 with stride 1.
  compiler::PointwiseKernel k;
  k.shape = {300, 500};
  k.inputs = {{isa::DType::fp16, {500, 1}}};
  k.output = {isa::DType::fp16, {1, 300}};
  const isa::Program p(compiler::compile_pointwise(k, target, "aten::copy_"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1 << 20, .num_streams = 2}));
  // 256 x 256 blocks (four of 128 KiB fit 1 MiB): 2 x 2 blocks, one core each two.
  std::uint64_t elements = 0;
  for (std::uint32_t s = 0; s < 2; ++s) {
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst)) {
        CHECK(l->mem_stride[0] == 1);  // every source row contiguous
        CHECK(l->mem_stride[1] == 500);
      }
      if (const auto* st = std::get_if<isa::DmaStore>(&*d.inst)) {
        CHECK(st->mem_stride[0] == 1);  // every destination row contiguous
        CHECK(st->mem_stride[1] == 300);
      }
      if (const auto* t = std::get_if<isa::VTranspose>(&*d.inst)) elements += std::uint64_t{t->rows} * t->cols;
    }
  }
  CHECK(elements == 300 * 500);
  // A copy whose source is already contiguous along dimension 0 is the pointwise copy.
  k.inputs = {{isa::DType::fp16, {1, 300}}};
  const isa::Program plain(compiler::compile_pointwise(k, target, "aten::copy_"));
  for (std::uint32_t pc = 0; pc < plain.stream_length(0); ++pc) {
    CHECK_FALSE(std::holds_alternative<isa::VTranspose>(*plain.decode_at(0, pc).inst));
  }
}

TEST_CASE("given a broadcast row, each core loads it once per buffer slot, not once per tile") {
  const compiler::Target target{.cores = 1, .scratchpad_bytes = 1 << 20, .stick_bytes = 128};
  // [64 x 8192] + [8192] fp16 on one core: tiles of whole rows (how many depends on
  // the registers that fit), each needing the same row.
  compiler::PointwiseKernel k;
  k.shape = {8192, 64};
  k.inputs = {{isa::DType::fp16, {1, 8192}}, {isa::DType::fp16, {1, 0}}};
  k.output = {isa::DType::fp16, {1, 8192}};
  k.steps = {compiler::Step::binary(isa::BinaryOp::add, isa::DType::fp32, compiler::Value::input(0),
                                    compiler::Value::input(1))};
  const isa::Program p(compiler::compile_pointwise(k, target, "aten::add"));
  int row_loads = 0, full_loads = 0;
  for (std::uint32_t pc = 0; pc < p.stream_length(0); ++pc) {
    const isa::Decoded d = p.decode_at(0, pc);
    if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst)) ++(l->arg == 1 ? row_loads : full_loads);
  }
  CHECK(full_loads > 2);
  CHECK(row_loads == 2);  // slots 0 and 1, however many tiles
}

TEST_CASE("given a copy of an input expanded along dimension 1, each source run is loaded once for all its copies") {
  // K of 2 heads, each a run of 256 Ki fp16 values, repeated for groups of 4 query heads
  // (Hugging Face's repeat_kv): shape {256 Ki, 4, 2}, the source's stride 0 along the
  // groups. Tiles span the 4 copies, so the loads bring in 2 x 256 Ki = 512 Ki values
  // (the source once) and the stores write 4 x 512 Ki = 2 Mi; tiles of the innermost
  // run alone would load 2 Mi.
  const compiler::Target target{.cores = 4, .scratchpad_bytes = 2 << 20, .stick_bytes = 128};
  constexpr std::uint64_t run = 256 * 1024;
  compiler::PointwiseKernel k;
  k.shape = {run, 4, 2};
  k.inputs = {{isa::DType::fp16, {1, 0, static_cast<std::int64_t>(run)}}};
  k.output = {isa::DType::fp16, {1, static_cast<std::int64_t>(run), static_cast<std::int64_t>(4 * run)}};
  k.steps = {compiler::Step::unary(isa::UnaryOp::copy, isa::DType::fp16, compiler::Value::input(0))};
  const isa::Program p(compiler::compile_pointwise(k, target, "aten::copy_"));
  std::uint64_t loaded = 0, stored = 0;
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst)) loaded += std::uint64_t{l->shape[0]} * l->shape[1] * l->shape[2];
      if (const auto* st = std::get_if<isa::DmaStore>(&*d.inst)) stored += std::uint64_t{st->shape[0]} * st->shape[1] * st->shape[2];
    }
  }
  CHECK(loaded == 2 * run);
  CHECK(stored == 8 * run);
}

namespace {

compiler::PointwiseKernel contiguous_add(std::uint64_t n) {
  compiler::PointwiseKernel k;
  k.shape = {n};
  k.inputs = {{isa::DType::fp32, {1}}, {isa::DType::fp32, {1}}};
  k.output = {isa::DType::fp32, {1}};
  k.steps = {compiler::Step::binary(isa::BinaryOp::add, isa::DType::fp32, compiler::Value::input(0),
                                    compiler::Value::input(1))};
  return k;
}

// The launch arguments each stream's DMAs use.
std::vector<std::set<std::uint16_t>> args_by_stream(const isa::Program& p) {
  std::vector<std::set<std::uint16_t>> out(p.num_streams());
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst)) out[s].insert(l->arg);
      if (const auto* st = std::get_if<isa::DmaStore>(&*d.inst)) out[s].insert(st->arg);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("given a group of kernels, each keeps its code with its arguments renumbered, small ones on idle cores") {
  const compiler::Target target{.cores = 4, .scratchpad_bytes = 1 << 20, .stick_bytes = 128};
  // A 4096-element add splits 1024 elements per core; three 32-element adds are one tile
  // each. Arguments: the big add 0..2 (a, b, out), then 3..5, 6..8, 9..11.
  const std::vector<compiler::PointwiseKernel> kernels{contiguous_add(4096), contiguous_add(32), contiguous_add(32),
                                                       contiguous_add(32)};
  const isa::Program p(compiler::compile_pointwise_group(kernels, target, "aten::_foreach_add_.List"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1 << 20, .num_streams = 4}));
  REQUIRE(p.num_streams() == 4);
  const auto args = args_by_stream(p);
  // The big add on every core; every core loads 1024 x 8 bytes of it, so the small ones
  // go to the first cores with the least work: one each on cores 0, 1 and 2.
  for (std::uint32_t s = 0; s < 4; ++s) CHECK(args[s].count(0) == 1);
  CHECK(args[0] == std::set<std::uint16_t>{0, 1, 2, 3, 4, 5});
  CHECK(args[1] == std::set<std::uint16_t>{0, 1, 2, 6, 7, 8});
  CHECK(args[2] == std::set<std::uint16_t>{0, 1, 2, 9, 10, 11});
  CHECK(args[3] == std::set<std::uint16_t>{0, 1, 2});
  // Each stream ends once, after all of its members.
  for (std::uint32_t s = 0; s < 4; ++s) {
    std::uint32_t ends = 0;
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      ends += std::holds_alternative<isa::End>(*p.decode_at(s, pc).inst) ? 1 : 0;
    }
    CHECK(ends == 1);
  }
}

TEST_CASE("given members that synchronise their cores or too many arguments, a group is refused, naming why") {
  isa::ProgramBuilder ring("ring", 2);
  ring.add(0, isa::RingSend{.dst_core = 1, .tag = 1, .sp_addr = 0, .bytes = 64});
  ring.add(1, isa::RingRecv{.src_core = 0, .tag = 1, .sp_addr = 0, .bytes = 64});
  const compiler::GroupMember coupled{ring.build(), 0};
  CHECK_THROWS_WITH(compiler::compile_group({coupled}, 2, "g"), ContainsSubstring("member 0 synchronises its cores"));
  const compiler::Target target{.cores = 2, .scratchpad_bytes = 1 << 20, .stick_bytes = 128};
  // 86 three-argument adds take 258 arguments, past the launch's 256.
  const std::vector<compiler::PointwiseKernel> many(86, contiguous_add(32));
  CHECK_THROWS_WITH(compiler::compile_pointwise_group(many, target, "g"),
                    ContainsSubstring("take 258 launch arguments, a launch has at most 256"));
}

TEST_CASE("given an input broadcast along a small outer dimension, the box spans that dimension and reads the input once") {
  // Rotary embeddings on Q and K of 20 heads together: cos [512 positions x 128] against
  // Q/K [20 heads x 512 positions x 128], head dims split in halves of 64 (shape, innermost
  // first, {64, 2, 512, 20}; cos's stride 0 along the heads). A box spans the three
  // innermost dimensions, so in this order each head's tiles would read cos again: 20 x
  // 512 x 128 values. The heads trade places with the positions, a box is 64 x 2 x 20
  // (one position of every head), and cos's plane of it (64 x 2 values) is read once and
  // copied to the other 19 in the scratchpad: 512 x 128 values in all; q once, 20 x 512
  // x 128 values, and the output stored once.
  const compiler::Target target{.cores = 32, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128};
  compiler::PointwiseKernel k;
  k.shape = {64, 2, 512, 20};
  k.inputs = {{isa::DType::fp16, {1, 64, 128, 0}}, {isa::DType::fp16, {1, 64, 3072, 128}}};
  k.output = {isa::DType::fp16, {1, 64, 128, 65536}};
  k.steps = {compiler::Step::binary(isa::BinaryOp::mul, isa::DType::fp16, compiler::Value::input(0),
                                    compiler::Value::input(1))};
  const isa::Program p(compiler::compile_pointwise(k, target, "spyre::fused[mul]"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = p.num_streams()}));
  std::map<std::uint16_t, std::uint64_t> loaded;
  std::uint64_t stored = 0, copies = 0;
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst)) loaded[l->arg] += std::uint64_t{l->shape[0]} * l->shape[1] * l->shape[2];
      if (const auto* st = std::get_if<isa::DmaStore>(&*d.inst)) stored += std::uint64_t{st->shape[0]} * st->shape[1] * st->shape[2];
      if (const auto* u = std::get_if<isa::VUnary>(&*d.inst)) copies += u->op == isa::UnaryOp::copy ? u->count : 0;
    }
  }
  CHECK(loaded.at(0) == 512 * 128);
  CHECK(loaded.at(1) == 20 * 512 * 128);
  CHECK(stored == 20 * 512 * 128);
  CHECK(copies == 19 * 512 * 128);  // (1 -> 2 -> 4 -> 8 -> 16 -> 20 planes a box)
}

TEST_CASE("given steps, the fused IR encodes them and decodes them back, refusing bad programs by step and field") {
  using compiler::Step;
  using compiler::Value;
  const std::vector<Step> steps = {
      Step::select(isa::DType::fp32, Value::input(1), Value::input(2), Value::constant(0.5)),
      Step::unary(isa::UnaryOp::neg, isa::DType::fp16, Value::step(0)),
      Step::binary(isa::BinaryOp::pow, isa::DType::fp32, Value::constant(10000), Value::step(1)),
      Step::convert(isa::DType::bf16, Value::step(2))};
  const compiler::EncodedSteps ir = compiler::encode_steps(steps);
  REQUIRE(ir.words.size() == 4 * compiler::kStepWords);
  CHECK(ir.constants == std::vector<double>{0.5, 10000});
  // The select's words: kind, op 0, dtype, then (input 1) (input 2) (constant 0).
  CHECK(std::vector<std::int64_t>(ir.words.begin(), ir.words.begin() + 9) ==
        std::vector<std::int64_t>{3, 0, 0, 0, 1, 0, 2, 2, 0});
  // The unary's unused arguments are (kNoArg, 0).
  CHECK(ir.words[9 + 5] == compiler::kNoArg);
  const std::vector<Step> back = compiler::decode_steps(ir.words.data(), ir.words.size(), ir.constants, 3);
  REQUIRE(back.size() == steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CHECK(back[i].kind == steps[i].kind);
    CHECK(back[i].op == steps[i].op);
    CHECK(back[i].dtype == steps[i].dtype);
    REQUIRE(back[i].args.size() == steps[i].args.size());
    for (std::size_t a = 0; a < steps[i].args.size(); ++a) {
      CHECK(back[i].args[a].kind == steps[i].args[a].kind);
      CHECK(back[i].args[a].constant_value == steps[i].args[a].constant_value);
    }
  }
  CHECK_THROWS_WITH(compiler::decode_steps(ir.words.data(), ir.words.size(), ir.constants, 2),
                    "step 0: argument 1: input 2 does not exist: 2 tensor input(s)");
  std::vector<std::int64_t> later = ir.words;
  later[9 + 4] = 1;  // the unary reads step 1, itself
  CHECK_THROWS_WITH(compiler::decode_steps(later.data(), later.size(), ir.constants, 3),
                    "step 1: argument 0: step 1 is not an earlier step");
  CHECK_THROWS_WITH(compiler::decode_steps(ir.words.data(), 10, ir.constants, 3),
                    "the program has 10 integers, expected 9 per step");
  CHECK_THROWS_WITH(compiler::encode_steps({Step{Step::Kind::binary, 0, isa::DType::fp32, {Value::input(0)}}}),
                    "a binary step takes 2 argument(s), got 1");
}
