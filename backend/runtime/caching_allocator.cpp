#include "runtime/caching_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <c10/core/DeviceGuard.h>
#include <fmt/format.h>

#include "runtime/derived.h"
#include "runtime/driver.h"
#include "runtime/streams.h"

namespace spyre::backend {

void Stat::add(std::int64_t n) {
  current += n;
  peak = std::max(peak, current);
  (n >= 0 ? allocated : freed) += n >= 0 ? n : -n;
}

namespace {

constexpr std::size_t kRound = 512;               // every block size is a multiple
constexpr std::size_t kSmallLimit = 1 << 20;      // requests up to 1 MiB share 2 MiB segments
constexpr std::size_t kSmallSegment = 2 << 20;
constexpr std::size_t kLargeRound = 2 << 20;      // larger segments round to 2 MiB
constexpr std::size_t kMinLargeSplit = 1 << 20;   // a large block splits when >= 1 MiB would remain

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::string(v) != "0";
}

struct Block {
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  char* ptr = nullptr;
  bool allocated = false;
  bool small = false;
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
  std::set<c10::StreamId> used_on;  // other streams (record_stream)
};

struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

struct PendingFree {
  Block* block;
  std::vector<spyre_event_t> events;
};

struct DeviceState {
  std::set<Block*, BySize> small_pool, large_pool;
  std::unordered_map<void*, Block*> live;
  std::vector<PendingFree> pending;
  MemoryStats stats;
  std::size_t limit = 0;  // bytes the allocator may reserve (set_memory_fraction); 0 = all
  double fraction = 1;
};

class CachingAllocator final : public c10::Allocator {
 public:
  CachingAllocator()
      : caching_(env_flag("SPYRE_ALLOC_CACHING", true)), poison_(env_flag("SPYRE_ALLOC_POISON", false)) {}

