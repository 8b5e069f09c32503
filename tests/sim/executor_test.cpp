// The one executor under its policies: every generator's programs over a set of shapes,
// and hand-written faults, run on the timed device, the functional (untimed) device and
// the timed device without data. Results, fault records and counters must be
// identical; cycles must not depend on the data policy.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <optional>
#include <cstring>
#include <functional>
#include <random>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "compiler/argreduce.h"
#include "compiler/attention.h"
#include "compiler/dma.h"
#include "compiler/elementwise.h"
#include "compiler/gather.h"
#include "compiler/group.h"
#include "compiler/matmul.h"
#include "compiler/mlp.h"
#include "compiler/pointwise.h"
#include "compiler/reduce.h"
#include "compiler/sequence.h"
#include "compiler/transpose.h"
#include "compiler/triangle.h"
#include "config/derived_figures.h"
#include "functional/numeric.h"
#include "sim_test_support.h"

using namespace spyre;
using namespace spyre::test;
using isa::DType;

namespace {

// A launch argument: a device buffer of `bytes` (filled with random bytes, with valid
// row indices for a gather's index buffer, or with the device's positions vector), or
// a scalar.
struct Arg {
  std::uint64_t bytes = 0;
  std::uint64_t index_rows = 0;  // > 0: indices in [0, index_rows), int64 (wide) or int32
  bool wide = true;
  bool positions = false;  // fp32 0, 1, 2, ... (what arange, cumsum, topk and causal attention read)
};

struct Case {
  std::string name;
  std::vector<std::uint8_t> program;
  std::vector<Arg> args;
};

// What a device made of a case: the bytes of every buffer after the launch, the record
// and the per-core counters.
struct Result {
  std::vector<std::vector<std::uint8_t>> buffers;
  sim::LaunchRecord record;
  std::vector<sim::CoreStats> cores;
  std::uint64_t base = 0;
};

compiler::Target target_of(const config::ChipConfig& c) {
  const auto figures = config::derive(c);
  compiler::Target t;
  t.cores = static_cast<std::uint32_t>(c.cores.count);
  t.scratchpad_bytes = c.cores.scratchpad.usable_bytes;
  t.stick_bytes = static_cast<std::uint32_t>(c.dma.stick_bytes);
  t.core_macs_per_s = figures.peak_macs_per_s[static_cast<int>(config::MacType::fp16)] / t.cores;
  t.dram_bytes_per_s = figures.dram_deliverable_bytes_per_s;
  t.array_rows = static_cast<std::uint32_t>(c.cores.compute_array.rows);
  t.array_cols = static_cast<std::uint32_t>(c.cores.compute_array.cols);
  for (const auto& [dtype, mac] : {std::pair{DType::fp32, config::MacType::fp32}, {DType::fp16, config::MacType::fp16},
                                  {DType::bf16, config::MacType::bf16}, {DType::int8, config::MacType::int8}}) {
    t.simd_depth[static_cast<std::size_t>(dtype)] =
        static_cast<std::uint32_t>(config::simd_depth(c.cores.compute_array.simd_depth, mac));
  }
  return t;
}

Result run_case(sim::Simulation* simulation, sim::Chip& chip, const Case& c, std::uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> addresses;
  for (const Arg& a : c.args) {
    const std::uint64_t addr = *chip.memory().allocate(a.bytes);
    std::uint8_t* p = chip.memory().host(addr);
    if (a.index_rows > 0) {
      const std::uint64_t width = a.wide ? 8 : 4;
      for (std::uint64_t i = 0; i < a.bytes / width; ++i) {
        const std::int64_t v = static_cast<std::int64_t>(rng() % a.index_rows);
        std::memcpy(p + i * width, &v, width);  // (little-endian: int32's are the low word)
      }
    } else if (a.positions) {
      for (std::uint64_t i = 0; i < a.bytes / 4; ++i) {
        const auto v = static_cast<float>(i);
        std::memcpy(p + i * 4, &v, 4);
      }
    } else {
      // Random bytes, kept finite for floats: the top bit of every 2-byte half is clear
      // and bits 14..10 are never all ones (fp16), the rest as drawn.
      for (std::uint64_t i = 0; i < a.bytes; ++i) p[i] = static_cast<std::uint8_t>(rng());
      for (std::uint64_t i = 1; i < a.bytes; i += 2) p[i] &= 0x3b;
    }
    addresses.push_back(addr);
  }
  Result r;
  r.base = chip.memory().base();
  isa::Program program(c.program);
  std::vector<std::uint32_t> cores;
  for (std::uint32_t i = 0; i < program.num_streams(); ++i) cores.push_back(i);
  bool done = false;
  chip.reset_stats();
  chip.launch({.program = std::make_shared<const isa::Program>(std::move(program)), .args = addresses,
               .cores = cores, .name = c.name, .id = 1},
              [&](const sim::LaunchRecord& rec) {
                r.record = rec;
                done = true;
              });
  if (simulation != nullptr) simulation->run();
  REQUIRE(done);
  for (std::size_t i = 0; i < c.args.size(); ++i) {
    const std::uint8_t* p = chip.memory().host(addresses[i]);
    r.buffers.emplace_back(p, p + c.args[i].bytes);
    chip.memory().free(addresses[i]);
  }
  r.cores = chip.core_stats();
  return r;
}

// A fault's text with device addresses made relative to the memory's base (the two
// devices map their memory at different host addresses).
std::string relative(const std::string& text, std::uint64_t base) {
  std::string out;
  const std::regex hex("0x[0-9a-f]+");
  auto it = std::sregex_iterator(text.begin(), text.end(), hex);
  std::size_t last = 0;
  for (; it != std::sregex_iterator(); ++it) {
    out += text.substr(last, it->position() - last);
    const std::uint64_t v = std::stoull(it->str(), nullptr, 16);
    out += v >= base ? "dev+" + std::to_string(v - base) : it->str();
    last = it->position() + it->length();
  }
  return out + text.substr(last);
}

void check_same(const Result& a, const Result& b, bool compare_data) {
  CHECK(a.record.instructions == b.record.instructions);
  CHECK(a.record.macs == b.record.macs);
  CHECK(a.record.vector_elements == b.record.vector_elements);
  CHECK(a.record.dram_read_bytes == b.record.dram_read_bytes);
  CHECK(a.record.dram_write_bytes == b.record.dram_write_bytes);
  CHECK(a.record.ring_bytes == b.record.ring_bytes);
  REQUIRE(a.cores.size() == b.cores.size());
  for (std::size_t i = 0; i < a.cores.size(); ++i) {
    INFO("core " << i);
    CHECK(a.cores[i].instructions == b.cores[i].instructions);
    CHECK(a.cores[i].dma_load_bytes == b.cores[i].dma_load_bytes);
    CHECK(a.cores[i].dma_store_bytes == b.cores[i].dma_store_bytes);
    CHECK(a.cores[i].ring_sent_bytes == b.cores[i].ring_sent_bytes);
    CHECK(a.cores[i].scratchpad_high_water == b.cores[i].scratchpad_high_water);
  }
  REQUIRE(a.record.fault.has_value() == b.record.fault.has_value());
  if (a.record.fault) {
    const sim::Fault &fa = *a.record.fault, &fb = *b.record.fault;
    CHECK(fa.core == fb.core);
    CHECK(fa.stream == fb.stream);
    CHECK(fa.pc == fb.pc);
    CHECK(fa.kernel == fb.kernel);
    CHECK(fa.instruction == fb.instruction);
    CHECK(relative(fa.reason, a.base) == relative(fb.reason, b.base));
    CHECK(fa.address.has_value() == fb.address.has_value());
    if (fa.address && fb.address) CHECK(*fa.address - a.base == *fb.address - b.base);
  }
  if (compare_data) {
    REQUIRE(a.buffers.size() == b.buffers.size());
    for (std::size_t i = 0; i < a.buffers.size(); ++i) {
      INFO("argument " << i);
      CHECK(a.buffers[i] == b.buffers[i]);
    }
  }
}

std::uint64_t bytes_of(std::uint64_t elements, DType t) { return elements * isa::dtype_size(t); }

// Every generator over a set of shapes (ragged ones included), on the CI chip.
std::vector<Case> generator_cases(const compiler::Target& t) {
  using namespace compiler;
  std::vector<Case> cases;
  const auto binary = [&](isa::BinaryOp op, DType d, std::uint64_t n) {
    cases.push_back({"binary", compile_binary(op, d, n, t, "binary"), {{bytes_of(n, d)}, {bytes_of(n, d)}, {bytes_of(n, d)}}});
  };
  binary(isa::BinaryOp::add, DType::fp32, 4097);
  binary(isa::BinaryOp::mul, DType::fp16, 100000);
  binary(isa::BinaryOp::max, DType::bf16, 7);
  for (const auto& [op, n] : {std::pair{isa::UnaryOp::exp, 3000ull}, {isa::UnaryOp::gelu_tanh, 65537ull}}) {
    cases.push_back({"unary", compile_unary(op, DType::fp16, n, t, "unary"), {{bytes_of(n, DType::fp16)}, {bytes_of(n, DType::fp16)}}});
  }
  {
    // out[33 x 64] (fp32) = a (fp16, transposed) * b (fp32 row, broadcast down) + 1.5
    PointwiseKernel k;
    k.shape = {64, 33};
    k.inputs = {{DType::fp16, {33, 1}}, {DType::fp32, {1, 0}}};
    k.output = {DType::fp32, {1, 64}};
    k.steps = {Step::binary(isa::BinaryOp::mul, DType::fp32, Value::input(0), Value::input(1)),
               Step::binary(isa::BinaryOp::add, DType::fp32, Value::step(0), Value::constant(1.5))};
    cases.push_back({"pointwise", compile_pointwise(k, t, "pointwise"),
                     {{bytes_of(64 * 33, DType::fp16)}, {bytes_of(64, DType::fp32)}, {bytes_of(64 * 33, DType::fp32)}}});
  }
  {
    // out[300 x 200] (bf16) = a[200 x 300].t(): the transposed copy (vtranspose).
    PointwiseKernel k;
    k.shape = {200, 300};
    k.inputs = {{DType::bf16, {300, 1}}};
    k.output = {DType::bf16, {1, 200}};
    cases.push_back({"transposed copy", compile_pointwise(k, t, "transpose"),
                     {{bytes_of(200 * 300, DType::bf16)}, {bytes_of(200 * 300, DType::bf16)}}});
  }
  {
    // out[5 x 3 x 70] (fp16) = 2 * normal + uniform, drawn from the state (argument 1):
    // no inputs; the numbers depend on each element's index alone.
    PointwiseKernel k;
    k.shape = {70, 3, 5};
    k.output = {DType::fp16, {1, 70, 210}};
    k.steps = {Step::binary(isa::BinaryOp::mul, DType::fp32, Value::random(isa::RandomDist::normal), Value::constant(2)),
               Step::binary(isa::BinaryOp::add, DType::fp32, Value::step(0), Value::random(isa::RandomDist::uniform))};
    cases.push_back({"random", compile_pointwise(k, t, "normal_"), {{bytes_of(1050, DType::fp16)}, {16}}});
  }
  const auto matmul = [&](MatmulShape s) {
    std::vector<Arg> args = {{bytes_of(s.m * s.k, s.dtype)}, {bytes_of(s.k * s.n, s.dtype)}, {bytes_of(s.m * s.n, s.dtype)}};
    if (s.bias) args.push_back({bytes_of(s.n, *s.bias)});
    cases.push_back({"matmul", compile_matmul(s, t, "matmul"), args});
  };
  matmul({.m = 64, .n = 64, .k = 64});
  matmul({.m = 300, .n = 200, .k = 100});
  matmul({.m = 33, .n = 17, .k = 65, .dtype = DType::fp32, .b_transposed = true});
  matmul({.m = 128, .n = 96, .k = 256, .dtype = DType::bf16, .bias = DType::bf16, .activation = isa::UnaryOp::gelu});
  matmul({.m = 512, .n = 512, .k = 512});
  {
    // A layer norm prologue (its weight and bias the arguments after the matmul's bias)
    // and an RMSNorm one (its weight only): norm(A) made on the chip, never stored.
    MatmulShape s{.m = 100, .n = 256, .k = 512, .dtype = DType::fp16, .b_transposed = true, .bias = DType::fp16};
    s.norm = MatmulShape::Norm{.rms = false, .eps = 1e-5, .weight = DType::fp16, .bias = DType::fp32};
    cases.push_back({"matmul (layer norm prologue)", compile_matmul(s, t, "matmul[layer_norm]"),
                     {{bytes_of(100 * 512, DType::fp16)}, {bytes_of(256 * 512, DType::fp16)},
                      {bytes_of(100 * 256, DType::fp16)}, {bytes_of(256, DType::fp16)}, {bytes_of(512, DType::fp16)},
                      {bytes_of(512, DType::fp32)}}});
    MatmulShape r{.m = 300, .n = 200, .k = 128, .dtype = DType::bf16, .b_transposed = true};
    r.norm = MatmulShape::Norm{.rms = true, .eps = 1e-6, .weight = DType::bf16};
    cases.push_back({"matmul (RMSNorm prologue)", compile_matmul(r, t, "matmul[rms_norm]"),
                     {{bytes_of(300 * 128, DType::bf16)}, {bytes_of(200 * 128, DType::bf16)},
                      {bytes_of(300 * 200, DType::bf16)}, {bytes_of(128, DType::bf16)}}});
  }
  {
    // A gated pair, silu(A W1^T) * (A W3^T): W1 argument 1, W3 argument 3.
    MatmulShape s{.m = 130, .n = 96, .k = 200, .dtype = DType::fp16, .b_transposed = true,
                  .activation = isa::UnaryOp::silu};
    s.b_pieces = {96, 96};
    s.gated = true;
    cases.push_back({"matmul (gated pair)", compile_matmul(s, t, "linear_gated[silu]"),
                     {{bytes_of(130 * 200, DType::fp16)}, {bytes_of(96 * 200, DType::fp16)},
                      {bytes_of(130 * 96, DType::fp16)}, {bytes_of(96 * 200, DType::fp16)}}});
    // B in three pieces (arguments 1, 3 and 4), the second's rows 200 apart.
    MatmulShape c{.m = 100, .n = 160, .k = 128, .dtype = DType::fp16, .b_transposed = true};
    c.b_pieces = {64, 32, 64};
    c.b_piece_ld = {0, 200, 0};
    cases.push_back({"matmul (B in pieces)", compile_matmul(c, t, "linear_concat"),
                     {{bytes_of(100 * 128, DType::fp16)}, {bytes_of(64 * 128, DType::fp16)},
                      {bytes_of(100 * 160, DType::fp16)}, {bytes_of(31 * 200 + 128, DType::fp16)},
                      {bytes_of(64 * 128, DType::fp16)}}});
  }
  {
    // Convolutions as matmuls of an implicit A gathered from a padded channels-last
    // input: two 10x12 images of 8 channels, 3x3 taps, stride (1, 2), dilation (2, 1)
    // into 16 channels; then two groups of 4 channels as batches (dilation (2, 2)),
    // writing their columns of one [48 x 16] result.
    MatmulShape s{.m = 60, .n = 16, .k = 72, .dtype = DType::fp16, .b_transposed = true};
    s.conv = MatmulShape::ConvA{.images = 2, .h = 10, .w = 12, .channels = 8, .group_channels = 8, .kh = 3, .kw = 3,
                                .sh = 1, .sw = 2, .dh = 2, .dw = 1, .ho = 6, .wo = 5};
    cases.push_back({"matmul (convolution)", compile_matmul(s, t, "convolution"),
                     {{bytes_of(2 * 10 * 12 * 8, DType::fp16)}, {bytes_of(16 * 72, DType::fp16)},
                      {bytes_of(60 * 16, DType::fp16)}}});
    MatmulShape g{.m = 48, .n = 8, .k = 36, .dtype = DType::fp32, .b_transposed = true, .batch = 2,
                  .a_batch_stride = 4, .b_batch_stride = 8 * 36};
    g.ldc = 16;
    g.c_batch_stride = 8;
    g.conv = MatmulShape::ConvA{.images = 2, .h = 10, .w = 12, .channels = 8, .group_channels = 4, .kh = 3, .kw = 3,
                                .sh = 1, .sw = 2, .dh = 2, .dw = 2, .ho = 6, .wo = 4};
    cases.push_back({"matmul (grouped convolution)", compile_matmul(g, t, "convolution"),
                     {{bytes_of(2 * 10 * 12 * 8, DType::fp32)}, {bytes_of(2 * 8 * 36, DType::fp32)},
                      {bytes_of(48 * 16, DType::fp32)}}});
  }
  // The other epilogues and forms: a folded batch norm (bias 3, channel scale 4, scalar
  // scale 5), a residual multiply (argument 3), int8 into int32, a transposed A in
  // batches against one B.
  cases.push_back({"matmul (channel scale, scale)",
                   compile_matmul({.m = 64, .n = 48, .k = 32, .dtype = DType::fp16, .b_transposed = true,
                                   .bias = DType::fp32, .activation = isa::UnaryOp::relu, .channel_scale = true,
                                   .scale = true},
                                  t, "conv[bn,relu]"),
                   {{bytes_of(64 * 32, DType::fp16)}, {bytes_of(48 * 32, DType::fp16)},
                    {bytes_of(64 * 48, DType::fp16)}, {bytes_of(48, DType::fp32)}, {bytes_of(48, DType::fp32)},
                    {bytes_of(1, DType::fp32)}}});
  cases.push_back({"matmul (residual multiply)",
                   compile_matmul({.m = 200, .n = 130, .k = 64, .dtype = DType::bf16, .residual = true,
                                   .residual_op = isa::BinaryOp::mul},
                                  t, "matmul[mul]"),
                   {{bytes_of(200 * 64, DType::bf16)}, {bytes_of(64 * 130, DType::bf16)},
                    {bytes_of(200 * 130, DType::bf16)}, {bytes_of(200 * 130, DType::bf16)}}});
  cases.push_back({"matmul (int8 into int32)",
                   compile_matmul({.m = 128, .n = 64, .k = 256, .dtype = DType::int8, .out = DType::int32}, t, "int_mm"),
                   {{bytes_of(128 * 256, DType::int8)}, {bytes_of(256 * 64, DType::int8)},
                    {bytes_of(128 * 64, DType::int32)}}});
  cases.push_back({"matmul (transposed A, batched, B broadcast)",
                   compile_matmul({.m = 40, .n = 50, .k = 60, .dtype = DType::fp32, .a_transposed = true, .batch = 3,
                                   .a_batch_stride = 60 * 40},
                                  t, "bmm"),
                   {{bytes_of(3 * 60 * 40, DType::fp32)}, {bytes_of(60 * 50, DType::fp32)},
                    {bytes_of(3 * 40 * 50, DType::fp32)}}});
  cases.push_back({"reduce rows", compile_reduce({.outer = 100, .reduced = 1000, .outer_stride = 1000, .reduced_stride = 1}, t, "reduce"),
                   {{bytes_of(100 * 1000, DType::fp32)}, {bytes_of(100, DType::fp32)}}});
  cases.push_back({"reduce all (partials over the ring)",
                   compile_reduce({.outer = 1, .reduced = 300000, .in = DType::bf16, .out = DType::fp32, .scale = 0.5}, t,
                                  "reduce"),
                   {{bytes_of(300000, DType::bf16)}, {bytes_of(1, DType::fp32)}}});
  cases.push_back({"reduce columns",
                   compile_reduce({.outer = 300, .reduced = 70, .outer_stride = 1, .reduced_stride = 300,
                                   .in = DType::fp16, .out = DType::fp16, .op = isa::ReduceOp::max}, t, "reduce"),
                   {{bytes_of(300 * 70, DType::fp16)}, {bytes_of(300, DType::fp16)}}});
  cases.push_back({"softmax", compile_softmax({.rows = 64, .cols = 1000, .row_stride = 1000, .in = DType::fp16, .out = DType::fp16}, t, "softmax"),
                   {{bytes_of(64 * 1000, DType::fp16)}, {bytes_of(64 * 1000, DType::fp16)}}});
  cases.push_back({"log_softmax", compile_softmax({.rows = 7, .cols = 33, .row_stride = 40, .log = true, .safe = true}, t, "log_softmax"),
                   {{bytes_of(7 * 40, DType::fp32)}, {bytes_of(7 * 40, DType::fp32)}}});
  cases.push_back({"layer_norm", compile_layer_norm({.rows = 50, .cols = 768, .weight = DType::fp32, .bias = DType::fp32}, t, "layer_norm"),
                   {{bytes_of(50 * 768, DType::fp32)}, {bytes_of(768, DType::fp32)}, {bytes_of(768, DType::fp32)},
                    {bytes_of(50 * 768, DType::fp32)}, {bytes_of(50, DType::fp32)}, {bytes_of(50, DType::fp32)}}});
  cases.push_back({"gather", compile_gather({.count = 100, .rows = 1000, .row_bytes = 256, .wide_index = true}, t, "gather"),
                   {{1000 * 256}, {100 * 8, 1000}, {100 * 256}}});
  // Rows of 48 bytes into a table 64 bytes apart, 3 outer positions 5000 bytes apart.
  cases.push_back({"scatter", compile_scatter({.count = 30, .rows = 70, .row_bytes = 48, .row_stride = 64,
                                               .outer_sizes = {3}, .outer_strides = {5000}, .wide_index = true},
                                              t, "scatter"),
                   {{3 * 5000}, {30 * 8, 70}, {3 * 30 * 48}}});
  cases.push_back({"triangle", compile_triangle({.matrices = 2, .rows = 40, .cols = 50, .element_bytes = 2, .lower = true, .diagonal = 1}, t, "tril"),
                   {{2 * 40 * 50 * 2}, {2 * 40 * 50 * 2}}});
  {
    // The transposed copy called directly: a convolution's weights [16][24][9] made
    // [16][9][24] (whole planes per DMA), and [3][270][130] fp16 made [3][130][270].
    PointwiseKernel k;
    k.shape = {24, 9, 16};
    k.inputs = {{DType::fp32, {9, 1, 216}}};
    k.output = {DType::fp32, {1, 24, 216}};
    std::optional<std::vector<std::uint8_t>> planes = compile_transposed_copy(k, t, "transpose");
    REQUIRE(planes);
    cases.push_back({"transposed copy (planes)", std::move(*planes),
                     {{bytes_of(16 * 24 * 9, DType::fp32)}, {bytes_of(16 * 24 * 9, DType::fp32)}}});
    k.shape = {270, 130, 3};
    k.inputs = {{DType::fp16, {130, 1, 270 * 130}}};
    k.output = {DType::fp16, {1, 270, 270 * 130}};
    std::optional<std::vector<std::uint8_t>> batched = compile_transposed_copy(k, t, "transpose");
    REQUIRE(batched);
    cases.push_back({"transposed copy (batched)", std::move(*batched),
                     {{bytes_of(3 * 270 * 130, DType::fp16)}, {bytes_of(3 * 270 * 130, DType::fp16)}}});
  }
  cases.push_back({"gather (int32 indices)",
                   compile_gather({.count = 77, .rows = 500, .row_bytes = 96, .wide_index = false}, t, "gather"),
                   {{500 * 96}, {.bytes = 77 * 4, .index_rows = 500, .wide = false}, {77 * 96}}});
  // torch.gather along dim 1 of a [3 x 200 x 5] fp16 table: 15 outer positions of 50
  // indices each, the table's elements along the dim 10 bytes apart.
  cases.push_back({"gather along a dim",
                   compile_gather_along({.count = 50, .rows = 200, .elem_bytes = 2, .row_stride = 10,
                                         .outer_sizes = {3, 5}, .outer_strides = {2000, 2}},
                                        t, "gather"),
                   {{3 * 200 * 5 * 2}, {3 * 5 * 50 * 8, 200}, {3 * 5 * 50 * 2}}});
  {
    // _foreach_norm's two launches: each tensor's partials (ord 2), then their norms
    // (here of random partials) as fp32; and ord inf into fp16.
    for (const auto& [ord, out] : {std::pair{2.0, DType::fp32}, {INFINITY, DType::fp16}}) {
      const ForeachNormShape s{.sizes = {1000, 70000, 33}, .dtypes = {DType::fp32, DType::fp16, DType::bf16}, .out = out,
                               .ord = ord};
      const ForeachNormPlan plan = plan_foreach_norm(s, t);
      cases.push_back({"foreach norm partials", compile_foreach_norm_partials(s, t, "_foreach_norm"),
                       {{bytes_of(1000, DType::fp32)}, {bytes_of(70000, DType::fp16)}, {bytes_of(33, DType::bf16)},
                        {bytes_of(plan.partials, DType::fp32)}}});
      cases.push_back({"foreach norm finish", compile_foreach_norm_finish(s, t, "_foreach_norm"),
                       {{bytes_of(plan.partials, DType::fp32)}, {bytes_of(1, out)}, {bytes_of(1, out)},
                        {bytes_of(1, out)}}});
    }
  }
  {
    // Attention over contiguous [batch, heads, length, dim] query, key and value. The
    // arguments: query, key, value, the output [batch, q_len, q_heads, value_dim], the
    // logsumexp (fp32), then the mask, the positions (causal) and the slots (paged).
    const auto attention = [&](const char* name, AttentionShape a) {
      const auto i = [](std::uint64_t v) { return static_cast<std::int64_t>(v); };
      a.q_stride = {i(a.q_heads * a.q_len * a.head_dim), i(a.q_len * a.head_dim), i(a.head_dim)};
      a.k_stride = {i(a.kv_heads * a.kv_len * a.head_dim), i(a.kv_len * a.head_dim), i(a.head_dim)};
      a.v_stride = {i(a.kv_heads * a.kv_len * a.value_dim), i(a.kv_len * a.value_dim), i(a.value_dim)};
      std::vector<Arg> args = {{bytes_of(a.batch * a.q_heads * a.q_len * a.head_dim, a.dtype)},
                               {bytes_of(a.batch * a.kv_heads * a.kv_len * a.head_dim, a.dtype)},
                               {bytes_of(a.batch * a.kv_heads * a.kv_len * a.value_dim, a.dtype)},
                               {bytes_of(a.batch * a.q_len * a.q_heads * a.value_dim, a.dtype)},
                               {bytes_of(a.batch * a.q_heads * a.q_len, DType::fp32)}};
      if (a.mask) {  // [batch, 1, q_len, kv_len], broadcast over the heads
        a.mask_stride = {i(a.q_len * a.kv_len), 0, i(a.kv_len)};
        args.push_back({bytes_of(a.batch * a.q_len * a.kv_len, *a.mask)});
      }
      if (a.causal) args.push_back({.bytes = bytes_of(kCausalBand, DType::fp32), .positions = true});
      cases.push_back({name, compile_attention(a, t, "sdpa"), args});
    };
    attention("attention (mask)", {.batch = 2, .q_heads = 2, .kv_heads = 2, .q_len = 100, .kv_len = 300,
                                   .head_dim = 64, .value_dim = 64, .dtype = DType::fp32, .scale = 0.125,
                                   .mask = DType::fp32});
    attention("attention (causal)", {.batch = 1, .q_heads = 2, .kv_heads = 2, .q_len = 300, .kv_len = 300,
                                     .head_dim = 64, .value_dim = 32, .dtype = DType::bf16, .scale = 0.125,
                                     .causal = true});
    // Grouped-query: a decode step (a block holds a group's 4 heads), and a causal
    // prefill whose 4 cores each take one head's block and share the one key/value
    // head's blocks over the ring.
    attention("attention (grouped-query decode)", {.batch = 1, .q_heads = 8, .kv_heads = 2, .q_len = 1, .kv_len = 700,
                                                   .head_dim = 64, .value_dim = 64, .scale = 0.125});
    attention("attention (grouped-query causal prefill)",
              {.batch = 1, .q_heads = 4, .kv_heads = 1, .q_len = 256, .kv_len = 256, .head_dim = 64, .value_dim = 64,
               .scale = 0.125, .causal = true});
    // A paged KV cache: pools of 1000 token rows [slot, kv_head, dim], two sequences of
    // 300 keys named by int32 slots.
    AttentionShape p{.batch = 2, .q_heads = 4, .kv_heads = 2, .q_len = 1, .kv_len = 300, .head_dim = 64,
                     .value_dim = 64, .scale = 0.125, .paged = true, .pool_slots = 1000, .slots_stride = 300};
    p.q_stride = {4 * 64, 64, 64};
    p.k_stride = p.v_stride = {0, 64, 2 * 64};
    cases.push_back({"attention (paged)", compile_attention(p, t, "paged_attention"),
                     {{bytes_of(2 * 4 * 64, DType::fp16)}, {bytes_of(1000 * 2 * 64, DType::fp16)},
                      {bytes_of(1000 * 2 * 64, DType::fp16)}, {bytes_of(2 * 4 * 64, DType::fp16)},
                      {bytes_of(2 * 4, DType::fp32)}, {.bytes = 2 * 300 * 4, .index_rows = 1000, .wide = false}}});
  }
  {
    // The fused feed-forward half. Arguments: 0 x, 1 W1, 2 y, 3 W2, then b1, b2, the
    // residual, the norm's weight and bias, the projection's p, Wp and bp, and last W3.
    // Plain (both biases, GELU, the residual); gated with an RMSNorm prologue (a short
    // slice on the last core: 1000 hidden units); a layer norm prologue after an
    // output projection whose 24 columns leave a core none.
    cases.push_back({"mlp", compile_mlp({.m = 64, .d = 128, .h = 512, .dtype = DType::fp16, .bias1 = DType::fp16,
                                          .bias2 = DType::fp32, .activation = isa::UnaryOp::gelu_tanh, .residual = true},
                                         t, "mlp"),
                     {{bytes_of(64 * 128, DType::fp16)}, {bytes_of(512 * 128, DType::fp16)},
                      {bytes_of(64 * 128, DType::fp16)}, {bytes_of(128 * 512, DType::fp16)}, {bytes_of(512, DType::fp16)},
                      {bytes_of(128, DType::fp32)}, {bytes_of(64 * 128, DType::fp16)}}});
    MlpShape g{.m = 7, .d = 200, .h = 1000, .dtype = DType::bf16, .activation = isa::UnaryOp::silu, .residual = true,
               .gated = true};
    g.norm = MatmulShape::Norm{.rms = true, .eps = 1e-6, .weight = DType::bf16};
    cases.push_back({"mlp (gated, RMSNorm prologue)", compile_mlp(g, t, "mlp[rms_norm,gated_silu]"),
                     {{bytes_of(7 * 200, DType::bf16)}, {bytes_of(1000 * 200, DType::bf16)},
                      {bytes_of(7 * 200, DType::bf16)}, {bytes_of(200 * 1000, DType::bf16)},
                      {bytes_of(7 * 200, DType::bf16)}, {bytes_of(200, DType::bf16)},
                      {bytes_of(1000 * 200, DType::bf16)}}});
    MlpShape n{.m = 33, .d = 128, .h = 256, .dtype = DType::fp16, .bias1 = DType::fp16,
               .activation = isa::UnaryOp::relu};
    n.norm = MatmulShape::Norm{.rms = false, .eps = 1e-5, .weight = DType::fp16, .bias = DType::fp16};
    n.projection = MlpShape::Projection{.dp = 24, .bias = DType::fp16};
    cases.push_back({"mlp (projection, layer norm prologue)", compile_mlp(n, t, "mlp[linear,layer_norm,relu]"),
                     {{bytes_of(33 * 128, DType::fp16)}, {bytes_of(256 * 128, DType::fp16)},
                      {bytes_of(33 * 128, DType::fp16)}, {bytes_of(128 * 256, DType::fp16)}, {bytes_of(256, DType::fp16)},
                      {bytes_of(128, DType::fp16)}, {bytes_of(128, DType::fp16)}, {bytes_of(33 * 24, DType::fp16)},
                      {bytes_of(128 * 24, DType::fp16)}, {bytes_of(128, DType::fp16)}}});
  }
  {
    // Arg reductions (arguments: in, int64 indices, positions, values): argmax with its
    // values; argmin over strided rows longer than a tile (16384), in chunks; int8.
    const auto argreduce = [&](const char* name, const ArgReduceShape& s) {
      std::vector<Arg> args = {{bytes_of((s.rows - 1) * s.row_stride + s.cols, s.in)},
                               {s.rows * 8},
                               {.bytes = bytes_of(argreduce_positions(s), DType::fp32), .positions = true}};
      if (s.values) args.push_back({bytes_of(s.rows, s.in)});
      cases.push_back({name, compile_argreduce(s, t, "argmax"), args});
    };
    argreduce("argmax", {.rows = 100, .cols = 1000, .row_stride = 1000, .in = DType::fp16, .values = true});
    argreduce("argmin (chunked rows)",
              {.rows = 3, .cols = 20000, .row_stride = 20011, .in = DType::bf16, .max = false});
    argreduce("argmax (int8)", {.rows = 64, .cols = 77, .row_stride = 77, .in = DType::int8});
    // topk (arguments: in, values, int64 indices, positions): the 5 largest of short
    // rows; the 3 smallest of rows longer than a chunk.
    const auto topk = [&](const char* name, const TopkShape& s) {
      cases.push_back({name, compile_topk(s, t, "topk"),
                       {{bytes_of((s.rows - 1) * s.row_stride + s.cols, s.in)}, {bytes_of(s.rows * s.k, s.in)},
                        {s.rows * s.k * 8},
                        {.bytes = bytes_of(std::min<std::uint64_t>(s.cols, 16384), DType::fp32), .positions = true}}});
    };
    topk("topk", {.rows = 50, .cols = 300, .row_stride = 300, .k = 5, .in = DType::fp16});
    topk("topk (smallest, chunked rows)", {.rows = 2, .cols = 20000, .row_stride = 20000, .k = 3, .largest = false});
  }
  {
    // Sequences (the positions last): arange as int64 and as fp16 in tiles of 1024
    // positions, linspace, and running sums: short rows fp16 into fp32, rows longer than
    // a chunk (16384) in fp32, bf16.
    cases.push_back({"arange (int64)",
                     compile_arange({.count = 5000, .start = -100, .step = 3, .int64 = true}, 1024, t, "arange"),
                     {{5000 * 8}, {.bytes = 1024 * 4, .positions = true}}});
    cases.push_back({"arange",
                     compile_arange({.count = 3000, .start = 7, .step = -2, .out = DType::fp16}, 1024, t, "arange"),
                     {{bytes_of(3000, DType::fp16)}, {.bytes = 1024 * 4, .positions = true}}});
    cases.push_back({"linspace",
                     compile_linspace({.count = 1001, .start = -1, .end = 1, .step = 0.002, .out = DType::fp16}, 256,
                                      t, "linspace"),
                     {{bytes_of(1001, DType::fp16)}, {.bytes = 256 * 4, .positions = true}}});
    const auto cumsum = [&](const CumsumShape& s) {
      cases.push_back({"cumsum", compile_cumsum(s, t, "cumsum"),
                       {{bytes_of(s.rows * s.cols, s.in)}, {bytes_of(s.rows * s.cols, s.out)},
                        {.bytes = bytes_of(std::min<std::uint64_t>(s.cols, 16384), DType::fp32), .positions = true}}});
    };
    cumsum({.rows = 30, .cols = 500, .in = DType::fp16, .out = DType::fp32});
    cumsum({.rows = 2, .cols = 20000});
    cumsum({.rows = 100, .cols = 33, .in = DType::bf16, .out = DType::bf16});
  }
  {
    // Horizontal fusion: independent members in one launch, their arguments renumbered
    // (an add's 3, an exp's 2, a row reduction's 2, a gather's 3); and two pointwise
    // kernels as one.
    cases.push_back({"group", compile_group({{compile_binary(isa::BinaryOp::add, DType::fp32, 5000, t, "add"), 3},
                                             {compile_unary(isa::UnaryOp::exp, DType::fp16, 3000, t, "exp"), 2},
                                             {compile_reduce({.outer = 50, .reduced = 300, .outer_stride = 300}, t,
                                                             "sum"), 2},
                                             {compile_gather({.count = 40, .rows = 100, .row_bytes = 128}, t,
                                                             "gather"), 3}},
                                            t.cores, "group"),
                     {{bytes_of(5000, DType::fp32)}, {bytes_of(5000, DType::fp32)}, {bytes_of(5000, DType::fp32)},
                      {bytes_of(3000, DType::fp16)}, {bytes_of(3000, DType::fp16)},
                      {bytes_of(50 * 300, DType::fp32)}, {bytes_of(50, DType::fp32)},
                      {100 * 128}, {40 * 8, 100}, {40 * 128}}});
    PointwiseKernel mul;  // out[1000] (fp16) = a * 3
    mul.shape = {1000};
    mul.inputs = {{DType::fp16, {1}}};
    mul.output = {DType::fp16, {1}};
    mul.steps = {Step::binary(isa::BinaryOp::mul, DType::fp32, Value::input(0), Value::constant(3))};
    PointwiseKernel add;  // out[70 x 40] (fp32) = a + b (bf16, a row broadcast down)
    add.shape = {40, 70};
    add.inputs = {{DType::fp32, {1, 40}}, {DType::bf16, {1, 0}}};
    add.output = {DType::fp32, {1, 40}};
    add.steps = {Step::binary(isa::BinaryOp::add, DType::fp32, Value::input(0), Value::input(1))};
    cases.push_back({"pointwise group", compile_pointwise_group({mul, add}, t, "foreach"),
                     {{bytes_of(1000, DType::fp16)}, {bytes_of(1000, DType::fp16)}, {bytes_of(70 * 40, DType::fp32)},
                      {bytes_of(40, DType::bf16)}, {bytes_of(70 * 40, DType::fp32)}}});
  }
  return cases;
}

// Hand-written programs that fault: in the instruction check, in DMA addressing, on a
// data-dependent gather index, on a missing argument, in a ring deadlock.
std::vector<Case> fault_cases() {
  std::vector<Case> cases;
  const auto add = [&](const char* name, std::uint32_t streams, const std::function<void(isa::ProgramBuilder&)>& body,
                       std::vector<Arg> args) {
    isa::ProgramBuilder b(name, streams);
    body(b);
    cases.push_back({name, b.build(), std::move(args)});
  };
  add("past allocation", 1, [](auto& b) { b.add(0, load(0, 0, 4000, 100)).add(0, wait_for(0)).add(0, isa::End{}); },
      {{4096}});
  add("missing argument", 1, [](auto& b) { b.add(0, load(0, 2, 0, 8)).add(0, isa::End{}); }, {{4096}});
  add("gather index", 1,
      [](auto& b) {
        b.add(0, load(0, 1, 0, 4, DType::int32))
            .add(0, wait_for(0))
            .add(0, isa::DmaGather{.token = 1, .wide_index = false, .arg = 0, .index_sp = 0, .count = 4, .sp_addr = 64,
                                   .row_bytes = 16, .offset = 0, .rows = 8, .row_stride = 16})
            .add(0, wait_for(1))
            .add(0, isa::End{});
      },
      {{128}, {16}});  // random int32 indices: almost surely outside [0, 8)
  add("deadlock", 2,
      [](auto& b) {
        b.add(0, isa::RingRecv{.token = 0, .src_core = 1, .tag = 7, .sp_addr = 0, .bytes = 64}).add(0, isa::End{});
        b.add(1, isa::Barrier{.id = 1, .count = 2}).add(1, isa::End{});
      },
      {});
  add("matmul past the scratchpad", 1,
      [](auto& b) {
        b.add(0, isa::Matmul{.a = 0, .b = 0, .c = 0xfffff000, .m = 64, .n = 64, .k = 64, .lda = 64, .ldb = 64,
                             .ldc = 64, .in = DType::fp16, .out = DType::fp32})
            .add(0, isa::End{});
      },
      {});
  return cases;
}

}  // namespace

