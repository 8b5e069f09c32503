// Anonymous host memory for the model's storage (device memory backing, scratchpads).
#pragma once

#include <cstddef>

namespace spyre::sim {

// Maps `bytes` of zero-filled memory committed on first touch (MAP_NORESERVE), aligned
// to 2 MiB. With `huge_pages` it asks for transparent huge pages (MADV_HUGEPAGE): far
// fewer page faults and TLB misses when the model streams through it, at a 2 MiB
// granularity of resident memory. `writable` false gives a PROT_NONE reservation.
// Throws std::runtime_error naming `what` when the mapping fails.
void* map_host_memory(std::size_t bytes, bool writable, bool huge_pages, const char* what);
void unmap_host_memory(void* address, std::size_t bytes);

}  // namespace spyre::sim
