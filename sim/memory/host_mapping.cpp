#include "memory/host_mapping.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace spyre::sim {

namespace {
constexpr std::size_t kHugePage = 2u << 20;
}

void* map_host_memory(std::size_t bytes, bool writable, bool huge_pages, const char* what) {
  // Over-map by one huge page, then trim both ends to a 2 MiB-aligned range.
  const std::size_t total = bytes + kHugePage;
  void* raw = mmap(nullptr, total, writable ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    throw std::runtime_error(std::string("cannot reserve ") + std::to_string(bytes) + " bytes of host memory for the " +
                             what + ": " + std::strerror(errno));
  }
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + total, used_end = aligned + bytes;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  if (huge_pages) madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // a hint: failure is harmless
  return reinterpret_cast<void*>(aligned);
}

void unmap_host_memory(void* address, std::size_t bytes) { munmap(address, bytes); }

}  // namespace spyre::sim
