#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/cost.h"
#include "compiler/does_not_fit.h"
#include "compiler/matmul.h"
#include "compiler/elementwise.h"
#include "spyre/isa/program.h"

using namespace spyre;
using Catch::Matchers::ContainsSubstring;

// The CI chip's figures (configs/spyre-ci.yaml) as the compiler sees them.
compiler::Target ci_chip() {
  return {.cores = 4, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128, .core_macs_per_s = 1.536e12,
          .dram_bytes_per_s = 149.504e9, .array_rows = 8, .array_cols = 8, .simd_depth = {2, 8, 8, 26, 0, 0}};
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
  const compiler::Target target = ci_chip();
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

TEST_CASE("given a residual, each tile's is loaded when the tile starts and added after its rounding") {
  // The CI chip and the shape of the test above, which tests/python/test_compile.py
  // runs with a residual against a separate add: still two tiles per core a K step
  // apart (64x64 tiles: the residual takes 2 x 64 x 64 x 2 = 16 KiB more).
  const compiler::Target target = ci_chip();
  compiler::MatmulShape shape{.m = 1152, .n = 700, .k = 2200, .dtype = isa::DType::fp16};
  shape.residual = true;
  const compiler::MatmulPlan plan = compiler::plan_matmul(shape, target);
  REQUIRE(plan.rows_per_core == 2);
  REQUIRE(plan.tm == 64);
  const isa::Program p(compiler::compile_matmul(shape, target, "spyre::matmul[residual]"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 4}));
  // Stream 0, in order: L for a residual load (argument 3), M for a matmul, C for the
  // fp32 -> fp16 conversion, A for the add of the residual, W for the wait on its token,
  // S for a store. The first block: both residual tiles load before its first matmul;
  // a tile's add follows its conversion and precedes its store.
  std::string order;
  for (std::uint32_t pc = 0; pc < p.stream_length(0); ++pc) {
    const isa::Decoded d = p.decode_at(0, pc);
    if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst); l != nullptr && l->arg == 3) {
      order += 'L';
      CHECK(l->token == 15);
      CHECK(l->shape[0] == 64);          // a tile's row of 64 values
      CHECK(l->mem_stride[1] == 700);    // rows of the residual, n apart
    }
    if (std::holds_alternative<isa::Matmul>(*d.inst)) order += 'M';
    if (std::holds_alternative<isa::VConvert>(*d.inst)) order += 'C';
    if (const auto* v = std::get_if<isa::VBinary>(&*d.inst); v != nullptr && v->op == isa::BinaryOp::add) {
      order += 'A';
      CHECK(v->dtype == isa::DType::fp16);
    }
    if (const auto* w = std::get_if<isa::Wait>(&*d.inst); w != nullptr && w->token_mask == (1u << 15)) order += 'W';
    if (std::holds_alternative<isa::DmaStore>(*d.inst)) order += 'S';
  }
  CHECK(order.rfind("LLM", 0) == 0);
  CHECK(order.find("MCWAS") != std::string::npos);  // the first finished tile waits for its residual
  CHECK(order.find("MCAS") != std::string::npos);   // the second finds it loaded
  // Every converted piece (a tile, or a row piece of the core's last) gets its add
  // before its store.
  const auto count = [&](char c) { return std::count(order.begin(), order.end(), c); };
  CHECK(count('A') == count('C'));
  CHECK(count('A') == count('S'));
  // A batched residual, or one with rows shorter than n, is a clear error.
  compiler::MatmulShape batched = shape;
  batched.batch = 2;
  CHECK_THROWS_WITH(compiler::compile_matmul(batched, target, "x"),
                    ContainsSubstring("x: a residual epilogue takes an unbatched matmul, got a batch of 2"));
  compiler::MatmulShape narrow = shape;
  narrow.ldr = 600;
  CHECK_THROWS_WITH(compiler::compile_matmul(narrow, target, "x"),
                    ContainsSubstring("x: the residual's row pitch 600 is shorter than its rows (700)"));
  // A gate multiplies instead (the same program with mul in place of every add); other
  // ops are an error.
  compiler::MatmulShape gate = shape;
  gate.residual_op = isa::BinaryOp::mul;
  const isa::Program g(compiler::compile_matmul(gate, target, "spyre::matmul[gate]"));
  std::size_t muls = 0;
  for (std::uint32_t pc = 0; pc < g.stream_length(0); ++pc) {
    const isa::Decoded d = g.decode_at(0, pc);
    if (const auto* v = std::get_if<isa::VBinary>(&*d.inst)) {
      CHECK(v->op == isa::BinaryOp::mul);
      ++muls;
    }
  }
  CHECK(static_cast<std::ptrdiff_t>(muls) == count('A'));
  compiler::MatmulShape sub = shape;
  sub.residual_op = isa::BinaryOp::sub;
  CHECK_THROWS_WITH(compiler::compile_matmul(sub, target, "x"),
                    ContainsSubstring("x: a residual is added or multiplied, got sub"));
}