  c10::DataPtr allocate(std::size_t bytes) override {
    const c10::DeviceIndex device = current_device();
    const c10::Device where(c10::DeviceType::PrivateUse1, device);
    if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &noop, where);
    Block* block;
    std::int64_t allocated = 0, reserved = 0;
    const auto take = [&] {
      const std::lock_guard lock(mutex_);
      block = caching_ ? from_pool(device, bytes) : direct(device, bytes);
      allocated = state(device).stats.allocated_bytes.current;
      reserved = state(device).stats.reserved_bytes.current;
    };
    try {
      take();
    } catch (const c10::OutOfMemoryError&) {
      // Kept derived copies (runtime/derived.h) are a cache too: released, then retried.
      if (!derived::clear()) throw;
      take();
    }
    // torch.profiler(profile_memory=True): each allocation and free, as CUDA's allocator reports them.
    if (c10::memoryProfilingEnabled()) {
      c10::reportMemoryUsageToProfiler(block->ptr, static_cast<std::int64_t>(block->size),
                                       static_cast<std::size_t>(allocated), static_cast<std::size_t>(reserved), where);
    }
    if (poison_) {
      const std::uint8_t pattern = 0xff;
      SPYRE_CHECK(spyreMemFillAsync(queue_of(current_stream(device)), block->ptr, &pattern, 1, block->size));
    }
    return c10::DataPtr(block->ptr, block, &release, where);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count == 0) return;
    derived::note_write(dest);
    SPYRE_CHECK(spyreMemcpy(dest, src, count));
  }

  void free(Block* block) {
    if (c10::memoryProfilingEnabled()) {
      std::int64_t allocated = 0, reserved = 0;
      {
        const std::lock_guard lock(mutex_);
        allocated = state(block->device).stats.allocated_bytes.current - static_cast<std::int64_t>(block->size);
        reserved = state(block->device).stats.reserved_bytes.current;
      }
      c10::reportMemoryUsageToProfiler(block->ptr, -static_cast<std::int64_t>(block->size),
                                       static_cast<std::size_t>(allocated), static_cast<std::size_t>(reserved),
                                       c10::Device(c10::DeviceType::PrivateUse1, block->device));
    }
    const std::lock_guard lock(mutex_);
    DeviceState& d = state(block->device);
    d.stats.allocated_bytes.add(-static_cast<std::int64_t>(block->size));
    d.stats.requested_bytes.add(-static_cast<std::int64_t>(block->requested));
    d.stats.allocations.add(-1);
    d.live.erase(block->ptr);
    if (!caching_) {
      d.stats.active_bytes.add(-static_cast<std::int64_t>(block->size));
      release_segment(d, block);
      return;
    }
    if (!block->used_on.empty()) {
      // Used on other streams: reuse only after their work submitted so far completes.
      PendingFree p{block, {}};
      for (const c10::StreamId s : block->used_on) {
        spyre_event_t e = nullptr;
        SPYRE_CHECK(spyreEventCreate(driver_device(block->device), &e));
        SPYRE_CHECK(spyreEventRecord(e, queue_of(stream(block->device, s))));
        p.events.push_back(e);
      }
      block->used_on.clear();
      d.pending.push_back(std::move(p));
      return;
    }
    d.stats.active_bytes.add(-static_cast<std::int64_t>(block->size));
    to_pool(d, block);
  }

  void record_stream(void* ptr, c10::Stream s) {
    const std::lock_guard lock(mutex_);
    DeviceState& d = state(s.device_index());
    const auto it = d.live.find(ptr);
    if (it == d.live.end()) return;  // not from this allocator (or size 0)
    if (it->second->stream != s.id()) it->second->used_on.insert(s.id());
  }

  void empty_cache() {
    const std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < states_.size(); ++i) release_cached(state(static_cast<c10::DeviceIndex>(i)));
  }

  MemoryStats stats(c10::DeviceIndex device) {
    const std::lock_guard lock(mutex_);
    return state(device).stats;
  }

  void reset_peaks(c10::DeviceIndex device) {
    const std::lock_guard lock(mutex_);
    auto& s = state(device).stats;
    for (Stat* st : {&s.allocated_bytes, &s.requested_bytes, &s.reserved_bytes, &s.active_bytes, &s.allocations,
                     &s.segments}) {
      st->peak = st->current;
    }
  }

  void set_fraction(double fraction, c10::DeviceIndex device) {
    TORCH_CHECK(fraction >= 0 && fraction <= 1, "spyre: a memory fraction is between 0 and 1; got ", fraction);
    std::size_t free_bytes = 0, total = 0;
    SPYRE_CHECK(spyreMemGetInfo(driver_device(device), &free_bytes, &total));
    const std::lock_guard lock(mutex_);
    DeviceState& d = state(device);
    d.fraction = fraction;
    d.limit = static_cast<std::size_t>(fraction * static_cast<double>(total));
  }

  // Every block of `device` in address order, each with its segment's first block.
  std::string snapshot(c10::DeviceIndex device) {
    const std::lock_guard lock(mutex_);
    DeviceState& d = state(device);
    std::set<Block*> pending;
    for (const auto& p : d.pending) pending.insert(p.block);
    std::set<Block*> heads;
    const auto add_head = [&](Block* b) {
      while (b->prev != nullptr) b = b->prev;
      heads.insert(b);
    };
    for (const auto& [ptr, b] : d.live) add_head(b);
    for (Block* b : pending) add_head(b);
    for (const auto* pool : {&d.small_pool, &d.large_pool}) {
      for (Block* b : *pool) add_head(b);
    }
    std::vector<Block*> ordered(heads.begin(), heads.end());
    std::sort(ordered.begin(), ordered.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
    std::string out = "[";
    for (Block* head : ordered) {
      std::size_t total = 0, allocated = 0, active = 0, requested = 0;
      std::string blocks;
      for (Block* b = head; b != nullptr; b = b->next) {
        const bool waiting = pending.count(b) != 0;
        const char* state = b->allocated && !waiting ? "active_allocated" : waiting ? "active_pending_free" : "inactive";
        total += b->size;
        if (b->allocated && !waiting) allocated += b->size, requested += b->requested;
        if (b->allocated || waiting) active += b->size;
        blocks += fmt::format("{}{{\"address\": {}, \"size\": {}, \"requested_size\": {}, \"state\": \"{}\"}}",
                              blocks.empty() ? "" : ", ", reinterpret_cast<std::uintptr_t>(b->ptr), b->size,
                              b->allocated ? b->requested : 0, state);
      }
      out += fmt::format("{}{{\"device\": {}, \"address\": {}, \"total_size\": {}, \"allocated_size\": {}, "
                         "\"active_size\": {}, \"requested_size\": {}, \"stream\": {}, \"segment_type\": \"{}\", "
                         "\"blocks\": [{}]}}",
                         out.size() > 1 ? ", " : "", device, reinterpret_cast<std::uintptr_t>(head->ptr), total,
                         allocated, active, requested, head->stream, head->small ? "small" : "large", blocks);
    }
    return out + "]";
  }

  std::uint64_t raw_alloc(std::size_t bytes, c10::DeviceIndex device, c10::StreamId stream_id) {
    const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
    const c10::Stream previous = exchange_stream(stream(device, stream_id));
    c10::DataPtr data;
    try {
      data = allocate(bytes);
    } catch (...) {
      exchange_stream(previous);
      throw;
    }
    exchange_stream(previous);
    const auto address = reinterpret_cast<std::uint64_t>(data.get());
    const std::lock_guard lock(mutex_);
    raw_.emplace(address, std::move(data));
    return address;
  }

  void raw_delete(std::uint64_t address) {
    c10::DataPtr data;
    {
      const std::lock_guard lock(mutex_);
      const auto it = raw_.find(address);
      TORCH_CHECK(it != raw_.end(), "spyre: caching_allocator_delete of ", reinterpret_cast<void*>(address),
                  ", which caching_allocator_alloc did not return (or was deleted already)");
      data = std::move(it->second);
      raw_.erase(it);
    }
    // (the block is freed here, outside the map's lock scope)
  }

  static void release(void* ctx) { allocator().free(static_cast<Block*>(ctx)); }
  static CachingAllocator& allocator();

 private:
  static void noop(void*) {}

  static c10::Stream stream(c10::DeviceIndex device, c10::StreamId id) {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
  }

  DeviceState& state(c10::DeviceIndex device) {
    check_device_index(device);
    if (states_.empty()) states_.resize(static_cast<std::size_t>(device_count_or_zero()));
    return states_[static_cast<std::size_t>(device)];
  }

  static std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

  void process_pending(DeviceState& d) {
    for (auto it = d.pending.begin(); it != d.pending.end();) {
      const bool done = std::all_of(it->events.begin(), it->events.end(),
                                    [](spyre_event_t e) { return spyreEventQuery(e) != SPYRE_NOT_READY; });
      if (!done) {
        ++it;
        continue;
      }
      for (spyre_event_t e : it->events) spyreEventDestroy(e);
      d.stats.active_bytes.add(-static_cast<std::int64_t>(it->block->size));
      to_pool(d, it->block);
      it = d.pending.erase(it);
    }
  }

  Block* from_pool(c10::DeviceIndex device, std::size_t bytes) {
    DeviceState& d = state(device);
    process_pending(d);
    const std::size_t size = round_up(bytes, kRound);
    const bool small = size <= kSmallLimit;
    auto& pool = small ? d.small_pool : d.large_pool;
    const c10::StreamId stream_id = current_stream(device).id();
    Block key;
    key.stream = stream_id;
    key.size = size;
    Block* block = nullptr;
    auto it = pool.lower_bound(&key);
    if (it != pool.end() && (*it)->stream == stream_id) {
      block = *it;
      pool.erase(it);
    } else {
      const std::size_t segment = small ? kSmallSegment : round_up(size, kLargeRound);
      // On a device smaller than a segment, a segment of just the request.
      block = new_segment(d, device, segment, bytes, size);
      block->stream = stream_id;
      block->small = small;
    }
    const std::size_t rest = block->size - size;
    if (rest >= (small ? kRound : kMinLargeSplit)) {
      auto* tail = new Block(*block);
      tail->ptr = block->ptr + size;
      tail->size = rest;
      tail->prev = block;
      tail->next = block->next;
      if (block->next) block->next->prev = tail;
      block->next = tail;
      block->size = size;
      pool.insert(tail);
    }
    mark_allocated(d, block, bytes);
    return block;
  }

  Block* direct(c10::DeviceIndex device, std::size_t bytes) {
    DeviceState& d = state(device);
    Block* block = new_segment(d, device, bytes, bytes);
    block->stream = current_stream(device).id();
    mark_allocated(d, block, bytes);
    return block;
  }

  void mark_allocated(DeviceState& d, Block* block, std::size_t requested) {
    block->allocated = true;
    block->requested = requested;
    d.live[block->ptr] = block;
    d.stats.allocated_bytes.add(static_cast<std::int64_t>(block->size));
    d.stats.requested_bytes.add(static_cast<std::int64_t>(requested));
    d.stats.active_bytes.add(static_cast<std::int64_t>(block->size));
    d.stats.allocations.add(1);
  }

  // A segment of `size` bytes; when that does not fit even after releasing the cache,
  // one of `minimum` bytes (0: no smaller size will do).
  // The driver's allocation, unless it would take the reservation past the cap.
  spyre_result_t reserve(DeviceState& d, c10::DeviceIndex device, std::size_t size, void** ptr) {
    if (d.limit != 0 && static_cast<std::size_t>(d.stats.reserved_bytes.current) + size > d.limit) {
      return SPYRE_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    return spyreMemAlloc(driver_device(device), size, ptr);
  }

  Block* new_segment(DeviceState& d, c10::DeviceIndex device, std::size_t size, std::size_t requested,
                     std::size_t minimum = 0) {
    void* ptr = nullptr;
    spyre_result_t rc = reserve(d, device, size, &ptr);
    if (rc == SPYRE_ERROR_OUT_OF_DEVICE_MEMORY) {
      // Release what the cache holds, then try once more.
      ++d.stats.num_alloc_retries;
      release_cached(d);
      rc = reserve(d, device, size, &ptr);
    }
    if (rc == SPYRE_ERROR_OUT_OF_DEVICE_MEMORY && minimum != 0 && minimum < size) {
      size = minimum;
      rc = reserve(d, device, size, &ptr);
    }
    if (rc == SPYRE_ERROR_OUT_OF_DEVICE_MEMORY) {
      ++d.stats.num_ooms;
      if (c10::memoryProfilingEnabled()) {
        c10::reportOutOfMemoryToProfiler(static_cast<std::int64_t>(requested),
                                         static_cast<std::size_t>(d.stats.allocated_bytes.current),
                                         static_cast<std::size_t>(d.stats.reserved_bytes.current),
                                         c10::Device(c10::DeviceType::PrivateUse1, device));
      }
      std::size_t free_bytes = 0, total = 0;
      spyreMemGetInfo(driver_device(device), &free_bytes, &total);
      const std::string cap = d.limit == 0 ? std::string()
                                           : fmt::format("; this process may reserve {} ({} of the device, "
                                                         "torch.spyre.set_per_process_memory_fraction)",
                                                         format_bytes(d.limit), d.fraction);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "spyre: out of memory on spyre:", static_cast<int>(device),
                       ": tried to allocate ", format_bytes(requested), "; the device has ", format_bytes(total),
                       " of which ", format_bytes(free_bytes), " is free; PyTorch holds ",
                       format_bytes(static_cast<std::size_t>(d.stats.allocated_bytes.current)), " in tensors and ",
                       format_bytes(static_cast<std::size_t>(d.stats.reserved_bytes.current)),
                       " reserved in total", cap, " (the cache was released before this error)");
    }
    if (rc != SPYRE_SUCCESS) driver_failure(rc, "spyreMemAlloc");
    auto* block = new Block();
    block->device = device;
    block->size = size;
    block->ptr = static_cast<char*>(ptr);
    d.stats.reserved_bytes.add(static_cast<std::int64_t>(size));
    d.stats.segments.add(1);
    return block;
  }

  void to_pool(DeviceState& d, Block* block) {
    block->allocated = false;
    auto& pool = block->small ? d.small_pool : d.large_pool;
    // Coalesce with free neighbours of the same segment.
    for (Block* n : {block->prev, block->next}) {
      if (n == nullptr || n->allocated || pool.count(n) == 0) continue;
      pool.erase(n);
      if (n == block->prev) {
        block->ptr = n->ptr;
        block->prev = n->prev;
        if (n->prev) n->prev->next = block;
      } else {
        block->next = n->next;
        if (n->next) n->next->prev = block;
      }
      block->size += n->size;
      delete n;
    }
    pool.insert(block);
  }

  void release_segment(DeviceState& d, Block* block) {
    SPYRE_CHECK(spyreMemFree(block->ptr));
    d.stats.reserved_bytes.add(-static_cast<std::int64_t>(block->size));
    d.stats.segments.add(-1);
    delete block;
  }

  void release_cached(DeviceState& d) {
    process_pending(d);
    for (auto* pool : {&d.small_pool, &d.large_pool}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev == nullptr && b->next == nullptr) {
          it = pool->erase(it);
          release_segment(d, b);
        } else {
          ++it;
        }
      }
    }
  }

  static std::string format_bytes(std::size_t n) {
    if (n >= (1ull << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(n) / (1ull << 30));
    if (n >= (1ull << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(n) / (1ull << 20));
    if (n >= (1ull << 10)) return fmt::format("{:.2f} KiB", static_cast<double>(n) / (1ull << 10));
    return fmt::format("{} bytes", n);
  }

  const bool caching_;
  const bool poison_;
  std::recursive_mutex mutex_;
  std::vector<DeviceState> states_;
  std::unordered_map<std::uint64_t, c10::DataPtr> raw_;  // caching_allocator_alloc's blocks
};

CachingAllocator& CachingAllocator::allocator() {
  static CachingAllocator instance;
  return instance;
}

}  // namespace

