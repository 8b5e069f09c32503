// The device memory allocator behind every spyre tensor: a caching allocator in the
// manner of CUDA's. Memory comes from the driver in segments (2 MiB for requests up
// to 1 MiB, the rounded request for larger ones) and is split into blocks; freed
// blocks return to size-ordered pools of their stream and coalesce with free
// neighbours. A block used on other streams (record_stream) is reused only after
// events recorded on those streams at free time complete.
//
// Environment: SPYRE_ALLOC_CACHING=0 makes every tensor its own driver allocation
// (an out-of-bounds access then faults precisely); SPYRE_ALLOC_POISON=1 fills new
// allocations with 0xff bytes (NaN for floats) to expose reads of uninitialised memory.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

namespace spyre::backend {

struct Stat {
  std::int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void add(std::int64_t n);
};

struct MemoryStats {
  Stat allocated_bytes;   // in live tensors (rounded block sizes)
  Stat requested_bytes;   // as asked
  Stat reserved_bytes;    // held from the driver
  Stat active_bytes;      // allocated, or freed but waiting for other streams
  Stat allocations;       // live blocks
  Stat segments;          // driver allocations
  std::int64_t num_alloc_retries = 0;  // driver OOM, cache released, retried
  std::int64_t num_ooms = 0;
};

c10::Allocator* caching_allocator();

MemoryStats memory_stats(c10::DeviceIndex device);
// The stats as the flat "allocated_bytes.all.current"-style map of torch.cuda.
std::map<std::string, std::int64_t> memory_stats_map(c10::DeviceIndex device);
void reset_peak_memory_stats(c10::DeviceIndex device);
std::string memory_summary(c10::DeviceIndex device);
// Releases every cached segment that holds no live block back to the driver.
void empty_cache();
// Marks a tensor's block as used on `stream`, so it is not reused before the work
// already submitted there completes.
void record_stream(const c10::DataPtr& data, c10::Stream stream);

// The segments the allocator holds on `device` and their blocks, as JSON in the form of
// torch.cuda.memory_snapshot(): a list of {device, address, total_size, allocated_size,
// active_size, requested_size, stream, segment_type ("small" | "large"), blocks:
// [{address, size, requested_size, state ("active_allocated", "active_pending_free",
// "inactive")}]}, ordered by address.
std::string memory_snapshot_json(c10::DeviceIndex device);

// Caps what the allocator may reserve on `device` at `fraction` (0 to 1) of its usable
// memory, as torch.cuda.set_per_process_memory_fraction: past it, the cache is released
// and the allocation retried, then torch.OutOfMemoryError names the cap.
void set_memory_fraction(double fraction, c10::DeviceIndex device);

// A raw allocation of `bytes` on `device` for `stream` (torch.spyre.caching_allocator_
// alloc): the address; caching_allocator_delete returns it. An address that did not come
// from caching_allocator_alloc is an error naming it.
std::uint64_t raw_alloc(std::size_t bytes, c10::DeviceIndex device, c10::StreamId stream);
void raw_delete(std::uint64_t address);

}  // namespace spyre::backend