TEST_CASE("given B in pieces, each panel row is loaded from the piece that holds it, and all of B is read") {
  // Q, K and V projections of one input as one kernel: pieces 300, 100 and 300 wide
  // (arguments 1, 3 and 4), K = 2200, stored transposed (each [n_p x K]). With 64-wide
  // tiles, the tiles over columns 256-319 and 384-447 cross a piece boundary and take
  // two DMAs per panel part.
  const compiler::Target target = ci_chip();
  compiler::MatmulShape shape{.m = 1152, .n = 700, .k = 2200, .dtype = isa::DType::fp16, .b_transposed = true};
  shape.b_pieces = {300, 100, 300};
  shape.b_piece_ld = {0, 2304, 0};  // the second piece's rows 2304 apart (a slice of a wider matrix)
  REQUIRE(compiler::plan_matmul(shape, target).tn == 64);
  const isa::Program p(compiler::compile_matmul(shape, target, "spyre::linear_concat"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 4}));
  const std::map<std::uint16_t, std::pair<std::uint64_t, std::uint64_t>> pieces{  // arg: rows, row pitch
      {1, {300, 2200}}, {3, {100, 2304}}, {4, {300, 2200}}};
  std::map<std::uint16_t, std::vector<std::vector<bool>>> seen;
  for (const auto& [arg, piece] : pieces) seen[arg].assign(piece.first, std::vector<bool>(2200, false));
  std::size_t b_loads = 0;
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      const auto* l = std::get_if<isa::DmaLoad>(&*d.inst);
      if (l == nullptr || l->arg == 0) continue;
      REQUIRE(pieces.count(l->arg) == 1);  // A (0) or a piece of B; nothing else is loaded
      ++b_loads;
      const auto [rows, ld] = pieces.at(l->arg);
      CHECK(l->mem_stride[1] == static_cast<std::int64_t>(ld));
      const std::uint64_t first = l->offset / 2, row = first / ld, k0 = first % ld;
      REQUIRE(row + l->shape[1] <= rows);  // never past its piece's last row
      REQUIRE(k0 + l->shape[0] <= 2200);
      for (std::uint64_t r = row; r < row + l->shape[1]; ++r) {
        for (std::uint64_t k = k0; k < k0 + l->shape[0]; ++k) seen[l->arg][r][k] = true;
      }
    }
  }
  CHECK(b_loads > 0);
  for (const auto& [arg, rows] : seen) {
    for (const auto& r : rows) CHECK(std::all_of(r.begin(), r.end(), [](bool b) { return b; }));
  }
  // Widths that do not add up to n, an epilogue, or untransposed pieces are clear errors.
  compiler::MatmulShape wrong = shape;
  wrong.b_pieces = {300, 100, 200};
  CHECK_THROWS_WITH(compiler::compile_matmul(wrong, target, "x"),
                    ContainsSubstring("x: B's pieces are 600 columns wide in all, n is 700"));
  compiler::MatmulShape biased = shape;
  biased.bias = isa::DType::fp16;
  CHECK_THROWS_WITH(compiler::compile_matmul(biased, target, "x"),
                    ContainsSubstring("x: B in pieces takes transposed float pieces"));
  compiler::MatmulShape plain = shape;
  plain.b_transposed = false;
  CHECK_THROWS_WITH(compiler::compile_matmul(plain, target, "x"),
                    ContainsSubstring("x: B in pieces takes transposed float pieces"));
  compiler::MatmulShape short_ld = shape;
  short_ld.b_piece_ld = {0, 2000, 0};
  CHECK_THROWS_WITH(compiler::compile_matmul(short_ld, target, "x"),
                    ContainsSubstring("x: B piece 1's row pitch 2000 is shorter than K (2200)"));
}

