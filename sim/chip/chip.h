// One simulated Spyre chip: cores (compute array, vector units, scratchpad, DMA
// engines), device memory behind its channels, the ring, and the host link.
//
// The chip is plain C++ holding state; each launch spawns one SystemC thread per core
// it uses, so chips can be created at any time and several live in one simulation.
// Instructions and transfers are transactions with computed durations: shared
// resources are timing::Servers that each transfer occupies for bytes/bandwidth, so
// contention emerges; nothing steps a clock.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/chip_config.h"
#include "config/derived_figures.h"
#include "exec/launch.h"
#include "memory/device_memory.h"
#include "spyre/isa/program.h"
#include "timing/overlap_meter.h"
#include "timing/timing_rules.h"

namespace spyre::sim {

using timing::Picoseconds;

struct ChipStats {
  std::array<std::uint64_t, 6> macs{};
  std::uint64_t vector_elements = 0;
  std::uint64_t instructions = 0;
  std::uint64_t launches = 0;
  std::uint64_t faults = 0;
  std::uint64_t dram_read_bytes = 0, dram_write_bytes = 0;
  std::uint64_t host_to_device_bytes = 0, device_to_host_bytes = 0;
  std::uint64_t peer_sent_bytes = 0, peer_received_bytes = 0;  // copies to and from other cards
  // Collectives with cards of other processes (the driver's external work): how many,
  // their time from this card's arrival to their end, and the bytes they moved.
  std::uint64_t collectives = 0, collective_bytes = 0;
  Picoseconds collective_ps = 0;
  std::map<std::string, std::uint64_t> collective_link_bytes;  // sent on each link, when the work said
  // Timed devices: the time launches ran (compute), peer copies and collectives ran
  // (communication), and both at once, each counted once however many overlap.
  timing::OverlapMeter activity;
  Picoseconds first_activity_ps = 0, last_activity_ps = 0;  // span of the recorded work
  Picoseconds first_launch_ps = 0, last_launch_ps = 0;      // span of the launches alone
  // The most recent launches, at most Chip::launch_record_limit() of them (older ones
  // are dropped and counted; the totals above and per kernel stay exact).
  std::deque<LaunchRecord> launch_records;
  std::uint64_t launch_records_dropped = 0;
  std::map<std::string, KernelTotals> kernel_totals;
};

// Launch records kept by default: memory stays flat over long runs (a record is a few
// hundred bytes); SPYRE_SIM_LAUNCH_RECORDS=N|all changes it (driver).
inline constexpr std::size_t kDefaultLaunchRecordLimit = 1024;

class TraceRecorder;

class Chip {
 public:
  // `timing` and `data` pick the executor's policies (exec/launch.h): the timed device
  // (the default), the functional device (untimed), or bookkeeping without data.
  Chip(const config::ChipConfig& config, std::uint32_t device_index, Timing timing = Timing::timed,
       Data data = Data::real);
  ~Chip();
  Chip(const Chip&) = delete;
  Chip& operator=(const Chip&) = delete;

  const config::ChipConfig& config() const { return config_; }
  const config::DerivedFigures& figures() const { return figures_; }
  std::uint32_t device_index() const { return device_; }
  Timing timing() const { return timing_; }
  Data data() const { return data_; }
  // The device's time: the SystemC time on the timed device; untimed, the clock set by
  // set_host_clock (launch records are stamped with it), or 0.
  Picoseconds now() const;
  void set_host_clock(std::function<Picoseconds()> clock) { host_clock_ = std::move(clock); }
  std::uint32_t num_cores() const { return static_cast<std::uint32_t>(config_.cores.count); }
  DeviceMemory& memory() { return memory_; }
  const timing::Clock& clock() const { return clock_; }

  // A core's scratchpad bytes (tests inspect them).
  std::uint8_t* scratchpad(std::uint32_t core);
  // How many launch records stats() keeps (nothing: all of them, memory grows).
  void set_launch_record_limit(std::optional<std::size_t> limit) { record_limit_ = limit; }
  std::optional<std::size_t> launch_record_limit() const { return record_limit_; }

  // What programs for this chip are validated against, for a launch on `cores` cores.
  isa::Limits limits(std::uint32_t cores) const;

  // Starts a launch at the current simulated time; `done` runs (in simulation
  // context) when every stream has ended or the launch faulted. A stream whose core
  // is busy with another launch waits for it. Call from SystemC process context or
  // between sc_start() calls. Untimed, the launch runs to completion inside the call
  // and `done` runs before it returns. Throws std::invalid_argument for a malformed
  // request (no program, bad core index, too few cores).
  void launch(LaunchRequest request, LaunchCallback done);
  std::size_t active_launches() const;

  // Aborts every launch that cannot make progress (called when the simulation has
  // nothing left to do but launches are unfinished: a ring receive or barrier that
  // will never be satisfied). Each gets a fault naming what its cores wait for.
  std::size_t abort_stalled_launches();

  // Aborts a running launch (e.g. the firmware's watchdog): its cores stop after their
  // current instruction and the launch completes with a fault giving `reason`.
  // Returns false when no such launch is running.
  bool abort_launch(std::uint64_t id, const std::string& reason);

