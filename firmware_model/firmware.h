// The firmware model: what runs on the card. Command queues with doorbells, a core
// scheduler with priorities, events with device timestamps, fault records and a
// watchdog. Everything here runs in SystemC context (the driver's simulation thread);
// the driver creates queues and submits commands at their arrival times.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <systemc>

#include "chip/chip.h"
#include "timing/card_links.h"

namespace spyre::firmware {

using sim::Picoseconds;

inline constexpr std::uint32_t kFirmwareVersion = 1;

enum class CommandKind { copy, fill, launch, event_record, event_wait, fence, external };
std::string_view to_string(CommandKind kind);

// An event's state, shared by the host side (which counts records) and the device
// side (which completes them).
struct EventState {
  std::uint64_t completed = 0;  // the latest record generation that completed
  Picoseconds time = 0;         // its device timestamp
  // The state-change events of firmwares with a queue waiting on this event, notified
  // when a record completes: the waiter may be another device's firmware (a
  // cross-device wait), which this device's own notifications never reach.
  // Simulation context only.
  std::vector<sc_core::sc_event*> waiters;
};

class Firmware;

// A copy of `rows` rows of `width` bytes. Host sides: `snapshot` holds pageable source
// bytes taken at submission; otherwise `host_src` / `host_dst` are read / written when
// the copy executes.
struct Copy {
  enum class Direction { host_to_device, device_to_host, device_to_device, peer };
  Direction direction = Direction::device_to_device;
  std::uint64_t dst = 0, src = 0;  // device addresses (or 0 for the host side)
  std::uint64_t width = 0, rows = 1, dst_pitch = 0, src_pitch = 0;
  std::vector<std::uint8_t> snapshot;
  const std::uint8_t* host_src = nullptr;
  std::uint8_t* host_dst = nullptr;
  // The devices holding the source and destination (null for host memory). A peer
  // copy may run on either device's queue.
  Firmware* src_device = nullptr;
  Firmware* dst_device = nullptr;
};

struct Fill {
  std::uint64_t dst = 0, bytes = 0;
  std::uint32_t pattern = 0, pattern_size = 1;
};

struct Launch {
  std::shared_ptr<const isa::Program> program;
  std::vector<std::uint64_t> args;
  std::vector<bool> core_mask;  // empty: any core
  std::string name;
  std::uint64_t queue_tag = 0;  // reported in launch records
  std::uint64_t flow = 0;       // trace link to the host call (sim::LaunchRequest::flow)
  std::uint64_t min_read_bytes = 0, min_write_bytes = 0;  // the op's least traffic (0: unknown)
};

struct EventRecord {
  std::shared_ptr<EventState> event;
  std::uint64_t generation = 0;
};

struct EventWait {
  std::shared_ptr<EventState> event;
  std::uint64_t generation = 0;
};

struct Fence {};

// Work the host runtime does when the queue reaches it (spyre_drv.h,
// spyreQueueExternal): `fn` gets host views of the device ranges and the arrival time,
// and gives the end time or a fault reason. It runs in simulation context.
struct External {
  std::string name;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // device address, bytes
  std::function<bool(Picoseconds arrival, std::vector<void*>& views, Picoseconds& end, std::string& reason)> fn;
  // Called instead of fn when the work is skipped (its queue is in error state), so the
  // host runtime can tell whoever waits for it.
  std::function<void(Picoseconds now)> cancel;
  std::uint64_t bytes = 0;
  // The bytes this card sends on each link of the system (timing::sent_link_bytes),
  // counted when the work has run.
  std::map<std::string, std::uint64_t> link_bytes;
};

using CommandBody = std::variant<Copy, Fill, Launch, EventRecord, EventWait, Fence, External>;

struct FaultRecord {
  CommandKind command = CommandKind::copy;
  std::uint64_t command_index = 0;
  Picoseconds time = 0;
  std::string kernel;
  std::uint32_t core = 0, pc = 0;
  std::string instruction;
  std::uint64_t address = 0;
  std::string reason;
};

struct Queue {
  std::uint32_t id = 0;
  int priority = 0;  // higher first
  std::deque<std::pair<std::uint64_t, CommandBody>> pending;  // (command index, body)
  // Created with the queue's firmware thread, in simulation context: host threads
  // create queues and must not touch SystemC objects.
  std::unique_ptr<sc_core::sc_event> doorbell;
  std::uint64_t submitted = 0, completed = 0;
  bool busy = false;
  bool error = false;
  std::optional<FaultRecord> fault;
  std::uint64_t skipped = 0;
  bool started = false;
  // Per-launch records of this queue's kernels carry this tag.
  std::uint64_t tag = 0;
};

// The firmware: one implementation of every command's semantics (checks, data
// movement, events, faults, a faulted queue skipping work until acknowledged); how
// commands meet time is the subclass, picked by the chip's timing (make_firmware):
// - timed: each queue is a SystemC thread that fetches its commands, a core scheduler
//   grants launches cores by priority, a watchdog bounds kernels;
// - immediate (the untimed device): each command runs in the caller's thread at
//   submission, one at a time, so every earlier command has completed before it and
//   waits and fences hold by construction; event times come from the chip's clock.
class Firmware {
 public:
  virtual ~Firmware();