// Every (group, pixel, k) of a convolution's implicit A that the A panels' DMAs gather,
// found by inverting each element's input offset. K must be one chunk (tk = K), so an
// element's scratchpad position within its slot, (sp / size) mod (tm x K), is
// (row in tile) x K + k.
std::vector<std::vector<std::vector<int>>> gathered(const isa::Program& p, const compiler::MatmulShape& s,
                                                    std::uint64_t tm, std::uint64_t size) {
  const auto& c = *s.conv;
  std::vector<std::vector<std::vector<int>>> seen(s.batch, std::vector<std::vector<int>>(s.m, std::vector<int>(s.k)));
  for (std::uint32_t st = 0; st < p.num_streams(); ++st) {
    for (std::uint32_t pc = 0; pc < p.stream_length(st); ++pc) {
      const isa::Decoded d = p.decode_at(st, pc);
      const auto* l = std::get_if<isa::DmaLoad>(&*d.inst);
      if (l == nullptr || l->arg != 0) continue;
      for (std::uint32_t i2 = 0; i2 < l->shape[2]; ++i2) {
        for (std::uint32_t i1 = 0; i1 < l->shape[1]; ++i1) {
          for (std::uint32_t i0 = 0; i0 < l->shape[0]; ++i0) {
            const std::int64_t at = static_cast<std::int64_t>(l->offset / size) + i0 * l->mem_stride[0] +
                                    i1 * l->mem_stride[1] + i2 * l->mem_stride[2];
            const std::uint64_t sp = l->sp_addr / size + i0 + i1 * l->sp_stride[0] + i2 * l->sp_stride[1];
            const std::uint64_t pos = sp % (tm * s.k), r = pos / s.k, k = pos % s.k;
            REQUIRE(at >= 0);
            const auto e = static_cast<std::uint64_t>(at);
            const std::uint64_t ch = e % c.channels, ix = e / c.channels % c.w, iy = e / c.channels / c.w % c.h;
            const std::uint64_t image = e / c.channels / c.w / c.h;
            REQUIRE(image < c.images);
            const std::uint64_t g = ch / c.group_channels, kc = k % c.group_channels;
            const std::uint64_t ky = k / (c.kw * c.group_channels), kx = k / c.group_channels % c.kw;
            REQUIRE(ch % c.group_channels == kc);  // the tap's channel, in the batch's group
            REQUIRE(g < s.batch);
            REQUIRE(iy >= ky * c.dh);
            REQUIRE(ix >= kx * c.dw);
            REQUIRE((iy - ky * c.dh) % c.sh == 0);
            REQUIRE((ix - kx * c.dw) % c.sw == 0);
            const std::uint64_t oy = (iy - ky * c.dh) / c.sh, ox = (ix - kx * c.dw) / c.sw;
            REQUIRE(oy < c.ho);
            REQUIRE(ox < c.wo);
            const std::uint64_t pixel = (image * c.ho + oy) * c.wo + ox;
            REQUIRE(pixel % tm == r);  // in its row of the panel
            ++seen[g][pixel][k];
          }
        }
      }
    }
  }
  return seen;
}

