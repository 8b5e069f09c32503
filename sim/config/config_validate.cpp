#include "config/config_validate.h"

#include <fmt/format.h>

#include "config/config_loader.h"

namespace spyre::config {
namespace {

bool is_power_of_two(std::uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

void validate(const ChipConfig& chip, const Locate& locate) {
  const auto require = [&](bool ok, const std::string& key, const std::string& message) {
    if (!ok) throw ConfigError(locate(key), key, message);
  };
  const auto& sp = chip.cores.scratchpad;
  require(sp.usable_bytes <= sp.bytes, "cores.scratchpad.usable_bytes",
          fmt::format("expected at most cores.scratchpad.bytes ({}), found {}", sp.bytes, sp.usable_bytes));
  require(chip.cores.compute_array.simd_depth.fp16 > 0, "cores.compute_array.simd_depth.fp16",
          "expected a positive depth: every chip must support fp16 matmul");

  require(chip.cores.count * sp.bytes <= kMaxTotalScratchpadBytes, "cores.scratchpad.bytes",
          fmt::format("expected cores.count x scratchpad bytes at most {} GiB (every core's scratchpad is "
                      "host memory), found {} x {} bytes",
                      kMaxTotalScratchpadBytes >> 30, chip.cores.count, sp.bytes));
  // The watchdog's time in picoseconds must fit 63 bits: cycles x 1000 / clock_ghz.
  require(static_cast<double>(chip.firmware.watchdog_cycles) * 1000.0 / chip.clock_ghz < 9.2e18,
          "firmware.watchdog_cycles",
          fmt::format("expected at most {:.3g} cycles at {} GHz (the timeout must fit 2^63 picoseconds), found {}",
                      9.2e18 * chip.clock_ghz / 1000.0, chip.clock_ghz, chip.firmware.watchdog_cycles));

  const auto& mem = chip.memory;
  require(mem.usable_bytes <= mem.capacity_bytes, "memory.usable_bytes",
          fmt::format("expected at most memory.capacity_bytes ({}), found {}", mem.capacity_bytes,
                      mem.usable_bytes));
  require(is_power_of_two(chip.dma.stick_bytes), "dma.stick_bytes",
          fmt::format("expected a power of two, found {}", chip.dma.stick_bytes));
  require(is_power_of_two(mem.interleave_bytes) && mem.interleave_bytes >= chip.dma.stick_bytes,
          "memory.interleave_bytes",
          fmt::format("expected a power of two no smaller than dma.stick_bytes ({}), found {}",
                      chip.dma.stick_bytes, mem.interleave_bytes));
  require(chip.ring.memory_stops <= mem.channels && mem.channels % chip.ring.memory_stops == 0,
          "ring.memory_stops",
          fmt::format("expected a divisor of memory.channels ({}) so every memory stop serves the "
                      "same number of channels, found {}",
                      mem.channels, chip.ring.memory_stops));
  require(is_power_of_two(chip.host_link.lanes), "host_link.lanes",
          fmt::format("expected a PCIe link width of 1, 2, 4, 8, 16 or 32 lanes, found {}",
                      chip.host_link.lanes));
  if (chip.system) {
    const SystemConfig& sys = *chip.system;
    require(!(sys.topology == Topology::switched && sys.link), "system.link",
            "expected no link under topology 'switch': a switched card's only link is its host_link "
            "(set host_link.lanes or pcie_gen for a what-if); link describes ring and full topologies");
    require(!(sys.topology != Topology::switched && sys.host_uplink), "system.host_uplink",
            "expected no host_uplink under a ring or full topology: there every card reaches the host "
            "through its own host_link; host_uplink is the port of a switch");
    for (const auto& [key, link] : {std::pair{"system.link", &sys.link}, {"system.host_uplink", &sys.host_uplink}}) {
      if (*link) {
        require(is_power_of_two((*link)->lanes), std::string(key) + ".lanes",
                fmt::format("expected a PCIe link width of 1, 2, 4, 8, 16 or 32 lanes, found {}", (*link)->lanes));
      }
    }
  }
}

}  // namespace spyre::config
