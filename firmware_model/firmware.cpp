#define SC_INCLUDE_DYNAMIC_PROCESSES
#include "firmware.h"

#include "functional/interpreter.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace spyre::firmware {

std::string_view to_string(CommandKind kind) {
  switch (kind) {
    case CommandKind::copy: return "copy";
    case CommandKind::fill: return "fill";
    case CommandKind::launch: return "launch";
    case CommandKind::event_record: return "event record";
    case CommandKind::event_wait: return "event wait";
    case CommandKind::fence: return "fence";
  }
  return "?";
}

namespace {

Picoseconds now_ps() { return sc_core::sc_time_stamp().value(); }

FaultRecord fault_record(const sim::Fault& f) {
  FaultRecord r;
  r.kernel = f.kernel;
  r.core = f.core;
  r.pc = f.pc;
  r.instruction = f.instruction;
  r.address = f.address.value_or(0);
  r.reason = f.reason;
  return r;
}

CommandKind kind_of(const CommandBody& body) {
  return std::visit(
      [](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, Copy>) return CommandKind::copy;
        else if constexpr (std::is_same_v<T, Fill>) return CommandKind::fill;
        else if constexpr (std::is_same_v<T, Launch>) return CommandKind::launch;
        else if constexpr (std::is_same_v<T, EventRecord>) return CommandKind::event_record;
        else if constexpr (std::is_same_v<T, EventWait>) return CommandKind::event_wait;
        else return CommandKind::fence;
      },
      body);
}

}  // namespace

Firmware::Firmware(sim::Chip& chip, std::function<void()> progress, Mode mode, std::function<Picoseconds()> clock)
    : chip_(chip), progress_(std::move(progress)), mode_(mode), clock_(std::move(clock)),
      core_busy_(chip.num_cores(), false) {}

Picoseconds Firmware::now() const { return mode_ == Mode::functional ? (clock_ ? clock_() : 0) : now_ps(); }

Firmware::~Firmware() = default;

void Firmware::add_queue(std::shared_ptr<Queue> queue) { queues_.push_back(std::move(queue)); }

void Firmware::remove_queue(const Queue* queue) {
  std::erase_if(queues_, [queue](const auto& q) { return q.get() == queue; });
}

bool Firmware::device_idle() const {
  return std::all_of(queues_.begin(), queues_.end(), [this](const auto& q) { return idle(*q); });
}

void Firmware::acknowledge(Queue& queue) {
  queue.error = false;
  queue.fault.reset();
  queue.skipped = 0;
}

void Firmware::submit(const std::shared_ptr<Queue>& queue, CommandBody body) {
  if (mode_ == Mode::functional) {
    complete(*queue, queue->submitted++, body);
    return;
  }
  queue->pending.emplace_back(queue->submitted++, std::move(body));
  if (!queue->started) {
    queue->started = true;
    queue->doorbell = std::make_unique<sc_core::sc_event>();
    sc_core::sc_spawn([this, queue] { run_queue(queue); });
  }
  queue->doorbell->notify(sc_core::SC_ZERO_TIME);
}

void Firmware::wait_ps(Picoseconds d) {
  if (d > 0) sc_core::wait(sc_core::sc_time::from_value(d));
}

void Firmware::run_queue(std::shared_ptr<Queue> queue) {
  const auto& cfg = chip_.config();
  for (;;) {
    while (queue->pending.empty()) sc_core::wait(*queue->doorbell);
    auto [index, body] = std::move(queue->pending.front());
    queue->pending.pop_front();
    queue->busy = true;
    wait_ps(chip_.clock().ps(cfg.firmware.command_fetch_cycles));
    complete(*queue, index, body);
    queue->busy = false;
    state_changed_.notify(sc_core::SC_ZERO_TIME);
    if (progress_) progress_();
  }
}

void Firmware::complete(Queue& queue, std::uint64_t index, CommandBody& body) {
  const CommandKind kind = kind_of(body);
  if (queue.error && kind != CommandKind::event_record) {
    // A faulted queue completes later commands unexecuted until the host
    // acknowledges; event records still complete so no other queue waits forever.
    ++queue.skipped;
  } else {
    std::optional<FaultRecord> fault;
    execute(queue, index, body, fault);
    if (fault && !queue.error) {
      fault->command = kind;
      fault->command_index = index;
      fault->time = now();
      spdlog::warn("spyre:{} queue {}: {} {} failed: {}", chip_.device_index(), queue.id, to_string(kind), index,
                   fault->reason);
      queue.fault = std::move(fault);
      queue.error = true;
    }
  }
  ++queue.completed;
}