TEST_CASE("given every generator's programs, the timed and functional devices agree on results and counters") {
  const config::ChipConfig cfg = ci_chip();
  sim::Simulation simulation;
  sim::Chip& timed = simulation.add_chip(cfg);
  sim::Chip& bookkeeping = simulation.add_chip(cfg, sim::Timing::timed, sim::Data::none);
  sim::Chip functional(cfg, 9, sim::Timing::untimed);
  std::uint32_t seed = 1;
  for (const Case& c : generator_cases(target_of(cfg))) {
    INFO(c.name << " (seed " << seed << ")");
    const Result t = run_case(&simulation, timed, c, seed);
    const Result f = run_case(nullptr, functional, c, seed);
    CHECK_FALSE(t.record.fault);
    check_same(t, f, true);
    CHECK(f.record.end == f.record.start);  // no time passes untimed
    // Without data: the same counters and exactly the same cycles (the gathers' indices
    // and paged attention's slots stay real, so they are included).
    const Result n = run_case(&simulation, bookkeeping, c, seed);
    check_same(t, n, false);
    CHECK(n.record.end - n.record.start == t.record.end - t.record.start);
    ++seed;
  }
}

// Case c run on the CI chip timed with data and timed without: neither faults, and both
// take the same cycles. Returns (with data, without).
std::pair<Result, Result> with_and_without_data(const Case& c, std::uint32_t seed) {
  const config::ChipConfig cfg = ci_chip();
  sim::Simulation simulation;
  sim::Chip& timed = simulation.add_chip(cfg);
  sim::Chip& bookkeeping = simulation.add_chip(cfg, sim::Timing::timed, sim::Data::none);
  Result t = run_case(&simulation, timed, c, seed);
  Result n = run_case(&simulation, bookkeeping, c, seed);
  REQUIRE_FALSE(t.record.fault);
  REQUIRE_FALSE(n.record.fault);
  CHECK(n.record.end - n.record.start == t.record.end - t.record.start);
  return {std::move(t), std::move(n)};
}

