// The kernel compiler's sequences: arange's start, start + step, ... made on the chip
// from the device's positions vector (there is no index instruction), and running
// sums along rows (cumsum).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/elementwise.h"
#include "spyre/isa/isa.h"

namespace spyre::compiler {

struct ArangeShape {
  std::uint64_t count = 1;
  double start = 0, step = 1;  // integers with |values| < 2^24, so fp32 holds each exactly
  isa::DType out = isa::DType::fp32;  // fp32, fp16, bf16, int32, int8; or int64 (below)
  bool int64 = false;                 // store int64: the int32 value and its sign word
};

// Values start + step * i, i < count, computed in fp32 (exact for the integers
// allowed) in tiles of the positions vector's length, split over the cores.
// Arguments: 0 = out (contiguous), 1 = positions (fp32 0, 1, ..., at least
// min(count, positions) values).
std::vector<std::uint8_t> compile_arange(const ArangeShape& shape, std::uint64_t positions, const Target& target,
                                         const std::string& name);

// linspace's `count` values from start to end as PyTorch's CPU kernel computes them:
// the first half (i < count / 2) start + step * i, the rest end - step * (count - 1 - i),
// so both ends are exact. start, end and step are the values the CPU kernel uses (in
// the output's dtype); the device computes in fp32 and rounds once to `out`.
struct LinspaceShape {
  std::uint64_t count = 2;  // at least 2, at most 2^24 (indices exact in fp32)
  double start = 0, end = 1, step = 1;
  isa::DType out = isa::DType::fp32;  // fp32, fp16 or bf16
};
// Arguments: 0 = out (contiguous), 1 = positions (fp32 0, 1, ..., at least
// min(count, positions) values).
std::vector<std::uint8_t> compile_linspace(const LinspaceShape& shape, std::uint64_t positions, const Target& target,
                                           const std::string& name);

// Running sums along each row: out[r, j] = in[r, 0] + ... + in[r, j].
struct CumsumShape {
  std::uint64_t rows = 1, cols = 1;  // contiguous rows
  isa::DType in = isa::DType::fp32, out = isa::DType::fp32;  // each fp32, fp16 or bf16
};

// Rows in tiles (whole rows of up to 16384 values, as many as fit; longer rows in
// chunks of 16384, each chunk's sums then offset by the row's total so far), summed in
// fp32 by log2(width) doubling steps: after the step of distance d every value holds
// the sum of the up to 2d values ending at it (Hillis-Steele; a value takes its
// neighbour d back only from its own row, by a mask of the positions). Arguments:
// 0 = in, 1 = out (rows x cols, contiguous), 2 = positions (fp32, at least
// min(cols, 16384) values).
std::vector<std::uint8_t> compile_cumsum(const CumsumShape& shape, const Target& target, const std::string& name);

}  // namespace spyre::compiler