void Firmware::execute(Queue& queue, std::uint64_t, CommandBody& body, std::optional<FaultRecord>& fault) {
  if (auto* copy = std::get_if<Copy>(&body)) return execute_copy(*copy, fault);
  if (auto* fill = std::get_if<Fill>(&body)) return execute_fill(*fill, fault);
  if (auto* launch = std::get_if<Launch>(&body)) return execute_launch(queue, *launch, fault);
  if (auto* record = std::get_if<EventRecord>(&body)) {
    if (record->generation > record->event->completed) {
      record->event->completed = record->generation;
      record->event->time = now();
      for (sc_core::sc_event* waiter : record->event->waiters) waiter->notify(sc_core::SC_ZERO_TIME);
    }
    return;
  }
  // In functional mode every earlier command has completed already: waits and fences
  // are satisfied by construction.
  if (mode_ == Mode::functional) return;
  if (auto* wait = std::get_if<EventWait>(&body)) {
    auto& waiters = wait->event->waiters;
    waiters.push_back(&state_changed_);
    while (wait->event->completed < wait->generation) sc_core::wait(state_changed_);
    waiters.erase(std::find(waiters.begin(), waiters.end(), &state_changed_));
    return;
  }
  // Fence: everything submitted to the device before it has completed. Commands of
  // other queues submitted earlier have smaller arrival times, so they are counted in
  // `submitted` already.
  std::vector<std::pair<Queue*, std::uint64_t>> targets;
  for (const auto& q : queues_) {
    if (q.get() != &queue) targets.emplace_back(q.get(), q->submitted);
  }
  const auto done = [&] {
    return std::all_of(targets.begin(), targets.end(), [](const auto& t) { return t.first->completed >= t.second; });
  };
  while (!done()) sc_core::wait(state_changed_);
}

void Firmware::execute_copy(Copy& c, std::optional<FaultRecord>& fault) {
  using Direction = Copy::Direction;
  const auto check = [&](sim::DeviceMemory& mem, std::uint64_t base, std::uint64_t pitch, const char* what) {
    for (std::uint64_t r = 0; r < c.rows; ++r) {
      if (auto err = mem.check(base + r * pitch, c.width)) {
        fault = FaultRecord{};
        fault->address = err->address;
        fault->reason = fmt::format("copy {}: {}", what, err->description);
        return false;
      }
    }
    return true;
  };
  sim::Chip* src = c.src_device ? &c.src_device->chip() : nullptr;
  sim::Chip* dst = c.dst_device ? &c.dst_device->chip() : nullptr;
  if (src && !check(src->memory(), c.src, c.src_pitch, "source")) return;
  if (dst && !check(dst->memory(), c.dst, c.dst_pitch, "destination")) return;

  if (mode_ == Mode::timed) {
    const std::uint64_t bytes = c.width * c.rows;
    const Picoseconds now = now_ps();
    Picoseconds end = now;
    switch (c.direction) {
      case Direction::host_to_device:
        end = dst->host_transfer(now, sim::Chip::HostDirection::to_device, c.dst, bytes);
        break;
      case Direction::device_to_host:
        end = src->host_transfer(now, sim::Chip::HostDirection::to_host, c.src, bytes);
        break;
      case Direction::device_to_device:
        end = src->dram_copy(now, c.dst, c.src, bytes);
        break;
      case Direction::peer:
        // Over PCIe: out of one device, into the other.
        end = std::max(src->host_transfer(now, sim::Chip::HostDirection::to_host, c.src, bytes),
                       dst->host_transfer(now, sim::Chip::HostDirection::to_device, c.dst, bytes));
        break;
    }
    wait_ps(end - now);
  }
  // The bytes land when the copy completes.
  for (std::uint64_t r = 0; r < c.rows; ++r) {
    std::uint8_t* to = dst ? dst->memory().host(c.dst + r * c.dst_pitch) : c.host_dst + r * c.dst_pitch;
    const std::uint8_t* from = src ? src->memory().host(c.src + r * c.src_pitch)
                               : c.snapshot.empty() ? c.host_src + r * c.src_pitch
                                                    : c.snapshot.data() + r * c.width;
    std::memmove(to, from, c.width);
  }
}

