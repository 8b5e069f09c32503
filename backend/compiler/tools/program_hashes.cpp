// spyre-program-hashes: a hash of every program the matmul, MLP, attention and
// pointwise generators write over a fixed corpus of shapes (about 2,500, on four
// targets: a 32-core chip, a 4-core chip with a small scratchpad, one whose rates are
// unknown, and one with 16 x 16 arrays and 8 MiB). A refactor of the compiler that
// should change no program is checked by running it before and after and diffing the
// outputs: a differing line names the program whose instructions changed
// (backend/README.md). Each line: target, generator and index, then the FNV-1a hash and
// size of the program's bytes, or the generator's refusal.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>
#include "compiler/attention.h"
#include "compiler/matmul.h"
#include "compiler/mlp.h"
#include "compiler/pointwise.h"
using namespace spyre;
using namespace spyre::compiler;
using isa::DType;

namespace {

std::uint64_t fnv(const std::vector<std::uint8_t>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (auto c : v) { h ^= c; h *= 1099511628211ull; }
  return h;
}
void run(const std::string& name, const std::function<std::vector<std::uint8_t>()>& f) {
  try { auto v = f(); std::printf("%s %016llx %zu\n", name.c_str(), (unsigned long long)fnv(v), v.size()); }
  catch (const std::exception& e) { std::printf("%s throws %s\n", name.c_str(), e.what()); }
}
std::vector<Target> targets() {
  Target a{.cores = 32, .scratchpad_bytes = 1638 * 1024, .stick_bytes = 128, .core_macs_per_s = 1.536e12,
           .dram_bytes_per_s = 149.504e9, .array_rows = 8, .array_cols = 8, .simd_depth = {2, 8, 8, 26, 0, 0}};
  a.clock_hz = 1.12e9; a.dram_channels = 8; a.dram_interleave_bytes = 256;
  Target b = a; b.cores = 4; b.scratchpad_bytes = 256 * 1024;
  Target c{.cores = 8, .scratchpad_bytes = 2 * 1024 * 1024};  // rates unknown
  Target d = a; d.scratchpad_bytes = 8 * 1024 * 1024; d.array_rows = 16; d.array_cols = 16;
  return {a, b, c, d};
}
}  // namespace