TEST_CASE("given a convolution, A's panels gather every pixel's taps from the input, and bad shapes are errors") {
  const compiler::Target target = ci_chip();
  // Two padded 10x12 images of 8 channels, 3x3 taps, stride (1, 2), dilation (2, 1):
  // ho = (10 - 2 x 2 - 1) / 1 + 1 = 6, wo = (12 - 2 - 1) / 2 + 1 = 5; m = 2 x 6 x 5 = 60,
  // k = 3 x 3 x 8 = 72 (one K chunk), 16 output channels.
  compiler::MatmulShape s{.m = 60, .n = 16, .k = 72, .dtype = isa::DType::fp16, .b_transposed = true};
  s.conv = compiler::MatmulShape::ConvA{.images = 2, .h = 10, .w = 12, .channels = 8, .group_channels = 8, .kh = 3,
                                        .kw = 3, .sh = 1, .sw = 2, .dh = 2, .dw = 1, .ho = 6, .wo = 5};
  compiler::MatmulPlan plan = compiler::plan_matmul(s, target);
  REQUIRE(plan.tk == 72);
  isa::Program p(compiler::compile_matmul(s, target, "aten::convolution"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 4}));
  // Each element once per grid column that loads A (16 columns: one tile wide, one loader).
  const auto once = gathered(p, s, plan.tm, 2);
  for (const auto& pixel : once[0]) {
    for (const int n : pixel) CHECK(n == 1);
  }
  // dw = 1 and one group: a tap row (kw x channels = 24 values) is contiguous, one run
  // of K per DMA.
  for (std::uint32_t pc = 0; pc < p.stream_length(0); ++pc) {
    const isa::Decoded d = p.decode_at(0, pc);
    const auto* l = std::get_if<isa::DmaLoad>(&*d.inst);
    if (l != nullptr && l->arg == 0) CHECK(l->shape[0] == 24);
  }

  // Two groups of 4 channels (batches: the second group's A starts at channel 4), dw 2:
  // wo = (12 - 2 x 2 - 1) / 2 + 1 = 4, m = 2 x 6 x 4 = 48, k = 3 x 3 x 4 = 36; runs of K
  // are single taps (4 values).
  compiler::MatmulShape g{.m = 48, .n = 8, .k = 36, .dtype = isa::DType::fp32, .b_transposed = true, .batch = 2,
                          .a_batch_stride = 4, .b_batch_stride = 8 * 36};
  g.ldc = 16;
  g.c_batch_stride = 8;
  g.conv = compiler::MatmulShape::ConvA{.images = 2, .h = 10, .w = 12, .channels = 8, .group_channels = 4, .kh = 3,
                                        .kw = 3, .sh = 1, .sw = 2, .dh = 2, .dw = 2, .ho = 6, .wo = 4};
  plan = compiler::plan_matmul(g, target);
  REQUIRE(plan.tk == 36);
  p = isa::Program(compiler::compile_matmul(g, target, "aten::convolution"));
  const auto seen = gathered(p, g, plan.tm, 4);
  for (const auto& group : seen) {
    for (const auto& pixel : group) {
      for (const int n : pixel) CHECK(n == 1);
    }
  }
  // Each group's result goes to its 8 columns of the 16-wide C.
  std::set<std::uint64_t> columns;
  for (std::uint32_t st = 0; st < p.num_streams(); ++st) {
    for (std::uint32_t pc = 0; pc < p.stream_length(st); ++pc) {
      const isa::Decoded dec = p.decode_at(st, pc);
      const auto* d = std::get_if<isa::DmaStore>(&*dec.inst);
      if (d == nullptr) continue;
      CHECK(d->mem_stride[1] == 16);
      columns.insert(d->offset / 4 % 16);
    }
  }
  CHECK(columns == std::set<std::uint64_t>{0, 8});

  // 1x1, stride 1: an image's pixels are evenly spaced (8 channels apart), so each panel
  // part is one 2-D DMA; with 7 input rows for 6 output rows (the last row unread) the
  // images are not, and a part crossing from one image to the next takes two.
  for (const std::uint64_t h : {6, 7}) {
    compiler::MatmulShape e{.m = 60, .n = 16, .k = 8, .dtype = isa::DType::fp16, .b_transposed = true};
    e.conv = compiler::MatmulShape::ConvA{.images = 2, .h = h, .w = 5, .channels = 8, .group_channels = 8, .kh = 1,
                                          .kw = 1, .sh = 1, .sw = 1, .dh = 1, .dw = 1, .ho = 6, .wo = 5};
    plan = compiler::plan_matmul(e, target);
    p = isa::Program(compiler::compile_matmul(e, target, "aten::convolution"));
    const auto even = gathered(p, e, plan.tm, 2);
    for (const auto& pixel : even[0]) CHECK(pixel[0] == 1);
    std::uint64_t a_loads = 0, crossing = 0;
    for (std::uint64_t i0 = 0; i0 < 60; i0 += plan.tm) {
      for (std::uint32_t part = 0; part < 2; ++part) {  // (compiler::kPanelPieces)
        const std::uint64_t rows = std::min<std::uint64_t>(plan.tm, 60 - i0);
        const std::uint64_t r0 = i0 + rows * part / 2, r1 = i0 + rows * (part + 1) / 2;
        if (r1 > r0) ++a_loads, crossing += r0 < 30 && r1 > 30 ? 1 : 0;
      }
    }
    std::uint64_t dmas = 0;
    for (std::uint32_t st = 0; st < p.num_streams(); ++st) {
      for (std::uint32_t pc = 0; pc < p.stream_length(st); ++pc) {
        const isa::Decoded d = p.decode_at(st, pc);
        const auto* l = std::get_if<isa::DmaLoad>(&*d.inst);
        if (l != nullptr && l->arg == 0) {
          ++dmas;
          CHECK(l->shape[2] == 1);
        }
      }
    }
    CHECK(crossing > 0);
    CHECK(dmas == a_loads + (h == 7 ? crossing : 0));
  }

  compiler::MatmulShape wrong = s;
  wrong.m = 61;
  CHECK_THROWS_WITH(compiler::compile_matmul(wrong, target, "x"),
                    ContainsSubstring("x: a convolution of 2 images into 6x5 pixels over 3x3 taps of 8 channels is "
                                      "m = 60, k = 72; got m = 61, k = 72"));
  wrong = s;  // transposed (a weight gradient's A^T): m is the taps, k the pixels
  wrong.a_transposed = true;
  wrong.m = 72;
  wrong.k = 59;
  CHECK_THROWS_WITH(compiler::compile_matmul(wrong, target, "x"),
                    ContainsSubstring("is k = 60, m = 72; got k = 59, m = 72"));
  wrong.k = 60;
  CHECK_NOTHROW(compiler::compile_matmul(wrong, target, "x"));
  wrong = s;
  wrong.conv->ho = 7;  // (7 - 1) x 1 + 2 x 2 = 10: row 10 of a 10-row input
  wrong.m = 70;
  CHECK_THROWS_WITH(compiler::compile_matmul(wrong, target, "x"),
                    ContainsSubstring("x: the convolution reads input pixel (10, 10) of a 10x12 input"));
  wrong = g;
  wrong.a_batch_stride = 5;
  CHECK_THROWS_WITH(compiler::compile_matmul(wrong, target, "x"),
                    ContainsSubstring("x: 2 groups of 4 channels, 5 apart, do not fit the input's 8 channels"));
  wrong = s;
  wrong.ldc = 8;
  CHECK_THROWS_WITH(compiler::compile_matmul(wrong, target, "x"),
                    ContainsSubstring("x: C's row pitch 8 is shorter than its rows (16)"));
}