  sim::Chip& chip() { return chip_; }

  // Starts serving a queue (its thread starts with its first command) / stops
  // considering it for fences and idleness (it must be idle). Simulation context.
  void add_queue(std::shared_ptr<Queue> queue);
  void remove_queue(const Queue* queue);

  // Rings the queue's doorbell with a command. Simulation context.
  virtual void submit(const std::shared_ptr<Queue>& queue, CommandBody body) = 0;

  bool idle(const Queue& queue) const { return queue.completed == queue.submitted && !queue.busy; }
  bool device_idle() const;
  void acknowledge(Queue& queue);

  const std::vector<std::shared_ptr<Queue>>& queues() const { return queues_; }

  // The links between the cards of the system this card is in (every card's firmware
  // shares one): peer copies are timed over them. Null: the card is alone, and a peer
  // copy is refused as a fault.
  void set_card_links(timing::CardLinks* links) { card_links_ = links; }

 protected:
  explicit Firmware(sim::Chip& chip);

  // Runs a command to completion: its fault (if any) and the queue's bookkeeping.
  void complete(Queue& queue, std::uint64_t index, CommandBody& body);

  // The time hooks. Each blocks the calling command (timed) or returns at once.
  virtual void wait_until(Picoseconds t) = 0;
  virtual void await(EventWait& wait) = 0;
  // Until everything submitted to the device before this fence (on `queue`) is done.
  virtual void await_fence(Queue& queue) = 0;
  // Picks cores for the launch, runs it to completion and returns its record.
  virtual sim::LaunchRecord run_launch(Queue& queue, Launch& launch) = 0;

  std::uint64_t next_launch_id() { return next_launch_id_++; }

  sim::Chip& chip_;
  std::vector<std::shared_ptr<Queue>> queues_;
  timing::CardLinks* card_links_ = nullptr;

 private:
  void execute(Queue& queue, CommandBody& body, std::optional<FaultRecord>& fault);
  void execute_copy(Copy& copy, std::optional<FaultRecord>& fault);
  void execute_fill(const Fill& fill, std::optional<FaultRecord>& fault);
  void execute_external(External& work, std::optional<FaultRecord>& fault);
  // Times a peer copy over the card links and counts it on both chips; returns when
  // its last byte has landed. A fault when the cards share no links.
  Picoseconds peer_copy(sim::Chip& src, sim::Chip& dst, const Copy& copy, Picoseconds now, std::uint64_t bytes,
                        std::optional<FaultRecord>& fault);

  std::uint64_t next_launch_id_ = 1;
};

// The firmware for `chip`, timed or immediate by chip.timing(). `progress` runs (in
// simulation context) whenever a timed command completes.
std::unique_ptr<Firmware> make_firmware(sim::Chip& chip, std::function<void()> progress);

}  // namespace spyre::firmware
