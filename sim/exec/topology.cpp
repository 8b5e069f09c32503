#include "exec/topology.h"

#include <algorithm>

#include "spyre/checked.h"

namespace spyre::sim {

Topology::Topology(const config::ChipConfig& cfg)
    : channels_(static_cast<std::uint32_t>(cfg.memory.channels)),
      channels_per_stop_(static_cast<std::uint32_t>(cfg.memory.channels / cfg.ring.memory_stops)),
      stick_(cfg.dma.stick_bytes),
      granule_(cfg.memory.interleave_bytes) {
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

void Topology::charge(std::uint64_t offset, std::uint64_t bytes, std::vector<std::uint64_t>& shares,
                      std::uint64_t& charged) const {
  if (bytes == 0) return;
  const std::uint64_t s0 = offset / stick_ * stick_;
  const std::uint64_t s1 = ceil_div(offset + bytes, stick_) * stick_;
  charged += s1 - s0;
  const std::uint64_t g0 = s0 / granule_, g1 = (s1 - 1) / granule_;
  const std::uint64_t count = g1 - g0 + 1;
  if (count <= 2 * std::uint64_t{channels_}) {
    for (std::uint64_t g = g0; g <= g1; ++g) {
      shares[g % channels_] += std::min(s1, (g + 1) * granule_) - std::max(s0, g * granule_);
    }
    return;
  }
  // Long runs: the partial first and last granules, whole rounds, then the remainder.
  shares[g0 % channels_] += (g0 + 1) * granule_ - s0;
  shares[g1 % channels_] += s1 - g1 * granule_;
  const std::uint64_t middle = count - 2;
  const std::uint64_t rounds = middle / channels_;
  if (rounds > 0) {
    for (auto& s : shares) s += rounds * granule_;
  }
  for (std::uint64_t j = 0; j < middle % channels_; ++j) shares[(g0 + 1 + j) % channels_] += granule_;
}

}  // namespace spyre::sim