TEST_CASE("given no data, integers converted from float values are zeros, not the scratchpad's old bytes") {
  // Core 0 loads 16 int32 (arg 0) to scratchpad 0 and 16 fp32 (arg 1) to 256, converts
  // the floats to int32 over the first load, and stores the result (arg 2). With data
  // the store holds the converted floats; without, zeros (never arg 0's integers, which
  // were real data in the scratchpad).
  using compiler::make_dma;
  isa::ProgramBuilder b("convert over old integers", 1);
  b.add(0, make_dma<isa::DmaLoad>(0, DType::int32, 0, 0, 0, {16, 1, 1}, {1, 0, 0}))
      .add(0, make_dma<isa::DmaLoad>(0, DType::fp32, 1, 0, 256, {16, 1, 1}, {1, 0, 0}))
      .add(0, isa::Wait{.token_mask = 1})
      .add(0, isa::VConvert{.from = DType::fp32, .to = DType::int32, .src = 256, .dst = 0, .count = 16})
      .add(0, make_dma<isa::DmaStore>(1, DType::int32, 2, 0, 0, {16, 1, 1}, {1, 0, 0}))
      .add(0, isa::Wait{.token_mask = 2})
      .add(0, isa::End{});
  const Case c{"convert over old integers", b.build(), {{.bytes = 64}, {.bytes = 64}, {.bytes = 64}}};
  const auto [t, n] = with_and_without_data(c, 5);
  CHECK(n.buffers[0] == t.buffers[0]);  // the same random integers went in
  CHECK(std::any_of(n.buffers[0].begin(), n.buffers[0].end(), [](std::uint8_t v) { return v != 0; }));
  CHECK(std::all_of(n.buffers[2].begin(), n.buffers[2].end(), [](std::uint8_t v) { return v == 0; }));
  CHECK(t.buffers[2] != t.buffers[0]);  // with data, the floats' conversions
}