TEST_CASE("a convolution's least traffic counts the input positions it reads") {
  // ResNet's stem, 7 taps at stride 2 over 224 with padding 3: o * 2 + t - 3 runs from -3
  // to 111 x 2 + 6 - 3 = 225, every one of the 224 rows.
  CHECK(compiler::conv_positions_read(224, 112, 7, 2, 1, 3) == 224);
  // A 1x1 convolution of stride 2: every other row, 28 of 56.
  CHECK(compiler::conv_positions_read(56, 28, 1, 2, 1, 0) == 28);
  // 3 taps at stride 4 over 10: 0 1 2, 4 5 6, 8 9 (10 is past the input): 8.
  CHECK(compiler::conv_positions_read(10, 3, 3, 4, 1, 0) == 8);
  // Dilation 3, 2 taps, stride 1, 2 outputs over 5: 0 3, 1 4: 4 (2 is never read).
  CHECK(compiler::conv_positions_read(5, 2, 2, 1, 3, 0) == 4);
  // Padding is not read: 3 taps, padding 1, 8 outputs over 8: -1 .. 8 inside [0, 8).
  CHECK(compiler::conv_positions_read(8, 8, 3, 1, 1, 1) == 8);
}

TEST_CASE("given a gated pair, each tile computes the gate and the up projection from one A panel") {
  // SwiGLU's silu(x W1^T) * (x W3^T) at 1152 x 700 x 2200 on the CI chip: W1 is argument
  // 1, W3 argument 3, both [700 x 2200]. A tile's B panel is its 64 gate rows then its
  // 64 up rows; two matmuls per A panel; the finished tile: silu on the gate's
  // accumulator, both rounded to fp16, multiplied, stored (C is 1152 x 700).
  const compiler::Target target = ci_chip();
  compiler::MatmulShape shape{.m = 1152, .n = 700, .k = 2200, .dtype = isa::DType::fp16, .b_transposed = true};
  shape.b_pieces = {700, 700};
  shape.gated = true;
  shape.activation = isa::UnaryOp::silu;
  const compiler::MatmulPlan plan = compiler::plan_matmul(shape, target);
  CHECK(plan.rows_per_core == 1);
  const isa::Program p(compiler::compile_matmul(shape, target, "spyre::linear_gated[silu]"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 4}));
  std::map<std::uint16_t, std::vector<std::vector<bool>>> seen;
  for (const std::uint16_t arg : {1, 3}) seen[arg].assign(700, std::vector<bool>(2200, false));
  std::string order;
  std::uint64_t stored = 0;
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst); l != nullptr && l->arg != 0) {
        REQUIRE((l->arg == 1 || l->arg == 3));
        const std::uint64_t first = l->offset / 2, row = first / 2200, k0 = first % 2200;
        REQUIRE(row + l->shape[1] <= 700);
        for (std::uint64_t r = row; r < row + l->shape[1]; ++r) {
          for (std::uint64_t k = k0; k < k0 + l->shape[0]; ++k) seen[l->arg][r][k] = true;
        }
      }
      if (s != 0) {
        if (const auto* st = std::get_if<isa::DmaStore>(&*d.inst)) stored += std::uint64_t{st->shape[0]} * st->shape[1];
        continue;
      }
      if (std::holds_alternative<isa::Matmul>(*d.inst)) order += 'M';
      if (const auto* u = std::get_if<isa::VUnary>(&*d.inst); u != nullptr && u->op == isa::UnaryOp::silu) order += 'G';
      if (std::holds_alternative<isa::VConvert>(*d.inst)) order += 'C';
      if (const auto* v = std::get_if<isa::VBinary>(&*d.inst); v != nullptr && v->op == isa::BinaryOp::mul) order += 'X';
      if (const auto* st = std::get_if<isa::DmaStore>(&*d.inst)) {
        order += 'S';
        stored += std::uint64_t{st->shape[0]} * st->shape[1];
        CHECK(st->mem_stride[1] == 700);  // rows of C, n apart
      }
    }
  }
  for (const auto& [arg, rows] : seen) {
    for (const auto& r : rows) CHECK(std::all_of(r.begin(), r.end(), [](bool b) { return b; }));
  }
  CHECK(stored == 1152 * 700);  // C once, n columns wide
  const auto count = [&](char c) { return std::count(order.begin(), order.end(), c); };
  CHECK(count('M') % 2 == 0);
  CHECK(order.find("MMGCCXS") != std::string::npos);  // a finished tile's epilogue
  CHECK(count('G') == count('S'));
  CHECK(count('C') == 2 * count('S'));
  // The pair's pieces must both be n wide.
  compiler::MatmulShape wrong = shape;
  wrong.b_pieces = {700, 600};
  CHECK_THROWS_WITH(compiler::compile_matmul(wrong, target, "x"),
                    ContainsSubstring("x: a gated pair takes B as two pieces of n = 700 columns"));
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

