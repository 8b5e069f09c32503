// Functional results of every compute instruction against plain references.
// Bit-exact: moves, conversions, arithmetic elementwise ops, compares, select, fill.
// Stated bounds: transcendental functions (ulp), reductions and matmul (fp32
// accumulation). The references compute in double and round once with the
// round-to-nearest-even functions below, written independently of the model's.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "functional/numeric.h"
#include "functional/philox.h"

using namespace spyre;
using namespace spyre::sim;
using isa::Broadcast;
using isa::DType;

namespace {

// --- Independent references -------------------------------------------------------

// The value of an fp16 bit pattern, from the IEEE formula.
double fp16_value(std::uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = std::ldexp(m, -24);
  else if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(1024 + m, e - 25);
  return sign ? -v : v;
}
double bf16_value(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

// Round to nearest even by searching the (monotonic) positive bit patterns.
std::uint16_t round_by_search(double x, double (*value)(std::uint16_t), std::uint16_t max_finite,
                              std::uint16_t inf, std::uint16_t nan) {
  if (std::isnan(x)) return nan;
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  const double top = value(max_finite), next_ulp = top - value(max_finite - 1);
  // Past the largest finite value by half an ulp: the "next" code (infinity, or e4m3's
  // NaN); the tie goes to whichever of the two is even.
  if (a > top + next_ulp / 2 || (a == top + next_ulp / 2 && (max_finite & 1) != 0)) return sign | inf;
  std::uint16_t lo = 0, hi = max_finite;  // largest pattern with value <= a
  while (lo < hi) {
    const auto mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
    if (value(mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  if (lo == max_finite) return sign | lo;
  const double below = a - value(lo), above = value(lo + 1) - a;
  const std::uint16_t r = (below < above || (below == above && (lo & 1) == 0)) ? lo : lo + 1;
  return sign | r;
}
std::uint16_t ref_fp16(double x) { return round_by_search(x, fp16_value, 0x7bff, 0x7c00, 0x7e00); }

// fp8 from their definitions (PyTorch's float8_e4m3fn and float8_e5m2): sign, exponent,
// fraction; subnormals at exponent 0; e4m3's S.1111.111 is NaN (no infinity), e5m2's
// top exponent holds infinity and NaN.
double e4m3_value(std::uint16_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  if (e == 15 && m == 7) v = std::numeric_limits<double>::quiet_NaN();
  return (c & 0x80) ? -v : v;
}
double e5m2_value(std::uint16_t c) {
  const int e = (c >> 2) & 31, m = c & 3;
  double v = e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17);
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  return (c & 0x80) ? -v : v;
}
// Overflow: e4m3 to NaN (0x7f; 448 + half an ulp, 464, is a tie that stays at the even
// 448), e5m2 to infinity (0x7c; its tie at 61440 goes to the even infinity).
std::uint8_t ref_e4m3(double x) {
  const std::uint16_t c = round_by_search(x, e4m3_value, 0x7e, 0x7f, 0x7f);
  return static_cast<std::uint8_t>((c & 0x7f) | ((c & 0x8000) ? 0x80 : 0));
}
std::uint8_t ref_e5m2(double x) {
  const std::uint16_t c = round_by_search(x, e5m2_value, 0x7b, 0x7c, 0x7f);
  return static_cast<std::uint8_t>((c & 0x7f) | ((c & 0x8000) ? 0x80 : 0));
}
std::uint16_t ref_bf16(double x) { return round_by_search(x, bf16_value, 0x7f7f, 0x7f80, 0x7fc0); }

// A value of `t` stored at p, as double (exact for every dtype here).
double get(DType t, const std::uint8_t* p, std::size_t i) {
  switch (t) {
    case DType::fp32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
    case DType::fp16: { std::uint16_t h; std::memcpy(&h, p + 2 * i, 2); return fp16_value(h); }
    case DType::bf16: { std::uint16_t h; std::memcpy(&h, p + 2 * i, 2); return bf16_value(h); }
    case DType::int8: return static_cast<std::int8_t>(p[i]);
    case DType::int32: { std::int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::boolean: return p[i] != 0;
    case DType::fp8_e4m3: return e4m3_value(p[i]);
    case DType::fp8_e5m2: return e5m2_value(p[i]);
  }
  return 0;
}

// Rounds/wraps a double into `t` (the model's documented semantics) at p[i].
void put(DType t, std::uint8_t* p, std::size_t i, double x) {
  switch (t) {
    case DType::fp32: { const float f = static_cast<float>(x); std::memcpy(p + 4 * i, &f, 4); return; }
    case DType::fp16: { const auto h = ref_fp16(x); std::memcpy(p + 2 * i, &h, 2); return; }
    case DType::bf16: { const auto h = ref_bf16(x); std::memcpy(p + 2 * i, &h, 2); return; }
    case DType::int8:
    case DType::int32: {
      const double lo = t == DType::int8 ? -128 : -2147483648.0, hi = t == DType::int8 ? 127 : 2147483647.0;
      const double v = std::isnan(x) ? 0 : std::clamp(std::trunc(x), lo, hi);
      if (t == DType::int8) p[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(v));
      else { const auto w = static_cast<std::int32_t>(v); std::memcpy(p + 4 * i, &w, 4); }
      return;
    }
    case DType::boolean: p[i] = x != 0; return;
    case DType::fp8_e4m3: p[i] = ref_e4m3(x); return;
    case DType::fp8_e5m2: p[i] = ref_e5m2(x); return;
  }
}

bool same_bits_or_both_nan(DType t, const std::uint8_t* a, const std::uint8_t* b, std::size_t i) {
  const std::size_t s = isa::dtype_size(t);
  if (isa::is_float(t) && std::isnan(get(t, a, i)) && std::isnan(get(t, b, i))) return true;
  return std::memcmp(a + s * i, b + s * i, s) == 0;
}

// Distance in units in the last place between two values of a float dtype.
std::int64_t ulps(DType t, double x, double y) {
  std::vector<std::uint8_t> bx(4), by(4);
  put(t, bx.data(), 0, x);
  put(t, by.data(), 0, y);
  const auto ordered = [&](const std::vector<std::uint8_t>& b) -> std::int64_t {
    if (t == DType::fp32) {
      std::int32_t v; std::memcpy(&v, b.data(), 4);
      return v < 0 ? std::int64_t{INT32_MIN} - v : v;
    }
    std::int16_t v; std::memcpy(&v, b.data(), 2);
    return v < 0 ? std::int64_t{INT16_MIN} - v : v;
  };
  return std::llabs(ordered(bx) - ordered(by));
}

constexpr DType kAll[] = {DType::fp32, DType::fp16,  DType::bf16,     DType::int8,
                          DType::int32, DType::boolean, DType::fp8_e4m3, DType::fp8_e5m2};
constexpr DType kFloats[] = {DType::fp32, DType::fp16, DType::bf16};

// Random values of `t` at p, with specials mixed in for floats.
void randomize(DType t, std::uint8_t* p, std::size_t n, std::mt19937& rng, double scale = 4.0) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::uniform_int_distribution<int> coin(0, 63);
  static const double specials[] = {0.0, -0.0, 1.0, -1.0, 65504.0, 1e-8, -3e38, std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()};
  for (std::size_t i = 0; i < n; ++i) {
    double x = u(rng);
    if (isa::is_float(t) && coin(rng) == 0) x = specials[rng() % std::size(specials)];
    if (!isa::is_float(t)) x = std::round(x * (t == DType::int32 ? 1e8 : 30));
    if (t == DType::boolean) x = rng() % 2;
    put(t, p, i, x);
  }
}

}  // namespace

TEST_CASE("given every fp16 and bf16 pattern, widening to fp32 is exact") {
  std::vector<std::uint8_t> in(2 * 65536);
  std::vector<float> out(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) std::memcpy(&in[2 * i], &i, 2);
  for (const DType t : {DType::fp16, DType::bf16}) {
    numeric::load_f32(t, in.data(), out.data(), 65536);
    std::size_t bad = 0;
    for (std::uint32_t i = 0; i < 65536; ++i) {
      const double ref = t == DType::fp16 ? fp16_value(static_cast<std::uint16_t>(i)) : bf16_value(static_cast<std::uint16_t>(i));
      if (!(std::isnan(ref) ? std::isnan(out[i]) : static_cast<double>(out[i]) == ref)) ++bad;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("given random fp32 values across all exponents, narrowing rounds to nearest even") {
  std::mt19937 rng(1);
  std::vector<float> in(1 << 18);
  for (auto& f : in) f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  // Values right at fp16 and bf16 ties and overflow edges.
  in[0] = 65520.0f;                 // fp16: ties to inf
  in[1] = 65519.996f;               // fp16: 65504
  in[2] = 1.0f + 1.0f / 2048;       // fp16: tie, rounds to even 1.0
  in[3] = 1.0f + 3.0f / 2048;       // fp16: tie, rounds to even 1 + 2/1024
  in[4] = std::ldexp(1.0f, -25);    // fp16: tie between 0 and the smallest subnormal -> 0
  in[5] = 1.0f + 1.0f / 256;        // bf16: tie -> 1.0
  in[6] = std::bit_cast<float>(0x7f7fffffu);  // bf16: rounds to inf
  std::vector<std::uint8_t> out(2 * in.size());
  for (const DType t : {DType::fp16, DType::bf16}) {
    numeric::store_f32(t, in.data(), out.data(), in.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      std::uint16_t got;
      std::memcpy(&got, &out[2 * i], 2);
      const std::uint16_t ref = t == DType::fp16 ? ref_fp16(in[i]) : ref_bf16(in[i]);
      const bool both_nan = std::isnan(in[i]) && ((got & 0x7fff) > (t == DType::fp16 ? 0x7c00 : 0x7f80));
      if (got != ref && !both_nan) ++bad;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("given every pair of dtypes, conversion matches the reference bit for bit") {
  std::mt19937 rng(2);
  constexpr std::size_t n = 5000;
  for (const DType from : kAll) {
    std::vector<std::uint8_t> src(4 * n);
    randomize(from, src.data(), n, rng, 300.0);
    for (const DType to : kAll) {
      std::vector<std::uint8_t> got(4 * n), ref(4 * n);
      numeric::convert(from, to, src.data(), got.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        double v = get(from, src.data(), i);
        // int32 -> fp16/bf16 goes through fp32, as PyTorch's casts do.
        if (from == DType::int32 && (to == DType::fp16 || to == DType::bf16 || isa::is_fp8(to))) v = static_cast<float>(v);
        if (!isa::is_float(from) && !isa::is_float(to) && to != DType::boolean) {
          // Integer narrowing wraps (two's complement), it does not saturate.
          const auto w = static_cast<std::int64_t>(v);
          v = to == DType::int8 ? static_cast<std::int8_t>(w) : static_cast<std::int32_t>(w);
        }
        put(to, ref.data(), i, v);
      }
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) bad += !same_bits_or_both_nan(to, got.data(), ref.data(), i);
      INFO(isa::to_string(from) << " -> " << isa::to_string(to));
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("given elementwise arithmetic with every broadcast, results are bit exact") {
  std::mt19937 rng(3);
  const std::uint32_t rows = 37, cols = 53;  // odd sizes cross the 2048-element chunks
  for (const DType t : {DType::fp32, DType::fp16, DType::bf16, DType::int32, DType::int8}) {
    for (std::uint8_t op = 0; op < isa::kNumBinaryOps; ++op) {
      for (std::uint8_t bc = 0; bc < isa::kNumBroadcasts; ++bc) {
        const auto bop = static_cast<isa::BinaryOp>(op);
        const auto bcast = static_cast<Broadcast>(bc);
        std::vector<std::uint8_t> sp(64 * 1024);
        const std::size_t n = std::size_t{rows} * cols, size = isa::dtype_size(t);
        const isa::VBinary v{.op = bop, .dtype = t, .bcast = bcast, .a = 0, .b = static_cast<std::uint32_t>(n * size),
                             .dst = static_cast<std::uint32_t>(2 * n * size), .rows = rows, .cols = cols, .imm = 1.5};
        randomize(t, sp.data(), n, rng);
        randomize(t, sp.data() + v.b, n, rng);
        if (!isa::is_float(t) && bop == isa::BinaryOp::div) {
          for (std::size_t i = 0; i < n; ++i) if (get(t, sp.data() + v.b, i) == 0) put(t, sp.data() + v.b, i, 3);
        }
        if (!isa::is_float(t) && bop == isa::BinaryOp::pow) {  // exponents -3 .. 40: the reference multiplies
          for (std::size_t i = 0; i < n; ++i) {
            const auto e = static_cast<std::int64_t>(get(t, sp.data() + v.b, i));
            put(t, sp.data() + v.b, i, static_cast<double>(((e % 44) + 44) % 44 - 3));
          }
        }
        const double imm = isa::is_float(t) ? v.imm : 1;
        isa::VBinary vi = v;
        vi.imm = imm;
        std::vector<std::uint8_t> ref(n * size);
        for (std::size_t e = 0; e < n; ++e) {
          const std::size_t r = e / cols, c = e % cols;
          const std::size_t bi = bcast == Broadcast::none ? e : bcast == Broadcast::row ? c : bcast == Broadcast::col ? r : 0;
          const double x = get(t, sp.data(), e);
          const double y = bcast == Broadcast::immediate ? imm : get(t, sp.data() + v.b, bi);
          double z = 0;
          switch (bop) {
            case isa::BinaryOp::add: z = x + y; break;
            case isa::BinaryOp::sub: z = x - y; break;
            case isa::BinaryOp::mul: z = x * y; break;
            case isa::BinaryOp::div: z = isa::is_float(t) ? x / y : std::trunc(x / y); break;
            case isa::BinaryOp::max: z = (std::isnan(x) || std::isnan(y)) ? x + y : std::max(x, y); break;
            case isa::BinaryOp::min: z = (std::isnan(x) || std::isnan(y)) ? x + y : std::min(x, y); break;
            case isa::BinaryOp::pow: z = static_cast<float>(std::pow(x, y)); break;
          }
          if (!isa::is_float(t)) {  // integers: exact in int64, then wrap
            const auto xi = static_cast<std::int64_t>(x), yi = static_cast<std::int64_t>(y);
            std::int64_t w = 0;
            switch (bop) {
              case isa::BinaryOp::add: w = xi + yi; break;
              case isa::BinaryOp::sub: w = xi - yi; break;
              case isa::BinaryOp::mul: w = xi * yi; break;
              case isa::BinaryOp::div: w = xi / yi; break;
              case isa::BinaryOp::max: w = std::max(xi, yi); break;
              case isa::BinaryOp::min: w = std::min(xi, yi); break;
              case isa::BinaryOp::pow: {  // by repeated multiplication, in the dtype's width
                if (yi < 0) {
                  w = xi == 1 ? 1 : xi == -1 ? (yi % 2 ? -1 : 1) : 0;
                } else {
                  std::uint64_t p = 1;
                  for (std::int64_t k = 0; k < yi; ++k) p *= static_cast<std::uint64_t>(xi);
                  w = static_cast<std::int64_t>(p);
                }
                break;
              }
            }
            z = t == DType::int8 ? static_cast<std::int8_t>(w) : static_cast<std::int32_t>(static_cast<std::uint32_t>(w));
          }
          put(t, ref.data(), e, z);
        }
        REQUIRE_FALSE(numeric::binary(vi, sp.data()));
        std::size_t bad = 0;
        for (std::size_t e = 0; e < n; ++e) bad += !same_bits_or_both_nan(t, sp.data() + v.dst, ref.data(), e);
        INFO(isa::to_string(t) << " " << isa::to_string(bop) << " " << isa::to_string(bcast));
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("given an integer division by zero, the kernel reports it") {
  std::vector<std::uint8_t> sp(64, 0);
  put(DType::int32, sp.data(), 0, 7);
  const auto fault = numeric::binary(isa::VBinary{.op = isa::BinaryOp::div, .dtype = DType::int32,
                                                  .bcast = Broadcast::none, .a = 0, .b = 16, .dst = 32, .rows = 1,
                                                  .cols = 2},
                                     sp.data());
  REQUIRE(fault);
  CHECK(*fault == "integer division by zero at element 0");
}

TEST_CASE("given compares and select, results are exact including NaN") {
  std::mt19937 rng(4);
  const std::uint32_t rows = 9, cols = 301;
  const std::size_t n = std::size_t{rows} * cols;
  for (const DType t : kAll) {
    for (std::uint8_t op = 0; op < isa::kNumCompareOps; ++op) {
      std::vector<std::uint8_t> sp(32 * 1024);
      const std::size_t size = isa::dtype_size(t);
      const isa::VCompare c{.op = static_cast<isa::CompareOp>(op), .dtype = t, .bcast = Broadcast::col, .a = 0,
                            .b = static_cast<std::uint32_t>(n * size), .dst = static_cast<std::uint32_t>(2 * n * size),
                            .rows = rows, .cols = cols, .imm = 0};
      randomize(t, sp.data(), n, rng, 2.0);
      randomize(t, sp.data() + c.b, rows, rng, 2.0);
      numeric::compare(c, sp.data());
      std::size_t bad = 0;
      for (std::size_t e = 0; e < n; ++e) {
        const double x = get(t, sp.data(), e), y = get(t, sp.data() + c.b, e / cols);
        bool want = false;
        switch (c.op) {
          case isa::CompareOp::eq: want = x == y; break;
          case isa::CompareOp::ne: want = x != y; break;
          case isa::CompareOp::lt: want = x < y; break;
          case isa::CompareOp::le: want = x <= y; break;
          case isa::CompareOp::gt: want = x > y; break;
          case isa::CompareOp::ge: want = x >= y; break;
        }
        bad += sp[c.dst + e] != (want ? 1 : 0);
      }
      INFO(isa::to_string(t) << " " << isa::to_string(c.op));
      CHECK(bad == 0);
    }
    std::vector<std::uint8_t> sp(32 * 1024);
    const std::size_t size = isa::dtype_size(t);
    const isa::VSelect s{.dtype = t, .cond = 0, .a = 4096, .b = 12288, .dst = 20480, .count = 1000};
    randomize(DType::boolean, sp.data(), 1000, rng);
    randomize(t, sp.data() + s.a, 1000, rng);
    randomize(t, sp.data() + s.b, 1000, rng);
    numeric::select(s, sp.data());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < 1000; ++i) {
      bad += std::memcmp(sp.data() + s.dst + size * i, sp.data() + (sp[i] ? s.a : s.b) + size * i, size) != 0;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("given fills, every dtype holds the exact value") {
  for (const DType t : kAll) {
    std::vector<std::uint8_t> sp(256, 0xcd);
    const double value = t == DType::boolean ? 1 : (isa::is_float(t) ? -2.5 : -7);
    numeric::fill(isa::VFill{.dtype = t, .dst = 8, .count = 10, .value = value}, sp.data());
    for (std::size_t i = 0; i < 10; ++i) CHECK(get(t, sp.data() + 8, i) == value);
    CHECK(sp[8 + 10 * isa::dtype_size(t)] == 0xcd);  // nothing past the end
  }
}

TEST_CASE("given unary ops, moves are exact and transcendentals stay within the stated ulp") {
  // Bounds: fp16 and bf16 results are the fp32 result rounded once, so within 1 ulp
  // of the correctly rounded value. fp32: 2 ulp for exp, log, rsqrt, reciprocal, tanh,
  // erf, sin, cos (sqrt is exact); 4 ulp for the composed sigmoid and silu. gelu and gelu_tanh
  // in fp32 are ill-conditioned in the negative tail: the fp32 rounding of the erfc or
  // exp argument is amplified by the function's condition number (about x^2 for gelu,
  // |2u| for gelu_tanh's exp(-2u)), so their bound is 4 ulp plus twice that. Measured
  // on these inputs (|x| <= 8): exp, log, rsqrt 1 ulp; sigmoid 2; silu 1; gelu 54 and
  // gelu_tanh 76 near x = -8.
  std::mt19937 rng(5);
  const std::size_t n = 4099;
  for (const DType t : kFloats) {
    for (std::uint8_t op = 0; op < isa::kNumUnaryOps; ++op) {
      const auto u = static_cast<isa::UnaryOp>(op);
      std::vector<std::uint8_t> src(4 * n), dst(4 * n);
      randomize(t, src.data(), n, rng, 8.0);
      numeric::unary(u, t, src.data(), dst.data(), n);
      std::int64_t worst = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double x = get(t, src.data(), i);
        double ref = 0;
        switch (u) {
          case isa::UnaryOp::copy: ref = x; break;
          case isa::UnaryOp::neg: ref = -x; break;
          case isa::UnaryOp::abs: ref = std::fabs(x); break;
          case isa::UnaryOp::exp: ref = std::exp(x); break;
          case isa::UnaryOp::log: ref = std::log(x); break;
          case isa::UnaryOp::sqrt: ref = std::sqrt(x); break;
          case isa::UnaryOp::rsqrt: ref = 1 / std::sqrt(x); break;
          case isa::UnaryOp::reciprocal: ref = 1 / x; break;
          case isa::UnaryOp::tanh: ref = std::tanh(x); break;
          case isa::UnaryOp::erf: ref = std::erf(x); break;
          case isa::UnaryOp::sigmoid: ref = 1 / (1 + std::exp(-x)); break;
          case isa::UnaryOp::relu: ref = x > 0 ? x : (std::isnan(x) ? x : 0.0); break;
          // 1 + erf(u) = erfc(-u) and 1 + tanh(u) = 2 / (1 + exp(-2u)) keep the double
          // reference accurate where the textbook forms cancel (large negative x).
          case isa::UnaryOp::gelu: ref = 0.5 * x * std::erfc(-x / std::sqrt(2.0)); break;
          case isa::UnaryOp::gelu_tanh:
            ref = x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
            break;
          case isa::UnaryOp::silu: ref = x / (1 + std::exp(-x)); break;
          case isa::UnaryOp::sin: ref = std::sin(x); break;
          case isa::UnaryOp::cos: ref = std::cos(x); break;
          case isa::UnaryOp::hardswish: ref = x * std::min(std::max(x + 3, 0.0), 6.0) / 6; break;
          case isa::UnaryOp::hardsigmoid: ref = std::min(std::max(x + 3, 0.0), 6.0) / 6; break;
        }
        const double got = get(t, dst.data(), i);
        if (std::isnan(ref) || std::isnan(got)) {
          CHECK(std::isnan(ref) == std::isnan(got));
          continue;
        }
        if (std::isinf(ref) || std::isinf(got)) {
          CHECK(ref == got);
          continue;
        }
        std::int64_t d = ulps(t, got, ref);
        if (t == DType::fp32 && (u == isa::UnaryOp::gelu || u == isa::UnaryOp::gelu_tanh)) {
          // The conditioning allowance: 2 x^2 for erfc(-x/sqrt 2); for exp(-2u) with
          // u = sqrt(2/pi) (x + 0.044715 x^3), 2 |2u|.
          const double two_u = 2 * std::sqrt(2 / M_PI) * std::fabs(x + 0.044715 * x * x * x);
          const double allowance = u == isa::UnaryOp::gelu ? 2 * x * x : 2 * two_u;
          // (Capped: for large |x| the allowance passes what an int64 holds; found by UBSan.)
          d = std::max<std::int64_t>(0, d - static_cast<std::int64_t>(std::min(allowance, 1e18)));
        }
        worst = std::max(worst, d);
      }
      const bool exact = u == isa::UnaryOp::copy || u == isa::UnaryOp::neg || u == isa::UnaryOp::abs ||
                         u == isa::UnaryOp::relu || (u == isa::UnaryOp::sqrt && t == DType::fp32);
      const std::int64_t bound = exact ? 0
                                 : t != DType::fp32 ? 1
                                 : (u == isa::UnaryOp::sigmoid || u == isa::UnaryOp::silu || u == isa::UnaryOp::gelu ||
                                    u == isa::UnaryOp::gelu_tanh) ? 4 : 2;
      INFO(isa::to_string(t) << " " << isa::to_string(u) << ": worst " << worst << " ulp, bound " << bound);
      CHECK(worst <= bound);
    }
  }
  // Integer unary ops wrap: neg(INT32_MIN) = INT32_MIN.
  std::vector<std::uint8_t> v(8);
  put(DType::int32, v.data(), 0, -2147483648.0);
  put(DType::int32, v.data(), 1, -5);
  numeric::unary(isa::UnaryOp::neg, DType::int32, v.data(), v.data(), 2);
  CHECK(get(DType::int32, v.data(), 0) == -2147483648.0);
  CHECK(get(DType::int32, v.data(), 1) == 5);
}

TEST_CASE("given reductions along either axis, sums stay within fp32 accumulation error") {
  std::mt19937 rng(6);
  const std::uint32_t rows = 33, cols = 1000;
  for (const DType t : {DType::fp32, DType::fp16, DType::bf16, DType::int32, DType::int8}) {
    const DType out = isa::is_float(t) ? DType::fp32 : DType::int32;
    for (std::uint8_t op = 0; op < isa::kNumReduceOps; ++op) {
      for (std::uint8_t axis = 0; axis < 2; ++axis) {
        std::vector<std::uint8_t> sp(512 * 1024);
        const std::size_t n = std::size_t{rows} * cols;
        std::uniform_real_distribution<double> u(-4, 4);
        for (std::size_t i = 0; i < n; ++i) put(t, sp.data(), i, isa::is_float(t) ? u(rng) : std::round(u(rng) * 20));
        const isa::VReduce r{.op = static_cast<isa::ReduceOp>(op), .in = t, .out = out, .axis = axis, .src = 0,
                             .dst = static_cast<std::uint32_t>(n * isa::dtype_size(t)), .rows = rows, .cols = cols};
        numeric::reduce(r, sp.data());
        const std::size_t outputs = axis == 1 ? rows : cols, length = axis == 1 ? cols : rows;
        std::size_t bad = 0;
        for (std::size_t o = 0; o < outputs; ++o) {
          double acc = r.op == isa::ReduceOp::sum ? 0 : get(t, sp.data(), axis == 1 ? o * cols : o);
          double abs_sum = 0;
          for (std::size_t j = 0; j < length; ++j) {
            const double x = get(t, sp.data(), axis == 1 ? o * cols + j : j * cols + o);
            abs_sum += std::fabs(x);
            acc = r.op == isa::ReduceOp::sum ? acc + x : r.op == isa::ReduceOp::max ? std::max(acc, x) : std::min(acc, x);
          }
          const double got = get(out, sp.data() + r.dst, o);
          // Sequential fp32 summation: |error| <= length * 2^-24 * sum |x|.
          const double tol = (r.op == isa::ReduceOp::sum && isa::is_float(t)) ? length * std::ldexp(1.0, -24) * abs_sum : 0;
          bad += std::fabs(got - acc) > tol;
        }
        INFO(isa::to_string(t) << " " << isa::to_string(r.op) << " axis " << int(axis));
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("given matmuls with transposes, padding and accumulation, results are within fp32 accumulation error") {
  std::mt19937 rng(7);
  struct Case { std::uint32_t m, n, k; bool ta, tb, acc; DType in, out; };
  const Case cases[] = {{17, 33, 65, false, false, false, DType::fp16, DType::fp32},
                        {64, 64, 64, true, false, true, DType::bf16, DType::fp32},
                        {7, 129, 31, false, true, false, DType::fp32, DType::fp32},
                        {31, 9, 100, true, true, true, DType::fp16, DType::fp16},
                        {40, 24, 48, false, false, true, DType::fp32, DType::bf16},
                        {13, 11, 300, true, false, true, DType::int8, DType::int32}};
  for (const Case& c : cases) {
    const std::uint32_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
    const std::uint32_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
    const std::uint32_t lda = a_cols + 3, ldb = b_cols + 1, ldc = c.n + 5;  // padded rows
    const std::uint32_t out_size = isa::dtype_size(c.out);
    const isa::Matmul mm{.a = 0, .b = 256 * 1024, .c = 512 * 1024, .m = c.m, .n = c.n, .k = c.k, .lda = lda,
                         .ldb = ldb, .ldc = ldc, .in = c.in, .out = c.out, .trans_a = c.ta, .trans_b = c.tb,
                         .accumulate = c.acc};
    std::vector<std::uint8_t> sp(1 << 20);
    std::uniform_real_distribution<double> u(-2, 2);
    const auto value = [&] { return c.in == DType::int8 ? std::round(u(rng) * 60) : u(rng); };
    for (std::uint32_t i = 0; i < a_rows * lda; ++i) put(c.in, sp.data() + mm.a, i, value());
    for (std::uint32_t i = 0; i < b_rows * ldb; ++i) put(c.in, sp.data() + mm.b, i, value());
    for (std::uint32_t i = 0; i < c.m * ldc; ++i) put(c.out, sp.data() + mm.c, i, c.in == DType::int8 ? 5 : u(rng));
    const std::vector<std::uint8_t> before = sp;
    numeric::matmul(mm, sp.data());
    std::size_t bad = 0, gaps_touched = 0;
    for (std::uint32_t i = 0; i < c.m; ++i) {
      for (std::uint32_t j = 0; j < ldc; ++j) {
        const std::size_t at = std::size_t{i} * ldc + j;
        if (j >= c.n) {  // the padding between rows of C is left alone
          gaps_touched += std::memcmp(sp.data() + mm.c + at * out_size, before.data() + mm.c + at * out_size, out_size) != 0;
          continue;
        }
        double ref = c.acc ? get(c.out, before.data() + mm.c, at) : 0, mag = std::fabs(ref);
        for (std::uint32_t p = 0; p < c.k; ++p) {
          const double a = get(c.in, before.data() + mm.a, c.ta ? std::size_t{p} * lda + i : std::size_t{i} * lda + p);
          const double b = get(c.in, before.data() + mm.b, c.tb ? std::size_t{j} * ldb + p : std::size_t{p} * ldb + j);
          ref += a * b;
          mag += std::fabs(a * b);
        }
        const double got = get(c.out, sp.data() + mm.c, at);
        // fp32 accumulation: k * 2^-24 * sum |a*b|, plus rounding into the output type.
        const double out_eps = c.out == DType::fp32 ? std::ldexp(1.0, -24) : c.out == DType::fp16 ? std::ldexp(1.0, -11)
                               : c.out == DType::bf16 ? std::ldexp(1.0, -8) : 0;
        const double tol = c.in == DType::int8 ? 0 : (c.k + 1) * std::ldexp(1.0, -24) * mag + out_eps * std::fabs(ref);
        bad += std::fabs(got - ref) > tol;
      }
    }
    INFO(c.m << "x" << c.n << "x" << c.k << " " << isa::to_string(c.in) << "->" << isa::to_string(c.out));
    CHECK(bad == 0);
    CHECK(gaps_touched == 0);
  }
}

TEST_CASE("given a block of every element size, a transpose moves each element to its mirrored place unchanged") {
  for (const DType t : {DType::int8, DType::fp16, DType::fp32}) {
    const std::size_t size = isa::dtype_size(t), rows = 37, cols = 70;  // blocks of 32 and a ragged edge
    std::vector<std::uint8_t> sp(2 * rows * cols * size);
    for (std::size_t i = 0; i < rows * cols * size; ++i) sp[i] = static_cast<std::uint8_t>(i * 7 + i / 251);
    const std::uint32_t dst = static_cast<std::uint32_t>(rows * cols * size);
    numeric::transpose(isa::VTranspose{.dtype = t, .src = 0, .dst = dst, .rows = 37, .cols = 70}, sp.data());
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        REQUIRE(std::memcmp(sp.data() + dst + (c * rows + r) * size, sp.data() + (r * cols + c) * size, size) == 0);
      }
    }
  }
}

TEST_CASE("given the published known-answer vectors, Philox4x32-10 reproduces them") {
  // Random123's kat_vectors for philox4x32 with 10 rounds: counter, key -> output.
  using A4 = std::array<std::uint32_t, 4>;
  CHECK(functional::philox4x32_10({0, 0, 0, 0}, {0, 0}) == A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(functional::philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(functional::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("given a random state, vrandom's numbers follow the definition and do not depend on how they are split") {
  const std::uint64_t seed = 0x299f31d0a4093822ull, offset = 0x85a308d3243f6a88ull;
  // Number 2 of the uniform stream: lane 2 of counter offset + 0, top 24 bits.
  const auto lanes = functional::philox4x32_10({static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32), 0, 0},
                                               {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  CHECK(functional::random_value(isa::RandomDist::uniform, seed, offset, 2) == static_cast<float>(lanes[2] >> 8) / 16777216.0f);
  // Number 1 of the normal stream: lanes 2 and 3 of the same counter, Box-Muller.
  const double u1 = (lanes[2] >> 8) / 16777216.0, u2 = (lanes[3] >> 8) / 16777216.0;
  CHECK(functional::random_value(isa::RandomDist::normal, seed, offset, 1) ==
        static_cast<float>(std::sqrt(-2 * std::log(1 - u1)) * std::cos(2 * 3.14159265358979323846 * u2)));
  for (const auto dist : {isa::RandomDist::uniform, isa::RandomDist::normal}) {
    // 2 planes x 3 rows x 5 cols of a 5 x 4 x 2 iteration space (row step 5, plane step 20), starting at 7.
    std::vector<std::uint8_t> sp(16 + 30 * 4);
    std::memcpy(sp.data(), &seed, 8);
    std::memcpy(sp.data() + 8, &offset, 8);
    functional::random(isa::VRandom{.dist = dist, .dst = 16, .cols = 5, .rows = 3, .planes = 2, .state = 0, .start = 7,
                                    .row_step = 5, .plane_step = 20},
                       sp.data());
    const auto* got = reinterpret_cast<const float*>(sp.data() + 16);
    for (std::uint64_t p = 0; p < 2; ++p) {
      for (std::uint64_t r = 0; r < 3; ++r) {
        for (std::uint64_t c = 0; c < 5; ++c) {
          REQUIRE(got[(p * 3 + r) * 5 + c] == functional::random_value(dist, seed, offset, 7 + c + r * 5 + p * 20));
        }
      }
    }
  }
}

TEST_CASE("given a million numbers of each distribution, their moments are the distribution's") {
  const std::uint64_t n = 1 << 20;
  double sum[2] = {0, 0}, sq[2] = {0, 0}, lo = 1, hi = 0;
  for (std::uint64_t j = 0; j < n; ++j) {
    const double u = functional::random_value(isa::RandomDist::uniform, 42, 0, j);
    const double z = functional::random_value(isa::RandomDist::normal, 42, 0, j);
    sum[0] += u, sq[0] += u * u, sum[1] += z, sq[1] += z * z;
    lo = std::min(lo, u), hi = std::max(hi, u);
  }
  // Means within 5 standard errors: uniform sd 0.2887 / 1024, normal 1 / 1024.
  CHECK(std::abs(sum[0] / n - 0.5) < 5 * 0.2887 / 1024);
  CHECK(std::abs(sq[0] / n - sum[0] * sum[0] / n / n - 1.0 / 12) < 1e-3);
  CHECK(std::abs(sum[1] / n) < 5.0 / 1024);
  CHECK(std::abs(sq[1] / n - 1) < 0.01);
  CHECK(lo >= 0);
  CHECK(hi < 1);
}

TEST_CASE("given every fp8 code, decoding matches the format's definition, and encoding rounds back to it") {
  std::vector<std::uint8_t> codes(256), back(256);
  std::vector<float> values(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<std::uint8_t>(c);
  for (const DType t : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    numeric::load_f32(t, codes.data(), values.data(), 256);
    numeric::store_f32(t, values.data(), back.data(), 256);
    std::size_t bad = 0;
    for (int c = 0; c < 256; ++c) {
      const double want = get(t, codes.data(), c);
      bad += !(values[c] == want || (std::isnan(values[c]) && std::isnan(want)));
      bad += !(back[c] == codes[c] || (std::isnan(values[c]) && std::isnan(get(t, back.data(), c))));
    }
    INFO(isa::to_string(t));
    CHECK(bad == 0);
  }
  // Hand-worked: e4m3's largest 448 = 1.75 x 2^8 (0x7e), smallest subnormal 2^-9 (0x01);
  // 464 ties to the even 448, 465 and infinity become NaN; e5m2's largest 57344 (0x7b),
  // 61440 ties up to infinity (0x7c).
  const float xs[] = {448.0f, 0x1p-9f, 464.0f, 465.0f, INFINITY, 57344.0f, 61440.0f, -0x1p-10f};
  std::uint8_t e4[8], e5[8];
  numeric::store_f32(DType::fp8_e4m3, xs, e4, 8);
  numeric::store_f32(DType::fp8_e5m2, xs, e5, 8);
  CHECK(e4[0] == 0x7e);
  CHECK(e4[1] == 0x01);
  CHECK(e4[2] == 0x7e);
  CHECK(e4[3] == 0x7f);
  CHECK(e4[4] == 0x7f);
  CHECK(e4[7] == 0x80);  // -2^-10 is half the smallest subnormal: the tie goes to the even -0
  CHECK(e5[5] == 0x7b);
  CHECK(e5[6] == 0x7c);
}
