// The timed device: the executor's timed policy and the SystemC threads that run a
// launch's streams. Each instruction occupies the chip's resources (timing::Servers)
// for a computed duration and the stream waits it out; nothing steps a clock.
#define SC_INCLUDE_DYNAMIC_PROCESSES
#include <algorithm>
#include <array>
#include <deque>

#include <fmt/format.h>

#include "chip/chip_impl.h"
#include "chip/trace_recorder.h"
#include "kernel/sim_kernel.h"

namespace spyre::sim {

namespace {

Picoseconds now_ps() { return sc_core::sc_time_stamp().value(); }

void wait_until(Picoseconds t) {
  const Picoseconds now = now_ps();
  if (t > now) sc_core::wait(sc_core::sc_time::from_value(t - now));
}

Server& least_busy(std::vector<Server>& servers) {
  return *std::min_element(servers.begin(), servers.end(),
                           [](const Server& a, const Server& b) { return a.free_at() < b.free_at(); });
}

// The trace label of a compute or vector instruction.
std::string label(const isa::Instruction& inst) {
  if (const auto* mm = std::get_if<isa::Matmul>(&inst)) return fmt::format("matmul {}x{}x{}", mm->m, mm->n, mm->k);
  if (const auto* u = std::get_if<isa::VUnary>(&inst)) return std::string(isa::to_string(u->op));
  if (const auto* b = std::get_if<isa::VBinary>(&inst)) return std::string(isa::to_string(b->op));
  if (const auto* r = std::get_if<isa::VReduce>(&inst)) return "reduce " + std::string(isa::to_string(r->op));
  if (std::holds_alternative<isa::VFill>(inst)) return "fill";
  return std::string(isa::to_string(isa::opcode_of(inst)));
}

}  // namespace

struct TimedLaunch final : TimingPolicy, std::enable_shared_from_this<TimedLaunch> {
  TimedLaunch(Chip::Impl& owner, LaunchRequest req, LaunchCallback callback, isa::Limits limits)
      : impl(owner), request(std::move(req)), done(std::move(callback)),
        exec(impl.view(), request, limits, *this), remaining(exec.num_streams()) {
    exec.record().start = now_ps();
  }

  Chip::Impl& impl;
  LaunchRequest request;  // (before exec: the executor keeps a reference)
  LaunchCallback done;
  Executor exec;
  std::uint32_t remaining;
  std::uint32_t blocked = 0;  // streams waiting for a message or a barrier
  std::uint32_t waiting_for_core = 0;
  bool deadlock_check_pending = false;
  std::vector<Picoseconds> stop_end;  // (dma's scratch: each memory stop's last channel end)
  sc_core::sc_event changed;

  std::uint32_t core(std::uint32_t stream) const { return request.cores[stream]; }

  // A core's compute array and vector unit each run their instructions in order, from
  // a queue of `cores.queue_depth` waiting instructions: an instruction starts when
  // the stream has issued it, its unit is free and its scratchpad operands are
  // (`not_before`); the stream waits only while the unit's queue is full. With a depth
  // of 0 the stream waits for each instruction to end (the units never overlap).
  struct Unit {
    Picoseconds free = 0;
    std::deque<Picoseconds> waiting;  // the start times of the instructions queued
  };
  std::vector<std::array<Unit, 2>> units = std::vector<std::array<Unit, 2>>(exec.num_streams());

  Picoseconds issue(std::uint32_t stream, bool compute, Picoseconds duration, Picoseconds not_before,
                    const isa::Instruction& inst) {
    Unit& unit = units[stream][compute ? 0 : 1];
    const std::uint64_t depth = impl.chip.config().cores.queue_depth;
    for (;;) {
      while (!unit.waiting.empty() && unit.waiting.front() <= now_ps()) unit.waiting.pop_front();
      if (unit.waiting.size() < std::max<std::uint64_t>(depth, 1)) break;
      wait_until(unit.waiting.front());
    }
    const Picoseconds start = std::max({now_ps(), not_before, unit.free});
    const Picoseconds end = start + duration;
    unit.free = end;
    unit.waiting.push_back(start);
    CoreStats& stats = impl.core_stats(core(stream));
    (compute ? stats.compute_busy_ps : stats.vector_busy_ps) += duration;
    if (TraceRecorder* t = impl.trace()) {
      t->complete(t->track(fmt::format("core {} {}", core(stream), compute ? "compute" : "vector")), label(inst), start,
                  end, exec.record().name);
    }
    if (depth == 0) wait_until(end);
    return end;
  }

