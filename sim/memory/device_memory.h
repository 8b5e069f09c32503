// Device memory: sparse backing store plus an allocation map that checks every access
// (the device MMU).
//
// Backing pages are committed on first touch (an anonymous MAP_NORESERVE mapping), so
// a 128 GiB device costs only what is written. Device addresses lie in a separate
// PROT_NONE reservation of the host's address space: they are not host pointers, and
// a host dereference of one faults at once.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace spyre::sim {

class DeviceMemory {
 public:
  struct Allocation {
    std::uint64_t base = 0;
    std::uint64_t size = 0;  // as requested
  };

  // `capacity` bytes of address space; allocations may use up to `usable` of it.
  DeviceMemory(std::uint64_t capacity, std::uint64_t usable);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Device address of the first byte of device memory.
  std::uint64_t base() const { return base_; }
  std::uint64_t usable() const { return usable_; }

  // Best-fit allocation, granule-aligned (kGranule). Nothing when it does not fit.
  std::optional<std::uint64_t> allocate(std::uint64_t bytes);

  enum class FreeResult { ok, double_free, not_a_base, unknown };
  // Frees the allocation starting at `address`; its pages return to the host.
  FreeResult free(std::uint64_t address);

  // The live allocation containing `address`, if any.
  std::optional<Allocation> find(std::uint64_t address) const;

  // Checks that [address, address + bytes) lies inside one live allocation. On failure
  // returns the first bad address and a description naming the nearest allocation:
  // "16 bytes past the end of a 4096-byte allocation at 0x...", "in a 4096-byte
  // allocation at 0x... that was freed", ...
  struct AccessError {
    std::uint64_t address;
    std::string description;
  };
  std::optional<AccessError> check(std::uint64_t address, std::uint64_t bytes) const;

  // Host view of checked device bytes (call check() first).
  std::uint8_t* host(std::uint64_t address) { return backing_ + (address - base_); }
  const std::uint8_t* host(std::uint64_t address) const { return backing_ + (address - base_); }

  std::uint64_t bytes_in_use() const;
  std::uint64_t allocation_count() const;
  std::uint64_t largest_free_block() const;
  // Whether `address` lies in this device's address range at all.
  bool contains(std::uint64_t address) const { return address >= base_ && address < base_ + capacity_; }

  static constexpr std::uint64_t kGranule = 256;

 private:
  void add_free(std::uint64_t offset, std::uint64_t size);
  void remove_free(std::uint64_t offset, std::uint64_t size);
  void forget_freed_overlapping(std::uint64_t base, std::uint64_t size);
  std::string describe_nearest(std::uint64_t address) const;
  std::optional<Allocation> find_locked(std::uint64_t address) const;

  mutable std::mutex mutex_;
  std::uint64_t capacity_;
  std::uint64_t usable_;
  std::uint64_t base_ = 0;             // device address space (PROT_NONE reservation)
  std::uint8_t* backing_ = nullptr;    // host backing store
  std::uint64_t in_use_ = 0;           // granule-rounded bytes of live allocations
  std::map<std::uint64_t, std::uint64_t> live_;   // base -> requested size
  std::map<std::uint64_t, std::uint64_t> free_by_offset_;          // offset -> size
  std::set<std::pair<std::uint64_t, std::uint64_t>> free_by_size_;  // (size, offset)
  // Recently freed allocations, for "use after free" reports.
  std::map<std::uint64_t, std::uint64_t> freed_;  // base -> size
  std::deque<std::uint64_t> freed_order_;
  static constexpr std::size_t kFreedHistory = 4096;
};

}  // namespace spyre::sim