TEST_CASE("given no data, an int8 matmul's int32 result is zeros, with data the exact products") {
  // Core 0 loads A (8x32 int8, arg 0) to 0, B (32x8 int8, arg 1) to 256 and old int32
  // values (arg 2) to 1024, where the matmul then writes C (8x8 int32), and stores C
  // (arg 3). With data: C = A x B exactly (checked against integer arithmetic here).
  // Without: zeros, not the old values, and the same cycles.
  using compiler::make_dma;
  isa::ProgramBuilder b("int8 matmul", 1);
  b.add(0, make_dma<isa::DmaLoad>(0, DType::int8, 0, 0, 0, {256, 1, 1}, {1, 0, 0}))
      .add(0, make_dma<isa::DmaLoad>(0, DType::int8, 1, 0, 256, {256, 1, 1}, {1, 0, 0}))
      .add(0, make_dma<isa::DmaLoad>(0, DType::int32, 2, 0, 1024, {64, 1, 1}, {1, 0, 0}))
      .add(0, isa::Wait{.token_mask = 1})
      .add(0, isa::Matmul{.a = 0, .b = 256, .c = 1024, .m = 8, .n = 8, .k = 32, .lda = 32, .ldb = 8, .ldc = 8,
                          .in = DType::int8, .out = DType::int32})
      .add(0, make_dma<isa::DmaStore>(1, DType::int32, 3, 0, 1024, {64, 1, 1}, {1, 0, 0}))
      .add(0, isa::Wait{.token_mask = 2})
      .add(0, isa::End{});
  const Case c{"int8 matmul", b.build(), {{.bytes = 256}, {.bytes = 256}, {.bytes = 256}, {.bytes = 256}}};
  const auto [t, n] = with_and_without_data(c, 7);
  const auto a = reinterpret_cast<const std::int8_t*>(t.buffers[0].data());
  const auto bm = reinterpret_cast<const std::int8_t*>(t.buffers[1].data());
  std::vector<std::int32_t> want(64, 0), got(64), none(64), old(64);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      for (int k = 0; k < 32; ++k) want[i * 8 + j] += std::int32_t{a[i * 32 + k]} * bm[k * 8 + j];
    }
  }
  std::memcpy(got.data(), t.buffers[3].data(), 256);
  std::memcpy(none.data(), n.buffers[3].data(), 256);
  std::memcpy(old.data(), n.buffers[2].data(), 256);
  CHECK(got == want);
  CHECK(std::any_of(old.begin(), old.end(), [](std::int32_t v) { return v != 0; }));
  CHECK(std::all_of(none.begin(), none.end(), [](std::int32_t v) { return v == 0; }));
}