TEST_CASE("given a what-if array of 16 rows, a core's last matmul runs in pieces of whole 16-row folds") {
  // One core, a 200-row tile: the last K step's matmul splits into at most 4 pieces of
  // whole folds: ceil(ceil(200 / 4) / 16) x 16 = 64 rows (64, 64, 64, 8) on a 16-row
  // array; on an 8-row array ceil(50 / 8) x 8 = 56 (56, 56, 56, 32).
  for (const auto& [rows, piece] : {std::pair{16u, 64u}, std::pair{8u, 56u}}) {
    const compiler::Target target{.cores = 1, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128,
                                  .array_rows = rows, .array_cols = rows};
    const isa::Program p(
        compiler::compile_matmul({.m = 200, .n = 64, .k = 64, .dtype = isa::DType::fp16}, target, "aten::mm"));
    std::vector<std::uint32_t> ms;
    for (std::uint32_t pc = 0; pc < p.stream_length(0); ++pc) {
      const auto d = p.decode_at(0, pc);
      if (const auto* mm = std::get_if<isa::Matmul>(&*d.inst)) ms.push_back(mm->m);
    }
    INFO("array rows " << rows);
    REQUIRE(ms.size() >= 2);
    CHECK(ms.front() == piece);
    std::uint32_t total = 0;
    for (const auto m : ms) total += m;
    CHECK(total == 200);
  }
}

TEST_CASE("given a plan, the predicted GEMM time follows the stage model's arithmetic") {
  // One core, one 8x8 array (os, depth 1) at 1 GHz, 1 GB/s of DRAM, 128-byte sticks,
  // no latencies: 64x64x64 fp16 is one 64x64x64 tile, one K step, one stage.
  compiler::Target t{.cores = 1, .scratchpad_bytes = 1 << 20, .stick_bytes = 128, .core_macs_per_s = 1e9,
                     .dram_bytes_per_s = 1e9, .array_rows = 8, .array_cols = 8, .simd_depth = {1, 1, 1, 1, 0, 0}};
  t.clock_hz = 1e9;
  const compiler::MatmulShape shape{.m = 64, .n = 64, .k = 64, .dtype = isa::DType::fp16};
  const auto plan = compiler::plan_matmul(shape, t);
  REQUIRE(plan.tm == 64);
  REQUIRE(plan.tn == 64);
  REQUIRE(plan.tk == 64);
  REQUIRE(plan.rows_per_core == 1);
  // compute: 8 x 8 folds x (64 + 14) - 1 = 4991 cycles = 4.991 us;
  // DRAM: A, B and C are 64 rows of 128 bytes (one stick each): 3 x 8192 B = 24.576 us;
  // one stage: its load, the longer of that DRAM time and its panels through the core's
  // one engine (at the DRAM rate, no engine rate given: A and B, 2 x 8192 B = 16.384 us),
  // then 4.991; the last tile: its conversion, 4096 values at one per cycle (no vector
  // figures given) = 4.096 us, and its store, 8192 B = 8.192 us.
  CHECK(compiler::predict_matmul_s(shape, plan, t) * 1e6 == Catch::Approx(24.576 + 4.991 + 4.096 + 8.192));
  // K = 72: A's rows are 144 bytes, stored back to back. One DMA of 32 rows charges each
  // stick once (a row starting in the last stick of the one before pays only the sticks
  // after): 32 x 144 = 4608 B = 36 sticks, twice = 9216 B, not 64 rows x 2 sticks =
  // 16384 B. B: 72 rows of 128 B = 9216 B; C 8192 B: 26.624 us of DRAM; compute
  // 64 x (72 + 14) - 1 = 5503 cycles.
  const compiler::MatmulShape k72{.m = 64, .n = 64, .k = 72, .dtype = isa::DType::fp16};
  const auto plan72 = compiler::plan_matmul(k72, t);
  REQUIRE(plan72.tk == 72);
  CHECK(compiler::predict_matmul_s(k72, plan72, t) * 1e6 == Catch::Approx(26.624 + 5.503 + 4.096 + 8.192));
  // Unknown rates: no prediction.
  t.clock_hz = 0;
  CHECK(compiler::predict_matmul_s(shape, plan, t) == 0);
}

