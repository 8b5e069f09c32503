// The byte movement of a DMA instruction, for the executor (exec/executor.h): the
// device-memory checks, the copy, and the contiguous device runs it touched (for the
// counters and the timing policy).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "memory/device_memory.h"
#include "spyre/isa/isa.h"

namespace spyre::sim::functional {

struct DmaResult {
  std::uint64_t useful_bytes = 0;        // elements moved x element size
  std::uint64_t sp_end = 0;              // one past the last scratchpad byte written/read
};

struct DmaFault {
  std::string reason;
  std::optional<std::uint64_t> address;
};

// Moves the bytes of `d` between device memory (starting at argument + d.offset,
// `argument` being the launch's address for d.arg) and the scratchpad `sp`. Every
// address is computed with overflow checks. Every element must lie in one live allocation (the
// bounding box is checked: its corner elements are really touched). `on_run` gets the
// device runs touched, consecutive ones merged. Returns the fault, if any, before
// moving anything. With `move_bytes` false, everything but the copy happens.
std::optional<DmaFault> transfer(const isa::Dma& d, bool load, std::uint64_t argument, DeviceMemory& memory,
                                 std::uint8_t* sp, DmaResult& result,
                                 const std::function<void(std::uint64_t, std::uint64_t)>& on_run,
                                 bool move_bytes = true);

// The rows of a DmaGather (from argument + g.offset): checks every index against
// [0, rows) and every row against the live allocations before moving anything, then
// copies the rows into the scratchpad (with g.scatter: from it, into the table rows);
// `on_run` gets each row's device run.
std::optional<DmaFault> gather(const isa::DmaGather& g, std::uint64_t argument, DeviceMemory& memory, std::uint8_t* sp,
                               DmaResult& result, const std::function<void(std::uint64_t, std::uint64_t)>& on_run,
                               bool move_bytes = true);

}  // namespace spyre::sim::functional