c10::Allocator* caching_allocator() { return &CachingAllocator::allocator(); }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, caching_allocator());

MemoryStats memory_stats(c10::DeviceIndex device) { return CachingAllocator::allocator().stats(device); }

namespace {

// Every statistic the map and the summary show, listed once: its key in
// torch.cuda.memory_stats() form and its row label.
struct StatField {
  const char* key;
  const char* label;
  Stat MemoryStats::*member;
};
constexpr StatField kStatFields[] = {
    {"allocated_bytes", "allocated bytes", &MemoryStats::allocated_bytes},
    {"requested_bytes", "requested bytes", &MemoryStats::requested_bytes},
    {"active_bytes", "active bytes", &MemoryStats::active_bytes},
    {"reserved_bytes", "reserved bytes", &MemoryStats::reserved_bytes},
    {"allocation", "allocations", &MemoryStats::allocations},
    {"segment", "segments", &MemoryStats::segments},
};

}  // namespace

std::map<std::string, std::int64_t> memory_stats_map(c10::DeviceIndex device) {
  const MemoryStats s = memory_stats(device);
  std::map<std::string, std::int64_t> out;
  for (const StatField& f : kStatFields) {
    const Stat& st = s.*f.member;
    const std::string name = f.key;
    out[name + ".all.current"] = st.current;
    out[name + ".all.peak"] = st.peak;
    out[name + ".all.allocated"] = st.allocated;
    out[name + ".all.freed"] = st.freed;
  }
  out["num_alloc_retries"] = s.num_alloc_retries;
  out["num_ooms"] = s.num_ooms;
  return out;
}

