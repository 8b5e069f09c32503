#define SC_INCLUDE_DYNAMIC_PROCESSES
#include "chip/chip.h"
#include "kernel/sim_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <systemc>

#include "chip/trace_recorder.h"
#include "functional/dma.h"
#include "functional/numeric.h"
#include "memory/host_mapping.h"

namespace spyre::sim {

using config::MacType;
using timing::Server;

std::string Fault::to_string() const {
  std::string s = fmt::format("device fault on spyre:{} core {} (stream {}) pc {} in kernel '{}'", device, core,
                              stream, pc, kernel);
  if (!instruction.empty()) s += fmt::format(" [{}]", instruction);
  s += ": " + reason;
  return s;
}

namespace {

Picoseconds now_ps() { return sc_core::sc_time_stamp().value(); }

void wait_ps(Picoseconds d) {
  if (d > 0) sc_core::wait(sc_core::sc_time::from_value(d));
}

void wait_until(Picoseconds t) {
  const Picoseconds now = now_ps();
  if (t > now) wait_ps(t - now);
}

// A scratchpad's bytes: zero-filled, in huge pages, committed when the chip is built
// (SRAM exists from power-on; faulting it in during a launch would be host noise in
// the simulation's wall time).
class ZeroedBuffer {
 public:
  explicit ZeroedBuffer(std::size_t bytes)
      : bytes_(bytes), data_(static_cast<std::uint8_t*>(map_host_memory(bytes, true, true, "scratchpad"))) {
    std::memset(data_, 0, bytes_);
  }
  ~ZeroedBuffer() { unmap_host_memory(data_, bytes_); }
  ZeroedBuffer(const ZeroedBuffer&) = delete;
  ZeroedBuffer& operator=(const ZeroedBuffer&) = delete;
  std::uint8_t* data() { return data_; }

 private:
  std::size_t bytes_;
  std::uint8_t* data_;
};

MacType mac_type(isa::DType t) {
  switch (t) {
    case isa::DType::fp32: return MacType::fp32;
    case isa::DType::fp16: return MacType::fp16;
    case isa::DType::bf16: return MacType::bf16;
    default: return MacType::int8;
  }
}

const char* unary_cost_name(isa::UnaryOp op) {
  using isa::UnaryOp;
  switch (op) {
    case UnaryOp::copy: return "copy";
    case UnaryOp::neg: return "neg";
    case UnaryOp::abs: return "abs";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::rsqrt: return "rsqrt";
    case UnaryOp::reciprocal: return "reciprocal";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::erf: return "erf";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::relu: return "relu";
    case UnaryOp::gelu:
    case UnaryOp::gelu_tanh: return "gelu";
    case UnaryOp::silu: return "silu";
    case UnaryOp::sin: return "sin";
    case UnaryOp::cos: return "cos";
  }
  return "copy";
}

std::string bytes_text(std::uint64_t b) {
  if (b >= (1u << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= (1u << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1 << 10));
  return fmt::format("{} B", b);
}

struct Message {
  Picoseconds arrival;
  std::vector<std::uint8_t> data;
};

struct LaunchState : std::enable_shared_from_this<LaunchState> {
  LaunchRequest request;
  LaunchCallback done;
  LaunchRecord record;
  isa::Limits limits;
  std::uint32_t remaining = 0;
  bool aborted = false;
  sc_core::sc_event abort_event;
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint16_t>, std::deque<Message>> mailbox;
  sc_core::sc_event mail_event;
  struct BarrierState {
    std::uint32_t arrived = 0;
    std::uint64_t generation = 0;
  };
  std::map<std::uint16_t, BarrierState> barriers;
  sc_core::sc_event barrier_event;
  std::vector<std::uint32_t> pcs;
  std::vector<std::string> waiting_for;  // per stream, while blocked
  std::uint32_t blocked = 0;             // streams waiting for a message or a barrier
  bool deadlock_check_pending = false;
};

}  // namespace

struct Chip::Impl {
  struct Core {
    std::vector<Server> dma_engines;
    std::vector<Server> sp_ports;
    std::unique_ptr<ZeroedBuffer> scratchpad;
    bool busy = false;
    sc_core::sc_event freed;
  };

  Chip& chip;
  std::uint32_t stops = 0;
  std::vector<std::uint32_t> core_stop;    // ring position of each core
  std::vector<std::uint32_t> memory_stop;  // ring position of each memory stop
  std::vector<Server> channels;
  std::vector<Server> ring_cw, ring_ccw;   // link i joins stop i and stop i+1
  Server pcie_to_device, pcie_to_host;
  std::vector<Core> cores;
  std::list<std::shared_ptr<LaunchState>> launches;
  Picoseconds dram_latency_ps, hop_ps, sp_latency_ps, dma_setup_ps, pcie_latency_ps;
  double engine_bytes_per_s;