  // The array's cycles, or the time the core's scratchpad ports need to stream its
  // operands and result if that is longer (the ports' combined rate; DMA traffic through
  // the ports is not counted against it).
  Picoseconds compute(std::uint32_t stream, std::uint64_t cycles, const isa::Instruction& inst,
                      Picoseconds not_before) override {
    Picoseconds duration = impl.chip.clock().ps(cycles);
    if (const auto* mm = std::get_if<isa::Matmul>(&inst)) {
      const std::uint64_t bytes = timing::matmul_scratchpad_bytes(impl.chip.config(), mm->m, mm->n, mm->k,
                                                                  isa::dtype_size(mm->in), isa::dtype_size(mm->out),
                                                                  mm->accumulate);
      duration = std::max(duration, timing::transfer_ps(bytes, impl.sp_bytes_per_s));
    }
    return issue(stream, true, duration, not_before, inst);
  }
  Picoseconds vector(std::uint32_t stream, std::uint64_t cycles, const isa::Instruction& inst,
                     Picoseconds not_before) override {
    return issue(stream, false, impl.chip.clock().ps(cycles), not_before, inst);
  }
  Picoseconds now() const override { return now_ps(); }

  // An engine (setup + bytes at its rate), the channels, the ring links between each
  // memory stop and the core, a scratchpad port; then the latencies. A load is a
  // pipelined flow: its bytes cross a link as they arrive from the stage before, so each
  // link (and then the port) is booked to finish no earlier than that stage delivers
  // (start = max(ready, previous stage's end - own duration)), not from the DMA's start.
  Picoseconds dma(std::uint32_t stream, const DmaCost& cost) override {
    auto& c = impl.cores[core(stream)];
    Server& engine = least_busy(c.dma_engines);
    const Picoseconds now = now_ps();
    const auto eng =
        engine.reserve(now, now, impl.dma_setup_ps + timing::transfer_ps(cost.charged, impl.engine_bytes_per_s), cost.charged);
    const Picoseconds ready = eng.start + impl.dma_setup_ps;
    Picoseconds end = std::max(eng.end, impl.reserve_channels(now, ready, cost.channel_bytes,
                                                              cost.load ? Direction::read : Direction::write, &stop_end));
    const Topology& topo = impl.topology;
    const std::uint32_t me = topo.core_stop(core(stream));
    std::uint32_t hops = 0;
    Picoseconds delivered = ready;  // (a load) when the last link hands its bytes to the core
    for (std::uint32_t m = 0; m < cost.stop_bytes.size(); ++m) {
      if (cost.stop_bytes[m] == 0) continue;
      const std::uint32_t mem = topo.memory_stop(m);
      const std::uint32_t from = cost.load ? mem : me;
      const auto p = topo.path(from, cost.load ? me : mem);
      hops = std::max(hops, p.hops);
      Picoseconds before = stop_end[m];
      // (The links' rates are usually all equal: one division per stop, not per link.)
      double rate = 0;
      Picoseconds own = 0;
      auto& ring = p.clockwise ? impl.ring_cw : impl.ring_ccw;
      for (std::uint32_t i = 0; i < p.hops; ++i) {
        Server& link = ring[p.link(from, i, topo.stops())];
        if (link.bytes_per_s() != rate) rate = link.bytes_per_s(), own = timing::transfer_ps(cost.stop_bytes[m], rate);
        const Picoseconds at = cost.load && before > ready + own ? before - own : ready;
        before = link.reserve(now, at, own, cost.stop_bytes[m]).end;
        end = std::max(end, before);
      }
      delivered = std::max(delivered, before);
    }
    Server& port = least_busy(c.sp_ports);
    const Picoseconds own = timing::transfer_ps(cost.useful, port.bytes_per_s());
    end = std::max(end, port.reserve_bytes(now, cost.load && delivered > ready + own ? delivered - own : ready, cost.useful).end);
    end += impl.dram_latency_ps + hops * impl.hop_ps + impl.sp_latency_ps;
    if (TraceRecorder* t = impl.trace()) {
      const auto index = static_cast<std::size_t>(&engine - c.dma_engines.data());
      t->complete(t->track(fmt::format("core {} dma {}", core(stream), index)),
                  fmt::format("{} {}", cost.load ? "load" : "store", bytes_text(cost.useful)), eng.start, end,
                  exec.record().name);
    }
    return end;
  }

