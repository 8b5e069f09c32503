// Where things sit on the chip and what an access costs in bytes, independent of time:
// the ring's stops (cores in groups, each group followed by its memory stop), the
// shorter path between two stops, and the DRAM bytes an address range is charged per
// channel (whole sticks, interleaved over the channels). The executor counts with it;
// the timed device reserves the same links and channels with it.
#pragma once

#include <cstdint>
#include <vector>

#include "config/chip_config.h"

namespace spyre::sim {

class Topology {
 public:
  explicit Topology(const config::ChipConfig& config);

  std::uint32_t stops() const { return stops_; }
  std::uint32_t core_stop(std::uint32_t core) const { return core_stop_[core]; }
  std::uint32_t memory_stop(std::uint32_t m) const { return memory_stop_[m]; }
  std::uint32_t memory_stops() const { return static_cast<std::uint32_t>(memory_stop_.size()); }
  std::uint32_t channels() const { return channels_; }
  // The memory stop (index into memory_stop) behind a channel.
  std::uint32_t memory_stop_of_channel(std::uint32_t channel) const { return channel / channels_per_stop_; }

  // The links from stop a to stop b along the shorter direction (clockwise on ties):
  // link i joins stop i and stop i + 1; clockwise paths use links a, a+1, ...,
  // counter-clockwise ones a-1, a-2, ... (mod stops).
  struct Path {
    bool clockwise = true;
    std::uint32_t hops = 0;
    std::uint32_t link(std::uint32_t from, std::uint32_t i, std::uint32_t stops) const {
      return clockwise ? (from + i) % stops : (from + stops - 1 - i) % stops;
    }
  };
  Path path(std::uint32_t a, std::uint32_t b) const;

  // The channel of interleave granule `granule` (memory.channel_map).
  std::uint32_t channel_of(std::uint64_t granule) const;
  // Adds the DRAM bytes the range [offset, offset + bytes) of device memory (offset
  // from the memory's base) is charged, rounded out to whole sticks, to the per-channel
  // `shares` (granule g lives on channel_of(g)) and to `charged`.
  void charge(std::uint64_t offset, std::uint64_t bytes, std::vector<std::uint64_t>& shares,
              std::uint64_t& charged) const;

 private:
  std::uint32_t stops_ = 0, channels_ = 0, channels_per_stop_ = 1;
  std::uint64_t stick_ = 0, granule_ = 0;
  bool skewed_ = false;
  std::vector<std::uint32_t> core_stop_, memory_stop_;
};

}  // namespace spyre::sim