  explicit Impl(Chip& c) : chip(c), cores(c.config_.cores.count) {
    const auto& cfg = c.config_;
    const auto& d = c.figures_;
    // Ring: the cores in memory_stops groups, each group followed by its memory stop.
    const std::uint32_t n_cores = static_cast<std::uint32_t>(cfg.cores.count);
    const std::uint32_t n_mem = static_cast<std::uint32_t>(cfg.ring.memory_stops);
    stops = n_cores + n_mem;
    std::uint32_t pos = 0, core = 0;
    for (std::uint32_t g = 0; g < n_mem; ++g) {
      const std::uint32_t group = n_cores / n_mem + (g < n_cores % n_mem ? 1 : 0);
      for (std::uint32_t i = 0; i < group; ++i) core_stop.push_back(pos++), ++core;
      memory_stop.push_back(pos++);
    }
    channels.assign(cfg.memory.channels, Server(d.dram_channel_bytes_per_s * cfg.memory.efficiency));
    ring_cw.assign(stops, Server(d.ring_link_bytes_per_s));
    ring_ccw.assign(stops, Server(d.ring_link_bytes_per_s));
    pcie_to_device = Server(d.pcie_effective_bytes_per_s);
    pcie_to_host = Server(d.pcie_effective_bytes_per_s);
    engine_bytes_per_s = static_cast<double>(cfg.dma.bytes_per_cycle) * d.clock_hz;
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

  TraceRecorder* trace() { return chip.trace_.get(); }
  CoreStats& core_stats(std::uint32_t core) { return chip.core_stats_[core]; }

  std::uint8_t* scratchpad(std::uint32_t core) { return cores[core].scratchpad->data(); }

  // Ring links from stop a to stop b along the shorter direction (clockwise on ties).
  struct Path {
    std::vector<Server*> links;
    std::uint32_t hops = 0;
  };
  Path path(std::uint32_t a, std::uint32_t b) {
    Path p;
    const std::uint32_t cw = (b + stops - a) % stops;
    const std::uint32_t ccw = stops - cw;
    if (cw == 0) return p;
    if (cw <= ccw) {
      for (std::uint32_t i = 0; i < cw; ++i) p.links.push_back(&ring_cw[(a + i) % stops]);
      p.hops = cw;
    } else {
      for (std::uint32_t i = 0; i < ccw; ++i) p.links.push_back(&ring_ccw[(a + stops - 1 - i) % stops]);
      p.hops = ccw;
    }
    return p;
  }

  std::uint32_t channel_stop(std::uint32_t channel) const {
    const auto per_stop = chip.config_.memory.channels / chip.config_.ring.memory_stops;
    return memory_stop[channel / per_stop];
  }

  // Adds the DRAM bytes a device range costs (whole sticks) to per-channel shares.
  void charge(std::uint64_t address, std::uint64_t bytes, std::vector<std::uint64_t>& shares,
              std::uint64_t& charged) const {
    const auto& cfg = chip.config_;
    const std::uint64_t stick = cfg.dma.stick_bytes, granule = cfg.memory.interleave_bytes;
    const std::uint64_t channel_count = cfg.memory.channels;
    const std::uint64_t offset = address - chip.memory_.base();
    const std::uint64_t s0 = offset / stick * stick;
    const std::uint64_t s1 = timing::ceil_div(offset + bytes, stick) * stick;
    charged += s1 - s0;
    const std::uint64_t g0 = s0 / granule, g1 = (s1 - 1) / granule;
    const std::uint64_t count = g1 - g0 + 1;
    if (count <= 2 * channel_count) {
      for (std::uint64_t g = g0; g <= g1; ++g) {
        shares[g % channel_count] += std::min(s1, (g + 1) * granule) - std::max(s0, g * granule);
      }
      return;
    }
    // Long runs: the partial first and last granules, whole rounds, then the remainder.
    shares[g0 % channel_count] += (g0 + 1) * granule - s0;
    shares[g1 % channel_count] += s1 - g1 * granule;
    const std::uint64_t middle = count - 2;
    const std::uint64_t rounds = middle / channel_count;
    if (rounds > 0) {
      for (auto& s : shares) s += rounds * granule;
    }
    for (std::uint64_t j = 0; j < middle % channel_count; ++j) shares[(g0 + 1 + j) % channel_count] += granule;
  }

  // Reserves the channels for per-channel shares from `ready`; returns the last end.
  Picoseconds reserve_channels(Picoseconds ready, const std::vector<std::uint64_t>& shares) {
    Picoseconds end = ready;
    for (std::size_t c = 0; c < shares.size(); ++c) {
      if (shares[c] == 0) continue;
      const auto iv = channels[c].reserve_bytes(ready, shares[c]);
      end = std::max(end, iv.end);
      if (chip.trace_) {
        chip.trace_->complete(chip.trace_->track(fmt::format("dram channel {}", c)), "dram", iv.start, iv.end,
                              bytes_text(shares[c]));
        chip.trace_->dram_bytes(iv.start, iv.end, shares[c]);
      }
    }
    return end;
  }

  void run_stream(std::shared_ptr<LaunchState> launch, std::uint32_t stream);
  void abort_deadlocked(LaunchState& launch);

  // Every unfinished stream of the launch waits for a message or a barrier: nothing
  // can wake them, a deadlock. Checked 1 ps later, after the delta cycles in which a
  // just-notified stream would have woken up.
  void check_deadlock_soon(LaunchState& launch) {
    if (launch.remaining == 0 || launch.blocked < launch.remaining || launch.deadlock_check_pending) return;
    launch.deadlock_check_pending = true;
    spawn_recycling_name([this, l = launch.shared_from_this()] {
      sc_core::wait(sc_core::sc_time::from_value(1));
      l->deadlock_check_pending = false;
      if (l->remaining > 0 && l->blocked >= l->remaining && !l->aborted) abort_deadlocked(*l);
    }, "deadlock_check");
  }
  void finish_stream(const std::shared_ptr<LaunchState>& launch);
};

namespace {

// Executes one stream of a launch on one core.
class StreamRunner {
 public:
  StreamRunner(Chip::Impl& impl, Chip& chip, LaunchState& launch, std::uint32_t stream)
      : impl_(impl), chip_(chip), launch_(launch), stream_(stream), core_(launch.request.cores[stream]),
        sp_(impl.scratchpad(core_)), stats_(impl.core_stats(core_)) {}

