#include "config/derived_figures.h"

#include <algorithm>

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace spyre::config {

std::string_view to_string(MacType t) {
  switch (t) {
    case MacType::fp32: return "fp32";
    case MacType::fp16: return "fp16";
    case MacType::bf16: return "bf16";
    case MacType::fp8: return "fp8";
    case MacType::int8: return "int8";
    case MacType::int4: return "int4";
  }
  throw std::logic_error("unknown MacType");
}

std::uint64_t simd_depth(const SimdDepth& d, MacType t) {
  switch (t) {
    case MacType::fp32: return d.fp32;
    case MacType::fp16: return d.fp16;
    case MacType::bf16: return d.bf16;
    case MacType::fp8: return d.fp8;
    case MacType::int8: return d.int8;
    case MacType::int4: return d.int4;
  }
  throw std::logic_error("unknown MacType");
}

double pcie_gt_per_s(std::uint64_t gen) {
  static constexpr double rates[] = {2.5, 5.0, 8.0, 16.0, 32.0, 64.0};
  if (gen < 1 || gen > 6) throw std::out_of_range("PCIe generation must be 1..6");
  return rates[gen - 1];
}

double pcie_encoding(std::uint64_t gen) {
  if (gen <= 2) return 8.0 / 10.0;      // 8b/10b
  if (gen <= 5) return 128.0 / 130.0;   // 128b/130b
  return 242.0 / 256.0;                 // Gen6 FLIT mode: 242 payload bytes per 256-byte FLIT
}

double pcie_raw_bytes_per_s(const HostLinkConfig& link) {
  return pcie_gt_per_s(link.pcie_gen) * 1e9 * static_cast<double>(link.lanes) * pcie_encoding(link.pcie_gen) / 8;
}

double pcie_effective_bytes_per_s(const HostLinkConfig& link) { return pcie_raw_bytes_per_s(link) * link.efficiency; }

DerivedFigures derive(const ChipConfig& chip) {
  DerivedFigures d;
  const auto& c = chip.cores;
  d.clock_hz = chip.clock_ghz * 1e9;
  d.pes_per_core = c.corelets * c.compute_array.rows * c.compute_array.cols;
  for (const MacType t : kMacTypes) {
    const double per_cycle_core = static_cast<double>(d.pes_per_core * simd_depth(c.compute_array.simd_depth, t));
    d.peak_macs_per_ns_core[static_cast<int>(t)] = per_cycle_core * chip.clock_ghz;
    d.peak_macs_per_s[static_cast<int>(t)] = per_cycle_core * static_cast<double>(c.count) * d.clock_hz;
  }
  d.vector_elements_per_s = static_cast<double>(c.count * c.corelets * c.vector.units_per_corelet * c.vector.lanes) * d.clock_hz;
  d.dram_peak_bytes_per_s = chip.memory.peak_gbps * 1e9;
  d.dram_deliverable_bytes_per_s = d.dram_peak_bytes_per_s * chip.memory.efficiency;
  d.dram_channel_bytes_per_s = d.dram_peak_bytes_per_s / static_cast<double>(chip.memory.channels);
  d.ring_link_bytes_per_s = static_cast<double>(chip.ring.bytes_per_cycle) * d.clock_hz;
  d.ring_bisection_bytes_per_s = 4 * d.ring_link_bytes_per_s;
  d.pcie_raw_bytes_per_s = pcie_raw_bytes_per_s(chip.host_link);
  d.pcie_effective_bytes_per_s = pcie_effective_bytes_per_s(chip.host_link);
  d.scratchpad_core_bytes_per_s =
      static_cast<double>(c.scratchpad.ports * c.scratchpad.bytes_per_cycle_per_port) * d.clock_hz;
  // One DMA engine: its datapath (bytes_per_cycle x clock) or, with `outstanding`
  // stick requests in flight each waiting the DRAM latency, Little's law:
  // outstanding x stick / latency, whichever is lower. (Default chip: 128 B x 1.5 GHz
  // = 192 GB/s against 64 x 128 B / 120 ns = 68.27 GB/s.)
  d.dma_engine_bytes_per_s = static_cast<double>(chip.dma.bytes_per_cycle) * d.clock_hz;
  if (chip.dma.outstanding_requests > 0 && chip.memory.latency_ns > 0) {
    d.dma_engine_bytes_per_s =
        std::min(d.dma_engine_bytes_per_s, static_cast<double>(chip.dma.outstanding_requests * chip.dma.stick_bytes) /
                                               (chip.memory.latency_ns * 1e-9));
  }
  // Each channel makes a round trip (2 turnarounds) per write batch of the scarcer
  // direction; with traffic spread over the channels, per byte of the chip's
  // min(R, W): 2 x turnaround / (channels x batch). (Default: 2 x 20 ns / (16 x 512 B)
  // = 4.883 ps/B.)
  d.dram_turnaround_s_per_byte = 2 * chip.memory.turnaround_ns * 1e-9 /
                                 static_cast<double>(chip.memory.channels * chip.memory.write_batch_bytes);
  d.scratchpad_total_bytes = c.scratchpad.bytes * c.count;
  d.scratchpad_usable_total_bytes = c.scratchpad.usable_bytes * c.count;
  d.ridge_ops_per_byte_fp16 = d.peak_ops_per_s(MacType::fp16) / d.dram_peak_bytes_per_s;
  return d;
}

nlohmann::json to_json(const DerivedFigures& d) {
  nlohmann::json peak_macs = nlohmann::json::object();
  nlohmann::json peak_ops = nlohmann::json::object();
  nlohmann::json per_core = nlohmann::json::object();
  for (const MacType t : kMacTypes) {
    const std::string name(to_string(t));
    peak_macs[name] = d.peak_macs_per_s[static_cast<int>(t)];
    peak_ops[name] = d.peak_ops_per_s(t);
    per_core[name] = d.peak_macs_per_ns_core[static_cast<int>(t)];
  }
  return {
      {"clock_hz", d.clock_hz},
      {"pes_per_core", d.pes_per_core},
      {"peak_macs_per_s", peak_macs},
      {"peak_ops_per_s", peak_ops},
      {"peak_macs_per_ns_per_core", per_core},
      {"vector_elements_per_s", d.vector_elements_per_s},
      {"dram_peak_bytes_per_s", d.dram_peak_bytes_per_s},
      {"dram_deliverable_bytes_per_s", d.dram_deliverable_bytes_per_s},
      {"dram_channel_bytes_per_s", d.dram_channel_bytes_per_s},
      {"ring_link_bytes_per_s", d.ring_link_bytes_per_s},
      {"ring_bisection_bytes_per_s", d.ring_bisection_bytes_per_s},
      {"pcie_raw_bytes_per_s", d.pcie_raw_bytes_per_s},
      {"pcie_effective_bytes_per_s", d.pcie_effective_bytes_per_s},
      {"scratchpad_core_bytes_per_s", d.scratchpad_core_bytes_per_s},
      {"dma_engine_bytes_per_s", d.dma_engine_bytes_per_s},
      {"dram_turnaround_s_per_byte", d.dram_turnaround_s_per_byte},
      {"scratchpad_total_bytes", d.scratchpad_total_bytes},
      {"scratchpad_usable_total_bytes", d.scratchpad_usable_total_bytes},
      {"ridge_ops_per_byte_fp16", d.ridge_ops_per_byte_fp16},
  };
}

}  // namespace spyre::config