TEST_CASE("the predicted GEMM time charges a K step's loads to the DRAM channels they land on") {
  // 4 channels of 0.25 GB/s, a 128-byte interleave; 64x64x256 fp16 on one core as one
  // 64x64 tile in four K steps of 64. A's rows are 512 B apart: K step s reads 128 B of
  // each row, all on channel s (64 x 128 = 8192 B); B's rows are 128 B apart, so each
  // step spreads over the four (2048 B each). Loads of 2 steps are in flight at once
  // (one grid row: 2 + 0), so channel s carries 8192 + 2 x 2048 = 12288 B per 2 steps:
  // 6144 B per step at 0.25 GB/s = 24.576 us, against (32768 + 32768 + 8192) B / 1 GB/s
  // / 4 steps = 18.432 us on average: the channel sets the step.
  compiler::Target t{.cores = 1, .scratchpad_bytes = 64 << 10, .stick_bytes = 128, .core_macs_per_s = 1e9,
                     .dram_bytes_per_s = 1e9, .array_rows = 8, .array_cols = 8, .simd_depth = {1, 1, 1, 1, 0, 0}};
  t.clock_hz = 1e9;
  t.dram_channels = 4;
  t.dram_interleave_bytes = 128;
  t.dram_channels_skewed = false;  // memory.channel_map: interleaved
  const compiler::MatmulShape shape{.m = 64, .n = 64, .k = 256, .dtype = isa::DType::fp16};
  // (The plan as given; the planner would pick narrower tiles here.)
  const compiler::MatmulPlan plan{.tm = 64, .tn = 64, .tk = 64, .super_blocks = 1};
  // Four stages of 24.576 us of DRAM against 64 x (64 + 14) - 1 = 4991 cycles: the first
  // stage's load (its panels through the engine take 16.384 us), three stages of
  // 24.576 + 10% of 4.991, the last compute; the last tile's conversion and store.
  const double stage = 24.576 + 0.1 * 4.991;
  CHECK(compiler::predict_matmul_s(shape, plan, t) * 1e6 == Catch::Approx(24.576 + 3 * stage + 4.991 + 4.096 + 8.192));
  // Skewed: row r of A in step s is on channel (s + the base-4 digits of r) mod 4, so each
  // step's A spreads evenly (2048 B a channel, as B's): 8192 B per 2 steps on each
  // channel is 16.384 us a step, under the average 18.432 us, which sets the step.
  t.dram_channels_skewed = true;
  CHECK(compiler::predict_matmul_s(shape, plan, t) * 1e6 ==
        Catch::Approx(18.432 + 3 * (18.432 + 0.1 * 4.991) + 4.991 + 4.096 + 8.192));
  // Channels unknown: the average rate.
  t.dram_channels = 0;
  CHECK(compiler::predict_matmul_s(shape, plan, t) * 1e6 ==
        Catch::Approx(18.432 + 3 * (18.432 + 0.1 * 4.991) + 4.991 + 4.096 + 8.192));
}

TEST_CASE("given a channel scale, each finished tile is multiplied by its columns' scales before the bias is added") {
  // A folded batch norm: C x scale[j] + shift[j]. Arguments: 0 A, 1 B, 2 C, 3 the bias
  // (shift), 4 the channel scale, then the scalar scale (5) when there is one.
  const compiler::MatmulShape shape{.m = 64, .n = 48, .k = 32, .dtype = isa::DType::fp16, .b_transposed = true,
                                    .bias = isa::DType::fp32, .activation = isa::UnaryOp::relu,
                                    .channel_scale = true, .scale = true};
  const isa::Program p(compiler::compile_matmul(shape, ci_chip(), "spyre::conv[bn,relu]"));
  std::set<std::uint16_t> loaded;
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    // In each stream, the epilogue's order: the scalar scale, the channel scale (a row
    // broadcast multiply), the shift (a row broadcast add), the activation.
    std::vector<std::string> epilogue;
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      if (const auto* l = std::get_if<isa::DmaLoad>(&*d.inst)) loaded.insert(l->arg);
      if (const auto* v = std::get_if<isa::VBinary>(&*d.inst)) {
        epilogue.push_back(std::string(isa::to_string(v->op)) + "/" + std::string(isa::to_string(v->bcast)));
      }
      if (const auto* u = std::get_if<isa::VUnary>(&*d.inst); u != nullptr && u->op == isa::UnaryOp::relu) {
        epilogue.emplace_back("relu");
      }
    }
    if (epilogue.empty()) continue;
    REQUIRE(epilogue.size() >= 4);
    CHECK(std::vector<std::string>(epilogue.begin(), epilogue.begin() + 4) ==
          std::vector<std::string>{"mul/scalar", "mul/row", "add/row", "relu"});
  }
  CHECK(loaded == std::set<std::uint16_t>{0, 1, 3, 4, 5});
  compiler::MatmulShape no_bias = shape;
  no_bias.bias = std::nullopt;
  CHECK_THROWS_WITH(compiler::compile_matmul(no_bias, ci_chip(), "spyre::conv"),
                    ContainsSubstring("a channel scale takes a float matmul with a bias"));
}

