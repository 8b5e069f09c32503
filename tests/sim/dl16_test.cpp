// DL16 conversions against an independent reference: the format written out from its
// definition (sign, 6-bit exponent with bias 31, 9-bit fraction, no subnormals, one
// merged NaN/infinity code), every finite value listed, and "round to nearest, ties
// away from zero" done by searching that list in long double arithmetic.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "functional/dl16.h"
#include "functional/numeric.h"

using namespace spyre::sim;

namespace {

// The value of a DL16 code from the definition; NaN for the NaN/infinity code.
long double decode(std::uint16_t code) {
  const int s = code >> 15, e = (code >> 9) & 63, f = code & 511;
  if (e == 63 && f == 511) return std::numeric_limits<long double>::quiet_NaN();
  if (e == 0 && f == 0) return s ? -0.0L : 0.0L;
  const long double v = std::ldexp(1.0L + f / 512.0L, e - 31);
  return s ? -v : v;
}

// Every non-negative finite DL16 value with its code, ascending.
struct Entry {
  long double value;
  std::uint16_t code;
};
const std::vector<Entry>& finite_values() {
  static const std::vector<Entry> values = [] {
    std::vector<Entry> v;
    for (std::uint32_t c = 0; c < 0x8000; ++c) {
      const long double x = decode(static_cast<std::uint16_t>(c));
      if (!std::isnan(x)) v.push_back({x, static_cast<std::uint16_t>(c)});
    }
    std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return a.value < b.value; });
    return v;
  }();
  return values;
}

// The reference encoder: the nearest DL16 value to x, a tie to the larger magnitude;
// magnitudes from halfway past the largest finite value up are NaN/infinity.
std::uint16_t reference(long double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x) || std::isinf(x)) return sign | 0x7fff;
  const long double a = std::fabs(x);
  const auto& v = finite_values();
  const long double largest = v.back().value;
  const long double beyond = std::ldexp(1.0L + 511 / 512.0L, 32);  // where the next value would be
  if (a >= (largest + beyond) / 2) return sign | 0x7fff;
  auto hi = std::lower_bound(v.begin(), v.end(), a, [](const Entry& e, long double y) { return e.value < y; });
  if (hi == v.end()) return sign | v.back().code;
  if (hi->value == a || hi == v.begin()) return sign | hi->code;
  const auto lo = hi - 1;
  return sign | (a - lo->value < hi->value - a ? lo->code : hi->code);  // a tie goes up
}

}  // namespace

TEST_CASE("given hand-worked values, DL16 encodes and decodes them as the format defines") {
  using numeric::f32_to_dl16;
  const float min_normal = std::ldexp(1.0f + 1.0f / 512, -31);
  const float largest = std::ldexp(1.0f + 510.0f / 512, 32);
  CHECK(f32_to_dl16(0.0f) == 0x0000);
  CHECK(f32_to_dl16(-0.0f) == 0x8000);
  CHECK(f32_to_dl16(1.0f) == 0x3e00);                          // exponent 31, fraction 0
  CHECK(f32_to_dl16(-1.0f) == 0xbe00);
  CHECK(f32_to_dl16(1.0f + 1.0f / 1024) == 0x3e01);            // a tie: up to 1 + 1/512
  CHECK(f32_to_dl16(-(1.0f + 1.0f / 1024)) == 0xbe01);         // a negative tie: away from zero
  CHECK(f32_to_dl16(1.0f + 1.0f / 2048) == 0x3e00);            // below the tie: down
  CHECK(f32_to_dl16(min_normal) == 0x0001);                    // the smallest normal
  CHECK(f32_to_dl16(std::ldexp(1.0f, -31)) == 0x0001);         // 2^-31 is no DL16 value (that code is zero)
  CHECK(f32_to_dl16(min_normal / 2) == 0x0001);                // the midpoint to zero: a tie, up
  CHECK(f32_to_dl16(std::nextafter(min_normal / 2, 0.0f)) == 0x0000);
  CHECK(f32_to_dl16(largest) == 0x7ffe);                       // exponent 63, fraction 510
  CHECK(f32_to_dl16(std::ldexp(1.0f + 510.5f / 512, 32)) == 0x7fff);  // halfway past it: overflow
  CHECK(f32_to_dl16(std::nextafter(std::ldexp(1.0f + 510.5f / 512, 32), 0.0f)) == 0x7ffe);
  CHECK(f32_to_dl16(std::numeric_limits<float>::infinity()) == 0x7fff);
  CHECK(f32_to_dl16(-std::numeric_limits<float>::infinity()) == 0xffff);
  CHECK(f32_to_dl16(std::numeric_limits<float>::quiet_NaN()) == 0x7fff);
  CHECK(numeric::dl16_to_f32(0x0001) == min_normal);
  CHECK(numeric::dl16_to_f32(0x7ffe) == largest);
  CHECK(std::isnan(numeric::dl16_to_f32(0x7fff)));
  CHECK(std::isnan(numeric::dl16_to_f32(0xffff)));
  CHECK(std::signbit(numeric::dl16_to_f32(0x8000)));
}

TEST_CASE("given every DL16 code, decoding matches the definition and encoding gives the code back") {
  for (std::uint32_t c = 0; c <= 0xffff; ++c) {
    const auto code = static_cast<std::uint16_t>(c);
    const float v = numeric::dl16_to_f32(code);
    const long double want = decode(code);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(v));
      continue;
    }
    REQUIRE(static_cast<long double>(v) == want);
    REQUIRE(numeric::f32_to_dl16(v) == code);
  }
}

TEST_CASE("given every fp16 and every bf16 value, the DL16 encoding is the reference's") {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const float x = numeric::fp16_to_f32(static_cast<std::uint16_t>(h));
    INFO("fp16 0x" << std::hex << h);
    REQUIRE(numeric::f32_to_dl16(x) == reference(x));
  }
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const float x = numeric::bf16_to_f32(static_cast<std::uint16_t>(b));
    INFO("bf16 0x" << std::hex << b);
    REQUIRE(numeric::f32_to_dl16(x) == reference(x));
  }
}

TEST_CASE("given fp32 edge cases and a million random values, the DL16 encoding is the reference's") {
  std::vector<float> xs = {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::max(), std::ldexp(1.0f, -32), std::ldexp(1.0f, 33)};
  // Around every DL16 value and every midpoint between neighbours: the exact point and
  // the fp32 values on either side.
  const auto& v = finite_values();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float p = static_cast<float>(v[i].value);
    xs.insert(xs.end(), {p, std::nextafter(p, 0.0f), std::nextafter(p, INFINITY)});
    if (i + 1 < v.size()) {
      const float mid = static_cast<float>((v[i].value + v[i + 1].value) / 2);  // exact: one more bit
      xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)});
    }
  }
  std::mt19937 rng(20261130);
  for (int i = 0; i < 1000000; ++i) xs.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  std::size_t checked = 0;
  for (const float x : xs) {
    for (const float y : {x, -x}) {
      INFO("fp32 " << std::bit_cast<std::uint32_t>(y));
      REQUIRE(numeric::f32_to_dl16(y) == reference(y));
      ++checked;
    }
  }
  CHECK(checked > 2000000);
}
