// Counter-based random numbers for vrandom (include/spyre/isa/isa.h): Philox4x32-10
// (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the generator
// PyTorch's CUDA and philox_engine use. A number is a pure function of (key, counter),
// which is what lets any split of a kernel over cores give the same values.
#pragma once

#include <array>
#include <cstdint>

#include "spyre/isa/isa.h"

namespace spyre::sim::functional {

// Ten rounds of Philox4x32 on `counter` under `key`.
std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key);

// Number j of the stream (seed, offset) in distribution `dist`, as vrandom defines it.
float random_value(isa::RandomDist dist, std::uint64_t seed, std::uint64_t offset, std::uint64_t j);

// Executes vrandom on the scratchpad.
void random(const isa::VRandom& inst, std::uint8_t* sp);

}  // namespace spyre::sim::functional
