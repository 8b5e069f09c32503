#include "driver/abi_support.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "spyre/checked.h"

namespace spyre::driver::abi {

namespace {
thread_local std::string t_last_error;
}  // namespace

const char* last_error() { return t_last_error.c_str(); }

spyre_result_t fail(spyre_result_t code, std::string message) {
  spdlog::debug("{}: {}", spyreResultString(code), message);
  t_last_error = std::move(message);
  return code;
}

void require(const void* p, const char* name) {
  if (p == nullptr) raise(SPYRE_ERROR_INVALID_NULL_POINTER, fmt::format("{} is NULL", name));
}

void require_size(std::uint32_t struct_size, std::size_t known, const char* type) {
  if (struct_size < known) {
    raise(SPYRE_ERROR_UNSUPPORTED_VERSION,
          fmt::format("{}.struct_size is {}, expected {} (set it to sizeof({}))", type, struct_size, known, type));
  }
}

void copy_string(char* dst, std::size_t capacity, const std::string& s) {
  const std::size_t n = std::min(capacity - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// Checks that [p, p + bytes) lies in one live allocation of `device`.
void check_device_range(Device& device, const void* p, std::uint64_t bytes, const char* what) {
  auto& memory = device.memory();
  if (!memory.find(addr(p))) {
    const auto err = memory.check(addr(p), 1);
    raise(SPYRE_ERROR_INVALID_DEVICE_POINTER, fmt::format("{}: {}", what, err ? err->description : "not allocated"));
  }
  if (auto err = memory.check(addr(p), std::max<std::uint64_t>(bytes, 1))) {
    raise(SPYRE_ERROR_INVALID_SIZE, fmt::format("{}: {}", what, err->description));
  }
}

std::shared_ptr<QueueObject> usable_queue(Runtime& rt, spyre_queue_t handle) {
  auto q = rt.lookup<QueueObject>(handle, "queue");
  if (q->error_seen) {
    raise(SPYRE_ERROR_QUEUE_IN_ERROR_STATE,
          "the queue faulted; read spyreQueueGetFault and call spyreQueueAcknowledgeError before reusing it");
  }
  return q;
}

// Before posting a command to q: with kMaxCommandsInFlight unfinished ones already
// there (as last seen), wait until one completes, like a full hardware ring.
// (Compared by adding, never subtracting: with several host threads on one queue,
// another thread may have seen more completions than this command's number.)
void take_ring_slot(Runtime& rt, const std::shared_ptr<QueueObject>& q) {
  constexpr std::uint64_t kMax = spyre::driver::kMaxCommandsInFlight;
  const std::uint64_t before = q->host_submitted++;  // commands posted before this one
  if (before >= q->known_completed.load() + kMax) {
    std::uint64_t completed = 0;
    rt.block_until(q->device, [&] {
      completed = q->queue->completed;
      return completed + kMax > before;
    });
    std::uint64_t known = q->known_completed.load();
    while (known < completed && !q->known_completed.compare_exchange_weak(known, completed)) {
    }
  }
}

// Posts a command without taking a ring slot (the caller took one).
void post_command(Runtime& rt, const std::shared_ptr<QueueObject>& q, firmware::CommandBody body) {
  rt.post(q->device, [dev = q->device, queue = q->queue, b = std::move(body)]() mutable {
    dev->submit(queue, std::move(b));
  });
}

void submit(Runtime& rt, const std::shared_ptr<QueueObject>& q, firmware::CommandBody body) {
  take_ring_slot(rt, q);
  post_command(rt, q, std::move(body));
}

// Blocks until the queue is idle; reports (and remembers) its error state.
spyre_result_t wait_idle(Runtime& rt, const std::shared_ptr<QueueObject>& q) {
  bool error = false;
  rt.block_until(q->device, [&] {
    if (!q->device->idle(*q->queue)) return false;
    error = q->queue->error;
    return true;
  });
  if (error) {
    q->error_seen = true;
    return fail(SPYRE_ERROR_DEVICE_FAULT, "the queue is in error state: see spyreQueueGetFault");
  }
  return SPYRE_SUCCESS;
}

void wait_device_idle(Runtime& rt, Device* d) {
  rt.block_until(d, [d] { return d->idle(); });
}

// Forgets a pinned range once no submitted copy can still read or write it.
void release_pinned(Runtime& rt, void* ptr, const char* expected) {
  require(ptr, "ptr");
  const auto range = rt.pinned_range(ptr);
  if (!range || range->first != reinterpret_cast<std::uintptr_t>(ptr)) {
    raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("{} is not {}", ptr, expected));
  }
  for (auto& d : rt.devices()) wait_device_idle(rt, d.get());
  rt.remove_pinned(ptr);
}

// Runs a copy or fill on the device's internal queue after everything already
// submitted to the device, and waits for it. A failure is reported (and the internal
// queue cleared) as SPYRE_ERROR_DEVICE_FAULT with the fault's reason.
void run_synchronously(Runtime& rt, Device* d, firmware::CommandBody body) {
  submit(rt, d->sync_queue, firmware::Fence{});
  submit(rt, d->sync_queue, std::move(body));
  if (wait_idle(rt, d->sync_queue) == SPYRE_SUCCESS) return;
  std::optional<firmware::FaultRecord> record;
  rt.query(d, [&] {
    record = d->sync_queue->queue->fault;
    d->acknowledge(*d->sync_queue->queue);
  });
  d->sync_queue->error_seen = false;
  raise(SPYRE_ERROR_DEVICE_FAULT, record ? record->reason : "the command failed");
}

firmware::Copy make_copy(Runtime& rt, void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t width, std::size_t height, bool snapshot_pageable, Endpoints& ends) {
  require(dst, "dst");
  require(src, "src");
  if (dst_pitch < width || src_pitch < width) {
    raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("pitches ({} and {}) must be at least the width {}", dst_pitch,
                                                    src_pitch, width));
  }
  ends = {rt.device_of(dst), rt.device_of(src)};
  if (ends.dst_device == nullptr && ends.src_device == nullptr) {
    raise(SPYRE_ERROR_INVALID_ARGUMENT, "both pointers are host memory: use memcpy");
  }
  // Bytes each side spans, and the host or device end address: a product or sum that
  // does not fit 64 bits is a size error here, not a fault when the copy runs.
  const auto extent = [&](const void* p, std::size_t pitch, const char* what) -> std::uint64_t {
    if (height == 0 || width == 0) return 0;
    const auto span = spyre::checked::add(spyre::checked::mul(std::uint64_t{height} - 1, std::uint64_t{pitch}),
                                   std::uint64_t{width});
    const auto end = span ? spyre::checked::add(addr(p), *span) : std::nullopt;
    // Linux user space ends below 2^57 (x86-64 and arm64, even with 5-level page
    // tables): a host range reaching past it cannot be memory the caller owns.
    const bool host = rt.device_of(p) == nullptr;
    if (!end || (host && *end > kHostAddressLimit)) {
      raise(SPYRE_ERROR_INVALID_SIZE,
            fmt::format("the {} of {} rows {} bytes apart from {} runs past the {} address space", what, height,
                        pitch, p, host ? "host's" : "64-bit"));
    }
    return *span;
  };
  const std::uint64_t dst_extent = extent(dst, dst_pitch, "destination");
  const std::uint64_t src_extent = extent(src, src_pitch, "source");
  if (ends.dst_device) check_device_range(*ends.dst_device, dst, dst_extent, "destination");
  if (ends.src_device) check_device_range(*ends.src_device, src, src_extent, "source");
  firmware::Copy c;
  c.src_device = ends.src_device ? ends.src_device->firmware() : nullptr;
  c.dst_device = ends.dst_device ? ends.dst_device->firmware() : nullptr;
  c.width = width;
  c.rows = height;
  c.dst_pitch = dst_pitch;
  c.src_pitch = src_pitch;
  using Direction = firmware::Copy::Direction;
  if (ends.dst_device && ends.src_device) {
    c.direction = ends.dst_device == ends.src_device ? Direction::device_to_device : Direction::peer;
    c.dst = addr(dst);
    c.src = addr(src);
  } else if (ends.dst_device) {
    c.direction = Direction::host_to_device;
    c.dst = addr(dst);
    const bool pinned = rt.pinned_range(src).has_value();
    if (width == 0 || height == 0) {
      // Nothing to read (a no-op copy; memcpy of a null snapshot would be undefined:
      // found by fuzz_abi under UBSan).
    } else if (snapshot_pageable && !pinned) {
      c.snapshot.resize(width * height);
      for (std::size_t r = 0; r < height; ++r) {
        std::memcpy(c.snapshot.data() + r * width, static_cast<const std::uint8_t*>(src) + r * src_pitch, width);
      }
    } else {
      c.host_src = static_cast<const std::uint8_t*>(src);
    }
  } else {
    c.direction = Direction::device_to_host;
    c.src = addr(src);
    c.host_dst = static_cast<std::uint8_t*>(dst);
  }
  return c;
}

Device* queue_device_for(const Endpoints& ends) { return ends.src_device ? ends.src_device : ends.dst_device; }

spyre_result_t copy_async(spyre_queue_t queue, void* dst, std::size_t dst_pitch, const void* src,
                          std::size_t src_pitch, std::size_t width, std::size_t height) {
  Runtime& rt = Runtime::get();
  auto q = usable_queue(rt, queue);
  Endpoints ends{};
  firmware::Copy c = make_copy(rt, dst, dst_pitch, src, src_pitch, width, height, true, ends);
  if (ends.dst_device != q->device && ends.src_device != q->device) {
    raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("neither end of the copy is on the queue's device spyre:{}",
                                                    q->device->index));
  }
  if (width == 0 || height == 0) return SPYRE_SUCCESS;  // nothing to move: a no-op, like CUDA's
  submit(rt, q, std::move(c));
  return SPYRE_SUCCESS;
}

firmware::Fill make_fill(Runtime& rt, void* dst, const void* pattern, std::size_t pattern_size, std::size_t bytes,
                         Device*& device) {
  require(dst, "dst");
  require(pattern, "pattern");
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4) {
    raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("pattern_size must be 1, 2 or 4, found {}", pattern_size));
  }
  if (bytes % pattern_size != 0) {
    raise(SPYRE_ERROR_INVALID_SIZE, fmt::format("{} bytes is not a multiple of the {}-byte pattern", bytes,
                                                pattern_size));
  }
  device = rt.device_of(dst);
  if (device == nullptr) raise(SPYRE_ERROR_INVALID_DEVICE_POINTER, "dst is not device memory");
  check_device_range(*device, dst, bytes, "destination");
  firmware::Fill f;
  f.dst = addr(dst);
  f.bytes = bytes;
  f.pattern_size = static_cast<std::uint32_t>(pattern_size);
  std::memcpy(&f.pattern, pattern, pattern_size);
  return f;
}


}  // namespace spyre::driver::abi