  void run() {
    const isa::Program& program = *launch_.request.program;
    const std::uint32_t length = program.stream_length(stream_);
    for (pc_ = 0; !launch_.aborted; ++pc_) {
      launch_.pcs[stream_] = pc_;
      if (pc_ >= length) {
        fault("ran past the end of its stream without END");
        return;
      }
      const isa::Decoded decoded = program.decode_at(stream_, pc_);
      if (!decoded.inst) {
        fault(decoded.error);
        return;
      }
      inst_ = &*decoded.inst;
      if (auto reason = isa::check(*inst_, launch_.limits)) {
        fault(*reason);
        return;
      }
      ++stats_.instructions;
      ++launch_.record.instructions;
      if (std::holds_alternative<isa::End>(*inst_)) break;
      if (!std::visit(*this, *inst_)) return;
    }
    // An END waits for this stream's outstanding DMA and ring transfers.
    Picoseconds last = 0;
    for (const Picoseconds t : tokens_) last = std::max(last, t);
    wait_until(last);
  }

  bool operator()(const isa::End&) { return true; }
  bool operator()(const isa::Nop&) { return true; }
  bool operator()(const isa::DmaLoad& d) { return dma(d, true); }
  bool operator()(const isa::DmaStore& d) { return dma(d, false); }
  bool operator()(const isa::DmaGather& g) {
    return move(g.arg, true, g.token, [&](std::uint64_t argument, functional::DmaResult& moved, const auto& on_run) {
      return functional::gather(g, argument, chip_.memory(), sp_, moved, on_run);
    });
  }

  bool operator()(const isa::Wait& w) {
    Picoseconds until = 0;
    for (std::uint32_t t = 0; t < isa::kNumTokens; ++t) {
      if (w.token_mask & (1u << t)) until = std::max(until, tokens_[t]);
    }
    wait_until(until);
    return true;
  }

  bool operator()(const isa::Matmul& mm) {
    const MacType type = mac_type(mm.in);
    if (config::simd_depth(chip_.config().cores.compute_array.simd_depth, type) == 0) {
      return fault(fmt::format("the compute array of this chip does not support {} operands",
                               isa::to_string(mm.in)));
    }
    numeric::matmul(mm, sp_);
    const std::uint64_t cycles = timing::core_matmul_cycles(chip_.config(), type, mm.m, mm.n, mm.k);
    const std::uint64_t macs = std::uint64_t{mm.m} * mm.n * mm.k;
    launch_.record.macs[static_cast<int>(type)] += macs;
    touch(mm.c + std::uint64_t{isa::dtype_size(mm.out)} * ((std::uint64_t{mm.m} - 1) * mm.ldc + mm.n));
    return busy(Unit::compute, cycles, fmt::format("matmul {}x{}x{}", mm.m, mm.n, mm.k));
  }

  bool operator()(const isa::VUnary& u) {
    numeric::unary(u.op, u.dtype, sp_ + u.src, sp_ + u.dst, u.count);
    touch(u.dst + std::uint64_t{u.count} * isa::dtype_size(u.dtype));
    return vector(unary_cost_name(u.op), u.count, std::string(isa::to_string(u.op)));
  }
  bool operator()(const isa::VBinary& b) {
    if (auto f = numeric::binary(b, sp_)) return fault(*f);
    const std::uint64_t n = std::uint64_t{b.rows} * b.cols;
    touch(b.dst + n * isa::dtype_size(b.dtype));
    return vector(std::string(isa::to_string(b.op)), n, std::string(isa::to_string(b.op)));
  }
  bool operator()(const isa::VCompare& c) {
    numeric::compare(c, sp_);
    const std::uint64_t n = std::uint64_t{c.rows} * c.cols;
    touch(c.dst + n);
    return vector("compare", n, "compare");
  }
  bool operator()(const isa::VSelect& s) {
    numeric::select(s, sp_);
    touch(s.dst + std::uint64_t{s.count} * isa::dtype_size(s.dtype));
    return vector("select", s.count, "select");
  }
  bool operator()(const isa::VReduce& r) {
    numeric::reduce(r, sp_);
    touch(r.dst + std::uint64_t{r.axis == 1 ? r.rows : r.cols} * isa::dtype_size(r.out));
    return vector("reduce", std::uint64_t{r.rows} * r.cols, std::string("reduce ") + std::string(isa::to_string(r.op)));
  }
  bool operator()(const isa::VConvert& c) {
    numeric::convert(c.from, c.to, sp_ + c.src, sp_ + c.dst, c.count);
    touch(c.dst + std::uint64_t{c.count} * isa::dtype_size(c.to));
    return vector("convert", c.count, "convert");
  }
  bool operator()(const isa::VFill& f) {
    numeric::fill(f, sp_);
    touch(f.dst + std::uint64_t{f.count} * isa::dtype_size(f.dtype));
    return vector("copy", f.count, "fill");
  }

