// The two ways commands meet time (firmware.h): the timed firmware (SystemC queue
// threads, the core scheduler, the watchdog) and the immediate one (the untimed
// device). make_firmware picks one by the chip's timing; nothing else tests it.
#define SC_INCLUDE_DYNAMIC_PROCESSES
#include <algorithm>
#include <list>

#include <fmt/format.h>

#include "firmware.h"

namespace spyre::firmware {

namespace {

class TimedFirmware final : public Firmware {
 public:
  TimedFirmware(sim::Chip& chip, std::function<void()> progress)
      : Firmware(chip), progress_(std::move(progress)), core_busy_(chip.num_cores(), false) {}

  void submit(const std::shared_ptr<Queue>& queue, CommandBody body) override {
    queue->pending.emplace_back(queue->submitted++, std::move(body));
    if (!queue->started) {
      queue->started = true;
      queue->doorbell = std::make_unique<sc_core::sc_event>();
      sc_core::sc_spawn([this, queue] { run_queue(queue); });
    }
    queue->doorbell->notify(sc_core::SC_ZERO_TIME);
  }

 private:
  struct CoreRequest {
    int priority;
    std::uint64_t sequence;
    const std::vector<bool>* mask;
    std::uint32_t count;
    std::vector<std::uint32_t> granted;
  };

  void wait_until(Picoseconds t) override {
    const Picoseconds now = chip_.now();
    if (t > now) sc_core::wait(sc_core::sc_time::from_value(t - now));
  }

  void run_queue(std::shared_ptr<Queue> queue) {
    const auto& cfg = chip_.config();
    for (;;) {
      while (queue->pending.empty()) sc_core::wait(*queue->doorbell);
      auto [index, body] = std::move(queue->pending.front());
      queue->pending.pop_front();
      queue->busy = true;
      wait_until(chip_.now() + chip_.clock().ps(cfg.firmware.command_fetch_cycles));
      complete(*queue, index, body);
      queue->busy = false;
      state_changed_.notify(sc_core::SC_ZERO_TIME);
      if (progress_) progress_();
    }
  }

  void await(EventWait& wait) override {
    auto& waiters = wait.event->waiters;
    waiters.push_back(&state_changed_);
    while (wait.event->completed < wait.generation) sc_core::wait(state_changed_);
    waiters.erase(std::find(waiters.begin(), waiters.end(), &state_changed_));
  }

  // Commands of other queues submitted earlier have smaller arrival times, so they
  // are counted in `submitted` already.
  void await_fence(Queue& queue) override {
    std::vector<std::pair<Queue*, std::uint64_t>> targets;
    for (const auto& q : queues_) {
      if (q.get() != &queue) targets.emplace_back(q.get(), q->submitted);
    }
    const auto done = [&] {
      return std::all_of(targets.begin(), targets.end(), [](const auto& t) { return t.first->completed >= t.second; });
    };
    while (!done()) sc_core::wait(state_changed_);
  }

  sim::LaunchRecord run_launch(Queue& queue, Launch& l) override {
    const auto& cfg = chip_.config();
    const std::vector<std::uint32_t> cores = acquire_cores(queue.priority, l.core_mask, l.program->num_streams());
    wait_until(chip_.now() + chip_.clock().ps(cfg.firmware.launch_cycles));
    const std::uint64_t id = next_launch_id();
    bool done = false;
    sc_core::sc_event finished;
    sim::LaunchRecord record;
    chip_.launch({.program = l.program, .args = std::move(l.args), .cores = cores, .name = l.name, .id = id,
                  .flow = l.flow, .queue_tag = l.queue_tag, .min_read_bytes = l.min_read_bytes,
                  .min_write_bytes = l.min_write_bytes},
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
    return record;
  }

  std::vector<std::uint32_t> acquire_cores(int priority, const std::vector<bool>& mask, std::uint32_t count) {
    CoreRequest request{priority, request_sequence_++, &mask, count, {}};
    // Highest priority first, then first come first served.
    auto pos = std::find_if(requests_.begin(), requests_.end(),
                            [&](const CoreRequest* r) { return r->priority < priority; });
    requests_.insert(pos, &request);
    schedule();
    while (request.granted.empty()) sc_core::wait(cores_changed_);
    return request.granted;
  }

  void release_cores(const std::vector<std::uint32_t>& cores) {
    for (const auto c : cores) core_busy_[c] = false;
    schedule();
  }

  // A scheduling point: grant waiting requests in order while they fit. A request that
  // does not fit stops the scan, so a large high-priority launch is not starved by
  // small low-priority ones slipping past it.
  void schedule() {
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

  std::function<void()> progress_;
  std::vector<bool> core_busy_;
  std::list<CoreRequest*> requests_;
  std::uint64_t request_sequence_ = 0;
  sc_core::sc_event cores_changed_;
  sc_core::sc_event state_changed_;
};

// The untimed device: a command runs when it is submitted, in the caller's thread.
class ImmediateFirmware final : public Firmware {
 public:
  explicit ImmediateFirmware(sim::Chip& chip) : Firmware(chip) {}

  void submit(const std::shared_ptr<Queue>& queue, CommandBody body) override {
    complete(*queue, queue->submitted++, body);
  }

 private:
  void wait_until(Picoseconds) override {}
  // Every earlier command has completed: waits and fences hold already.
  void await(EventWait&) override {}
  void await_fence(Queue&) override {}

  sim::LaunchRecord run_launch(Queue&, Launch& l) override {
    // The first free cores the mask allows (all are free: one command at a time).
    std::vector<std::uint32_t> cores;
    for (std::uint32_t c = 0; c < chip_.num_cores() && cores.size() < l.program->num_streams(); ++c) {
      if (l.core_mask.empty() || (c < l.core_mask.size() && l.core_mask[c])) cores.push_back(c);
    }
    sim::LaunchRecord record;
    chip_.launch({.program = l.program, .args = std::move(l.args), .cores = cores, .name = l.name,
                  .id = next_launch_id(), .flow = l.flow, .queue_tag = l.queue_tag,
                  .min_read_bytes = l.min_read_bytes, .min_write_bytes = l.min_write_bytes},
                 [&](const sim::LaunchRecord& r) { record = r; });
    return record;
  }
};

}  // namespace

std::unique_ptr<Firmware> make_firmware(sim::Chip& chip, std::function<void()> progress) {
  if (chip.timing() == sim::Timing::timed) return std::make_unique<TimedFirmware>(chip, std::move(progress));
  return std::make_unique<ImmediateFirmware>(chip);
}

}  // namespace spyre::firmware