TEST_CASE("given a norm prologue, the first core of each grid row reads its rows once more for their statistics") {
  // One row of tiles (m = 64): the cores of each grid row take the statistics of those
  // 64 rows once for all their tiles, each a share of the rows, in pieces of whole rows
  // (K = 512 values) on the statistics' tokens (14 and 15): 64 x 512 x 2 bytes per grid
  // row of each group that has work; the shares go to the grid row's first core.
  // The norm's weight and bias (K values each) are the arguments after C and the bias.
  compiler::MatmulShape shape{.m = 64, .n = 1024, .k = 512, .dtype = isa::DType::fp16, .b_transposed = true,
                              .bias = isa::DType::fp16};
  shape.norm = compiler::MatmulShape::Norm{.rms = false, .eps = 1e-5, .weight = isa::DType::fp16,
                                           .bias = isa::DType::fp32};
  const compiler::MatmulPlan plan = compiler::plan_matmul(shape, ci_chip());
  REQUIRE(plan.tm == 64);
  const isa::Program p(compiler::compile_matmul(shape, ci_chip(), "spyre::matmul[layer_norm,bias]"));
  CHECK_NOTHROW(p.validate(isa::Limits{.scratchpad_bytes = 1638 * 1024, .num_streams = 4}));
  std::uint64_t stats_bytes = 0;
  std::set<std::uint16_t> args;
  std::uint32_t stats_streams = 0;
  for (std::uint32_t s = 0; s < p.num_streams(); ++s) {
    std::uint64_t here = 0;
    for (std::uint32_t pc = 0; pc < p.stream_length(s); ++pc) {
      const isa::Decoded d = p.decode_at(s, pc);
      const auto* l = std::get_if<isa::DmaLoad>(&*d.inst);
      if (l == nullptr) continue;
      args.insert(l->arg);
      if (l->arg == 0 && l->token >= 14) here += std::uint64_t{l->shape[0]} * l->shape[1] * l->shape[2] * 2;
    }
    stats_bytes += here;
    stats_streams += here > 0 ? 1 : 0;
  }
  const std::uint64_t groups = std::min<std::uint64_t>(plan.groups, plan.super_blocks);  // those with work
  CHECK(stats_streams == groups * plan.grid_rows * plan.grid_cols);
  CHECK(stats_bytes == groups * plan.grid_rows * 64 * 512 * 2);
  CHECK(args == std::set<std::uint16_t>{0, 1, 3, 4, 5});
  // A transposed A (or a batch, or a convolution) has no row-major rows to normalise.
  compiler::MatmulShape transposed = shape;
  transposed.a_transposed = true;
  CHECK_THROWS_WITH(compiler::compile_matmul(transposed, ci_chip(), "mm"),
                    ContainsSubstring("a norm prologue takes a float, row-major A of one batch"));
  compiler::MatmulShape rms_bias = shape;
  rms_bias.norm->rms = true;
  CHECK_THROWS_WITH(compiler::compile_matmul(rms_bias, ci_chip(), "mm"),
                    ContainsSubstring("an RMSNorm prologue takes no bias and a weight of A's dtype (fp16)"));
}

TEST_CASE("given a norm prologue that would crowd out the matmul's own tiling, the compiler refuses it") {
  // K = 65536: the matmul's own tiling of 512x512 on the CI chip (256 x 256 tiles, K in
  // chunks of 512: 2 x (256 x 512 + 512 x 256) x 2 + 256 x 256 x (4 + 2) bytes = 1.4 MiB)
  // leaves less than the prologue's one-row statistics piece and fp32 weight need
  // (65536 x 8 + 65536 x 4 bytes = 768 KiB). A smaller tiling would cost the matmul more
  // than the norm's own pass: DoesNotFit, which the backend answers with the norm's kernel.
  compiler::MatmulShape shape{.m = 512, .n = 512, .k = 65536, .dtype = isa::DType::fp16, .b_transposed = true};
  REQUIRE(compiler::plan_matmul(shape, ci_chip()).tm == 256);
  shape.norm = compiler::MatmulShape::Norm{.rms = true, .eps = 1e-6, .weight = isa::DType::fp16};
  CHECK_THROWS_AS(compiler::compile_matmul(shape, ci_chip(), "spyre::linear_concat[rms_norm]"), compiler::DoesNotFit);
  CHECK_THROWS_WITH(compiler::compile_matmul(shape, ci_chip(), "spyre::linear_concat[rms_norm]"),
                    ContainsSubstring("do not fit beside the matmul's own tiling (256x256x512)"));
}
