// What a launch is and what it leaves behind: the request, the record, the fault and
// the per-core counters. Shared by the executor (exec/executor.h), which fills them
// the same way on every device, and the chip (chip/chip.h), which sums them.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spyre/isa/program.h"
#include "timing/timing_rules.h"

namespace spyre::sim {

using timing::Picoseconds;

// How a device spends time: `timed` runs launches as SystemC threads whose
// instructions occupy the chip's resources; `untimed` runs them to completion at once
// (the functional device). The executor and every counter are the same for both.
enum class Timing { timed, untimed };
// What a device does with data: `real` computes every byte; `none` keeps the
// bookkeeping only (every address and bounds check, every counter and cycle) and skips
// floating-point math and float data movement. Integer data stays real in both, so
// gather indices, and the addresses and times that follow from them, are exact.
enum class Data { real, none };

// A device fault: where, what, and which kernel.
struct Fault {
  std::uint32_t device = 0;
  std::uint32_t core = 0;
  std::uint32_t stream = 0;
  std::uint32_t pc = 0;
  std::string kernel;
  std::string instruction;  // disassembled, empty if it did not decode
  std::string reason;
  std::optional<std::uint64_t> address;  // the faulting device address, if any
  std::string to_string() const;
};

// What one launch did.
struct LaunchRecord {
  std::uint64_t id = 0;
  std::string name;
  std::vector<std::uint32_t> cores;
  Picoseconds start = 0, end = 0;
  std::array<std::uint64_t, 6> macs{};  // by config::MacType
  std::uint64_t vector_elements = 0;
  std::uint64_t instructions = 0;
  // Device-memory bytes the DMA engines moved: every access is rounded out to whole
  // sticks (the DRAM burst), so a 4-byte load costs a stick. Gathers count each row.
  std::uint64_t dram_read_bytes = 0, dram_write_bytes = 0;
  // Ring link bytes: every byte that crossed a link, once per link (bytes x hops), for
  // DMA traffic between a memory stop and the core and for ring messages alike.
  std::uint64_t ring_bytes = 0;
  std::optional<Fault> fault;
  std::uint64_t flow = 0;  // links the host call that launched it in traces (0: none)
  std::uint64_t queue_tag = 0;  // opaque, from the request: which host queue launched it
  // From the request: the op's least DRAM traffic (0: unknown), for the roofline.
  std::uint64_t min_read_bytes = 0, min_write_bytes = 0;
};

// Every launch of one kernel name, summed (bounded by the number of distinct names).
struct KernelTotals {
  std::uint64_t launches = 0, faults = 0;
  Picoseconds time_ps = 0;  // sum of (end - start)
  std::array<std::uint64_t, 6> macs{};
  std::uint64_t vector_elements = 0, instructions = 0;
  std::uint64_t dram_read_bytes = 0, dram_write_bytes = 0, ring_bytes = 0;
  std::uint64_t min_read_bytes = 0, min_write_bytes = 0;
};

struct LaunchRequest {
  std::shared_ptr<const isa::Program> program;
  std::vector<std::uint64_t> args;     // the argument table: device addresses or scalars
  std::vector<std::uint32_t> cores;    // stream i runs on cores[i]
  std::string name;                    // for records, traces and faults; default: the program's
  std::uint64_t id = 0;
  std::uint64_t flow = 0;              // trace link to the host call (trace_host_call)
  std::uint64_t queue_tag = 0;         // copied into the record
  std::uint64_t min_read_bytes = 0, min_write_bytes = 0;  // copied into the record
};

using LaunchCallback = std::function<void(const LaunchRecord&)>;

// Per core, over every launch. The byte and instruction counters are the executor's
// (identical on every device); the busy times are the timing policy's (zero untimed).
struct CoreStats {
  Picoseconds compute_busy_ps = 0;
  Picoseconds vector_busy_ps = 0;
  std::uint64_t instructions = 0;
  std::uint64_t dma_load_bytes = 0, dma_store_bytes = 0;
  std::uint64_t ring_sent_bytes = 0;
  std::uint64_t scratchpad_high_water = 0;
};

}  // namespace spyre::sim
