#include "chip/chip.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <systemc>

#include "chip/chip_impl.h"
#include "chip/trace_recorder.h"
#include "memory/host_mapping.h"

namespace spyre::sim {

using config::MacType;

std::string Fault::to_string() const {
  std::string s = fmt::format("device fault on spyre:{} core {} (stream {}) pc {} in kernel '{}'", device, core,
                              stream, pc, kernel);
  if (!instruction.empty()) s += fmt::format(" [{}]", instruction);
  s += ": " + reason;
  return s;
}

ZeroedBuffer::ZeroedBuffer(std::size_t bytes)
    : bytes_(bytes), data_(static_cast<std::uint8_t*>(map_host_memory(bytes, true, true, "scratchpad"))) {
  std::memset(data_, 0, bytes_);
}

ZeroedBuffer::~ZeroedBuffer() { unmap_host_memory(data_, bytes_); }

std::string bytes_text(std::uint64_t b) {
  if (b >= (1u << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= (1u << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1 << 10));
  return fmt::format("{} B", b);
}

Chip::Impl::Impl(Chip& c) : chip(c), topology(c.config_), cores(c.config_.cores.count) {
  const auto& cfg = c.config_;
  const auto& d = c.figures_;
  channels.assign(cfg.memory.channels, DramChannel(d.dram_channel_bytes_per_s * cfg.memory.efficiency,
                                                  timing::ns_to_ps(cfg.memory.turnaround_ns),
                                                  cfg.memory.write_batch_bytes));
  ring_cw.assign(topology.stops(), Server(d.ring_link_bytes_per_s));
  ring_ccw.assign(topology.stops(), Server(d.ring_link_bytes_per_s));
  pcie_to_device = Server(d.pcie_effective_bytes_per_s);
  pcie_to_host = Server(d.pcie_effective_bytes_per_s);
  engine_bytes_per_s = d.dma_engine_bytes_per_s;
  sp_bytes_per_s = d.scratchpad_core_bytes_per_s;
  const double port_bps = static_cast<double>(cfg.cores.scratchpad.bytes_per_cycle_per_port) * d.clock_hz;
  for (auto& k : cores) {
    k.dma_engines.assign(cfg.dma.engines_per_core, Server(engine_bytes_per_s));
    k.sp_ports.assign(cfg.cores.scratchpad.ports, Server(port_bps));
    k.scratchpad = std::make_unique<ZeroedBuffer>(cfg.cores.scratchpad.bytes);
  }
  dram_latency_ps = timing::ns_to_ps(cfg.memory.latency_ns);
  pcie_latency_ps = timing::ns_to_ps(cfg.host_link.latency_ns);
  hop_ps = c.clock_.ps(cfg.ring.hop_latency_cycles);
  sp_latency_ps = c.clock_.ps(cfg.cores.scratchpad.latency_cycles);
  dma_setup_ps = c.clock_.ps(cfg.dma.setup_cycles);
}

DeviceView Chip::Impl::view() {
  DeviceView v{.config = chip.config_, .topology = topology, .memory = chip.memory_, .scratchpads = {},
               .core_stats = chip.core_stats_, .device = chip.device_, .data = chip.data_,
               .half_through_dl16 = chip.config_.half_through_dl16()};
  v.scratchpads.reserve(cores.size());
  for (auto& core : cores) v.scratchpads.push_back(core.scratchpad->data());
  return v;
}

std::vector<Server*> Chip::Impl::links(std::uint32_t from, const Topology::Path& path) {
  auto& ring = path.clockwise ? ring_cw : ring_ccw;
  std::vector<Server*> out;
  out.reserve(path.hops);
  for (std::uint32_t i = 0; i < path.hops; ++i) out.push_back(&ring[path.link(from, i, topology.stops())]);
  return out;
}

std::uint64_t Chip::Impl::charge(std::uint64_t address, std::uint64_t bytes, std::vector<std::uint64_t>& shares) const {
  std::uint64_t charged = 0;
  topology.charge(address - chip.memory_.base(), bytes, shares, charged);
  return charged;
}

Picoseconds Chip::Impl::reserve_channels(Picoseconds now, Picoseconds ready, const std::vector<std::uint64_t>& shares,
                                         Direction direction, std::vector<Picoseconds>* stop_end) {
  Picoseconds end = ready;
  if (stop_end) stop_end->assign(topology.memory_stops(), ready);
  for (std::size_t c = 0; c < shares.size(); ++c) {
    if (shares[c] == 0) continue;
    const auto iv = channels[c].reserve(now, ready, shares[c], direction);
    end = std::max(end, iv.end);
    if (stop_end) {
      Picoseconds& e = (*stop_end)[topology.memory_stop_of_channel(static_cast<std::uint32_t>(c))];
      e = std::max(e, iv.end);
    }
    if (TraceRecorder* t = trace()) {
      t->complete(t->track(fmt::format("dram channel {}", c)), "dram", iv.start, iv.end, bytes_text(shares[c]));
      t->dram_bytes(iv.start, iv.end, shares[c]);
    }
  }
  return end;
}

Chip::Chip(const config::ChipConfig& config, std::uint32_t device_index, Timing timing, Data data)
    : config_(config),
      figures_(config::derive(config)),
      device_(device_index),
      timing_(timing),
      data_(data),
      clock_(config.clock_ghz),
      memory_(config.memory.capacity_bytes, config.memory.usable_bytes),
      core_stats_(config.cores.count),
      impl_(std::make_unique<Impl>(*this)) {}

Chip::~Chip() = default;

std::uint8_t* Chip::scratchpad(std::uint32_t core) { return impl_->cores.at(core).scratchpad->data(); }

Picoseconds Chip::now() const {
  if (timing_ == Timing::timed) return sc_core::sc_time_stamp().value();
  return host_clock_ ? host_clock_() : 0;
}

void Chip::record_launch(const LaunchRecord& r) {
  auto& s = stats_;
  note_activity(r.start, r.end);
  note_busy(timing::OverlapMeter::Kind::compute, r.start, r.end);
  for (std::size_t i = 0; i < r.macs.size(); ++i) s.macs[i] += r.macs[i];
  s.vector_elements += r.vector_elements;
  s.instructions += r.instructions;
  s.dram_read_bytes += r.dram_read_bytes;
  s.dram_write_bytes += r.dram_write_bytes;
  s.first_launch_ps = s.launches == 0 ? r.start : std::min(s.first_launch_ps, r.start);
  s.last_launch_ps = s.launches == 0 ? r.end : std::max(s.last_launch_ps, r.end);
  ++s.launches;
  if (r.fault) ++s.faults;
  KernelTotals& k = s.kernel_totals[r.name];
  ++k.launches;
  k.faults += r.fault ? 1 : 0;
  k.time_ps += r.end - r.start;
  for (std::size_t i = 0; i < r.macs.size(); ++i) k.macs[i] += r.macs[i];
  k.vector_elements += r.vector_elements;
  k.instructions += r.instructions;
  k.dram_read_bytes += r.dram_read_bytes;
  k.dram_write_bytes += r.dram_write_bytes;
  k.ring_bytes += r.ring_bytes;
  k.min_read_bytes += r.min_read_bytes;
  k.min_write_bytes += r.min_write_bytes;
  if (record_limit_ && *record_limit_ == 0) {
    ++s.launch_records_dropped;
    return;
  }
  s.launch_records.push_back(r);
  if (record_limit_ && s.launch_records.size() > *record_limit_) {
    s.launch_records.pop_front();
    ++s.launch_records_dropped;
  }
}

isa::Limits Chip::limits(std::uint32_t cores) const {
  return isa::Limits{.scratchpad_bytes = static_cast<std::uint32_t>(config_.cores.scratchpad.usable_bytes),
                     .num_streams = cores};
}

void Chip::launch(LaunchRequest request, LaunchCallback done) {
  if (!request.program) throw std::invalid_argument("launch without a program");
  const std::uint32_t streams = request.program->num_streams();
  if (request.cores.size() < streams) {
    throw std::invalid_argument(fmt::format("program '{}' has {} streams but the launch names {} core(s)",
                                            request.program->name(), streams, request.cores.size()));
  }
  for (const std::uint32_t c : request.cores) {
    if (c >= num_cores()) {
      throw std::invalid_argument(fmt::format("core {} does not exist (the chip has {})", c, num_cores()));
    }
  }
  const isa::Limits lim = limits(static_cast<std::uint32_t>(request.cores.size()));
  if (timing_ == Timing::timed) return impl_->start_timed(std::move(request), std::move(done), lim);
  LaunchRecord record = run_untimed(impl_->view(), request, lim);
  record.start = record.end = now();
  record_launch(record);
  if (done) done(record);
}

std::size_t Chip::active_launches() const { return impl_->launches.size(); }

std::size_t Chip::abort_stalled_launches() { return impl_->abort_stalled(); }

bool Chip::abort_launch(std::uint64_t id, const std::string& reason) { return impl_->abort(id, reason); }

// Host transfers, copies and fills: the bytes are counted on every device; the timed
// one also occupies the link and the channels (untimed, everything ends at `ready`).
Picoseconds Chip::host_transfer(Picoseconds ready, HostDirection direction, std::uint64_t device_address,
                                std::uint64_t bytes) {
  const bool in = direction == HostDirection::to_device;
  std::vector<std::uint64_t> shares(config_.memory.channels, 0);
  const std::uint64_t charged = impl_->charge(device_address, bytes, shares);
  (in ? stats_.host_to_device_bytes : stats_.device_to_host_bytes) += bytes;
  (in ? stats_.dram_write_bytes : stats_.dram_read_bytes) += charged;
  if (timing_ == Timing::untimed) return ready;
  // One pipelined flow: into the card through the switch's port to the host (if the
  // system has one) and then the card's own port; out of it the other way round. Each
  // server starts no earlier than the one before it.
  Server& port = in ? impl_->pcie_to_device : impl_->pcie_to_host;
  Server* uplink = in ? uplink_to_device_ : uplink_to_host_;
  Server::Interval up{ready, ready};
  if (uplink != nullptr && in) up = uplink->reserve_bytes(now(), ready, bytes);
  auto iv = port.reserve_bytes(now(), up.start, bytes);
  if (uplink != nullptr && !in) up = uplink->reserve_bytes(now(), iv.start, bytes);
  const Picoseconds link_end = std::max(iv.end, up.end);
  const Picoseconds end = std::max(link_end, impl_->reserve_channels(now(), iv.start, shares,
                                                                     in ? Direction::write : Direction::read)) +
                          impl_->pcie_latency_ps + impl_->dram_latency_ps + (uplink ? uplink_latency_ps_ : 0);
  note_activity(ready, end);
  if (trace_) {
    trace_->complete(trace_->track(in ? "pcie host->device" : "pcie device->host"), bytes_text(bytes), iv.start, iv.end);
  }
  return end;
}

Server& Chip::host_link(HostDirection direction) {
  return direction == HostDirection::to_device ? impl_->pcie_to_device : impl_->pcie_to_host;
}

Picoseconds Chip::peer_transfer(Picoseconds ready, HostDirection direction, std::uint64_t device_address,
                                std::uint64_t bytes) {
  const bool in = direction == HostDirection::to_device;
  std::vector<std::uint64_t> shares(config_.memory.channels, 0);
  const std::uint64_t charged = impl_->charge(device_address, bytes, shares);
  (in ? stats_.peer_received_bytes : stats_.peer_sent_bytes) += bytes;
  (in ? stats_.dram_write_bytes : stats_.dram_read_bytes) += charged;
  if (timing_ == Timing::untimed) return ready;
  const Picoseconds end = impl_->reserve_channels(now(), ready, shares, in ? Direction::write : Direction::read);
  note_activity(ready, end + impl_->dram_latency_ps);
  return end;
}

Picoseconds Chip::dram_copy(Picoseconds ready, std::uint64_t dst, std::uint64_t src, std::uint64_t bytes) {
  std::vector<std::uint64_t> reads(config_.memory.channels, 0), writes(config_.memory.channels, 0);
  stats_.dram_read_bytes += impl_->charge(src, bytes, reads);
  stats_.dram_write_bytes += impl_->charge(dst, bytes, writes);
  return occupy_channels(ready, reads, writes);
}

Picoseconds Chip::dram_fill(Picoseconds ready, std::uint64_t dst, std::uint64_t bytes) {
  std::vector<std::uint64_t> writes(config_.memory.channels, 0);
  stats_.dram_write_bytes += impl_->charge(dst, bytes, writes);
  return occupy_channels(ready, {}, writes);
}

Picoseconds Chip::occupy_channels(Picoseconds ready, const std::vector<std::uint64_t>& reads,
                                  const std::vector<std::uint64_t>& writes) {
  if (timing_ == Timing::untimed) return ready;
  const Picoseconds end = std::max(impl_->reserve_channels(now(), ready, reads, Direction::read),
                                   impl_->reserve_channels(now(), ready, writes, Direction::write)) +
                          impl_->dram_latency_ps;
  note_activity(ready, end);
  return end;
}

void Chip::note_activity(Picoseconds start, Picoseconds end) {
  if (stats_.last_activity_ps == 0 && stats_.first_activity_ps == 0) stats_.first_activity_ps = start;
  stats_.first_activity_ps = std::min(stats_.first_activity_ps, start);
  stats_.last_activity_ps = std::max(stats_.last_activity_ps, end);
}

void Chip::reset_stats() {
  stats_ = ChipStats{};
  for (auto& c : core_stats_) c = CoreStats{};
  for (auto& s : impl_->channels) s.reset_stats();
  for (auto& s : impl_->ring_cw) s.reset_stats();
  for (auto& s : impl_->ring_ccw) s.reset_stats();
  impl_->pcie_to_device.reset_stats();
  impl_->pcie_to_host.reset_stats();
  for (auto& core : impl_->cores) {
    for (auto& s : core.dma_engines) s.reset_stats();
    for (auto& s : core.sp_ports) s.reset_stats();
  }
}

void Chip::trace_host_call(const std::string& name, Picoseconds start, Picoseconds end, std::uint64_t flow) {
  if (!trace_) return;
  const int host = trace_->track("host");
  trace_->complete(host, name, start, end);
  if (flow != 0) trace_->flow_start(host, start, flow);
}

void Chip::record_external(const std::string& name, Picoseconds arrival, Picoseconds end, std::uint64_t bytes,
                           const std::map<std::string, std::uint64_t>& link_bytes) {
  ++stats_.collectives;
  for (const auto& [link, b] : link_bytes) stats_.collective_link_bytes[link] += b;
  stats_.collective_bytes += bytes;
  stats_.collective_ps += end - arrival;
  note_activity(arrival, end);
  note_busy(timing::OverlapMeter::Kind::communication, arrival, end);
  if (trace_) trace_->complete(trace_->track("collectives"), name, arrival, end, bytes_text(bytes));
}

void Chip::record_peer_copy(const std::string& name, Picoseconds start, Picoseconds end) {
  note_busy(timing::OverlapMeter::Kind::communication, start, end);
  if (trace_) trace_->complete(trace_->track("peer copies"), name, start, end);
}

void Chip::note_busy(timing::OverlapMeter::Kind kind, Picoseconds start, Picoseconds end) {
  if (timing_ != Timing::timed) return;
  stats_.activity.add(kind, start, end);
  stats_.activity.forget_before(impl_->earliest_launch_start(now()));
}

void Chip::start_trace() { trace_ = std::make_unique<TraceRecorder>(device_); }

void Chip::stop_trace(const std::string& path) {
  if (!trace_) throw std::logic_error("stop_trace without start_trace");
  auto trace = std::move(trace_);
  trace->write(path);
}

Simulation::Simulation() {
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);
  if (sc_core::sc_get_time_resolution() != sc_core::sc_time(1, sc_core::SC_PS)) {
    throw std::logic_error("the SystemC time resolution must be 1 ps");
  }
}

Simulation::~Simulation() = default;

Chip& Simulation::add_chip(const config::ChipConfig& config, Timing timing, Data data) {
  chips_.push_back(std::make_unique<Chip>(config, static_cast<std::uint32_t>(chips_.size()), timing, data));
  return *chips_.back();
}

void Simulation::run() {
  for (;;) {
    sc_core::sc_start();
    std::size_t stalled = 0;
    for (auto& chip : chips_) {
      if (chip->active_launches() > 0) stalled += chip->abort_stalled_launches();
    }
    if (stalled == 0) return;
  }
}

Picoseconds Simulation::now() { return sc_core::sc_time_stamp().value(); }

}  // namespace spyre::sim
