// The kernel compiler's sequences: arange's start, start + step, ... made on the chip
// from the device's positions vector (there is no index instruction).
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

}  // namespace spyre::compiler