TEST_CASE("given programs that fault, the timed and functional devices record the same fault") {
  const config::ChipConfig cfg = ci_chip();
  sim::Simulation simulation;
  sim::Chip& timed = simulation.add_chip(cfg);
  sim::Chip functional(cfg, 0, sim::Timing::untimed);
  for (const Case& c : fault_cases()) {
    INFO(c.name);
    const Result t = run_case(&simulation, timed, c, 42);
    const Result f = run_case(nullptr, functional, c, 42);
    REQUIRE(t.record.fault);
    check_same(t, f, true);
  }
}

TEST_CASE("given a DMA and a ring message, the counters follow their definitions") {
  // CI chip: 4 cores, 2 memory stops with 2 of the 4 channels each: the ring's 6 stops
  // are c0 c1 m0 c2 c3 m1. Stream 0 runs on core 0 (stop 0). A 256-byte load from the
  // base is 2 sticks of 128 B = 256 B on channel 0 (interleave 256 B) behind m0 (stop
  // 2): 2 hops -> 512 ring link bytes. A 100-byte message from core 0 to core 2 (stop
  // 3) crosses 3 links (a tie, clockwise) -> 300. A 4-byte store at offset 130 is
  // charged its whole stick, 128 B, also 2 hops -> 256.
  const config::ChipConfig cfg = ci_chip();
  REQUIRE(cfg.cores.count == 4);
  REQUIRE(cfg.ring.memory_stops == 2);
  REQUIRE(cfg.memory.channels == 4);
  REQUIRE(cfg.memory.interleave_bytes == 256);
  sim::Simulation simulation;
  sim::Chip& timed = simulation.add_chip(cfg);
  sim::Chip functional(cfg, 1, sim::Timing::untimed);
  isa::ProgramBuilder b("counters", 3);
  b.add(0, load(0, 0, 0, 128))
      .add(0, wait_for(0))
      .add(0, isa::RingSend{.token = 1, .dst_core = 2, .tag = 1, .sp_addr = 0, .bytes = 100})
      .add(0, store(0, 0, 130, 2))
      .add(0, wait_for(0))
      .add(0, wait_for(1))
      .add(0, isa::End{});
  b.add(1, isa::End{});
  b.add(2, isa::RingRecv{.token = 0, .src_core = 0, .tag = 1, .sp_addr = 0, .bytes = 100}).add(2, isa::End{});
  const Case c{"counters", b.build(), {{4096}}};
  for (sim::Chip* chip : {&timed, &functional}) {
    const Result r = run_case(chip == &timed ? &simulation : nullptr, *chip, c, 3);
    INFO((chip == &timed ? "timed" : "functional"));
    REQUIRE_FALSE(r.record.fault);
    CHECK(r.record.dram_read_bytes == 256);
    CHECK(r.record.dram_write_bytes == 128);
    CHECK(r.record.ring_bytes == 512 + 300 + 256);
    CHECK(r.cores[0].ring_sent_bytes == 100);
    CHECK(r.cores[0].dma_load_bytes == 256);
    CHECK(r.cores[0].dma_store_bytes == 4);
  }
}

