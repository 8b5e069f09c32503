// The mock driver's runtime: devices (chip + firmware), the simulation thread, the
// virtual host clock, and the handle tables. The C ABI (abi_*.cpp) validates
// arguments and calls into this.
//
// Threads: host threads call the ABI; one simulation thread owns the SystemC kernel.
// Host threads never touch SystemC objects: they post actions stamped with their
// arrival time (the host clock after the call's overhead) to an inbox; the simulation
// thread delivers each action at exactly that simulated time. While no host thread is
// blocked the simulation only runs up to just before the host clock; a blocking call
// registers a condition, the simulation runs until it holds, and the host clock jumps
// to that instant (docs/ARCHITECTURE.md §8).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chip/chip.h"
#include "config/config_loader.h"
#include "driver/device.h"
#include "firmware.h"
#include "spyre/spyre_drv.h"

namespace spyre::driver {

using sim::Picoseconds;

// A failed call: the result code and the one-line message for spyreGetLastErrorMessage.
struct Error {
  spyre_result_t code;
  std::string message;
};


struct QueueObject {
  Device* device = nullptr;
  std::shared_ptr<firmware::Queue> queue;  // touched only in simulation context
  std::atomic<bool> error_seen{false};     // the host observed the fault: refuse new work
  std::atomic<std::uint64_t> host_submitted{0};   // commands the host submitted
  std::atomic<std::uint64_t> known_completed{0};  // completed, as last seen by the host
};

// A queue holds at most this many unfinished commands, like a hardware command ring:
// a submission beyond that waits until one completes (spyre_drv.h), so a host loop that
// never synchronizes cannot queue unbounded work (and memory).
inline constexpr std::uint64_t kMaxCommandsInFlight = 1024;

struct EventObject {
  Device* device = nullptr;
  std::shared_ptr<firmware::EventState> state;  // touched only in simulation context
  std::atomic<std::uint64_t> generation{0};     // records submitted (host side)
};

struct ProgramObject {
  Device* device = nullptr;
  std::shared_ptr<const isa::Program> program;
  std::string name;
  std::uint64_t device_copy = 0;  // where the blob lives in device memory
};


// How the devices run (spyre_device_mode_t): timed, the SystemC model driven by the
// simulation thread; functional, untimed, each command running in the calling thread
// when it is submitted; no_data, timed without data.
enum class Mode { timed, functional, no_data };
std::string_view to_string(Mode mode);

class Runtime {
 public:
  // The running runtime, started on first use. Throws Error (NOT_INITIALIZED) when the
  // environment or config is bad.
  static Runtime& get();
  // The running runtime, or null: never starts one (for calls made from inside the
  // simulation, e.g. external work, which must not start or wait for the runtime).
  static Runtime* current();
  // Completes all work and releases every device and handle; the next get() starts
  // afresh. The simulation thread itself lives until process exit.
  static void shutdown();
  // What the next start builds devices from (nothing: the environment). Throws Error
  // (SPYRE_ERROR_INVALID_ARGUMENT) while the driver runs or for a bad config.
  struct StartConfig {
    std::string path;
    std::string yaml;  // the config as text (instead of path)
    std::vector<std::string> overrides;
    std::uint32_t devices = 0;  // 0: SPYRE_SIM_DEVICES
    std::optional<Mode> mode;   // nothing: SPYRE_SIM_MODE
  };
  static void configure(std::optional<StartConfig> config);

  std::vector<std::unique_ptr<Device>>& devices() { return devices_; }
  Mode mode() const { return mode_; }

  // The host clock: every call advances it by the device's overhead.
  Picoseconds advance(const Device* device);
  Picoseconds host_time();

  // Runs `action` in simulation context at the host time after this call's overhead.
  void post(const Device* device, std::function<void()> action);
  // Blocks until `condition` (evaluated in simulation context from this call's
  // arrival time on, after every command completion) holds; moves the host clock to
  // when it did and returns that time.
  Picoseconds block_until(const Device* device, std::function<bool()> condition);
  // Runs `f` once in simulation context at this call's arrival time, waiting for it.
  void query(const Device* device, const std::function<void()>& f);

  // Handles. Each lookup checks the kind and that the object still exists.
  template <class T>
  std::shared_ptr<T> lookup(const void* handle, const char* what);
  template <class T>
  void* add(std::shared_ptr<T> object);
  bool remove(const void* handle);

  // Pinned host memory (spyreHostAlloc / spyreHostRegister): base -> size.
  std::optional<std::pair<std::uintptr_t, std::size_t>> pinned_range(const void* p);
  bool add_pinned(void* p, std::size_t bytes);
  bool remove_pinned(void* p);

  // The device whose address range holds `p`, or null.
  Device* device_of(const void* p);

