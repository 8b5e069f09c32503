// One device as the driver ABI sees it: a facade over the chip and its firmware. The
// ABI's functions (abi_*.cpp) reach the device only through it; what lies below
// (the executor, the SystemC model, the firmware's queues) can change without them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "chip/chip.h"
#include "config/config_loader.h"
#include "firmware.h"

namespace spyre::driver {

using sim::Picoseconds;

struct QueueObject;

class Device {
 public:
  // A device built as the mode says (timing, data); `host_clock` stamps untimed work,
  // `progress` runs (in simulation context) whenever a timed command completes.
  Device(std::uint32_t index, config::LoadedConfig config, sim::Timing timing, sim::Data data,
         std::optional<std::size_t> record_limit, std::function<Picoseconds()> host_clock,
         std::function<void()> progress);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::uint32_t index;
  const config::LoadedConfig config;
  Picoseconds call_overhead = 1;  // host time per ABI call (at least 1 ps: arrivals stay distinct)
  void* handle = nullptr;
  std::shared_ptr<QueueObject> sync_queue;  // internal queue for synchronous copies and fills

  // Memory and programs.
  sim::DeviceMemory& memory();
  std::uint32_t num_cores() const;
  isa::Limits program_limits() const;  // what a program loaded on this device must fit
  const config::DerivedFigures& figures() const;

  // Commands (simulation context).
  void add_queue(std::shared_ptr<firmware::Queue> queue);
  void remove_queue(const firmware::Queue* queue);
  void submit(const std::shared_ptr<firmware::Queue>& queue, firmware::CommandBody body);
  bool idle(const firmware::Queue& queue) const;
  bool idle() const;             // every queue
  bool any_queue_faulted() const;
  void acknowledge(firmware::Queue& queue);
  // A copy names the firmware of each device it touches.
  firmware::Firmware* firmware() { return firmware_.get(); }
  // The card's PCIe port, for the system's card links.
  timing::CardLinks::Port link_port();
  // Joins the system whose links `links` are (owned by the runtime, outliving the
  // device): peer copies are timed over them, host copies pass its switch's port to
  // the host if it has one, and the report gives its links.
  void join_system(timing::CardLinks* links);
  // Launches that can never finish are aborted (the simulation has nothing else to do).
  std::size_t abort_stalled_launches();

  // Statistics, reports and traces.
  const sim::ChipStats& stats() const;
  nlohmann::json report() const;  // the chip's report over its active span, with derived figures
  void reset_stats();
  bool tracing() const;
  void start_trace();
  void stop_trace(const std::string& path);
  // The host call that launched a kernel, ending now, with an arrow to the kernel.
  void trace_host_call(const std::string& name, std::uint64_t flow);

 private:
  std::unique_ptr<sim::Chip> chip_;
  std::unique_ptr<firmware::Firmware> firmware_;
  timing::CardLinks* links_ = nullptr;
};

}  // namespace spyre::driver