  Picoseconds ring(std::uint32_t stream, std::uint32_t dst_stream, std::uint64_t bytes) override {
    const Topology& topo = impl.topology;
    const std::uint32_t from = topo.core_stop(core(stream));
    const auto p = topo.path(from, topo.core_stop(core(dst_stream)));
    const Picoseconds now = now_ps();
    Picoseconds arrival = now;
    for (Server* link : impl.links(from, p)) arrival = std::max(arrival, link->reserve_bytes(now, now, bytes).end);
    arrival += p.hops * impl.hop_ps;
    if (TraceRecorder* t = impl.trace()) {
      t->complete(t->track(fmt::format("core {} ring", core(stream))),
                  fmt::format("send {} -> core {}", bytes_text(bytes), core(dst_stream)), now, arrival);
    }
    return arrival;
  }

  void wait_until(Picoseconds t) override { sim::wait_until(t); }
  void wake() override { changed.notify(sc_core::SC_ZERO_TIME); }
  void high_water(std::uint32_t c, std::uint64_t bytes) override {
    if (TraceRecorder* t = impl.trace()) t->counter(fmt::format("core {} scratchpad bytes", c), now_ps(), double(bytes));
  }
};

void Chip::Impl::start_timed(LaunchRequest request, LaunchCallback done, isa::Limits limits) {
  auto launch = std::make_shared<TimedLaunch>(*this, std::move(request), std::move(done), limits);
  launches.push_back(launch);
  for (std::uint32_t s = 0; s < launch->exec.num_streams(); ++s) {
    run_pooled([this, launch, s] { run_stream(launch, s); });
  }
}

void Chip::Impl::run_stream(std::shared_ptr<TimedLaunch> launch, std::uint32_t stream) {
  Core& core = cores[launch->core(stream)];
  while (core.busy && !launch->exec.faulted()) {
    ++launch->waiting_for_core;
    sc_core::wait(core.freed | launch->changed);
    --launch->waiting_for_core;
  }
  if (!launch->exec.faulted()) {
    core.busy = true;
    while (launch->exec.step(stream) == Executor::Step::blocked) {
      ++launch->blocked;
      check_deadlock_soon(*launch);
      sc_core::wait(launch->changed);
      --launch->blocked;
    }
    core.busy = false;
    core.freed.notify(sc_core::SC_ZERO_TIME);
  }
  finish_stream(launch);
}

// Every unfinished stream of the launch waits for a message or a barrier: nothing can
// wake them, a deadlock. Checked 1 ps later, after the delta cycles in which a
// just-notified stream would have woken up.
void Chip::Impl::check_deadlock_soon(TimedLaunch& launch) {
  if (launch.remaining == 0 || launch.blocked < launch.remaining || launch.deadlock_check_pending) return;
  launch.deadlock_check_pending = true;
  spawn_recycling_name([this, l = launch.shared_from_this()] {
    sc_core::wait(sc_core::sc_time::from_value(1));
    l->deadlock_check_pending = false;
    if (l->remaining > 0 && l->blocked >= l->remaining && !l->exec.faulted()) abort_deadlocked(*l);
  }, "deadlock_check");
}

void Chip::Impl::abort_deadlocked(TimedLaunch& launch) {
  if (launch.blocked == 0 && launch.waiting_for_core > 0) {
    launch.exec.abort("deadlock: a stream waits for its core, busy with another launch");
  } else {
    launch.exec.abort_deadlocked();
  }
}

Picoseconds Chip::Impl::earliest_launch_start(Picoseconds bound) const {
  for (const auto& launch : launches) bound = std::min(bound, launch->exec.record().start);
  return bound;
}

bool Chip::Impl::abort(std::uint64_t id, const std::string& reason) {
  for (const auto& launch : launches) {
    if (launch->exec.record().id != id || launch->exec.faulted()) continue;
    launch->exec.abort(reason);
    return true;
  }
  return false;
}

std::size_t Chip::Impl::abort_stalled() {
  std::size_t aborted = 0;
  for (const auto& launch : launches) {
    if (launch->exec.faulted()) continue;
    abort_deadlocked(*launch);
    ++aborted;
  }
  return aborted;
}

void Chip::Impl::finish_stream(const std::shared_ptr<TimedLaunch>& launch) {
  if (--launch->remaining != 0) {
    check_deadlock_soon(*launch);
    return;
  }
  LaunchRecord& r = launch->exec.record();
  r.end = now_ps();
  if (TraceRecorder* t = trace()) {
    const int kernels = t->track("kernels");
    t->complete(kernels, r.name, r.start, r.end, r.fault ? "faulted" : "");
    if (r.flow != 0) t->flow_end(kernels, r.start, r.flow);
  }
  chip.record_launch(r);
  launches.remove(launch);
  if (launch->done) launch->done(r);
}

}  // namespace spyre::sim
