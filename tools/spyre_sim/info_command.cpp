// spyre-sim info: the chip summary and the figures derived from its config.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/config_loader.h"
#include "config/derived_figures.h"
#include "spyre_sim/commands.h"

namespace spyre::tools {
namespace {

using config::DerivedFigures;
using config::LoadedConfig;
using config::MacType;

constexpr int kInfoSchemaVersion = 1;

std::string bytes_text(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return fmt::format("{:.4g} {}", bytes, units[u]);
}

std::string dataflow_text(config::Dataflow d) {
  for (const auto& [name, value] : config::dataflow_choices()) {
    if (value == d) return std::string(name);
  }
  return "?";
}

void print_text(const LoadedConfig& loaded, const DerivedFigures& d) {
  const auto& chip = loaded.chip;
  const auto& c = chip.cores;
  fmt::print("spyre-sim {} — chip '{}' from {}{}\n", SPYRE_VERSION, chip.name, loaded.source,
             loaded.overrides.empty() ? "" : fmt::format(" with {} override(s)", loaded.overrides.size()));
  fmt::print("config hash          {}\n", loaded.hash);
  fmt::print("clock                {:.3f} GHz\n", chip.clock_ghz);
  fmt::print("cores                {} x {} corelets; per corelet: {}x{} PE array ({}), {} vector "
             "units x {} lanes\n",
             c.count, c.corelets, c.compute_array.rows, c.compute_array.cols,
             dataflow_text(c.compute_array.dataflow), c.vector.units_per_corelet, c.vector.lanes);
  fmt::print("scratchpad           {} per core ({} usable), {} total, {:.1f} GB/s per core\n",
             bytes_text(double(c.scratchpad.bytes)), bytes_text(double(c.scratchpad.usable_bytes)),
             bytes_text(double(d.scratchpad_total_bytes)), d.scratchpad_core_bytes_per_s / 1e9);
  fmt::print("peak compute         {:<6} {:>9} {:>12} {:>12}\n", "dtype", "MAC/cycle", "MAC/ns/core",
             "TOPS (chip)");
  for (const MacType t : config::kMacTypes) {
    const auto depth = config::simd_depth(c.compute_array.simd_depth, t);
    if (depth == 0) {
      fmt::print("                     {:<6} {:>9} {:>12} {:>12}\n", config::to_string(t), "-", "-",
                 "unsupported");
      continue;
    }
    fmt::print("                     {:<6} {:>9} {:>12.0f} {:>12.2f}\n", config::to_string(t),
               d.pes_per_core * depth, d.peak_macs_per_ns_core[static_cast<int>(t)],
               d.peak_ops_per_s(t) / 1e12);
  }
  fmt::print("vector               {:.3f} T element-ops/s (chip)\n", d.vector_elements_per_s / 1e12);
  fmt::print("device memory        {} ({} usable), {} channels, {:.1f} GB/s peak, {:.1f} GB/s "
             "deliverable ({:.0f}%)\n",
             bytes_text(double(chip.memory.capacity_bytes)), bytes_text(double(chip.memory.usable_bytes)),
             chip.memory.channels, d.dram_peak_bytes_per_s / 1e9, d.dram_deliverable_bytes_per_s / 1e9,
             chip.memory.efficiency * 100);
  if (d.dram_turnaround_s_per_byte > 0) {
    // A balanced copy (1 read + 1 write): 2 / (2 / deliverable + turnaround per byte).
    const double balanced = 2 / (2 / d.dram_deliverable_bytes_per_s + d.dram_turnaround_s_per_byte);
    fmt::print("DRAM turnaround      {:g} ns per {}-byte write batch: {:.1f} GB/s for a balanced copy\n",
               chip.memory.turnaround_ns, chip.memory.write_batch_bytes, balanced / 1e9);
  }
  fmt::print("DMA engine           {:.1f} GB/s each ({} per core{})\n", d.dma_engine_bytes_per_s / 1e9,
             chip.dma.engines_per_core,
             chip.dma.outstanding_requests > 0
                 ? fmt::format(", {} requests in flight over {:g} ns", chip.dma.outstanding_requests, chip.memory.latency_ns)
                 : std::string());
  fmt::print("ring                 {} B/cycle per link per direction = {:.1f} GB/s; bisection {:.1f} GB/s\n",
             chip.ring.bytes_per_cycle, d.ring_link_bytes_per_s / 1e9, d.ring_bisection_bytes_per_s / 1e9);
  fmt::print("host link            PCIe Gen{} x{}: {:.1f} GB/s raw, {:.1f} GB/s effective per direction\n",
             chip.host_link.pcie_gen, chip.host_link.lanes, d.pcie_raw_bytes_per_s / 1e9,
             d.pcie_effective_bytes_per_s / 1e9);
  if (chip.system) {
    const auto& sys = *chip.system;
    const char* topology = sys.topology == spyre::config::Topology::switched ? "behind a PCIe switch"
                           : sys.topology == spyre::config::Topology::ring   ? "in a ring"
                                                                              : "fully connected";
    const auto& link = sys.link ? *sys.link : chip.host_link;
    if (sys.topology == spyre::config::Topology::switched) {
      fmt::print("system               {} card(s) {}: peer copies through the cards' own ports, +{:.0f} ns switch latency",
                 sys.cards, topology, sys.switch_latency_ns);
      if (sys.host_uplink) {
        fmt::print("; the switch's port to the host PCIe Gen{} x{}: {:.1f} GB/s per direction",
                   sys.host_uplink->pcie_gen, sys.host_uplink->lanes,
                   spyre::config::pcie_effective_bytes_per_s(*sys.host_uplink) / 1e9);
      }
      fmt::print("\n");
    } else {
      fmt::print("system               {} card(s) {}: card links PCIe Gen{} x{}, {:.1f} GB/s per direction, {:.0f} ns each\n",
                 sys.cards, topology, link.pcie_gen, link.lanes, spyre::config::pcie_effective_bytes_per_s(link) / 1e9,
                 link.latency_ns);
    }
  }
  fmt::print("roofline ridge       {:.1f} FLOP/byte (fp16 peak over DRAM peak)\n", d.ridge_ops_per_byte_fp16);
}

nlohmann::json info_json(const LoadedConfig& loaded, const DerivedFigures& d) {
  return {
      {"tool", "spyre-sim"},
      {"version", SPYRE_VERSION},
      {"schema_version", kInfoSchemaVersion},
      {"config",
       {{"name", loaded.chip.name},
        {"source", loaded.source},
        {"overrides", loaded.overrides},
        {"hash", loaded.hash},
        {"resolved", config::to_json(loaded.chip)}}},
      {"derived", config::to_json(d)},
  };
}

}  // namespace

void add_info_command(CLI::App& app, int& exit_code) {
  struct Options {
    ConfigOptions config;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* info = app.add_subcommand("info", "print the chip summary and derived figures");
  add_config_options(*info, options->config);
  info->add_flag("--json", options->json, "print JSON (schema_version 1) instead of text");
  info->callback([options, &exit_code] {
    const LoadedConfig loaded = config::load_config(options->config.config_path, options->config.overrides);
    const DerivedFigures d = config::derive(loaded.chip);
    if (options->json) {
      fmt::print("{}\n", info_json(loaded, d).dump(2));
    } else {
      print_text(loaded, d);
    }
    exit_code = kExitSuccess;
  });
}

}  // namespace spyre::tools