  bool operator()(const isa::RingSend& s) {
    std::vector<std::uint8_t> data(sp_ + s.sp_addr, sp_ + s.sp_addr + s.bytes);
    send(s.dst_core, s.tag, std::move(data), s.token);
    return true;
  }

  bool operator()(const isa::RingRecv& r) {
    const auto key = std::make_tuple(stream_, std::uint32_t{r.src_core}, r.tag);
    auto& queue = launch_.mailbox[key];
    while (queue.empty()) {
      if (launch_.aborted) return false;
      launch_.waiting_for[stream_] =
          fmt::format("a ring message with tag {} from stream {} that is never sent", r.tag, r.src_core);
      block();
      sc_core::wait(launch_.mail_event | launch_.abort_event);
      unblock();
    }
    Message message = std::move(queue.front());
    queue.pop_front();
    if (message.data.size() != r.bytes) {
      return fault(fmt::format("received {} bytes from stream {} (tag {}) into a {}-byte buffer",
                               message.data.size(), r.src_core, r.tag, r.bytes));
    }
    wait_until(message.arrival);
    std::memcpy(sp_ + r.sp_addr, message.data.data(), r.bytes);
    touch(r.sp_addr + std::uint64_t{r.bytes});
    if (r.forward_to != isa::RingRecv::kNoForward) send(r.forward_to, r.tag, std::move(message.data), r.token);
    return true;
  }

  bool operator()(const isa::Barrier& b) {
    auto& state = launch_.barriers[b.id];
    if (++state.arrived >= b.count) {
      state.arrived = 0;
      ++state.generation;
      launch_.barrier_event.notify(sc_core::SC_ZERO_TIME);
      return true;
    }
    const std::uint64_t generation = state.generation;
    while (state.generation == generation) {
      if (launch_.aborted) return false;
      launch_.waiting_for[stream_] =
          fmt::format("barrier {} ({} of {} streams arrived)", b.id, state.arrived, b.count);
      block();
      sc_core::wait(launch_.barrier_event | launch_.abort_event);
      unblock();
    }
    return true;
  }

 private:
  enum class Unit { compute, vector };

  // A stream waiting for a ring message or a barrier (see check_deadlock_soon).
  void block() {
    ++launch_.blocked;
    impl_.check_deadlock_soon(launch_);
  }
  void unblock() {
    --launch_.blocked;
    launch_.waiting_for[stream_].clear();
  }

  bool fault(const std::string& reason, std::optional<std::uint64_t> address = std::nullopt) {
    if (!launch_.record.fault) {
      Fault f;
      f.device = chip_.device_index();
      f.core = core_;
      f.stream = stream_;
      f.pc = pc_;
      f.kernel = launch_.record.name;
      f.instruction = inst_ ? isa::disassemble(*inst_) : std::string{};
      f.reason = reason;
      f.address = address;
      launch_.record.fault = std::move(f);
    }
    launch_.aborted = true;
    launch_.abort_event.notify(sc_core::SC_ZERO_TIME);
    return false;
  }

  void touch(std::uint64_t end) {
    if (end > stats_.scratchpad_high_water) {
      stats_.scratchpad_high_water = end;
      if (impl_.trace()) impl_.trace()->counter(fmt::format("core {} scratchpad bytes", core_), now_ps(), double(end));
    }
  }

  bool busy(Unit unit, std::uint64_t cycles, std::string label) {
    const Picoseconds start = now_ps();
    const Picoseconds duration = chip_.clock().ps(cycles);
    (unit == Unit::compute ? stats_.compute_busy_ps : stats_.vector_busy_ps) += duration;
    if (impl_.trace()) {
      impl_.trace()->complete(impl_.trace()->track(fmt::format("core {} {}", core_, unit == Unit::compute ? "compute" : "vector")),
                             std::move(label), start, start + duration, launch_.record.name);
    }
    wait_ps(duration);
    return true;
  }

  bool vector(const std::string& cost_name, std::uint64_t elements, std::string label) {
    const double cost = timing::vector_op_cycles(chip_.config().cores.vector.op_cycles, cost_name);
    launch_.record.vector_elements += elements;
    return busy(Unit::vector, timing::vector_cycles(chip_.config(), cost, elements), std::move(label));
  }

