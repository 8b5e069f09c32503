// DL16 (IBM's DLFloat16), the card's 16-bit compute format: 1 sign, 6 exponent
// (bias 31) and 9 fraction bits, sign-magnitude.
//   - No subnormals: the lowest binade holds zero (exponent 0, fraction 0, either sign)
//     and normal numbers (exponent 0, fraction 1..511 = 2^-31 x (1 + f/512)).
//   - The top code of the highest binade (exponent 63, fraction 511) is one merged
//     NaN/infinity; exponent 63 with fraction 0..510 is finite (largest 2^32 x
//     (1 + 510/512) = 8581545984).
// Decisions where the sources leave room (docs/ARCHITECTURE.md §5):
//   - Rounding is "round to nearest up" on the magnitude: a tie goes away from zero,
//     for negative values too (the format is sign-magnitude).
//   - A value whose rounded magnitude passes the largest finite one (from 2^32 x
//     (1 + 510.5/512) up), infinities and NaNs encode as the NaN/infinity code, with
//     their sign; that code decodes as NaN (the card cannot tell them apart).
//   - Below the smallest normal, a value rounds to zero or to the smallest normal,
//     whichever is nearer (ties up); -0 keeps its sign.
#pragma once

#include <cstdint>

namespace spyre::sim::numeric {

inline constexpr std::uint16_t kDl16NanInf = 0x7fff;  // (with the sign bit: 0xffff)

std::uint16_t f32_to_dl16(float f);
float dl16_to_f32(std::uint16_t d);
// f rounded to the nearest DL16 value (NaN for the NaN/infinity code).
inline float round_through_dl16(float f) { return dl16_to_f32(f32_to_dl16(f)); }

}  // namespace spyre::sim::numeric
