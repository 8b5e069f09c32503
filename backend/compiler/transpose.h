// The kernel compiler's transposed copy: a copy whose source runs along the
// destination's second dimension (x.t().contiguous(), a permute that moves the
// innermost dimension). The pointwise copy would read such a source one element per
// 128-byte stick; this one reads blocks whose rows are contiguous in the source,
// turns them with the vector unit's transpose (the card's restickify) and stores
// blocks whose rows are contiguous in the destination.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/pointwise.h"

namespace spyre::compiler {

// The program for `kernel` when it is a plain copy (one input, no steps, one dtype)
// whose input is contiguous along dimension 1 and strided along dimension 0 while the
// output is contiguous along dimension 0; otherwise nothing (the pointwise family
// compiles it).
std::optional<std::vector<std::uint8_t>> compile_transposed_copy(const PointwiseKernel& kernel, const Target& target,
                                                                 const std::string& name);

}  // namespace spyre::compiler
