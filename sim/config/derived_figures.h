// Figures that follow from a ChipConfig (peaks, bandwidths, ridge point), computed in
// one place so every report and timing rule agrees on them.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "config/chip_config.h"

namespace spyre::config {

// Operand types of the compute array, in SimdDepth's order.
enum class MacType { fp32, fp16, bf16, fp8, int8, int4 };
inline constexpr std::array<MacType, 6> kMacTypes = {MacType::fp32, MacType::fp16, MacType::bf16,
                                                     MacType::fp8,  MacType::int8, MacType::int4};
std::string_view to_string(MacType t);
std::uint64_t simd_depth(const SimdDepth& d, MacType t);

struct DerivedFigures {
  double clock_hz = 0;
  std::uint64_t pes_per_core = 0;                  // corelets x rows x cols
  std::array<double, 6> peak_macs_per_s{};         // whole chip, per MacType
  std::array<double, 6> peak_macs_per_ns_core{};   // one core, per MacType
  double vector_elements_per_s = 0;                // whole chip, one element-op per lane-cycle
  double dram_peak_bytes_per_s = 0;
  double dram_deliverable_bytes_per_s = 0;         // peak x efficiency
  double dram_channel_bytes_per_s = 0;
  double ring_link_bytes_per_s = 0;                // one hop, one direction
  double ring_bisection_bytes_per_s = 0;           // a cut crosses 2 links x 2 directions
  double pcie_raw_bytes_per_s = 0;                 // one direction, after line encoding
  double pcie_effective_bytes_per_s = 0;           // x efficiency
  double scratchpad_core_bytes_per_s = 0;          // all ports of one core
  double dma_engine_bytes_per_s = 0;               // one engine: datapath or request limit
  // Read/write turnaround per byte of the scarcer direction, over the whole chip:
  // time = (R + W) / deliverable + this x min(R, W).
  double dram_turnaround_s_per_byte = 0;
  std::uint64_t scratchpad_total_bytes = 0;
  std::uint64_t scratchpad_usable_total_bytes = 0;
  double ridge_ops_per_byte_fp16 = 0;              // peak fp16 FLOP/s over DRAM peak B/s

  double peak_ops_per_s(MacType t) const { return 2 * peak_macs_per_s[static_cast<int>(t)]; }
};

DerivedFigures derive(const ChipConfig& chip);

// PCIe transfer rate per lane (GT/s) and line-code efficiency for a generation 1..6.
double pcie_gt_per_s(std::uint64_t gen);
double pcie_encoding(std::uint64_t gen);
// One direction of a PCIe link after line encoding: GT/s x lanes x encoding / 8 bits.
double pcie_raw_bytes_per_s(const HostLinkConfig& link);
// The same x the link's efficiency: the rate its payload moves at.
double pcie_effective_bytes_per_s(const HostLinkConfig& link);

nlohmann::json to_json(const DerivedFigures& d);

}  // namespace spyre::config