  bool dma(const isa::Dma& d, bool load) {
    return move(d.arg, load, d.token, [&](std::uint64_t argument, functional::DmaResult& moved, const auto& on_run) {
      return functional::transfer(d, load, argument, chip_.memory(), sp_, moved, on_run);
    });
  }

  // A DMA-engine transfer: `bytes(argument, moved, on_run)` moves the data (DmaLoad,
  // DmaStore, DmaGather) and reports the device runs it touched; they are charged
  // to the channels, and the engine, links and port are reserved here.
  template <class Mover>
  bool move(std::uint16_t arg, bool load, std::uint8_t token, Mover&& bytes) {
    const auto& args = launch_.request.args;
    if (arg >= args.size()) {
      return fault(fmt::format("argument {} is used but the launch passed {} argument(s)", arg, args.size()));
    }
    std::vector<std::uint64_t> shares(chip_.config().memory.channels, 0);
    std::uint64_t charged = 0;
    functional::DmaResult moved;
    const std::function<void(std::uint64_t, std::uint64_t)> on_run = [&](std::uint64_t a, std::uint64_t n) {
      impl_.charge(a, n, shares, charged);
    };
    if (auto f = bytes(args[arg], moved, on_run)) return fault(f->reason, f->address);
    const std::uint64_t useful = moved.useful_bytes;
    if (load) touch(moved.sp_end);

    // Timing: an engine (setup + bytes at its rate), the channels, the ring links
    // between each memory stop and this core, a scratchpad port; then the latencies.
    auto& core = impl_.cores[core_];
    auto engine = std::min_element(core.dma_engines.begin(), core.dma_engines.end(),
                                   [](const Server& a, const Server& b) { return a.free_at() < b.free_at(); });
    const Picoseconds now = now_ps();
    const auto eng = engine->reserve(now, impl_.dma_setup_ps + timing::transfer_ps(charged, impl_.engine_bytes_per_s),
                                     charged);
    const Picoseconds ready = eng.start + impl_.dma_setup_ps;
    Picoseconds end = std::max(eng.end, impl_.reserve_channels(ready, shares));
    std::vector<std::uint64_t> per_stop(chip_.config().ring.memory_stops, 0);
    const auto per_stop_channels = chip_.config().memory.channels / chip_.config().ring.memory_stops;
    for (std::size_t c = 0; c < shares.size(); ++c) per_stop[c / per_stop_channels] += shares[c];
    std::uint32_t hops = 0;
    for (std::size_t m = 0; m < per_stop.size(); ++m) {
      if (per_stop[m] == 0) continue;
      const std::uint32_t mem = impl_.memory_stop[m], me = impl_.core_stop[core_];
      const auto p = load ? impl_.path(mem, me) : impl_.path(me, mem);
      hops = std::max(hops, p.hops);
      for (Server* link : p.links) end = std::max(end, link->reserve_bytes(ready, per_stop[m]).end);
      launch_.record.ring_bytes += per_stop[m] * p.hops;
    }
    auto port = std::min_element(core.sp_ports.begin(), core.sp_ports.end(),
                                 [](const Server& a, const Server& b) { return a.free_at() < b.free_at(); });
    end = std::max(end, port->reserve_bytes(ready, useful).end);
    end += impl_.dram_latency_ps + hops * impl_.hop_ps + impl_.sp_latency_ps;
    tokens_[token] = std::max(tokens_[token], end);

    (load ? stats_.dma_load_bytes : stats_.dma_store_bytes) += useful;
    (load ? launch_.record.dram_read_bytes : launch_.record.dram_write_bytes) += charged;
    if (impl_.trace()) {
      const auto index = static_cast<std::size_t>(engine - core.dma_engines.begin());
      impl_.trace()->complete(impl_.trace()->track(fmt::format("core {} dma {}", core_, index)),
                             fmt::format("{} {}", load ? "load" : "store", bytes_text(useful)), eng.start, end,
                             launch_.record.name);
    }
    return true;
  }

  void send(std::uint32_t dst_stream, std::uint16_t tag, std::vector<std::uint8_t> data, std::uint8_t token) {
    const std::uint32_t dst_core = launch_.request.cores[dst_stream];
    const auto p = impl_.path(impl_.core_stop[core_], impl_.core_stop[dst_core]);
    const Picoseconds now = now_ps();
    Picoseconds arrival = now;
    for (Server* link : p.links) arrival = std::max(arrival, link->reserve_bytes(now, data.size()).end);
    arrival += p.hops * impl_.hop_ps;
    stats_.ring_sent_bytes += data.size();
    launch_.record.ring_bytes += data.size() * p.hops;
    tokens_[token] = std::max(tokens_[token], arrival);
    if (impl_.trace()) {
      impl_.trace()->complete(impl_.trace()->track(fmt::format("core {} ring", core_)),
                             fmt::format("send {} -> core {}", bytes_text(data.size()), dst_core), now, arrival);
    }
    launch_.mailbox[std::make_tuple(dst_stream, stream_, tag)].push_back({arrival, std::move(data)});
    launch_.mail_event.notify(sc_core::SC_ZERO_TIME);
  }

