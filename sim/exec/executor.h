// The one ISA executor: decode, checks, semantics, faults and counters of every
// instruction, written once. What an instruction costs in time is a TimingPolicy the
// executor calls (the timed chip's servers and SystemC waits, or nothing); what it
// does to data is the Data policy (real bytes, or bookkeeping only). The timed device
// and the functional device are this executor with different policies: they produce
// the same results, faults and counters by construction.
//
// Scheduling is the caller's: step() runs a stream until it blocks (a ring receive
// with no message yet, a barrier not yet full), ends or faults. The functional device
// round-robins its streams (run_untimed); the timed chip runs each in a SystemC thread
// that sleeps until wake() says something changed.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "config/chip_config.h"
#include "exec/launch.h"
#include "exec/topology.h"
#include "memory/device_memory.h"
#include "spyre/isa/program.h"

namespace spyre::sim {

// What one DMA instruction moved, for the timing policy to reserve: its engine, the
// channels (per-channel shares), the ring links from each memory stop (per-stop
// bytes) and a scratchpad port (useful bytes).
struct DmaCost {
  bool load = true;
  std::vector<std::uint64_t> channel_bytes;  // charged per channel
  std::vector<std::uint64_t> stop_bytes;     // charged per memory stop
  std::uint64_t charged = 0;                 // sum of channel_bytes (whole sticks)
  std::uint64_t useful = 0;                  // elements x element size
};

// The time side of the executor. Calls come from the stream's own context; the
// times returned are when asynchronous work completes (what a WAIT on its token or
// the END of the stream waits for).
class TimingPolicy {
 public:
  virtual ~TimingPolicy() = default;
  // The stream's compute array / vector unit runs the instruction for `cycles`, starting
  // no earlier than `not_before` (when the scratchpad bytes it uses are free) nor before
  // the unit's previous instruction ends. The stream goes on: it waits only while the
  // unit's queue is full. Returns when the instruction completes.
  virtual Picoseconds compute(std::uint32_t stream, std::uint64_t cycles, const isa::Instruction& inst,
                              Picoseconds not_before) = 0;
  virtual Picoseconds vector(std::uint32_t stream, std::uint64_t cycles, const isa::Instruction& inst,
                             Picoseconds not_before) = 0;
  // The stream's present time.
  virtual Picoseconds now() const = 0;
  // Starts a DMA now; returns its completion time.
  virtual Picoseconds dma(std::uint32_t stream, const DmaCost& cost) = 0;
  // Starts a ring message of `bytes` now; returns its arrival time.
  virtual Picoseconds ring(std::uint32_t stream, std::uint32_t dst_stream, std::uint64_t bytes) = 0;
  // Blocks the stream until time `t`.
  virtual void wait_until(Picoseconds t) = 0;
  // Something another stream may wait for changed: a message was posted, a barrier
  // released, or the launch faulted.
  virtual void wake() {}
  // A core's scratchpad high-water mark rose (for traces).
  virtual void high_water(std::uint32_t /*core*/, std::uint64_t /*bytes*/) {}
};

// A timing policy that costs nothing: the functional device.
class NullTiming final : public TimingPolicy {
 public:
  Picoseconds compute(std::uint32_t, std::uint64_t, const isa::Instruction&, Picoseconds) override { return 0; }
  Picoseconds vector(std::uint32_t, std::uint64_t, const isa::Instruction&, Picoseconds) override { return 0; }
  Picoseconds now() const override { return 0; }
  Picoseconds dma(std::uint32_t, const DmaCost&) override { return 0; }
  Picoseconds ring(std::uint32_t, std::uint32_t, std::uint64_t) override { return 0; }
  void wait_until(Picoseconds) override {}
};

// What a device lends the executor.
struct DeviceView {
  const config::ChipConfig& config;
  const Topology& topology;
  DeviceMemory& memory;
  std::vector<std::uint8_t*> scratchpads;  // by core
  std::vector<CoreStats>& core_stats;      // by core
  std::uint32_t device = 0;
  Data data = Data::real;
  bool half_through_dl16 = false;  // the chip's numerics (config numerics.half_precision)
};

class Executor {
 public:
  enum class Step { blocked, ended, faulted };

  // `request` must be well formed (a program, enough existing cores): Chip::launch
  // checks that before building an executor.
  Executor(DeviceView device, const LaunchRequest& request, isa::Limits limits, TimingPolicy& timing);

  // Runs `stream` until it blocks, ends or the launch faults (any stream's fault, or
  // abort()). A blocked stream is stepped again after wake().
  Step step(std::uint32_t stream);

  std::uint32_t num_streams() const { return static_cast<std::uint32_t>(streams_.size()); }
  bool faulted() const { return record_.fault.has_value(); }
  LaunchRecord& record() { return record_; }
  const LaunchRecord& record() const { return record_; }
  // What a blocked stream waits for (empty if it does not).
  std::string waiting_for(std::uint32_t stream) const;

  // Faults the launch from outside (watchdog): `reason`, at the first stream's pc.
  void abort(const std::string& reason);
  // Faults the launch as deadlocked: the first blocked stream and what it waits for.
  void abort_deadlocked();

