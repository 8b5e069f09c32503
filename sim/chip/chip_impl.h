// The chip's insides, shared by chip.cpp (construction, statistics, host transfers),
// timed_launch.cpp (the timed policy and its SystemC threads) and chip_report.cpp.
// Not part of the chip's interface.
#pragma once

#include <list>
#include <memory>
#include <string>
#include <vector>

#include <systemc>

#include "chip/chip.h"
#include "exec/executor.h"
#include "exec/topology.h"

namespace spyre::sim {

using timing::Direction;
using timing::DramChannel;
using timing::Server;

// A scratchpad's bytes: zero-filled, in huge pages, committed when the chip is built
// (SRAM exists from power-on; faulting it in during a launch would be host noise in
// the simulation's wall time).
class ZeroedBuffer {
 public:
  explicit ZeroedBuffer(std::size_t bytes);
  ~ZeroedBuffer();
  ZeroedBuffer(const ZeroedBuffer&) = delete;
  ZeroedBuffer& operator=(const ZeroedBuffer&) = delete;
  std::uint8_t* data() { return data_; }

 private:
  std::size_t bytes_;
  std::uint8_t* data_;
};

std::string bytes_text(std::uint64_t bytes);

// One launch on the timed device: the executor, and what its SystemC threads wait on.
struct TimedLaunch;

struct Chip::Impl {
  struct Core {
    std::vector<Server> dma_engines;
    std::vector<Server> sp_ports;
    std::unique_ptr<ZeroedBuffer> scratchpad;
    bool busy = false;
    sc_core::sc_event freed;
  };

  Chip& chip;
  Topology topology;
  std::vector<DramChannel> channels;
  std::vector<Server> ring_cw, ring_ccw;  // link i joins stop i and stop i+1
  Server pcie_to_device, pcie_to_host;
  std::vector<Core> cores;
  std::list<std::shared_ptr<TimedLaunch>> launches;
  Picoseconds dram_latency_ps, hop_ps, sp_latency_ps, dma_setup_ps, pcie_latency_ps;
  double engine_bytes_per_s;
  double sp_bytes_per_s;  // all of a core's scratchpad ports

  explicit Impl(Chip& c);

  // The earliest start of a launch in flight (`bound` when none starts earlier).
  Picoseconds earliest_launch_start(Picoseconds bound) const;

  // What the executor gets from this chip.
  DeviceView view();
  TraceRecorder* trace() { return chip.trace_.get(); }
  CoreStats& core_stats(std::uint32_t core) { return chip.core_stats_[core]; }
  // The link servers along a path from stop `from`.
  std::vector<Server*> links(std::uint32_t from, const Topology::Path& path);
  // Charges a device range to the channels (whole sticks); returns the bytes charged.
  std::uint64_t charge(std::uint64_t address, std::uint64_t bytes, std::vector<std::uint64_t>& shares) const;
  // Reserves the channels for per-channel shares read or written from `ready` (the call
  // made at `now`); returns the last end.
  // `stop_end`, when given, gets each memory stop's last channel end (at least `ready`).
  Picoseconds reserve_channels(Picoseconds now, Picoseconds ready, const std::vector<std::uint64_t>& shares,
                               Direction direction, std::vector<Picoseconds>* stop_end = nullptr);

  // The timed device (timed_launch.cpp).
  void start_timed(LaunchRequest request, LaunchCallback done, isa::Limits limits);
  void run_stream(std::shared_ptr<TimedLaunch> launch, std::uint32_t stream);
  void check_deadlock_soon(TimedLaunch& launch);
  void abort_deadlocked(TimedLaunch& launch);
  void finish_stream(const std::shared_ptr<TimedLaunch>& launch);
  bool abort(std::uint64_t id, const std::string& reason);
  std::size_t abort_stalled();
};

}  // namespace spyre::sim