  Chip::Impl& impl_;
  Chip& chip_;
  LaunchState& launch_;
  std::uint32_t stream_;
  std::uint32_t core_;
  std::uint8_t* sp_;
  CoreStats& stats_;
  std::uint32_t pc_ = 0;
  const isa::Instruction* inst_ = nullptr;
  std::array<Picoseconds, isa::kNumTokens> tokens_{};
};

}  // namespace

void Chip::Impl::run_stream(std::shared_ptr<LaunchState> launch, std::uint32_t stream) {
  Core& core = cores[launch->request.cores[stream]];
  while (core.busy && !launch->aborted) {
    launch->waiting_for[stream] = "its core, busy with another launch";
    sc_core::wait(core.freed | launch->abort_event);
    launch->waiting_for[stream].clear();
  }
  if (!launch->aborted) {
    core.busy = true;
    StreamRunner(*this, chip, *launch, stream).run();
    core.busy = false;
    core.freed.notify(sc_core::SC_ZERO_TIME);
  }
  finish_stream(launch);
}

void Chip::Impl::finish_stream(const std::shared_ptr<LaunchState>& launch) {
  if (--launch->remaining != 0) {
    check_deadlock_soon(*launch);
    return;
  }
  LaunchRecord& r = launch->record;
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

Chip::Chip(const config::ChipConfig& config, std::uint32_t device_index)
    : config_(config),
      figures_(config::derive(config)),
      device_(device_index),
      clock_(config.clock_ghz),
      memory_(config.memory.capacity_bytes, config.memory.usable_bytes),
      core_stats_(config.cores.count),
      impl_(std::make_unique<Impl>(*this)) {}

Chip::~Chip() = default;

std::uint8_t* Chip::scratchpad(std::uint32_t core) { return impl_->scratchpad(core); }

void Chip::record_launch(const LaunchRecord& r) {
  auto& s = stats_;
  note_activity(r.start, r.end);
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
  auto launch = std::make_shared<LaunchState>();
  launch->record.id = request.id;
  launch->record.name = request.name.empty() ? request.program->name() : request.name;
  launch->record.cores.assign(request.cores.begin(), request.cores.begin() + streams);
  launch->record.start = now_ps();
  launch->record.flow = request.flow;
  launch->record.queue_tag = request.queue_tag;
  launch->limits = limits(static_cast<std::uint32_t>(request.cores.size()));
  launch->remaining = streams;
  launch->pcs.assign(streams, 0);
  launch->waiting_for.assign(streams, {});
  launch->request = std::move(request);
  launch->done = std::move(done);
  impl_->launches.push_back(launch);
  for (std::uint32_t s = 0; s < streams; ++s) {
    spawn_recycling_name([impl = impl_.get(), launch, s] { impl->run_stream(launch, s); }, "stream");
  }
}

std::size_t Chip::active_launches() const { return impl_->launches.size(); }

void Chip::Impl::abort_deadlocked(LaunchState& launch) {
  for (std::uint32_t s = 0; s < launch.waiting_for.size(); ++s) {
    if (launch.waiting_for[s].empty()) continue;
    Fault f;
    f.device = chip.device_;
    f.core = launch.request.cores[s];
    f.stream = s;
    f.pc = launch.pcs[s];
    f.kernel = launch.record.name;
    f.reason = "deadlock: the stream waits for " + launch.waiting_for[s];
    launch.record.fault = std::move(f);
    break;
  }
  if (!launch.record.fault) {
    Fault f;
    f.device = chip.device_;
    f.kernel = launch.record.name;
    f.reason = "deadlock: the launch cannot make progress";
    launch.record.fault = std::move(f);
  }
  launch.aborted = true;
  launch.abort_event.notify(sc_core::SC_ZERO_TIME);
}

std::size_t Chip::abort_stalled_launches() {
  std::size_t aborted = 0;
  for (const auto& launch : impl_->launches) {
    if (launch->aborted) continue;
    impl_->abort_deadlocked(*launch);
    ++aborted;
  }
  return aborted;
}

bool Chip::abort_launch(std::uint64_t id, const std::string& reason) {
  for (const auto& launch : impl_->launches) {
    if (launch->record.id != id || launch->aborted) continue;
    Fault f;
    f.device = device_;
    f.kernel = launch->record.name;
    f.reason = reason;
    if (!launch->record.cores.empty()) f.core = launch->record.cores.front();
    f.pc = launch->pcs.empty() ? 0 : launch->pcs.front();
    launch->record.fault = std::move(f);
    launch->aborted = true;
    launch->abort_event.notify(sc_core::SC_ZERO_TIME);
    return true;
  }
  return false;
}

Picoseconds Chip::host_transfer(Picoseconds ready, HostDirection direction, std::uint64_t device_address,
                                std::uint64_t bytes) {
  Server& link = direction == HostDirection::to_device ? impl_->pcie_to_device : impl_->pcie_to_host;
  const auto iv = link.reserve_bytes(ready, bytes);
  std::vector<std::uint64_t> shares(config_.memory.channels, 0);
  std::uint64_t charged = 0;
  if (bytes > 0) impl_->charge(device_address, bytes, shares, charged);
  const Picoseconds end = std::max(iv.end, impl_->reserve_channels(iv.start, shares));
  (direction == HostDirection::to_device ? stats_.host_to_device_bytes : stats_.device_to_host_bytes) += bytes;
  note_activity(ready, end + impl_->pcie_latency_ps + impl_->dram_latency_ps);
  (direction == HostDirection::to_device ? stats_.dram_write_bytes : stats_.dram_read_bytes) += charged;
  if (trace_) {
    trace_->complete(trace_->track(direction == HostDirection::to_device ? "pcie host->device" : "pcie device->host"),
                     bytes_text(bytes), iv.start, iv.end);
  }
  return end + impl_->pcie_latency_ps + impl_->dram_latency_ps;
}

Picoseconds Chip::dram_copy(Picoseconds ready, std::uint64_t dst, std::uint64_t src, std::uint64_t bytes) {
  std::vector<std::uint64_t> shares(config_.memory.channels, 0);
  std::uint64_t read = 0, written = 0;
  if (bytes > 0) {
    impl_->charge(src, bytes, shares, read);
    impl_->charge(dst, bytes, shares, written);
  }
  stats_.dram_read_bytes += read;
  stats_.dram_write_bytes += written;
  const Picoseconds end = impl_->reserve_channels(ready, shares) + impl_->dram_latency_ps;
  note_activity(ready, end);
  return end;
}

Picoseconds Chip::dram_fill(Picoseconds ready, std::uint64_t dst, std::uint64_t bytes) {
  std::vector<std::uint64_t> shares(config_.memory.channels, 0);
  std::uint64_t written = 0;
  if (bytes > 0) impl_->charge(dst, bytes, shares, written);
  stats_.dram_write_bytes += written;
  const Picoseconds end = impl_->reserve_channels(ready, shares) + impl_->dram_latency_ps;
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

nlohmann::json Chip::report(Picoseconds elapsed_ps) const {
  using nlohmann::json;
  const double elapsed = std::max<double>(1.0, static_cast<double>(elapsed_ps));
  const auto server_json = [&](const Server& s) {
    return json{{"busy_ps", s.busy_ps()}, {"bytes", s.bytes()}, {"requests", s.requests()},
                {"utilisation", static_cast<double>(s.busy_ps()) / elapsed}};
  };
  json macs = json::object();
  for (const MacType t : config::kMacTypes) macs[std::string(config::to_string(t))] = stats_.macs[static_cast<int>(t)];
  json cores = json::array();
  const auto cycles = [&](Picoseconds ps) { return static_cast<std::uint64_t>(std::llround(clock_.cycles(ps))); };
  for (std::size_t c = 0; c < core_stats_.size(); ++c) {
    const CoreStats& s = core_stats_[c];
    std::uint64_t port_bytes = 0;
    for (const auto& port : impl_->cores[c].sp_ports) port_bytes += port.bytes();
    cores.push_back({{"core", c},
                     {"compute_busy_ps", s.compute_busy_ps},
                     {"vector_busy_ps", s.vector_busy_ps},
                     {"compute_busy_cycles", cycles(s.compute_busy_ps)},
                     {"compute_idle_cycles", cycles(elapsed_ps - std::min(elapsed_ps, s.compute_busy_ps))},
                     {"vector_busy_cycles", cycles(s.vector_busy_ps)},
                     {"vector_idle_cycles", cycles(elapsed_ps - std::min(elapsed_ps, s.vector_busy_ps))},
                     {"scratchpad_port_bytes", port_bytes},
                     {"compute_utilisation", static_cast<double>(s.compute_busy_ps) / elapsed},
                     {"vector_utilisation", static_cast<double>(s.vector_busy_ps) / elapsed},
                     {"instructions", s.instructions},
                     {"dma_load_bytes", s.dma_load_bytes},
                     {"dma_store_bytes", s.dma_store_bytes},
                     {"ring_sent_bytes", s.ring_sent_bytes},
                     {"scratchpad_high_water_bytes", s.scratchpad_high_water}});
  }
  json channels = json::array();
  for (const auto& s : impl_->channels) channels.push_back(server_json(s));
  std::uint64_t ring_busy = 0, ring_bytes = 0;
  for (const auto* links : {&impl_->ring_cw, &impl_->ring_ccw}) {
    for (const auto& s : *links) ring_busy += s.busy_ps(), ring_bytes += s.bytes();
  }
  json kernels = json::array();
  for (const auto& [name, k] : stats_.kernel_totals) {
    json m = json::object();
    for (const MacType t : config::kMacTypes) m[std::string(config::to_string(t))] = k.macs[static_cast<int>(t)];
    kernels.push_back({{"name", name}, {"launches", k.launches}, {"faults", k.faults}, {"time_ps", k.time_ps},
                       {"macs", m}, {"instructions", k.instructions}, {"vector_elements", k.vector_elements},
                       {"dram_read_bytes", k.dram_read_bytes}, {"dram_write_bytes", k.dram_write_bytes},
                       {"ring_link_bytes", k.ring_bytes}});
  }
  json launches = json::array();
  for (const auto& r : stats_.launch_records) {
    json l = {{"id", r.id}, {"name", r.name}, {"start_ps", r.start}, {"end_ps", r.end},
              {"instructions", r.instructions}, {"vector_elements", r.vector_elements},
              {"dram_read_bytes", r.dram_read_bytes}, {"dram_write_bytes", r.dram_write_bytes},
              {"ring_link_bytes", r.ring_bytes}};
    json m = json::object();
    for (const MacType t : config::kMacTypes) m[std::string(config::to_string(t))] = r.macs[static_cast<int>(t)];
    l["macs"] = m;
    if (r.fault) l["fault"] = r.fault->to_string();
    launches.push_back(std::move(l));
  }
  const double dram_bytes = static_cast<double>(stats_.dram_read_bytes + stats_.dram_write_bytes);
  return {{"device", device_},
          {"elapsed_ps", elapsed_ps},
          {"macs", macs},
          {"vector_elements", stats_.vector_elements},
          {"instructions", stats_.instructions},
          {"launches", stats_.launches},
          {"faults", stats_.faults},
          {"dram",
           {{"read_bytes", stats_.dram_read_bytes},
            {"write_bytes", stats_.dram_write_bytes},
            {"bandwidth_bytes_per_s", dram_bytes / elapsed * 1e12},
            {"channels", channels}}},
          {"ring", {{"link_busy_ps", ring_busy}, {"link_bytes", ring_bytes}}},
          {"pcie",
           {{"host_to_device", server_json(impl_->pcie_to_device)},
            {"device_to_host", server_json(impl_->pcie_to_host)}}},
          {"cores", cores},
          {"activity_ps", {stats_.first_activity_ps, stats_.last_activity_ps}},
          {"launch_span_ps", {stats_.first_launch_ps, stats_.last_launch_ps}},
          {"kernel_totals", kernels},
          {"launch_records", launches},
          {"launch_records_dropped", stats_.launch_records_dropped}};
}

std::string Chip::report_text(Picoseconds elapsed_ps) const {
  const double seconds = static_cast<double>(elapsed_ps) * 1e-12;
  std::string out = fmt::format("spyre:{} ({}): {:.0f} cycles = {:.3f} us, {} launch(es), {} fault(s), {} instructions\n",
                                device_, config_.name, clock_.cycles(elapsed_ps), seconds * 1e6, stats_.launches,
                                stats_.faults, stats_.instructions);
  for (const MacType t : config::kMacTypes) {
    const auto macs = stats_.macs[static_cast<int>(t)];
    if (macs == 0) continue;
    const double peak = figures_.peak_macs_per_s[static_cast<int>(t)];
    out += fmt::format("  {} MACs {:>14}  {:.1f}% of the chip's {} peak over this time\n", config::to_string(t), macs,
                       seconds > 0 && peak > 0 ? 100.0 * static_cast<double>(macs) / (peak * seconds) : 0.0,
                       config::to_string(t));
  }
  const double dram = static_cast<double>(stats_.dram_read_bytes + stats_.dram_write_bytes);
  out += fmt::format("  DRAM {:.2f} MiB read, {:.2f} MiB written: {:.1f} GB/s ({:.1f}% of deliverable)\n",
                     static_cast<double>(stats_.dram_read_bytes) / (1 << 20),
                     static_cast<double>(stats_.dram_write_bytes) / (1 << 20), seconds > 0 ? dram / seconds / 1e9 : 0.0,
                     seconds > 0 ? 100.0 * dram / seconds / figures_.dram_deliverable_bytes_per_s : 0.0);
  out += fmt::format("  PCIe {:.2f} MiB to the device, {:.2f} MiB to the host\n",
                     static_cast<double>(stats_.host_to_device_bytes) / (1 << 20),
                     static_cast<double>(stats_.device_to_host_bytes) / (1 << 20));
  double compute = 0, vector = 0;
  for (const auto& c : core_stats_) compute += static_cast<double>(c.compute_busy_ps), vector += static_cast<double>(c.vector_busy_ps);
  const double core_time = std::max(1.0, static_cast<double>(elapsed_ps) * static_cast<double>(core_stats_.size()));
  out += fmt::format("  cores: compute arrays busy {:.1f}%, vector units busy {:.1f}% (mean over {} cores)\n",
                     100 * compute / core_time, 100 * vector / core_time, core_stats_.size());
  return out;
}

void Chip::trace_host_call(const std::string& name, Picoseconds start, Picoseconds end, std::uint64_t flow) {
  if (!trace_) return;
  const int host = trace_->track("host");
  trace_->complete(host, name, start, end);
  if (flow != 0) trace_->flow_start(host, start, flow);
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

Chip& Simulation::add_chip(const config::ChipConfig& config) {
  chips_.push_back(std::make_unique<Chip>(config, static_cast<std::uint32_t>(chips_.size())));
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

Picoseconds Simulation::now() { return now_ps(); }

}  // namespace spyre::sim