void Firmware::execute_fill(const Fill& f, std::optional<FaultRecord>& fault) {
  if (auto err = chip_.memory().check(f.dst, f.bytes)) {
    fault = FaultRecord{};
    fault->address = err->address;
    fault->reason = "fill: " + err->description;
    return;
  }
  if (mode_ == Mode::timed) {
    const Picoseconds now = now_ps();
    wait_ps(chip_.dram_fill(now, f.dst, f.bytes) - now);
  }
  std::uint8_t* dst = chip_.memory().host(f.dst);
  for (std::uint64_t i = 0; i < f.bytes; i += f.pattern_size) std::memcpy(dst + i, &f.pattern, f.pattern_size);
}

void Firmware::execute_launch(Queue& queue, Launch& l, std::optional<FaultRecord>& fault) {
  const auto& cfg = chip_.config();
  if (mode_ == Mode::functional) {
    const std::uint64_t id = next_launch_id_++;
    std::vector<std::uint32_t> cores;
    for (std::uint32_t c = 0; c < chip_.num_cores() && cores.size() < l.program->num_streams(); ++c) {
      if (l.core_mask.empty() || l.core_mask[c]) cores.push_back(c);
    }
    sim::LaunchRecord record =
        sim::functional::run(chip_, {.program = l.program, .args = std::move(l.args), .cores = cores, .name = l.name, .id = id,
                                       .queue_tag = l.queue_tag});
    record.start = record.end = now();
    chip_.record_launch(record);
    if (record.fault) fault = fault_record(*record.fault);
    return;
  }
  const std::uint32_t streams = l.program->num_streams();
  const std::vector<std::uint32_t> cores = acquire_cores(queue.priority, l.core_mask, streams);
  wait_ps(chip_.clock().ps(cfg.firmware.launch_cycles));
  const std::uint64_t id = next_launch_id_++;
  bool done = false;
  sc_core::sc_event finished;
  sim::LaunchRecord record;
  chip_.launch({.program = l.program, .args = std::move(l.args), .cores = cores, .name = l.name, .id = id, .flow = l.flow,
                .queue_tag = l.queue_tag},
               [&](const sim::LaunchRecord& r) {
                 record = r;
                 done = true;
                 finished.notify(sc_core::SC_ZERO_TIME);
               });
  // Watchdog: a kernel running past the configured bound is aborted.
  const Picoseconds bound = chip_.clock().ps(cfg.firmware.watchdog_cycles);
  sc_core::wait(sc_core::sc_time::from_value(bound), finished);
  if (!done) {
    chip_.abort_launch(id, fmt::format("watchdog: the kernel ran past {} cycles ({:.3f} ms of device time) and "
                                       "was aborted",
                                       cfg.firmware.watchdog_cycles, static_cast<double>(bound) * 1e-9));
    while (!done) sc_core::wait(finished);
  }
  release_cores(cores);
  if (record.fault) fault = fault_record(*record.fault);
}

std::vector<std::uint32_t> Firmware::acquire_cores(int priority, const std::vector<bool>& mask, std::uint32_t count) {
  CoreRequest request{priority, request_sequence_++, &mask, count, {}};
  // Highest priority first, then first come first served.
  auto pos = std::find_if(requests_.begin(), requests_.end(), [&](const CoreRequest* r) {
    return r->priority < priority;
  });
  requests_.insert(pos, &request);
  schedule();
  while (request.granted.empty()) sc_core::wait(cores_changed_);
  return request.granted;
}

void Firmware::release_cores(const std::vector<std::uint32_t>& cores) {
  for (const auto c : cores) core_busy_[c] = false;
  schedule();
}

// A scheduling point: grant waiting requests in order while they fit. A request that
// does not fit stops the scan, so a large high-priority launch is not starved by small
// low-priority ones slipping past it.
void Firmware::schedule() {
  bool granted_any = false;
  while (!requests_.empty()) {
    CoreRequest* r = requests_.front();
    std::vector<std::uint32_t> picked;
    for (std::uint32_t c = 0; c < core_busy_.size() && picked.size() < r->count; ++c) {
      const bool allowed = r->mask->empty() || (c < r->mask->size() && (*r->mask)[c]);
      if (allowed && !core_busy_[c]) picked.push_back(c);
    }
    if (picked.size() < r->count) break;
    for (const auto c : picked) core_busy_[c] = true;
    r->granted = std::move(picked);
    requests_.pop_front();
    granted_any = true;
  }
  if (granted_any) cores_changed_.notify(sc_core::SC_ZERO_TIME);
}

}  // namespace spyre::firmware