 private:
  // Where device work runs, chosen when the devices start (by the mode): the
  // simulation thread (timed devices) or the calling thread (functional).
  class WorkLoop;
  class SimulationLoop;
  class InlineLoop;

  struct Waiter {
    std::function<bool()> condition;
    bool once = false;
    bool done = false;  // guarded by mutex_
    Picoseconds time = 0;
  };
  struct Item {
    Picoseconds arrival;
    std::function<void()> action;
  };

  Runtime();
  ~Runtime();
  void start_devices();
  void sim_main();
  void dispatcher();
  void check_waiters();  // simulation context
  void stop_thread();

  // The host clock a call advances: the process's, or with host.threads per_card the
  // card's (then host_time_ is the latest of them). Called with mutex_ held.
  Picoseconds& clock_of(const Device* device);
  // Advances clock_of(device) by the call's overhead and returns it (mutex_ held).
  Picoseconds tick(const Device* device);
  // How far the simulation may run while no host call waits: to the host clock, or
  // per card to the earliest card's clock (no card's later calls arrive before it).
  Picoseconds sim_limit() const;

  // Guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable sim_cv_, host_cv_;
  Picoseconds host_time_ = 0;
  bool per_card_hosts_ = false;
  std::vector<Picoseconds> card_clocks_;  // per device index, with per_card_hosts_
  Picoseconds sim_time_ = 0;
  std::deque<Item> inbox_;
  std::size_t waiting_ = 0;  // registered blocking calls not yet answered
  bool stop_ = false;
  bool starved_ = false;     // the last unbounded run found nothing to do

  // Simulation thread only.
  std::deque<Item> scheduled_;  // by arrival (in submission order when it is one clock)
  bool sorted_schedule_ = false;  // per-card clocks: arrivals come out of order
  std::vector<std::shared_ptr<Waiter>> waiters_;
  sc_core::sc_event* dispatch_event_ = nullptr;

  std::thread sim_thread_;
  Mode mode_ = Mode::timed;
  std::unique_ptr<WorkLoop> loop_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::unique_ptr<timing::CardLinks> card_links_;  // the links between devices_

  std::mutex objects_mutex_;
  struct Slot {
    std::shared_ptr<void> object;
    std::uint32_t kind = 0;
    std::uint32_t generation = 0;  // 1 .. kMaxGeneration; 0 = never used
  };
  static constexpr std::uint32_t kMaxGeneration = 0xffffffu;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::map<std::uintptr_t, std::size_t> pinned_;

  friend void at_exit();
};

template <class T>
constexpr std::uint32_t kind_of() {
  if constexpr (std::is_same_v<T, Device>) return 1;
  else if constexpr (std::is_same_v<T, QueueObject>) return 2;
  else if constexpr (std::is_same_v<T, EventObject>) return 3;
  else return 4;
}

inline std::uint64_t encode_handle(std::uint32_t kind, std::uint32_t generation, std::uint32_t index) {
  return (std::uint64_t{kind} << 56) | (std::uint64_t{generation & 0xffffffu} << 32) | (std::uint64_t{index} + 1);
}

template <class T>
std::shared_ptr<T> Runtime::lookup(const void* handle, const char* what) {
  const auto value = reinterpret_cast<std::uintptr_t>(handle);
  const std::uint32_t kind = static_cast<std::uint32_t>(value >> 56);
  const std::uint32_t generation = static_cast<std::uint32_t>((value >> 32) & 0xffffffu);
  const std::uint64_t index = (value & 0xffffffffu);
  const std::lock_guard lock(objects_mutex_);
  if (handle == nullptr) throw Error{SPYRE_ERROR_INVALID_HANDLE, std::string(what) + " handle is NULL"};
  if (kind != kind_of<T>() || index == 0 || index > slots_.size() || slots_[index - 1].kind != kind ||
      (slots_[index - 1].generation & 0xffffffu) != generation || !slots_[index - 1].object) {
    throw Error{SPYRE_ERROR_INVALID_HANDLE,
                std::string(what) + " handle is not a live " + what + " (destroyed, or another kind of handle)"};
  }
  return std::static_pointer_cast<T>(slots_[index - 1].object);
}

template <class T>
void* Runtime::add(std::shared_ptr<T> object) {
  const std::lock_guard lock(objects_mutex_);
  std::uint32_t index;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[index];
  slot.object = std::move(object);
  slot.kind = kind_of<T>();
  // Each reuse of a slot takes the next of its 2^24 - 1 generations; remove() retires
  // a slot whose generations are used up, so a destroyed handle never becomes live
  // again (spyre_drv.h, "Handles").
  ++slot.generation;
  return reinterpret_cast<void*>(encode_handle(slot.kind, slot.generation, index));
}

}  // namespace spyre::driver