void reset_peak_memory_stats(c10::DeviceIndex device) { CachingAllocator::allocator().reset_peaks(device); }

std::string memory_summary(c10::DeviceIndex device) {
  const MemoryStats s = memory_stats(device);
  std::ostringstream out;
  out << fmt::format("spyre:{} memory summary\n", device);
  out << fmt::format("{:<20} {:>16} {:>16} {:>16} {:>16}\n", "metric", "current", "peak", "total allocated",
                     "total freed");
  for (const StatField& f : kStatFields) {
    const Stat& st = s.*f.member;
    out << fmt::format("{:<20} {:>16} {:>16} {:>16} {:>16}\n", f.label, st.current, st.peak, st.allocated, st.freed);
  }
  out << fmt::format("alloc retries {}, out-of-memory errors {}\n", s.num_alloc_retries, s.num_ooms);
  return out.str();
}

void empty_cache() {
  derived::clear();  // (their blocks return to the pools first, and so to the driver below)
  CachingAllocator::allocator().empty_cache();
}

void record_stream(const c10::DataPtr& data, c10::Stream stream) {
  CachingAllocator::allocator().record_stream(data.get(), stream);
}

std::string memory_snapshot_json(c10::DeviceIndex device) { return CachingAllocator::allocator().snapshot(device); }

void set_memory_fraction(double fraction, c10::DeviceIndex device) {
  CachingAllocator::allocator().set_fraction(fraction, device);
}

std::uint64_t raw_alloc(std::size_t bytes, c10::DeviceIndex device, c10::StreamId stream) {
  return CachingAllocator::allocator().raw_alloc(bytes, device, stream);
}

void raw_delete(std::uint64_t address) { CachingAllocator::allocator().raw_delete(address); }

}  // namespace spyre::backend
