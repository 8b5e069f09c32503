#include "functional/dl16.h"

#include <bit>
#include <cmath>
#include <limits>

namespace spyre::sim::numeric {

std::uint16_t f32_to_dl16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000);
  const std::uint32_t a = u & 0x7fffffff;
  if (a >= 0x7f800000) return sign | kDl16NanInf;  // infinity or NaN
  const std::uint32_t biased = a >> 23;
  if (biased == 0) return sign;  // fp32 zero or subnormal: far below 2^-32
  int e = static_cast<int>(biased) - 127 + 31;  // DL16's biased exponent
  const std::uint32_t mant = a & 0x7fffff;
  // [2^-32, 2^-31): nearer the smallest normal 2^-31 x (1 + 2^-9) from the midpoint
  // 2^-32 x (1 + 2^-9) on (a tie goes up), nearer zero below it.
  if (e < -1) return sign;
  if (e == -1) return mant >= (1u << 14) ? static_cast<std::uint16_t>(sign | 1) : sign;
  // 23 fraction bits to 9: add half of the dropped 2^14 (ties away from zero).
  std::uint32_t r = mant + (1u << 13);
  if (r >= (1u << 23)) {  // the fraction carried into the exponent
    r -= 1u << 23;
    ++e;
  }
  const std::uint32_t frac = r >> 14;
  if (e > 63 || (e == 63 && frac == 511)) return sign | kDl16NanInf;  // past the largest finite
  if (e == 0 && frac == 0) return sign | 1;  // 2^-31 itself is not a DL16 value; its nearest is
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(e) << 9) | frac);
}

float dl16_to_f32(std::uint16_t d) {
  const bool negative = (d & 0x8000) != 0;
  const int e = (d >> 9) & 0x3f;
  const int frac = d & 0x1ff;
  if (e == 63 && frac == 511) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0 && frac == 0) return negative ? -0.0f : 0.0f;
  const float magnitude = std::ldexp(1.0f + static_cast<float>(frac) / 512.0f, e - 31);  // exact in fp32
  return negative ? -magnitude : magnitude;
}

}  // namespace spyre::sim::numeric