 private:
  enum class Outcome { next, blocked, ended, faulted };
  struct Stream {
    std::uint32_t pc = 0;
    bool done = false;
    bool at_barrier = false;
    std::uint64_t barrier_generation = 0;
    // What a blocked stream waits for, formatted only for a deadlock's fault (a stream
    // blocks on every ring message it waits for: no string is made then).
    struct Waiting {
      enum class Kind : std::uint8_t { none, message, barrier } kind = Kind::none;
      std::uint32_t a = 0, b = 0, c = 0;  // message: tag, source stream; barrier: id, arrived, count
    } waiting;
    std::array<Picoseconds, isa::kNumTokens> tokens{};
    // The scoreboard: scratchpad bytes the array and vector instructions issued ahead
    // read or write, until when; and when the last of them ends.
    struct Use {
      isa::SpRange range;
      Picoseconds until = 0;
      bool write = false;
    };
    std::vector<Use> uses;
    Picoseconds units_done = 0;
  };
  struct Message {
    Picoseconds arrival = 0;
    std::vector<std::uint8_t> data;
  };

  Outcome fault(std::uint32_t s, const std::string& reason, std::optional<std::uint64_t> address = std::nullopt);
  void touch(std::uint32_t s, std::uint64_t end);
  bool real(isa::DType t) const { return device_.data == Data::real || !isa::is_float(t); }
  std::uint8_t* sp(std::uint32_t s) { return device_.scratchpads[request_.cores[s]]; }
  CoreStats& stats(std::uint32_t s) { return device_.core_stats[request_.cores[s]]; }
  Outcome vector(std::uint32_t s, const isa::Instruction& inst, isa::VectorCost cost_class, std::uint64_t elements);
  // When the scratchpad bytes `access` reads and writes stop being used by instructions
  // issued before it: its reads after earlier writes, its write after earlier reads and
  // writes. `hold` books them until `until`, the instruction's end.
  Picoseconds hazard(std::uint32_t s, const isa::SpAccess& access);
  void hold(std::uint32_t s, const isa::SpAccess& access, Picoseconds until);
  // A DMA or ring transfer starts once the bytes it moves are no longer in use.
  void wait_for_scratchpad(std::uint32_t s);
  template <class Mover>
  Outcome move(std::uint32_t s, std::uint16_t arg, bool load, std::uint8_t token, Mover&& mover);
  void send(std::uint32_t s, std::uint32_t dst, std::uint16_t tag, std::vector<std::uint8_t> data,
            std::uint8_t token);

  Outcome run(std::uint32_t s, const isa::End&);
  Outcome run(std::uint32_t, const isa::Nop&) { return Outcome::next; }
  Outcome run(std::uint32_t s, const isa::DmaLoad& d);
  Outcome run(std::uint32_t s, const isa::DmaStore& d);
  Outcome run(std::uint32_t s, const isa::DmaGather& g);
  Outcome run(std::uint32_t s, const isa::Wait& w);
  Outcome run(std::uint32_t s, const isa::Matmul& mm);
  Outcome run(std::uint32_t s, const isa::VUnary& u);
  Outcome run(std::uint32_t s, const isa::VBinary& b);
  Outcome run(std::uint32_t s, const isa::VCompare& c);
  Outcome run(std::uint32_t s, const isa::VSelect& v);
  Outcome run(std::uint32_t s, const isa::VReduce& r);
  Outcome run(std::uint32_t s, const isa::VConvert& c);
  Outcome run(std::uint32_t s, const isa::VFill& f);
  Outcome run(std::uint32_t s, const isa::VTranspose& t);
  Outcome run(std::uint32_t s, const isa::VRandom& r);
  Outcome run(std::uint32_t s, const isa::RingSend& r);
  Outcome run(std::uint32_t s, const isa::RingRecv& r);
  Outcome run(std::uint32_t s, const isa::Barrier& b);

  DeviceView device_;
  const LaunchRequest& request_;
  const isa::Program& program_;
  isa::Limits limits_;
  TimingPolicy& timing_;
  LaunchRecord record_;
  DmaCost dma_cost_;  // move()'s, reused (a stream never yields inside it)
  std::vector<Stream> streams_;
  const isa::Instruction* current_ = nullptr;  // for fault records
  // (destination stream, source stream, tag) -> messages in order.
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint16_t>, std::deque<Message>> mailbox_;
  // Message buffers whose last receiver has copied them out, for the next sends: a
  // matmul grid sends its panels core to core every step, and a fresh buffer each
  // time is an allocation (and, for large panels, page faults) per message.
  std::vector<std::vector<std::uint8_t>> spare_buffers_;
  std::map<std::uint16_t, std::pair<std::uint32_t, std::uint64_t>> barriers_;  // id -> (arrived, generation)
};

// The functional device's scheduler: runs every stream of the launch to completion
// with no timing (streams take turns; a turn lasts until the stream blocks). When no
// stream can move, the launch faults as deadlocked. The record has no times.
LaunchRecord run_untimed(DeviceView device, const LaunchRequest& request, isa::Limits limits);

}  // namespace spyre::sim
