// The chip's statistics as JSON and as a summary.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "chip/chip_impl.h"

namespace spyre::sim {

using config::MacType;

nlohmann::json Chip::report(Picoseconds elapsed_ps) const {
  using nlohmann::json;
  const double elapsed = std::max<double>(1.0, static_cast<double>(elapsed_ps));
  const auto server_json = [&](const Server& s) {
    return json{{"busy_ps", s.busy_ps()}, {"bytes", s.bytes()}, {"requests", s.requests()},
                {"utilisation", static_cast<double>(s.busy_ps()) / elapsed}};
  };
  json macs = json::object();
  for (const MacType t : config::kMacTypes) macs[std::string(config::to_string(t))] = stats_.macs[static_cast<int>(t)];
  json cores = json::array();
  const auto cycles = [&](Picoseconds ps) { return static_cast<std::uint64_t>(std::llround(clock_.cycles(ps))); };
  for (std::size_t c = 0; c < core_stats_.size(); ++c) {
    const CoreStats& s = core_stats_[c];
    std::uint64_t port_bytes = 0;
    for (const auto& port : impl_->cores[c].sp_ports) port_bytes += port.bytes();
    cores.push_back({{"core", c},
                     {"compute_busy_ps", s.compute_busy_ps},
                     {"vector_busy_ps", s.vector_busy_ps},
                     {"compute_busy_cycles", cycles(s.compute_busy_ps)},
                     {"compute_idle_cycles", cycles(elapsed_ps - std::min(elapsed_ps, s.compute_busy_ps))},
                     {"vector_busy_cycles", cycles(s.vector_busy_ps)},
                     {"vector_idle_cycles", cycles(elapsed_ps - std::min(elapsed_ps, s.vector_busy_ps))},
                     {"scratchpad_port_bytes", port_bytes},
                     {"compute_utilisation", static_cast<double>(s.compute_busy_ps) / elapsed},
                     {"vector_utilisation", static_cast<double>(s.vector_busy_ps) / elapsed},
                     {"instructions", s.instructions},
                     {"dma_load_bytes", s.dma_load_bytes},
                     {"dma_store_bytes", s.dma_store_bytes},
                     {"ring_sent_bytes", s.ring_sent_bytes},
                     {"scratchpad_high_water_bytes", s.scratchpad_high_water}});
  }
  json channels = json::array();
  for (const auto& c : impl_->channels) {
    json j = server_json(c.server());
    j["turnarounds"] = c.turnarounds();
    channels.push_back(std::move(j));
  }
  std::uint64_t ring_busy = 0, ring_bytes = 0;
  for (const auto* links : {&impl_->ring_cw, &impl_->ring_ccw}) {
    for (const auto& s : *links) ring_busy += s.busy_ps(), ring_bytes += s.bytes();
  }
  json kernels = json::array();
  for (const auto& [name, k] : stats_.kernel_totals) {
    json m = json::object();
    for (const MacType t : config::kMacTypes) m[std::string(config::to_string(t))] = k.macs[static_cast<int>(t)];
    kernels.push_back({{"name", name}, {"launches", k.launches}, {"faults", k.faults}, {"time_ps", k.time_ps},
                       {"macs", m}, {"instructions", k.instructions}, {"vector_elements", k.vector_elements},
                       {"dram_read_bytes", k.dram_read_bytes}, {"dram_write_bytes", k.dram_write_bytes},
                       {"ring_link_bytes", k.ring_bytes}, {"min_read_bytes", k.min_read_bytes},
                       {"min_write_bytes", k.min_write_bytes}});
  }
  json launches = json::array();
  for (const auto& r : stats_.launch_records) {
    json l = {{"id", r.id}, {"name", r.name}, {"start_ps", r.start}, {"end_ps", r.end},
              {"instructions", r.instructions}, {"vector_elements", r.vector_elements},
              {"dram_read_bytes", r.dram_read_bytes}, {"dram_write_bytes", r.dram_write_bytes},
              {"ring_link_bytes", r.ring_bytes}, {"min_read_bytes", r.min_read_bytes},
              {"min_write_bytes", r.min_write_bytes}};
    json m = json::object();
    for (const MacType t : config::kMacTypes) m[std::string(config::to_string(t))] = r.macs[static_cast<int>(t)];
    l["macs"] = m;
    if (r.fault) l["fault"] = r.fault->to_string();
    launches.push_back(std::move(l));
  }
  const double dram_bytes = static_cast<double>(stats_.dram_read_bytes + stats_.dram_write_bytes);
  return {{"device", device_},
          {"elapsed_ps", elapsed_ps},
          {"macs", macs},
          {"vector_elements", stats_.vector_elements},
          {"instructions", stats_.instructions},
          {"launches", stats_.launches},
          {"faults", stats_.faults},
          {"dram",
           {{"read_bytes", stats_.dram_read_bytes},
            {"write_bytes", stats_.dram_write_bytes},
            {"bandwidth_bytes_per_s", dram_bytes / elapsed * 1e12},
            {"channels", channels}}},
          {"ring", {{"link_busy_ps", ring_busy}, {"link_bytes", ring_bytes}}},
          {"pcie",
           {{"host_to_device", server_json(impl_->pcie_to_device)},
            {"device_to_host", server_json(impl_->pcie_to_host)}}},
          {"peer", {{"sent_bytes", stats_.peer_sent_bytes}, {"received_bytes", stats_.peer_received_bytes}}},
          {"communication",
           {{"collectives", stats_.collectives},
            {"time_ps", stats_.collective_ps},
            {"bytes", stats_.collective_bytes},
            {"link_bytes", stats_.collective_link_bytes}}},
          // Busy time (each kind's union; timed devices): launches, peer copies and
          // collectives, and both at once.
          {"card_busy_ps",
           {{"compute", stats_.activity.busy(timing::OverlapMeter::Kind::compute)},
            {"communication", stats_.activity.busy(timing::OverlapMeter::Kind::communication)},
            {"overlap", stats_.activity.overlap()}}},
          {"cores", cores},
          {"activity_ps", {stats_.first_activity_ps, stats_.last_activity_ps}},
          {"launch_span_ps", {stats_.first_launch_ps, stats_.last_launch_ps}},
          {"kernel_totals", kernels},
          {"launch_records", launches},
          {"launch_records_dropped", stats_.launch_records_dropped}};
}

std::string Chip::report_text(Picoseconds elapsed_ps) const {
  const double seconds = static_cast<double>(elapsed_ps) * 1e-12;
  std::string out = fmt::format("spyre:{} ({}): {:.0f} cycles = {:.3f} us, {} launch(es), {} fault(s), {} instructions\n",
                                device_, config_.name, clock_.cycles(elapsed_ps), seconds * 1e6, stats_.launches,
                                stats_.faults, stats_.instructions);
  for (const MacType t : config::kMacTypes) {
    const auto macs = stats_.macs[static_cast<int>(t)];
    if (macs == 0) continue;
    const double peak = figures_.peak_macs_per_s[static_cast<int>(t)];
    out += fmt::format("  {} MACs {:>14}  {:.1f}% of the chip's {} peak over this time\n", config::to_string(t), macs,
                       seconds > 0 && peak > 0 ? 100.0 * static_cast<double>(macs) / (peak * seconds) : 0.0,
                       config::to_string(t));
  }
  const double dram = static_cast<double>(stats_.dram_read_bytes + stats_.dram_write_bytes);
  out += fmt::format("  DRAM {:.2f} MiB read, {:.2f} MiB written: {:.1f} GB/s ({:.1f}% of deliverable)\n",
                     static_cast<double>(stats_.dram_read_bytes) / (1 << 20),
                     static_cast<double>(stats_.dram_write_bytes) / (1 << 20), seconds > 0 ? dram / seconds / 1e9 : 0.0,
                     seconds > 0 ? 100.0 * dram / seconds / figures_.dram_deliverable_bytes_per_s : 0.0);
  out += fmt::format("  PCIe {:.2f} MiB to the device, {:.2f} MiB to the host\n",
                     static_cast<double>(stats_.host_to_device_bytes) / (1 << 20),
                     static_cast<double>(stats_.device_to_host_bytes) / (1 << 20));
  if (stats_.collectives > 0) {
    out += fmt::format("  collectives {}: {:.3f} us from this card's arrival to their end, {:.2f} MiB between cards\n",
                       stats_.collectives, static_cast<double>(stats_.collective_ps) * 1e-6,
                       static_cast<double>(stats_.collective_bytes) / (1 << 20));
    for (const auto& [link, b] : stats_.collective_link_bytes) {
      out += fmt::format("    {:<28} {:.2f} MiB sent\n", link, static_cast<double>(b) / (1 << 20));
    }
  }
  if (stats_.peer_sent_bytes + stats_.peer_received_bytes > 0) {
    out += fmt::format("  peer copies {:.2f} MiB sent to other cards, {:.2f} MiB received\n",
                       static_cast<double>(stats_.peer_sent_bytes) / (1 << 20),
                       static_cast<double>(stats_.peer_received_bytes) / (1 << 20));
  }
  if (const Picoseconds comm = stats_.activity.busy(timing::OverlapMeter::Kind::communication); comm > 0) {
    out += fmt::format("  communicating {:.3f} us, computing {:.3f} us, both at once {:.3f} us\n",
                       static_cast<double>(comm) * 1e-6,
                       static_cast<double>(stats_.activity.busy(timing::OverlapMeter::Kind::compute)) * 1e-6,
                       static_cast<double>(stats_.activity.overlap()) * 1e-6);
  }
  double compute = 0, vector = 0;
  for (const auto& c : core_stats_) compute += static_cast<double>(c.compute_busy_ps), vector += static_cast<double>(c.vector_busy_ps);
  const double core_time = std::max(1.0, static_cast<double>(elapsed_ps) * static_cast<double>(core_stats_.size()));
  out += fmt::format("  cores: compute arrays busy {:.1f}%, vector units busy {:.1f}% (mean over {} cores)\n",
                     100 * compute / core_time, 100 * vector / core_time, core_stats_.size());
  return out;
}

}  // namespace spyre::sim