  // Host-link transfer of `bytes` to/from device memory at `device_address` starting
  // no earlier than `ready`: counts the bytes and (timed) occupies the PCIe direction
  // and the DRAM channels; returns when the last byte lands (untimed: `ready`). The
  // caller moves the data.
  enum class HostDirection { to_device, to_host };
  Picoseconds host_transfer(Picoseconds ready, HostDirection direction, std::uint64_t device_address,
                            std::uint64_t bytes);
  // The host link's two directions: a card's PCIe port, which a system's card links
  // (timing::CardLinks) route peer copies through under a switch.
  timing::Server& host_link(HostDirection direction);
  // Under a switch with a port to the host (config system.host_uplink): host transfers
  // also pass these (the switch's two directions, shared by every card) and take
  // `latency_ps` more (the switch's and the port's); null: none.
  void set_host_uplink(timing::Server* to_device, timing::Server* to_host, Picoseconds latency_ps) {
    uplink_to_device_ = to_device;
    uplink_to_host_ = to_host;
    uplink_latency_ps_ = latency_ps;
  }
  // This card's side of a peer copy: `bytes` at `device_address` read from (to_host:
  // leaving the card) or written to (to_device: entering it) the DRAM channels no
  // earlier than `ready`. Counts the bytes; returns when the channels are done, before
  // the DRAM latency (untimed: `ready`). The links are the system's (timing::CardLinks).
  Picoseconds peer_transfer(Picoseconds ready, HostDirection direction, std::uint64_t device_address,
                            std::uint64_t bytes);
  // Device-memory to device-memory copy through the DRAM channels.
  Picoseconds dram_copy(Picoseconds ready, std::uint64_t dst, std::uint64_t src, std::uint64_t bytes);
  // A write of `bytes` at `dst` (a fill) through the DRAM channels.
  Picoseconds dram_fill(Picoseconds ready, std::uint64_t dst, std::uint64_t bytes);

  const ChipStats& stats() const { return stats_; }
  // Device time covered by the statistics: from the first to the last recorded work.
  Picoseconds active_span() const { return stats_.last_activity_ps - stats_.first_activity_ps; }
  const std::vector<CoreStats>& core_stats() const { return core_stats_; }
  void reset_stats();
  // Statistics as JSON: totals, per core, per resource (busy time, bytes, utilisation
  // over `elapsed_ps`), launches.
  nlohmann::json report(Picoseconds elapsed_ps) const;
  // The same as a human-readable summary.
  std::string report_text(Picoseconds elapsed_ps) const;

  // Tracing (Chrome/Perfetto JSON). Off by default; costs nothing when off.
  void start_trace();
  // Writes the trace collected since start_trace() and stops tracing.
  void stop_trace(const std::string& path);
  bool tracing() const { return trace_ != nullptr; }
  // A host-side call on the trace's "host" track (the aten op that launched a
  // kernel), with an arrow to the kernel's slice on the "kernels" track when `flow`
  // matches a later launch's LaunchRequest::flow. No-op unless tracing.
  void trace_host_call(const std::string& name, Picoseconds start, Picoseconds end, std::uint64_t flow);
  // Counts a collective from this card's arrival to its end (the report's
  // communication), with the bytes it sent on each link when known, and traces it on
  // the "collectives" track.
  void record_external(const std::string& name, Picoseconds arrival, Picoseconds end, std::uint64_t bytes,
                       const std::map<std::string, std::uint64_t>& link_bytes = {});
  // A peer copy this card sends or receives, from its first byte on the links to its
  // last landing: the report's communication, and a span on the "peer copies" track.
  void record_peer_copy(const std::string& name, Picoseconds start, Picoseconds end);

  struct Impl;

 private:
  void note_activity(Picoseconds start, Picoseconds end);
  // Compute or communication for the overlap meter (timed only); then forgets what
  // nothing later can meet: every interval still to come starts at or after the
  // earlier of now and the start of a launch in flight.
  void note_busy(timing::OverlapMeter::Kind kind, Picoseconds start, Picoseconds end);
  // Adds a finished launch to the statistics.
  void record_launch(const LaunchRecord& record);
  Picoseconds occupy_channels(Picoseconds ready, const std::vector<std::uint64_t>& reads,
                              const std::vector<std::uint64_t>& writes);

  config::ChipConfig config_;
  config::DerivedFigures figures_;
  std::uint32_t device_;
  Timing timing_;
  Data data_;
  std::function<Picoseconds()> host_clock_;
  timing::Clock clock_;
  DeviceMemory memory_;
  ChipStats stats_;
  std::optional<std::size_t> record_limit_ = kDefaultLaunchRecordLimit;
  std::vector<CoreStats> core_stats_;
  std::unique_ptr<TraceRecorder> trace_;
  timing::Server* uplink_to_device_ = nullptr;
  timing::Server* uplink_to_host_ = nullptr;
  Picoseconds uplink_latency_ps_ = 0;
  std::unique_ptr<Impl> impl_;
};

// Runs the SystemC kernel for tests and tools that drive chips directly (the driver
// runs it on its own thread instead).
class Simulation {
 public:
  Simulation();
  ~Simulation();
  Chip& add_chip(const config::ChipConfig& config, Timing timing = Timing::timed, Data data = Data::real);
  Chip& chip(std::uint32_t index) { return *chips_.at(index); }
  // Runs until nothing is left to do. Launches that stall are aborted with a fault.
  void run();
  static Picoseconds now();

 private:
  std::vector<std::unique_ptr<Chip>> chips_;
};

}  // namespace spyre::sim
