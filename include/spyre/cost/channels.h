// Which DRAM channel an address lives on, defined once for the chip model (which
// charges each access to its channels) and the kernel compiler's cost model (which
// predicts the busiest channel). Standard library only. docs/ARCHITECTURE.md §4.
#pragma once

#include <cstdint>

namespace spyre::cost {

// Interleave granule `granule` (address / interleave_bytes) of `channels` channels.
// skewed (memory.channel_map: skewed): the sum of the granule's digits in base
// `channels`, mod `channels`. Each aligned run of `channels` granules still covers every
// channel once, but a stride of a whole round (channels x interleave) moves one channel
// on instead of landing on the same one, as memory controllers hash higher address bits
// into the channel. interleaved: granule mod channels.
// (16 channels: granules 0, 16, 32 and 256 are on channels 0, 1, 2 and 1 skewed; all on
// channel 0 interleaved.) In both, granule g is on (dram_channel(g - g mod channels) +
// g mod channels) mod channels.
constexpr std::uint32_t dram_channel(std::uint64_t granule, std::uint32_t channels, bool skewed) {
  if (channels <= 1) return 0;
  if (!skewed) return static_cast<std::uint32_t>(granule % channels);
  std::uint64_t sum = 0;
  for (std::uint64_t g = granule; g != 0; g /= channels) sum += g % channels;
  return static_cast<std::uint32_t>(sum % channels);
}

static_assert(dram_channel(0, 16, true) == 0 && dram_channel(16, 16, true) == 1 && dram_channel(32, 16, true) == 2);
static_assert(dram_channel(256, 16, true) == 1 && dram_channel(17, 16, true) == 2 && dram_channel(31, 16, true) == 0);
static_assert(dram_channel(16, 16, false) == 0 && dram_channel(35, 16, false) == 3 && dram_channel(35, 1, true) == 0);

}  // namespace spyre::cost