int main() {
  auto ts = targets();
  for (std::size_t ti = 0; ti < ts.size(); ++ti) {
    const Target& t = ts[ti];
    const std::string T = "t" + std::to_string(ti) + " ";
    int idx = 0;
    auto mm = [&](MatmulShape s) { run(T + "mm" + std::to_string(idx++), [&] { return compile_matmul(s, t, "mm"); }); };
    for (auto dt : {DType::fp16, DType::bf16, DType::fp32}) {
      for (auto [m, n, k] : std::vector<std::array<std::uint64_t, 3>>{{64, 64, 64}, {100, 300, 77}, {1024, 1024, 1024},
                                                                      {2048, 2048, 2048}, {1, 4096, 4096}, {512, 768, 3072},
                                                                      {4096, 64, 4096}, {33, 17, 1000}}) {
        mm({.m = m, .n = n, .k = k, .dtype = dt});
        mm({.m = m, .n = n, .k = k, .dtype = dt, .b_transposed = true});
        mm({.m = m, .n = n, .k = k, .dtype = dt, .a_transposed = true});
        MatmulShape s{.m = m, .n = n, .k = k, .dtype = dt, .b_transposed = true};
        s.bias = DType::fp16; s.activation = isa::UnaryOp::gelu_tanh; mm(s);
        s.bias = DType::fp32; s.activation.reset(); s.residual = true; mm(s);
        s.residual_op = isa::BinaryOp::mul; s.ldr = n + 8; mm(s);
        s.residual = false; s.scale = true; mm(s);
        s.scale = false; s.channel_scale = true; mm(s);
        MatmulShape g{.m = m, .n = n, .k = k, .dtype = dt, .b_transposed = true};
        g.gated = true; g.activation = isa::UnaryOp::silu; g.b_pieces = {n, n}; mm(g);
        MatmulShape q{.m = m, .n = 3 * n, .k = k, .dtype = dt, .b_transposed = true};
        q.b_pieces = {n, n, n}; q.b_piece_ld = {0, k + 16, 0}; mm(q);
        MatmulShape nm{.m = m, .n = n, .k = k, .dtype = dt, .b_transposed = true};
        nm.norm = MatmulShape::Norm{.rms = true, .eps = 1e-6, .weight = dt}; mm(nm);
        nm.norm = MatmulShape::Norm{.rms = false, .eps = 1e-5, .weight = DType::fp32, .bias = DType::fp16}; mm(nm);
        nm.residual = true; nm.bias = dt; mm(nm);
        mm({.m = m, .n = n, .k = k, .dtype = dt, .batch = 3, .a_batch_stride = m * k, .b_batch_stride = 0});
        mm({.m = m, .n = n, .k = k, .dtype = dt, .b_transposed = true, .batch = 2, .a_batch_stride = m * (k + 4),
            .b_batch_stride = n * k, .lda = k + 4});
      }
    }
    mm({.m = 256, .n = 256, .k = 512, .dtype = DType::int8, .out = DType::int32});
    mm({.m = 2048, .n = 1024, .k = 2048, .dtype = DType::int8, .b_transposed = true, .out = DType::int32});
    for (int conv = 0; conv < 4; ++conv) {
      MatmulShape s{.dtype = DType::fp16};
      MatmulShape::ConvA c{.images = 2, .h = 34, .w = 34, .channels = 64, .group_channels = 64, .kh = 3, .kw = 3,
                           .sh = 1, .sw = 1, .dh = 1, .dw = 1, .ho = 32, .wo = 32};
      if (conv == 1) { c.sh = c.sw = 2; c.ho = c.wo = 16; }
      if (conv == 2) { c.kh = c.kw = 1; c.ho = c.wo = 34; }
      if (conv == 3) { c.group_channels = 16; s.batch = 4; s.a_batch_stride = 16; s.b_batch_stride = 16 * 9 * 32;
                       s.ldc = 128; s.c_batch_stride = 32; s.bias = DType::fp16; s.bias_batch_stride = 32; }
      s.conv = c; s.m = c.images * c.ho * c.wo; s.k = c.kh * c.kw * c.group_channels; s.n = conv == 3 ? 32 : 128;
      if (conv == 0) { s.bias = DType::fp32; s.channel_scale = true; s.activation = isa::UnaryOp::relu; }
      mm(s);
      if (conv == 0) { MatmulShape w = s; w.a_transposed = true; std::swap(w.m, w.k); w.bias.reset(); w.channel_scale = false; w.activation.reset(); mm(w); }
    }
    idx = 0;
    auto pw = [&](PointwiseKernel k) { run(T + "pw" + std::to_string(idx++), [&] { return compile_pointwise(k, t, "pw"); }); };
    auto contig = [](std::vector<std::uint64_t> shape) {
      std::vector<std::int64_t> st; std::int64_t a = 1; for (auto d : shape) { st.push_back(a); a *= (std::int64_t)d; } return st; };
    for (auto shape : std::vector<std::vector<std::uint64_t>>{{1000}, {4096, 512}, {64, 7, 33}, {128, 32, 8, 4}, {3, 5, 7, 11, 2},
                                                              {1 << 20}, {768, 512, 2}}) {
      for (auto dt : {DType::fp16, DType::fp32, DType::bf16}) {
        PointwiseKernel k; k.shape = shape;
        auto st = contig(shape);
        k.inputs = {{dt, st}, {dt, st}}; k.output = {dt, st};
        k.steps = {Step::binary(isa::BinaryOp::add, dt, Value::input(0), Value::input(1))}; pw(k);
        // a row broadcast (bias) and a scalar
        auto row = st; for (std::size_t d = 1; d < row.size(); ++d) row[d] = 0;
        std::vector<std::int64_t> sc(shape.size(), 0);
        k.inputs = {{dt, st}, {dt, row}, {DType::fp32, sc}};
        k.steps = {Step::binary(isa::BinaryOp::mul, dt, Value::input(0), Value::input(1)),
                   Step::convert(DType::fp32, Value::step(0)),
                   Step::binary(isa::BinaryOp::add, DType::fp32, Value::step(1), Value::input(2)),
                   Step::unary(isa::UnaryOp::exp, DType::fp32, Value::step(2)), Step::convert(dt, Value::step(3))};
        pw(k);
        // broadcast along dim 2 (rotary-like) and a transposed copy
        if (shape.size() >= 3) {
          auto b2 = st; b2[2] = 0; if (b2.size() > 3) for (std::size_t d = 3; d < b2.size(); ++d) b2[d] = 0;
          k.inputs = {{dt, st}, {dt, b2}}; k.output = {dt, st};
          k.steps = {Step::binary(isa::BinaryOp::mul, dt, Value::input(0), Value::input(1))}; pw(k);
          auto tr = st; std::swap(tr[0], tr[1]);
          PointwiseKernel c; c.shape = shape; c.inputs = {{dt, st}}; c.output = {dt, tr};
          c.steps = {Step::unary(isa::UnaryOp::copy, dt, Value::input(0))}; pw(c);
        }
        PointwiseKernel r; r.shape = shape; r.output = {dt, st};
        r.steps = {Step::convert(dt, Value::random(isa::RandomDist::normal))}; pw(r);
        PointwiseKernel al; al.shape = shape; al.inputs = {{dt, st}}; al.output = {dt, st};
        al.steps = {Step::unary(isa::UnaryOp::relu, dt, Value::input(0))}; pw(al);
      }
    }
    idx = 0;
    auto ml = [&](MlpShape s) { run(T + "mlp" + std::to_string(idx++), [&] { return compile_mlp(s, t, "mlp"); }); };
    for (auto dt : {DType::fp16, DType::bf16, DType::fp32}) {
      for (auto [m, d, h] : std::vector<std::array<std::uint64_t, 3>>{{512, 2048, 8192}, {1, 2048, 5632}, {64, 200, 900},
                                                                      {512, 4096, 7168}, {128, 768, 3072}, {7, 256, 1024}}) {
        MlpShape s{.m = m, .d = d, .h = h, .dtype = dt, .bias1 = DType::fp16, .bias2 = DType::fp16,
                   .activation = isa::UnaryOp::gelu_tanh, .residual = true};
        ml(s);
        s.norm = MatmulShape::Norm{.rms = false, .eps = 1e-5, .weight = DType::fp16, .bias = DType::fp16}; ml(s);
        MlpShape g{.m = m, .d = d, .h = h, .dtype = dt, .activation = isa::UnaryOp::silu, .residual = true, .gated = true};
        ml(g);
        g.norm = MatmulShape::Norm{.rms = true, .eps = 1e-6, .weight = dt}; ml(g);
        g.residual = false; g.projection = MlpShape::Projection{.dp = d}; ml(g);
        g.projection = MlpShape::Projection{.dp = 24, .bias = dt}; ml(g);
        MlpShape pl{.m = m, .d = d, .h = h, .dtype = dt, .ld1 = d + 64, .ld2 = h + 64, .activation = isa::UnaryOp::relu};
        ml(pl);
      }
    }
    idx = 0;
    auto at = [&](AttentionShape s) { run(T + "att" + std::to_string(idx++), [&] { return compile_attention(s, t, "att"); }); };
    for (auto dt : {DType::fp16, DType::fp32}) {
      for (auto [qh, kvh, ql, kl, dim] : std::vector<std::array<std::uint64_t, 5>>{
               {12, 12, 512, 512, 64}, {32, 8, 1, 2048, 128}, {32, 8, 512, 512, 128}, {4, 4, 100, 333, 64},
               {8, 2, 7, 1000, 64}, {16, 16, 2048, 2048, 128}}) {
        for (int causal = 0; causal < 2; ++causal) {
          AttentionShape a;
          a.batch = 2; a.q_heads = qh; a.kv_heads = kvh; a.q_len = ql; a.kv_len = kl; a.head_dim = a.value_dim = dim;
          a.dtype = dt;
          a.q_stride = {(std::int64_t)(qh * ql * dim), (std::int64_t)(ql * dim), (std::int64_t)dim};
          a.k_stride = {(std::int64_t)(kvh * kl * dim), (std::int64_t)(kl * dim), (std::int64_t)dim};
          a.v_stride = a.k_stride; a.scale = 0.125; a.causal = causal;
          at(a);
          if (!causal) { a.mask = DType::fp16; a.mask_stride = {0, 0, (std::int64_t)kl}; at(a); a.mask.reset(); }
          a.paged = true; a.pool_slots = 4096; a.k_stride = {0, (std::int64_t)dim, (std::int64_t)(kvh * dim)};
          a.v_stride = a.k_stride; at(a); a.slots_stride = kl + 5; at(a);
        }
      }
    }
  }
}
