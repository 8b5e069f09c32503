#include "exec/executor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "functional/dma.h"
#include "functional/numeric.h"
#include "functional/philox.h"
#include "timing/timing_rules.h"

namespace spyre::sim {

using config::MacType;

namespace {

// At most this many spare message buffers are kept (Executor::spare_buffers_).
constexpr std::size_t kSpareBuffers = 64;

MacType mac_type(isa::DType t) {
  switch (t) {
    case isa::DType::fp32: return MacType::fp32;
    case isa::DType::fp16: return MacType::fp16;
    case isa::DType::bf16: return MacType::bf16;
    case isa::DType::fp8_e4m3:
    case isa::DType::fp8_e5m2: return MacType::fp8;
    default: return MacType::int8;
  }
}

}  // namespace

Executor::Executor(DeviceView device, const LaunchRequest& request, isa::Limits limits, TimingPolicy& timing)
    : device_(std::move(device)), request_(request), program_(*request.program), limits_(limits), timing_(timing),
      streams_(program_.num_streams()) {
  record_.id = request.id;
  record_.name = request.name.empty() ? program_.name() : request.name;
  record_.cores.assign(request.cores.begin(), request.cores.begin() + program_.num_streams());
  record_.flow = request.flow;
  record_.queue_tag = request.queue_tag;
  record_.min_read_bytes = request.min_read_bytes;
  record_.min_write_bytes = request.min_write_bytes;
}

Executor::Step Executor::step(std::uint32_t s) {
  Stream& st = streams_[s];
  const std::uint32_t length = program_.stream_length(s);
  while (!faulted()) {
    if (st.done) return Step::ended;
    current_ = nullptr;
    if (st.pc >= length) {
      fault(s, "ran past the end of its stream without END");
      break;
    }
    const isa::Decoded decoded = program_.decode_at(s, st.pc);
    if (!decoded.inst) {
      fault(s, decoded.error);
      break;
    }
    current_ = &*decoded.inst;
    if (auto reason = isa::check(*current_, limits_)) {
      fault(s, *reason);
      break;
    }
    // The math of this instruction in the chip's numerics (per thread; set before every
    // instruction, since another chip's stream may have run on this thread meanwhile).
    numeric::set_half_through_dl16(device_.half_through_dl16);
    const Outcome outcome = std::visit([&](const auto& inst) { return run(s, inst); }, *current_);
    if (outcome == Outcome::blocked) return Step::blocked;
    if (outcome == Outcome::faulted) break;
    st.waiting = {};
    ++record_.instructions;
    ++stats(s).instructions;
    if (outcome == Outcome::ended) {
      st.done = true;
      return Step::ended;
    }
    ++st.pc;
  }
  return Step::faulted;
}

Executor::Outcome Executor::fault(std::uint32_t s, const std::string& reason, std::optional<std::uint64_t> address) {
  if (!record_.fault) {
    Fault f;
    f.device = device_.device;
    f.core = request_.cores[s];
    f.stream = s;
    f.pc = streams_[s].pc;
    f.kernel = record_.name;
    f.instruction = current_ ? isa::disassemble(*current_) : std::string{};
    f.reason = reason;
    f.address = address;
    record_.fault = std::move(f);
    timing_.wake();
  }
  return Outcome::faulted;
}

void Executor::abort(const std::string& reason) {
  if (record_.fault) return;
  Fault f;
  f.device = device_.device;
  f.kernel = record_.name;
  f.reason = reason;
  if (!record_.cores.empty()) f.core = record_.cores.front();
  f.pc = streams_.empty() ? 0 : streams_.front().pc;
  record_.fault = std::move(f);
  timing_.wake();
}

std::string Executor::waiting_for(std::uint32_t stream) const {
  const Stream::Waiting& w = streams_[stream].waiting;
  switch (w.kind) {
    case Stream::Waiting::Kind::message:
      return fmt::format("a ring message with tag {} from stream {} that is never sent", w.a, w.b);
    case Stream::Waiting::Kind::barrier: return fmt::format("barrier {} ({} of {} streams arrived)", w.a, w.b, w.c);
    case Stream::Waiting::Kind::none: break;
  }
  return {};
}

void Executor::abort_deadlocked() {
  if (record_.fault) return;
  for (std::uint32_t s = 0; s < streams_.size(); ++s) {
    if (streams_[s].done || streams_[s].waiting.kind == Stream::Waiting::Kind::none) continue;
    current_ = nullptr;
    fault(s, "deadlock: the stream waits for " + waiting_for(s));
    return;
  }
  abort("deadlock: the launch cannot make progress");
}

void Executor::touch(std::uint32_t s, std::uint64_t end) {
  CoreStats& c = stats(s);
  if (end > c.scratchpad_high_water) {
    c.scratchpad_high_water = end;
    timing_.high_water(request_.cores[s], end);
  }
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::End&) {
  // An END waits for the stream's outstanding DMA and ring transfers.
  const auto& tokens = streams_[s].tokens;
  timing_.wait_until(std::max(*std::max_element(tokens.begin(), tokens.end()), streams_[s].units_done));
  return Outcome::ended;
}

Picoseconds Executor::hazard(std::uint32_t s, const isa::SpAccess& access) {
  auto& uses = streams_[s].uses;
  const Picoseconds now = timing_.now();
  std::erase_if(uses, [&](const Stream::Use& u) { return u.until <= now; });
  Picoseconds until = 0;
  for (const Stream::Use& u : uses) {
    bool conflict = u.range.overlaps(access.write);
    if (u.write) {
      for (const isa::SpRange& r : access.reads) conflict = conflict || u.range.overlaps(r);
    }
    if (conflict) until = std::max(until, u.until);
  }
  return until;
}

void Executor::hold(std::uint32_t s, const isa::SpAccess& access, Picoseconds until) {
  Stream& st = streams_[s];
  st.units_done = std::max(st.units_done, until);
  for (const isa::SpRange& r : access.reads) {
    if (!r.empty()) st.uses.push_back({r, until, false});
  }
  if (!access.write.empty()) st.uses.push_back({access.write, until, true});
}

void Executor::wait_for_scratchpad(std::uint32_t s) {
  if (streams_[s].uses.empty()) return;
  timing_.wait_until(hazard(s, isa::scratchpad_access(*current_)));
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::Wait& w) {
  Picoseconds until = 0;
  for (std::uint32_t t = 0; t < isa::kNumTokens; ++t) {
    if (w.token_mask & (1u << t)) until = std::max(until, streams_[s].tokens[t]);
  }
  timing_.wait_until(until);
  return Outcome::next;
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::Matmul& mm) {
  const MacType type = mac_type(mm.in);
  if (config::simd_depth(device_.config.cores.compute_array.simd_depth, type) == 0) {
    return fault(s, fmt::format("the compute array of this chip does not support {} operands", isa::to_string(mm.in)));
  }
  // Integer matmuls compute only with data too: their int32 results are never indices
  // or positions (what no-data mode keeps real), and an int8 study at 8192^3 would
  // compute 0.5 T MACs on the host. Without data, a block they start reads as zeros
  // (deterministic, never the scratchpad's old bytes).
  if (device_.data == Data::real) {
    numeric::matmul(mm, sp(s));
  } else if (!isa::is_float(mm.out) && !mm.accumulate) {
    const std::size_t out_size = isa::dtype_size(mm.out);
    for (std::uint32_t r = 0; r < mm.m; ++r) {
      std::memset(sp(s) + mm.c + std::size_t{r} * mm.ldc * out_size, 0, std::size_t{mm.n} * out_size);
    }
  }
  record_.macs[static_cast<int>(type)] += std::uint64_t{mm.m} * mm.n * mm.k;
  touch(s, mm.c + std::uint64_t{isa::dtype_size(mm.out)} * ((std::uint64_t{mm.m} - 1) * mm.ldc + mm.n));
  const isa::SpAccess access = isa::scratchpad_access(*current_);
  hold(s, access,
       timing_.compute(s, timing::core_matmul_cycles(device_.config, type, mm.m, mm.n, mm.k), *current_, hazard(s, access)));
  return Outcome::next;
}

Executor::Outcome Executor::vector(std::uint32_t s, const isa::Instruction& inst, isa::VectorCost cost_class,
                                   std::uint64_t elements) {
  record_.vector_elements += elements;
  const double cost = device_.config.cores.vector.op_cycles[cost_class];
  const isa::SpAccess access = isa::scratchpad_access(inst);
  hold(s, access, timing_.vector(s, timing::vector_cycles(device_.config, cost, elements), inst, hazard(s, access)));
  return Outcome::next;
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::VUnary& u) {
  if (real(u.dtype)) numeric::unary(u.op, u.dtype, sp(s) + u.src, sp(s) + u.dst, u.count);
  touch(s, u.dst + std::uint64_t{u.count} * isa::dtype_size(u.dtype));
  return vector(s, *current_, isa::vector_cost(u.op), u.count);
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::VBinary& b) {
  if (real(b.dtype)) {
    if (auto f = numeric::binary(b, sp(s))) return fault(s, *f);
  }
  const std::uint64_t n = std::uint64_t{b.rows} * b.cols;
  touch(s, b.dst + n * isa::dtype_size(b.dtype));
  return vector(s, *current_, isa::vector_cost(b.op), n);
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::VCompare& c) {
  if (real(c.dtype)) numeric::compare(c, sp(s));
  const std::uint64_t n = std::uint64_t{c.rows} * c.cols;
  touch(s, c.dst + n);
  return vector(s, *current_, isa::VectorCost::compare, n);
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::VSelect& v) {
  if (real(v.dtype)) numeric::select(v, sp(s));
  touch(s, v.dst + std::uint64_t{v.count} * isa::dtype_size(v.dtype));
  return vector(s, *current_, isa::VectorCost::select, v.count);
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::VReduce& r) {
  if (real(r.in)) numeric::reduce(r, sp(s));
  touch(s, r.dst + std::uint64_t{r.axis == 1 ? r.rows : r.cols} * isa::dtype_size(r.out));
  return vector(s, *current_, isa::VectorCost::reduce, std::uint64_t{r.rows} * r.cols);
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::VConvert& c) {
  if (real(c.from) && real(c.to)) {
    numeric::convert(c.from, c.to, sp(s) + c.src, sp(s) + c.dst, c.count);
  } else if (real(c.to)) {
    // Without data, float values read as zeros, so integers made from them are zeros
    // (an argmax's indices, say), never what an earlier kernel left in the scratchpad.
    std::memset(sp(s) + c.dst, 0, std::size_t{c.count} * isa::dtype_size(c.to));
  }
  touch(s, c.dst + std::uint64_t{c.count} * isa::dtype_size(c.to));
  return vector(s, *current_, isa::VectorCost::convert, c.count);
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::VFill& f) {
  if (real(f.dtype)) numeric::fill(f, sp(s));
  touch(s, f.dst + std::uint64_t{f.count} * isa::dtype_size(f.dtype));
  return vector(s, *current_, isa::VectorCost::copy, f.count);
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::VTranspose& t) {
  if (real(t.dtype)) numeric::transpose(t, sp(s));
  const std::uint64_t n = std::uint64_t{t.rows} * t.cols;
  touch(s, t.dst + n * isa::dtype_size(t.dtype));
  return vector(s, *current_, isa::VectorCost::transpose, n);
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::VRandom& r) {
  if (real(isa::DType::fp32)) functional::random(r, sp(s));
  const std::uint64_t n = std::uint64_t{r.planes} * r.rows * r.cols;
  touch(s, r.dst + n * 4);
  return vector(s, *current_, r.dist == isa::RandomDist::uniform ? isa::VectorCost::random : isa::VectorCost::random_normal, n);
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::DmaLoad& d) {
  return move(s, d.arg, true, d.token, [&](std::uint64_t argument, functional::DmaResult& moved, const auto& on_run) {
    return functional::transfer(d, true, argument, device_.memory, sp(s), moved, on_run, real(d.dtype));
  });
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::DmaStore& d) {
  return move(s, d.arg, false, d.token, [&](std::uint64_t argument, functional::DmaResult& moved, const auto& on_run) {
    return functional::transfer(d, false, argument, device_.memory, sp(s), moved, on_run, real(d.dtype));
  });
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::DmaGather& g) {
  // The indices are integers, so always real; the rows move only with real data.
  return move(s, g.arg, !g.scatter, g.token, [&](std::uint64_t argument, functional::DmaResult& moved, const auto& on_run) {
    return functional::gather(g, argument, device_.memory, sp(s), moved, on_run, device_.data == Data::real);
  });
}

// A DMA-engine transfer: `mover(argument, moved, on_run)` checks and moves the bytes
// and reports the device runs it touched. The runs are charged to the channels (whole
// sticks) and, from each channel's memory stop, to the ring links to this core. The
// engine keeps the last sticks it fetched: a run within them is not charged again, and
// one that starts in them pays only the sticks after (a strided innermost dimension
// costs the sticks it spans, not a stick per element).
template <class Mover>
Executor::Outcome Executor::move(std::uint32_t s, std::uint16_t arg, bool load, std::uint8_t token, Mover&& mover) {
  const auto& args = request_.args;
  if (arg >= args.size()) {
    return fault(s, fmt::format("argument {} is used but the launch passed {} argument(s)", arg, args.size()));
  }
  wait_for_scratchpad(s);
  const Topology& topo = device_.topology;
  DmaCost& cost = dma_cost_;  // (reused: its vectors keep their storage between DMAs)
  cost.load = load;
  cost.charged = cost.useful = 0;
  cost.channel_bytes.assign(topo.channels(), 0);
  struct Runs {
    const Topology& topo;
    DmaCost& cost;
    std::uint64_t base, stick;
    std::uint64_t held_from = 0, held_to = 0;  // the sticks the previous run fetched
  } runs{topo, cost, device_.memory.base(), device_.config.dma.stick_bytes};
  // (One pointer captured, so the std::function stores it without allocating.)
  const std::function<void(std::uint64_t, std::uint64_t)> on_run = [r = &runs](std::uint64_t a, std::uint64_t n) {
    const std::uint64_t off = a - r->base;
    const std::uint64_t s0 = off / r->stick * r->stick, s1 = (off + n + r->stick - 1) / r->stick * r->stick;
    if (s0 >= r->held_from && s1 <= r->held_to) return;  // all in sticks already fetched
    const std::uint64_t from = s0 >= r->held_from && s0 < r->held_to ? r->held_to : s0;
    r->topo.charge(from, s1 - from, r->cost.channel_bytes, r->cost.charged);
    r->held_from = s0;
    r->held_to = s1;
  };
  functional::DmaResult moved;
  if (auto f = mover(args[arg], moved, on_run)) return fault(s, f->reason, f->address);
  cost.useful = moved.useful_bytes;
  if (load) touch(s, moved.sp_end);

  cost.stop_bytes.assign(topo.memory_stops(), 0);
  for (std::uint32_t c = 0; c < cost.channel_bytes.size(); ++c) {
    cost.stop_bytes[topo.memory_stop_of_channel(c)] += cost.channel_bytes[c];
  }
  const std::uint32_t me = topo.core_stop(request_.cores[s]);
  for (std::uint32_t m = 0; m < cost.stop_bytes.size(); ++m) {
    const std::uint32_t mem = topo.memory_stop(m);
    record_.ring_bytes += cost.stop_bytes[m] * (load ? topo.path(mem, me) : topo.path(me, mem)).hops;
  }
  (load ? stats(s).dma_load_bytes : stats(s).dma_store_bytes) += cost.useful;
  (load ? record_.dram_read_bytes : record_.dram_write_bytes) += cost.charged;
  auto& done = streams_[s].tokens[token];
  done = std::max(done, timing_.dma(s, cost));
  return Outcome::next;
}

void Executor::send(std::uint32_t s, std::uint32_t dst, std::uint16_t tag, std::vector<std::uint8_t> data,
                    std::uint8_t token) {
  const Topology& topo = device_.topology;
  const auto hops = topo.path(topo.core_stop(request_.cores[s]), topo.core_stop(request_.cores[dst])).hops;
  stats(s).ring_sent_bytes += data.size();
  record_.ring_bytes += data.size() * hops;
  const Picoseconds arrival = timing_.ring(s, dst, data.size());
  auto& done = streams_[s].tokens[token];
  done = std::max(done, arrival);
  mailbox_[std::make_tuple(dst, s, tag)].push_back({arrival, std::move(data)});
  timing_.wake();
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::RingSend& r) {
  wait_for_scratchpad(s);
  const std::uint8_t* p = sp(s) + r.sp_addr;
  std::vector<std::uint8_t> data;
  if (!spare_buffers_.empty()) {
    data = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  }
  data.assign(p, p + r.bytes);
  send(s, r.dst_core, r.tag, std::move(data), r.token);
  return Outcome::next;
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::RingRecv& r) {
  auto& queue = mailbox_[std::make_tuple(s, std::uint32_t{r.src_core}, r.tag)];
  if (queue.empty()) {
    streams_[s].waiting = {Stream::Waiting::Kind::message, r.tag, r.src_core, 0};
    return Outcome::blocked;
  }
  Message message = std::move(queue.front());
  queue.pop_front();
  if (message.data.size() != r.bytes) {
    return fault(s, fmt::format("received {} bytes from stream {} (tag {}) into a {}-byte buffer",
                                message.data.size(), r.src_core, r.tag, r.bytes));
  }
  wait_for_scratchpad(s);
  timing_.wait_until(message.arrival);
  std::memcpy(sp(s) + r.sp_addr, message.data.data(), r.bytes);
  touch(s, r.sp_addr + std::uint64_t{r.bytes});
  if (r.forward_to != isa::RingRecv::kNoForward) {
    send(s, r.forward_to, r.tag, std::move(message.data), r.token);
  } else if (spare_buffers_.size() < kSpareBuffers) {
    spare_buffers_.push_back(std::move(message.data));
  }
  return Outcome::next;
}

Executor::Outcome Executor::run(std::uint32_t s, const isa::Barrier& b) {
  Stream& st = streams_[s];
  auto& [arrived, generation] = barriers_[b.id];
  if (!st.at_barrier) {
    timing_.wait_until(st.units_done);  // (a barrier is a fence: the stream's array and vector work ends first)
    st.at_barrier = true;
    st.barrier_generation = generation;
    if (++arrived >= b.count) {
      arrived = 0;
      ++generation;
      timing_.wake();
    }
  }
  if (generation == st.barrier_generation) {
    st.waiting = {Stream::Waiting::Kind::barrier, b.id, static_cast<std::uint32_t>(arrived), b.count};
    return Outcome::blocked;
  }
  st.at_barrier = false;
  return Outcome::next;
}

LaunchRecord run_untimed(DeviceView device, const LaunchRequest& request, isa::Limits limits) {
  NullTiming timing;
  Executor exec(std::move(device), request, limits, timing);
  for (;;) {
    bool progress = false, all_done = true;
    // Progress is a completed instruction: a message sent, a barrier released, a
    // stream ended. (A barrier arrival that releases nobody wakes nobody either.)
    const std::uint64_t before = exec.record().instructions;
    for (std::uint32_t s = 0; s < exec.num_streams() && !exec.faulted(); ++s) {
      if (exec.step(s) == Executor::Step::blocked) all_done = false;
    }
    progress = exec.record().instructions != before;
    if (exec.faulted() || all_done) break;
    if (!progress) {
      exec.abort_deadlocked();
      break;
    }
  }
  return std::move(exec.record());
}

}  // namespace spyre::sim
