#include "memory/device_memory.h"

#include "memory/host_mapping.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace spyre::sim {
namespace {

constexpr std::uint64_t kPage = 4096;

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

DeviceMemory::DeviceMemory(std::uint64_t capacity, std::uint64_t usable)
    : capacity_((capacity + kPage - 1) / kPage * kPage), usable_(usable) {
  base_ = reinterpret_cast<std::uint64_t>(map_host_memory(capacity_, false, false, "device address space"));
  try {
    backing_ = static_cast<std::uint8_t*>(map_host_memory(capacity_, true, true, "device memory backing store"));
  } catch (...) {
    unmap_host_memory(reinterpret_cast<void*>(base_), capacity_);
    throw;
  }
  add_free(0, usable_ / kGranule * kGranule);
}

DeviceMemory::~DeviceMemory() {
  unmap_host_memory(backing_, capacity_);
  unmap_host_memory(reinterpret_cast<void*>(base_), capacity_);
}

void DeviceMemory::add_free(std::uint64_t offset, std::uint64_t size) {
  // Coalesce with the neighbours.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && offset + size == next->first) {
    size += next->second;
    free_by_size_.erase({next->second, next->first});
    next = free_by_offset_.erase(next);
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_by_size_.erase({prev->second, prev->first});
      free_by_offset_.erase(prev);
    }
  }
  if (size == 0) return;
  free_by_offset_[offset] = size;
  free_by_size_.insert({size, offset});
}

void DeviceMemory::remove_free(std::uint64_t offset, std::uint64_t size) {
  free_by_offset_.erase(offset);
  free_by_size_.erase({size, offset});
}

std::optional<std::uint64_t> DeviceMemory::allocate(std::uint64_t bytes) {
  const std::lock_guard lock(mutex_);
  if (bytes == 0) bytes = 1;  // a zero-byte allocation still has a unique address
  if (bytes > usable_) return std::nullopt;
  const std::uint64_t rounded = (bytes + kGranule - 1) / kGranule * kGranule;
  const auto it = free_by_size_.lower_bound({rounded, 0});
  if (it == free_by_size_.end()) return std::nullopt;
  const auto [size, offset] = *it;
  remove_free(offset, size);
  if (size > rounded) add_free(offset + rounded, size - rounded);
  const std::uint64_t address = base_ + offset;
  live_[address] = bytes;
  in_use_ += rounded;
  forget_freed_overlapping(address, rounded);
  return address;
}

void DeviceMemory::forget_freed_overlapping(std::uint64_t base, std::uint64_t size) {
  auto it = freed_.lower_bound(base);
  if (it != freed_.begin()) --it;
  while (it != freed_.end() && it->first < base + size) {
    if (it->first + it->second > base) {
      it = freed_.erase(it);
    } else {
      ++it;
    }
  }
}

DeviceMemory::FreeResult DeviceMemory::free(std::uint64_t address) {
  const std::lock_guard lock(mutex_);
  const auto it = live_.find(address);
  if (it == live_.end()) {
    if (freed_.count(address) != 0) return FreeResult::double_free;
    return find_locked(address) ? FreeResult::not_a_base : FreeResult::unknown;
  }
  const std::uint64_t size = it->second;
  const std::uint64_t rounded = (size + kGranule - 1) / kGranule * kGranule;
  live_.erase(it);
  in_use_ -= rounded;
  const std::uint64_t offset = address - base_;
  // Return whole pages inside the block to the host; they read as zero when reused.
  const std::uint64_t first_page = (offset + kPage - 1) / kPage * kPage;
  const std::uint64_t end_page = (offset + rounded) / kPage * kPage;
  if (end_page > first_page) madvise(backing_ + first_page, end_page - first_page, MADV_DONTNEED);
  add_free(offset, rounded);
  freed_[address] = size;
  freed_order_.push_back(address);
  if (freed_order_.size() > kFreedHistory) {
    const std::uint64_t oldest = freed_order_.front();
    freed_order_.pop_front();
    // Only forget it if it was not freed again since (it is then the newer entry).
    if (std::count(freed_order_.begin(), freed_order_.end(), oldest) == 0) freed_.erase(oldest);
  }
  return FreeResult::ok;
}

std::optional<DeviceMemory::Allocation> DeviceMemory::find(std::uint64_t address) const {
  const std::lock_guard lock(mutex_);
  return find_locked(address);
}

std::optional<DeviceMemory::Allocation> DeviceMemory::find_locked(std::uint64_t address) const {
  auto it = live_.upper_bound(address);
  if (it == live_.begin()) return std::nullopt;
  --it;
  if (address >= it->first && address < it->first + it->second) return Allocation{it->first, it->second};
  return std::nullopt;
}

std::string DeviceMemory::describe_nearest(std::uint64_t address) const {
  // A freed allocation containing the address explains it best.
  auto f = freed_.upper_bound(address);
  if (f != freed_.begin()) {
    --f;
    if (address < f->first + f->second) {
      return "is " + std::to_string(address - f->first) + " bytes into a " + std::to_string(f->second) +
             "-byte allocation at " + hex(f->first) + " that was freed";
    }
  }
  if (address < base_ || address >= base_ + capacity_) {
    return "is outside device memory [" + hex(base_) + ", " + hex(base_ + capacity_) + ")";
  }
  auto next = live_.upper_bound(address);
  std::string before, after;
  std::uint64_t d_before = UINT64_MAX, d_after = UINT64_MAX;
  if (next != live_.begin()) {
    const auto prev = std::prev(next);
    d_before = address - (prev->first + prev->second);
    before = std::to_string(d_before) + " bytes past the end of a " + std::to_string(prev->second) +
             "-byte allocation at " + hex(prev->first);
  }
  if (next != live_.end()) {
    d_after = next->first - address;
    after = std::to_string(d_after) + " bytes before a " + std::to_string(next->second) + "-byte allocation at " +
            hex(next->first);
  }
  if (before.empty() && after.empty()) return "is not in any allocation (none are live)";
  return "is " + (d_before <= d_after ? before : after);
}

std::optional<DeviceMemory::AccessError> DeviceMemory::check(std::uint64_t address, std::uint64_t bytes) const {
  const std::lock_guard lock(mutex_);
  const auto alloc = find_locked(address);
  if (!alloc) return AccessError{address, "address " + hex(address) + " " + describe_nearest(address)};
  const std::uint64_t end = alloc->base + alloc->size;
  if (bytes > end - address) {
    const std::uint64_t bad = end;
    return AccessError{bad, "an access of " + std::to_string(bytes) + " bytes at " + hex(address) + " runs " +
                                std::to_string(address + bytes - end) + " bytes past the end of a " +
                                std::to_string(alloc->size) + "-byte allocation at " + hex(alloc->base)};
  }
  return std::nullopt;
}

std::uint64_t DeviceMemory::bytes_in_use() const {
  const std::lock_guard lock(mutex_);
  return in_use_;
}

std::uint64_t DeviceMemory::allocation_count() const {
  const std::lock_guard lock(mutex_);
  return live_.size();
}

std::uint64_t DeviceMemory::largest_free_block() const {
  const std::lock_guard lock(mutex_);
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

}  // namespace spyre::sim
