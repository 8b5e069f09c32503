#include "exec/topology.h"

#include <algorithm>

#include "spyre/checked.h"
#include "spyre/cost/channels.h"

namespace spyre::sim {

Topology::Topology(const config::ChipConfig& cfg)
    : channels_(static_cast<std::uint32_t>(cfg.memory.channels)),
      channels_per_stop_(static_cast<std::uint32_t>(cfg.memory.channels / cfg.ring.memory_stops)),
      stick_(cfg.dma.stick_bytes),
      granule_(cfg.memory.interleave_bytes),
      skewed_(cfg.memory.channel_map == config::ChannelMap::skewed) {
  // The cores in memory_stops groups (the first n_cores % n_mem groups one larger),
  // each group followed by its memory stop.
  const auto n_cores = static_cast<std::uint32_t>(cfg.cores.count);
  const auto n_mem = static_cast<std::uint32_t>(cfg.ring.memory_stops);
  stops_ = n_cores + n_mem;
  std::uint32_t pos = 0;
  for (std::uint32_t g = 0; g < n_mem; ++g) {
    const std::uint32_t group = n_cores / n_mem + (g < n_cores % n_mem ? 1 : 0);
    for (std::uint32_t i = 0; i < group; ++i) core_stop_.push_back(pos++);
    memory_stop_.push_back(pos++);
  }
}

Topology::Path Topology::path(std::uint32_t a, std::uint32_t b) const {
  const std::uint32_t cw = (b + stops_ - a) % stops_;
  const std::uint32_t ccw = stops_ - cw;
  if (cw == 0) return {};
  if (cw <= ccw) return {.clockwise = true, .hops = cw};
  return {.clockwise = false, .hops = ccw};
}

std::uint32_t Topology::channel_of(std::uint64_t granule) const {
  return cost::dram_channel(granule, channels_, skewed_);
}

void Topology::charge(std::uint64_t offset, std::uint64_t bytes, std::vector<std::uint64_t>& shares,
                      std::uint64_t& charged) const {
  if (bytes == 0) return;
  const std::uint64_t s0 = offset / stick_ * stick_;
  const std::uint64_t s1 = ceil_div(offset + bytes, stick_) * stick_;
  charged += s1 - s0;
  const std::uint64_t g0 = s0 / granule_, g1 = (s1 - 1) / granule_;
  // A granule's channel is its block's (the aligned run of `channels` granules it is in)
  // plus its place in the block, mod channels, in either mapping: one channel_of per block.
  std::uint64_t block = ~std::uint64_t{0};
  std::uint32_t first_of_block = 0;
  const auto one = [&](std::uint64_t g) {
    if (g / channels_ != block) {
      block = g / channels_;
      first_of_block = channel_of(block * channels_);
    }
    const auto c = static_cast<std::uint32_t>((first_of_block + g % channels_) % channels_);
    shares[c] += std::min(s1, (g + 1) * granule_) - std::max(s0, g * granule_);
  };
  if (g1 - g0 + 1 <= 2 * std::uint64_t{channels_}) {
    for (std::uint64_t g = g0; g <= g1; ++g) one(g);
    return;
  }
  // Long runs: the (maybe partial) first and last granules; between them whole granules
  // one by one up to a block of `channels` aligned granules (a block covers every channel
  // once, in either mapping), whole blocks at once, then the rest.
  one(g0);
  one(g1);
  std::uint64_t g = g0 + 1;
  for (; g < g1 && g % channels_ != 0; ++g) one(g);
  const std::uint64_t blocks = (g1 - g) / channels_;
  if (blocks > 0) {
    for (auto& share : shares) share += blocks * granule_;
    g += blocks * channels_;
  }
  for (; g < g1; ++g) one(g);
}

}  // namespace spyre::sim