TEST_CASE("given a chip with DL16 numerics, fp16 math rounds through DL16 on the way in and out") {
  // 1 + 2^-10 is an fp16 value but not a DL16 one (9 fraction bits): on the card it is
  // a tie that rounds up to 1 + 2^-9. So is the sum 1 + 2^-10 of 1 and 2^-10.
  const config::ChipConfig dl16 = ci_chip({"numerics.half_precision=dl16"});
  REQUIRE(dl16.half_through_dl16());
  sim::Chip chip(dl16, 0, sim::Timing::untimed);
  sim::Chip plain(ci_chip(), 1, sim::Timing::untimed);
  const std::vector<float> a = {1.0f, 1.0f + 1.0f / 1024, 3.0f, 70000.0f}, b = {1.0f / 1024, 0.0f, 0.25f, 1.0f};
  // DL16: 1 + 2^-10 -> 1 + 2^-9; the input 1 + 2^-10 itself -> 1 + 2^-9; 3.25 exact;
  // 70000 (fp16: inf) takes DL16's merged NaN/infinity code, which reads back as NaN.
  // Plain fp16: the exact sums, and inf.
  const std::vector<float> want_dl16 = {1.0f + 1.0f / 512, 1.0f + 1.0f / 512, 3.25f, NAN};
  const std::vector<float> want_plain = {1.0f + 1.0f / 1024, 1.0f + 1.0f / 1024, 3.25f, INFINITY};
  for (sim::Chip* c : {&chip, &plain}) {
    const std::uint64_t pa = *c->memory().allocate(64), pb = *c->memory().allocate(64), po = *c->memory().allocate(64);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::uint16_t ha = sim::numeric::f32_to_fp16(a[i]), hb = sim::numeric::f32_to_fp16(b[i]);
      std::memcpy(c->memory().host(pa) + 2 * i, &ha, 2);
      std::memcpy(c->memory().host(pb) + 2 * i, &hb, 2);
    }
    const compiler::Target t = target_of(c->config());
    isa::Program program(compiler::compile_binary(isa::BinaryOp::add, DType::fp16, a.size(), t, "add"));
    std::optional<sim::LaunchRecord> record;
    c->launch({.program = std::make_shared<const isa::Program>(std::move(program)), .args = {pa, pb, po},
               .cores = {0, 1, 2, 3}, .name = "add", .id = 1},
              [&](const sim::LaunchRecord& r) { record = r; });
    REQUIRE(record);
    REQUIRE_FALSE(record->fault);
    const auto& want = c == &chip ? want_dl16 : want_plain;
    for (std::size_t i = 0; i < a.size(); ++i) {
      std::uint16_t h;
      std::memcpy(&h, c->memory().host(po) + 2 * i, 2);
      INFO((c == &chip ? "dl16 " : "ieee ") << i);
      const float got = sim::numeric::fp16_to_f32(h);
      if (std::isnan(want[i])) {
        CHECK(std::isnan(got));
      } else {
        CHECK(got == want[i]);
      }
    }
  }
  sim::numeric::set_half_through_dl16(false);  // (per thread: leave this one as it was)
}
