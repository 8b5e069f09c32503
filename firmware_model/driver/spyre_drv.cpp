// The C ABI of include/spyre/spyre_drv.h: argument validation, then the runtime.
// Every entry point is wrapped by `guarded`, so no exception crosses the ABI and every
// failure leaves a one-line message for spyreGetLastErrorMessage.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "driver/runtime.h"
#include "spyre/checked.h"
#include "spyre/spyre_drv.h"

using spyre::driver::Device;
using spyre::driver::Error;
using spyre::driver::EventObject;
using spyre::driver::ProgramObject;
using spyre::driver::QueueObject;
using spyre::driver::Runtime;
namespace firmware = spyre::firmware;
namespace isa = spyre::isa;

namespace {

thread_local std::string t_last_error;

spyre_result_t fail(spyre_result_t code, std::string message) {
  spdlog::debug("{}: {}", spyreResultString(code), message);
  t_last_error = std::move(message);
  return code;
}

template <class F>
spyre_result_t guarded(const char* function, F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    return fail(e.code, fmt::format("{}: {}", function, e.message));
  } catch (const std::bad_alloc&) {
    return fail(SPYRE_ERROR_OUT_OF_HOST_MEMORY, fmt::format("{}: out of host memory", function));
  } catch (const std::exception& e) {
    return fail(SPYRE_ERROR_INTERNAL, fmt::format("{}: internal error: {}", function, e.what()));
  }
}

[[noreturn]] void raise(spyre_result_t code, std::string message) { throw Error{code, std::move(message)}; }

void require(const void* p, const char* name) {
  if (p == nullptr) raise(SPYRE_ERROR_INVALID_NULL_POINTER, fmt::format("{} is NULL", name));
}

void require_size(std::uint32_t struct_size, std::size_t known, const char* type) {
  if (struct_size < known) {
    raise(SPYRE_ERROR_UNSUPPORTED_VERSION,
          fmt::format("{}.struct_size is {}, expected {} (set it to sizeof({}))", type, struct_size, known, type));
  }
}

std::uint64_t addr(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

constexpr std::uint64_t kHostAddressLimit = std::uint64_t{1} << 57;

void copy_string(char* dst, std::size_t capacity, const std::string& s) {
  const std::size_t n = std::min(capacity - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// Checks that [p, p + bytes) lies in one live allocation of `device`.
void check_device_range(Device& device, const void* p, std::uint64_t bytes, const char* what) {
  auto& memory = device.chip->memory();
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
  rt.post(q->device, [fw = q->device->firmware.get(), queue = q->queue, b = std::move(body)]() mutable {
    fw->submit(queue, std::move(b));
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
    if (!q->device->firmware->idle(*q->queue)) return false;
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
  rt.block_until(d, [d] { return d->firmware->device_idle(); });
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
    d->firmware->acknowledge(*d->sync_queue->queue);
  });
  d->sync_queue->error_seen = false;
  raise(SPYRE_ERROR_DEVICE_FAULT, record ? record->reason : "the command failed");
}

// A copy's endpoints, classified.
struct Endpoints {
  Device* dst_device;
  Device* src_device;
};

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
  c.src_device = ends.src_device ? ends.src_device->firmware.get() : nullptr;
  c.dst_device = ends.dst_device ? ends.dst_device->firmware.get() : nullptr;
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

}  // namespace

extern "C" {

spyre_result_t spyreDriverGetApiVersion(uint32_t* version) {
  return guarded(__func__, [&] {
    require(version, "version");
    *version = SPYRE_API_VERSION_CURRENT;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDriverConfigure(const spyre_driver_config_t* config) {
  return guarded(__func__, [&] {
    if (config == nullptr) {
      Runtime::configure(std::nullopt);
      return SPYRE_SUCCESS;
    }
    // 0.4 callers end at device_count; config_yaml and mode are read when present.
    const std::size_t v04 = offsetof(spyre_driver_config_t, config_yaml);
    require_size(config->struct_size, v04, "spyre_driver_config_t");
    const bool v05 = config->struct_size >= sizeof(spyre_driver_config_t);
    Runtime::StartConfig c;
    c.path = config->config_path != nullptr ? config->config_path : "";
    if (v05 && config->config_yaml != nullptr) c.yaml = config->config_yaml;
    if (v05 && config->mode != SPYRE_MODE_DEFAULT) {
      switch (config->mode) {
        case SPYRE_MODE_TIMED: c.mode = spyre::driver::Mode::timed; break;
        case SPYRE_MODE_FUNCTIONAL: c.mode = spyre::driver::Mode::functional; break;
        case SPYRE_MODE_NO_DATA: c.mode = spyre::driver::Mode::no_data; break;
        default:
          raise(SPYRE_ERROR_INVALID_ARGUMENT,
                fmt::format("config->mode: expected a spyre_device_mode_t (0 to 3), found {}", config->mode));
      }
    }
    if (config->num_overrides > 0) require(config->overrides, "config->overrides");
    for (uint32_t i = 0; i < config->num_overrides; ++i) {
      if (config->overrides[i] == nullptr) {
        raise(SPYRE_ERROR_INVALID_NULL_POINTER, fmt::format("config->overrides[{}] is NULL", i));
      }
      c.overrides.emplace_back(config->overrides[i]);
    }
    c.devices = config->device_count;
    Runtime::configure(std::move(c));
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDriverInit(uint32_t api_version) {
  return guarded(__func__, [&] {
    if ((api_version >> 16) != (SPYRE_API_VERSION_CURRENT >> 16)) {
      raise(SPYRE_ERROR_UNSUPPORTED_VERSION,
            fmt::format("caller built for API {}.{}, driver implements {}.{}", api_version >> 16, api_version & 0xffff,
                        SPYRE_API_VERSION_CURRENT >> 16, SPYRE_API_VERSION_CURRENT & 0xffff));
    }
    Runtime::get();
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDriverShutdown(void) {
  return guarded(__func__, [&] {
    Runtime::shutdown();
    return SPYRE_SUCCESS;
  });
}

const char* spyreResultString(spyre_result_t result) {
  switch (result) {
#define SPYRE_RESULT_NAME(code) \
  case code:                    \
    return #code;
    SPYRE_RESULT_NAME(SPYRE_SUCCESS)
    SPYRE_RESULT_NAME(SPYRE_NOT_READY)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_ARGUMENT)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_HANDLE)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_NULL_POINTER)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_SIZE)
    SPYRE_RESULT_NAME(SPYRE_ERROR_UNSUPPORTED_VERSION)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_DEVICE_POINTER)
    SPYRE_RESULT_NAME(SPYRE_ERROR_DOUBLE_FREE)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_PROGRAM)
    SPYRE_RESULT_NAME(SPYRE_ERROR_QUEUE_IN_ERROR_STATE)
    SPYRE_RESULT_NAME(SPYRE_ERROR_OUT_OF_DEVICE_MEMORY)
    SPYRE_RESULT_NAME(SPYRE_ERROR_DEVICE_FAULT)
    SPYRE_RESULT_NAME(SPYRE_ERROR_DEVICE_LOST)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INTERNAL)
    SPYRE_RESULT_NAME(SPYRE_ERROR_OUT_OF_HOST_MEMORY)
    SPYRE_RESULT_NAME(SPYRE_ERROR_NOT_INITIALIZED)
#undef SPYRE_RESULT_NAME
    case SPYRE_RESULT_FORCE_UINT32:
      break;
  }
  return "SPYRE_RESULT_UNKNOWN";
}

const char* spyreGetLastErrorMessage(void) { return t_last_error.c_str(); }

spyre_result_t spyreDriverGetHostTime(uint64_t* host_time_ps) {
  return guarded(__func__, [&] {
    require(host_time_ps, "host_time_ps");
    *host_time_ps = Runtime::get().host_time();
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGetCount(uint32_t* count) {
  return guarded(__func__, [&] {
    require(count, "count");
    *count = static_cast<uint32_t>(Runtime::get().devices().size());
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGet(uint32_t index, spyre_device_t* device) {
  return guarded(__func__, [&] {
    require(device, "device");
    Runtime& rt = Runtime::get();
    if (index >= rt.devices().size()) {
      raise(SPYRE_ERROR_INVALID_ARGUMENT,
            fmt::format("device index {} is out of range (there are {}; SPYRE_SIM_DEVICES)", index, rt.devices().size()));
    }
    *device = static_cast<spyre_device_t>(rt.devices()[index]->handle);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGetProperties(spyre_device_t device, spyre_device_properties_t* p) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(p, "properties");
    require_size(p->struct_size, sizeof(spyre_device_properties_t), "spyre_device_properties_t");
    const auto& c = d->config.chip;
    const auto& f = d->chip->figures();
    const uint32_t size = p->struct_size;
    std::memset(p, 0, sizeof *p);
    p->struct_size = size;
    p->isa_version = isa::kIsaVersion;
    copy_string(p->name, sizeof p->name, fmt::format("spyre:{}", d->index));
    copy_string(p->config_name, sizeof p->config_name, c.name);
    copy_string(p->config_hash, sizeof p->config_hash, d->config.hash);
    p->timed = rt.mode() == spyre::driver::Mode::functional ? 0 : 1;
    p->cores = static_cast<uint32_t>(c.cores.count);
    p->corelets_per_core = static_cast<uint32_t>(c.cores.corelets);
    p->array_rows = static_cast<uint32_t>(c.cores.compute_array.rows);
    p->array_cols = static_cast<uint32_t>(c.cores.compute_array.cols);
    for (const auto t : spyre::config::kMacTypes) {
      p->simd_depth[static_cast<int>(t)] =
          static_cast<uint32_t>(spyre::config::simd_depth(c.cores.compute_array.simd_depth, t));
      p->peak_macs_per_s[static_cast<int>(t)] = f.peak_macs_per_s[static_cast<int>(t)];
    }
    p->vector_units_per_corelet = static_cast<uint32_t>(c.cores.vector.units_per_corelet);
    p->vector_lanes = static_cast<uint32_t>(c.cores.vector.lanes);
    p->scratchpad_bytes = c.cores.scratchpad.bytes;
    p->scratchpad_usable_bytes = c.cores.scratchpad.usable_bytes;
    p->dma_engines_per_core = static_cast<uint32_t>(c.dma.engines_per_core);
    p->stick_bytes = static_cast<uint32_t>(c.dma.stick_bytes);
    p->memory_bytes = c.memory.usable_bytes;
    p->memory_channels = static_cast<uint32_t>(c.memory.channels);
    p->max_kernel_args = isa::kMaxArgs;
    p->clock_ghz = c.clock_ghz;
    p->dram_peak_bytes_per_s = f.dram_peak_bytes_per_s;
    p->dram_deliverable_bytes_per_s = f.dram_deliverable_bytes_per_s;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceSynchronize(spyre_device_t device) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    bool error = false;
    rt.block_until(d.get(), [&] {
      if (!d->firmware->device_idle()) return false;
      for (const auto& q : d->firmware->queues()) error = error || q->error;
      return true;
    });
    if (error) return fail(SPYRE_ERROR_DEVICE_FAULT, "spyreDeviceSynchronize: a queue of the device is in error state");
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreMemAlloc(spyre_device_t device, size_t bytes, void** ptr) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(ptr, "ptr");
    rt.advance(d.get());
    auto& memory = d->chip->memory();
    const auto address = memory.allocate(bytes);
    if (!address) {
      raise(SPYRE_ERROR_OUT_OF_DEVICE_MEMORY,
            fmt::format("spyre:{} cannot allocate {} bytes: {} bytes in use of {}, largest free block {} bytes",
                        d->index, bytes, memory.bytes_in_use(), memory.usable(), memory.largest_free_block()));
    }
    *ptr = reinterpret_cast<void*>(*address);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreMemFree(void* ptr) {
  return guarded(__func__, [&] {
    require(ptr, "ptr");
    Runtime& rt = Runtime::get();
    Device* d = rt.device_of(ptr);
    if (d == nullptr) raise(SPYRE_ERROR_INVALID_DEVICE_POINTER, fmt::format("{} is not device memory", ptr));
    wait_device_idle(rt, d);
    using FreeResult = spyre::sim::DeviceMemory::FreeResult;
    switch (d->chip->memory().free(addr(ptr))) {
      case FreeResult::ok: return SPYRE_SUCCESS;
      case FreeResult::double_free: raise(SPYRE_ERROR_DOUBLE_FREE, fmt::format("{} was already freed", ptr));
      case FreeResult::not_a_base:
        raise(SPYRE_ERROR_INVALID_DEVICE_POINTER, fmt::format("{} is inside an allocation, not its start", ptr));
      case FreeResult::unknown:
        raise(SPYRE_ERROR_INVALID_DEVICE_POINTER, fmt::format("{} was never allocated", ptr));
    }
    return SPYRE_ERROR_INTERNAL;
  });
}

spyre_result_t spyreMemGetInfo(spyre_device_t device, size_t* free_bytes, size_t* total_bytes) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(free_bytes, "free_bytes");
    require(total_bytes, "total_bytes");
    const auto& memory = d->chip->memory();
    *total_bytes = memory.usable();
    *free_bytes = memory.usable() - memory.bytes_in_use();
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyrePointerGetAttributes(const void* ptr, spyre_pointer_attributes_t* a) {
  return guarded(__func__, [&] {
    require(a, "attributes");
    require_size(a->struct_size, sizeof(spyre_pointer_attributes_t), "spyre_pointer_attributes_t");
    Runtime& rt = Runtime::get();
    const uint32_t size = a->struct_size;
    std::memset(a, 0, sizeof *a);
    a->struct_size = size;
    if (Device* d = rt.device_of(ptr)) {
      if (const auto alloc = d->chip->memory().find(addr(ptr))) {
        a->type = SPYRE_MEMORY_TYPE_DEVICE;
        a->device = static_cast<spyre_device_t>(d->handle);
        a->base = reinterpret_cast<void*>(alloc->base);
        a->size = alloc->size;
      }
    } else if (const auto pinned = rt.pinned_range(ptr)) {
      a->type = SPYRE_MEMORY_TYPE_HOST_PINNED;
      a->base = reinterpret_cast<void*>(pinned->first);
      a->size = pinned->second;
    }
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreHostAlloc(size_t bytes, void** ptr) {
  return guarded(__func__, [&] {
    require(ptr, "ptr");
    if (bytes == 0) raise(SPYRE_ERROR_INVALID_SIZE, "bytes must be positive");
    Runtime& rt = Runtime::get();
    // Whole pages; a size whose rounding does not fit size_t cannot be allocated.
    const auto rounded = spyre::checked::add(bytes, std::size_t{4095});
    void* p = rounded ? std::aligned_alloc(4096, *rounded / 4096 * 4096) : nullptr;
    if (p == nullptr) raise(SPYRE_ERROR_OUT_OF_HOST_MEMORY, fmt::format("cannot allocate {} bytes", bytes));
    if (!rt.add_pinned(p, bytes)) {
      const std::string where = fmt::format("{}", p);
      std::free(p);
      raise(SPYRE_ERROR_INTERNAL, "the new host buffer " + where + " overlaps a registered range");
    }
    *ptr = p;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreHostFree(void* ptr) {
  return guarded(__func__, [&] {
    release_pinned(Runtime::get(), ptr, "memory from spyreHostAlloc");
    std::free(ptr);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreHostRegister(void* ptr, size_t bytes) {
  return guarded(__func__, [&] {
    require(ptr, "ptr");
    if (bytes == 0) raise(SPYRE_ERROR_INVALID_SIZE, "bytes must be positive");
    if (!spyre::checked::add(addr(ptr), std::uint64_t{bytes})) {
      raise(SPYRE_ERROR_INVALID_SIZE, fmt::format("[{}, +{}) runs past the end of the address space", ptr, bytes));
    }
    if (!Runtime::get().add_pinned(ptr, bytes)) {
      raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("[{}, +{}) overlaps a registered range", ptr, bytes));
    }
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreHostUnregister(void* ptr) {
  return guarded(__func__, [&] {
    release_pinned(Runtime::get(), ptr, "the start of a registered range");
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueCreate(spyre_device_t device, spyre_queue_priority_t priority, spyre_queue_t* queue) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(queue, "queue");
    int level = 0;
    switch (priority) {
      case SPYRE_QUEUE_PRIORITY_LOW: level = -1; break;
      case SPYRE_QUEUE_PRIORITY_NORMAL: level = 0; break;
      case SPYRE_QUEUE_PRIORITY_HIGH: level = 1; break;
      default: raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("unknown queue priority {}", static_cast<int>(priority)));
    }
    auto q = std::make_shared<QueueObject>();
    q->device = d.get();
    q->queue = std::make_shared<firmware::Queue>();
    q->queue->priority = level;
    void* handle = rt.add(q);
    q->queue->id = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(handle) & 0xffffffffu);
    q->queue->tag = reinterpret_cast<std::uintptr_t>(handle);
    rt.post(d.get(), [fw = d->firmware.get(), fq = q->queue] { fw->add_queue(fq); });
    *queue = static_cast<spyre_queue_t>(handle);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueDestroy(spyre_queue_t queue) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = rt.lookup<QueueObject>(queue, "queue");
    rt.block_until(q->device, [&] { return q->device->firmware->idle(*q->queue); });
    if (!rt.remove(queue)) raise(SPYRE_ERROR_INVALID_HANDLE, "queue handle was destroyed meanwhile by another thread");
    rt.post(q->device, [fw = q->device->firmware.get(), fq = q->queue] { fw->remove_queue(fq.get()); });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueQuery(spyre_queue_t queue) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = rt.lookup<QueueObject>(queue, "queue");
    bool idle = false, error = false;
    rt.query(q->device, [&] {
      idle = q->device->firmware->idle(*q->queue);
      error = q->queue->error;
    });
    if (!idle) return SPYRE_NOT_READY;
    if (error) {
      q->error_seen = true;
      return fail(SPYRE_ERROR_DEVICE_FAULT, "spyreQueueQuery: the queue is in error state");
    }
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueSynchronize(spyre_queue_t queue) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    return wait_idle(rt, rt.lookup<QueueObject>(queue, "queue"));
  });
}

spyre_result_t spyreQueueGetFault(spyre_queue_t queue, spyre_fault_t* fault) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = rt.lookup<QueueObject>(queue, "queue");
    require(fault, "fault");
    require_size(fault->struct_size, sizeof(spyre_fault_t), "spyre_fault_t");
    std::optional<firmware::FaultRecord> record;
    std::uint64_t skipped = 0;
    rt.query(q->device, [&] {
      record = q->queue->fault;
      skipped = q->queue->skipped;
    });
    if (!record) return SPYRE_NOT_READY;
    const uint32_t size = fault->struct_size;
    std::memset(fault, 0, sizeof *fault);
    fault->struct_size = size;
    fault->command = static_cast<spyre_command_kind_t>(record->command);
    fault->command_index = record->command_index;
    fault->time_ps = record->time;
    copy_string(fault->kernel, sizeof fault->kernel, record->kernel);
    fault->core = record->core;
    fault->pc = record->pc;
    copy_string(fault->instruction, sizeof fault->instruction, record->instruction);
    fault->address = record->address;
    copy_string(fault->reason, sizeof fault->reason, record->reason);
    fault->skipped_commands = skipped;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueAcknowledgeError(spyre_queue_t queue) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = rt.lookup<QueueObject>(queue, "queue");
    rt.block_until(q->device, [&] {
      if (!q->device->firmware->idle(*q->queue)) return false;
      q->device->firmware->acknowledge(*q->queue);
      return true;
    });
    q->error_seen = false;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreMemcpy(void* dst, const void* src, size_t bytes) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    Endpoints ends{};
    firmware::Copy c = make_copy(rt, dst, bytes, src, bytes, bytes, 1, false, ends);
    if (bytes == 0) return SPYRE_SUCCESS;
    // Ordered after everything already submitted to the devices involved.
    if (ends.dst_device && ends.src_device && ends.dst_device != ends.src_device) wait_device_idle(rt, ends.dst_device);
    run_synchronously(rt, queue_device_for(ends), std::move(c));
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreMemcpyAsync(spyre_queue_t queue, void* dst, const void* src, size_t bytes) {
  return guarded(__func__, [&] { return copy_async(queue, dst, bytes, src, bytes, bytes, 1); });
}

spyre_result_t spyreMemcpy2DAsync(spyre_queue_t queue, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                                  size_t width, size_t height) {
  return guarded(__func__, [&] { return copy_async(queue, dst, dst_pitch, src, src_pitch, width, height); });
}

spyre_result_t spyreMemFill(void* dst, const void* pattern, size_t pattern_size, size_t bytes) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    Device* d = nullptr;
    firmware::Fill f = make_fill(rt, dst, pattern, pattern_size, bytes, d);
    run_synchronously(rt, d, f);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreMemFillAsync(spyre_queue_t queue, void* dst, const void* pattern, size_t pattern_size,
                                 size_t bytes) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = usable_queue(rt, queue);
    Device* d = nullptr;
    firmware::Fill f = make_fill(rt, dst, pattern, pattern_size, bytes, d);
    if (d != q->device) raise(SPYRE_ERROR_INVALID_ARGUMENT, "dst is memory of another device than the queue's");
    submit(rt, q, f);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueFence(spyre_queue_t queue) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    submit(rt, usable_queue(rt, queue), firmware::Fence{});
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreEventCreate(spyre_device_t device, spyre_event_t* event) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(event, "event");
    auto e = std::make_shared<EventObject>();
    e->device = d.get();
    e->state = std::make_shared<firmware::EventState>();
    *event = static_cast<spyre_event_t>(rt.add(e));
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreEventDestroy(spyre_event_t event) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    rt.lookup<EventObject>(event, "event");
    // Queued records keep the state alive until they complete.
    if (!rt.remove(event)) raise(SPYRE_ERROR_INVALID_HANDLE, "event handle was destroyed meanwhile by another thread");
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreEventRecord(spyre_event_t event, spyre_queue_t queue) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto e = rt.lookup<EventObject>(event, "event");
    auto q = usable_queue(rt, queue);
    if (e->device != q->device) raise(SPYRE_ERROR_INVALID_ARGUMENT, "the event and the queue are on different devices");
    // The slot first: a generation must not become visible to waiters (another thread's
    // spyreQueueWaitEvent) while its record still waits for room in a full queue.
    take_ring_slot(rt, q);
    post_command(rt, q, firmware::EventRecord{e->state, ++e->generation});
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueWaitEvent(spyre_queue_t queue, spyre_event_t event) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = usable_queue(rt, queue);
    auto e = rt.lookup<EventObject>(event, "event");
    submit(rt, q, firmware::EventWait{e->state, e->generation.load()});
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreEventQuery(spyre_event_t event) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto e = rt.lookup<EventObject>(event, "event");
    const std::uint64_t generation = e->generation;
    bool complete = false;
    rt.query(e->device, [&] { complete = e->state->completed >= generation; });
    return complete ? SPYRE_SUCCESS : SPYRE_NOT_READY;
  });
}

spyre_result_t spyreEventSynchronize(spyre_event_t event) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto e = rt.lookup<EventObject>(event, "event");
    const std::uint64_t generation = e->generation;
    rt.block_until(e->device, [&] { return e->state->completed >= generation; });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreEventGetTimestamp(spyre_event_t event, uint64_t* time_ps) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto e = rt.lookup<EventObject>(event, "event");
    require(time_ps, "time_ps");
    const std::uint64_t generation = e->generation;
    if (generation == 0) raise(SPYRE_ERROR_INVALID_ARGUMENT, "the event was never recorded");
    bool complete = false;
    rt.query(e->device, [&] {
      complete = e->state->completed >= generation;
      *time_ps = e->state->time;
    });
    return complete ? SPYRE_SUCCESS : SPYRE_NOT_READY;
  });
}

spyre_result_t spyreEventElapsedTime(spyre_event_t start, spyre_event_t end, double* nanoseconds) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto a = rt.lookup<EventObject>(start, "start event");
    auto b = rt.lookup<EventObject>(end, "end event");
    require(nanoseconds, "nanoseconds");
    if (a->device != b->device) raise(SPYRE_ERROR_INVALID_ARGUMENT, "the events are on different devices");
    const std::uint64_t ga = a->generation, gb = b->generation;
    if (ga == 0 || gb == 0) raise(SPYRE_ERROR_INVALID_ARGUMENT, "an event was never recorded");
    bool complete = false;
    std::uint64_t ta = 0, tb = 0;
    rt.query(a->device, [&] {
      complete = a->state->completed >= ga && b->state->completed >= gb;
      ta = a->state->time;
      tb = b->state->time;
    });
    if (!complete) return SPYRE_NOT_READY;
    *nanoseconds = (static_cast<double>(tb) - static_cast<double>(ta)) / 1000.0;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreProgramLoad(spyre_device_t device, const void* blob, size_t bytes, const char* name,
                                spyre_program_t* program) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(blob, "blob");
    require(program, "program");
    const auto* b = static_cast<const std::uint8_t*>(blob);
    std::shared_ptr<const isa::Program> parsed;
    try {
      auto p = std::make_shared<isa::Program>(std::vector<std::uint8_t>(b, b + bytes));
      p->validate(d->chip->limits(d->chip->num_cores()));
      parsed = std::move(p);
    } catch (const isa::ProgramError& e) {
      raise(SPYRE_ERROR_INVALID_PROGRAM, fmt::format("program rejected by spyre:{}: {}", d->index, e.what()));
    }
    rt.advance(d.get());
    const auto copy = d->chip->memory().allocate(bytes);
    if (!copy) raise(SPYRE_ERROR_OUT_OF_DEVICE_MEMORY, fmt::format("no room for the {}-byte program", bytes));
    std::memcpy(d->chip->memory().host(*copy), b, bytes);
    auto p = std::make_shared<ProgramObject>();
    p->device = d.get();
    p->program = std::move(parsed);
    p->name = name != nullptr && *name != '\0' ? name : p->program->name();
    p->device_copy = *copy;
    *program = static_cast<spyre_program_t>(rt.add(p));
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreProgramUnload(spyre_program_t program) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto p = rt.lookup<ProgramObject>(program, "program");
    if (!rt.remove(program)) {
      raise(SPYRE_ERROR_INVALID_HANDLE, "program handle was destroyed meanwhile by another thread");
    }
    wait_device_idle(rt, p->device);  // launches already submitted keep using it
    p->device->chip->memory().free(p->device_copy);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreProgramGetInfo(spyre_program_t program, uint32_t* num_streams, uint64_t* bytes) {
  return guarded(__func__, [&] {
    auto p = Runtime::get().lookup<ProgramObject>(program, "program");
    require(num_streams, "num_streams");
    require(bytes, "bytes");
    *num_streams = p->program->num_streams();
    *bytes = p->program->bytes().size();
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreLaunch(spyre_queue_t queue, const spyre_launch_desc_t* desc) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = usable_queue(rt, queue);
    require(desc, "desc");
    require_size(desc->struct_size, sizeof(spyre_launch_desc_t), "spyre_launch_desc_t");
    auto p = rt.lookup<ProgramObject>(desc->program, "program");
    if (p->device != q->device) raise(SPYRE_ERROR_INVALID_ARGUMENT, "the program was loaded on another device");
    if (desc->num_args > isa::kMaxArgs) {
      raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("{} arguments, at most {}", desc->num_args, isa::kMaxArgs));
    }
    if (desc->num_args > 0) require(desc->args, "desc->args");
    const std::uint32_t cores = q->device->chip->num_cores();
    // Configs allow at most SPYRE_MAX_CORES cores (config::kMaxCores), the mask's width.
    static_assert(sizeof(desc->core_mask) * 8 == SPYRE_MAX_CORES && SPYRE_MAX_CORES == isa::kMaxStreams);
    if (cores > SPYRE_MAX_CORES) {
      raise(SPYRE_ERROR_INTERNAL, fmt::format("the device has {} cores, more than the {} a core mask holds", cores,
                                              SPYRE_MAX_CORES));
    }
    std::vector<bool> mask;
    std::uint32_t allowed = cores;
    const bool any = std::all_of(std::begin(desc->core_mask), std::end(desc->core_mask), [](uint64_t w) { return w == 0; });
    if (!any) {
      mask.assign(cores, false);
      allowed = 0;
      for (std::uint32_t c = 0; c < cores; ++c) {
        mask[c] = (desc->core_mask[c / 64] >> (c % 64)) & 1u;
        allowed += mask[c];
      }
    }
    if (allowed < p->program->num_streams()) {
      raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("the program has {} streams but the core mask allows {} of the "
                                                      "device's {} cores",
                                                      p->program->num_streams(), allowed, cores));
    }
    firmware::Launch l;
    l.program = p->program;
    l.args.assign(desc->args, desc->args + desc->num_args);
    l.core_mask = std::move(mask);
    l.name = desc->name != nullptr && *desc->name != '\0' ? desc->name : p->name;
    l.queue_tag = reinterpret_cast<std::uintptr_t>(queue);
    // The host call on the trace's host track (at the virtual host time it ends), with
    // an arrow to the kernel it launched.
    static std::atomic<std::uint64_t> flows{0};
    l.flow = ++flows;
    take_ring_slot(rt, q);
    rt.post(q->device, [fw = q->device->firmware.get(), chip = q->device->chip.get(), queue = q->queue,
                        overhead = q->device->call_overhead, name = l.name, flow = l.flow,
                        b = firmware::CommandBody(std::move(l))]() mutable {
      if (chip->tracing()) {  // (never touches the SystemC clock otherwise: functional devices)
        const spyre::sim::Picoseconds now = spyre::sim::Simulation::now();
        chip->trace_host_call(name, now > overhead ? now - overhead : 0, now, flow);
      }
      fw->submit(queue, std::move(b));
    });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGetStats(spyre_device_t device, spyre_device_stats_t* stats) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(stats, "stats");
    require_size(stats->struct_size, sizeof(spyre_device_stats_t), "spyre_device_stats_t");
    const uint32_t size = stats->struct_size;
    rt.query(d.get(), [&] {
      const auto& s = d->chip->stats();
      std::memset(stats, 0, sizeof *stats);
      stats->struct_size = size;
      stats->time_ps = spyre::sim::Simulation::now();
      for (std::size_t i = 0; i < s.macs.size(); ++i) stats->macs[i] = s.macs[i];
      stats->instructions = s.instructions;
      stats->launches = s.launches;
      stats->faults = s.faults;
      stats->dram_read_bytes = s.dram_read_bytes;
      stats->dram_write_bytes = s.dram_write_bytes;
      stats->host_to_device_bytes = s.host_to_device_bytes;
      stats->device_to_host_bytes = s.device_to_host_bytes;
    });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGetLaunchRecords(spyre_device_t device, uint32_t* count, spyre_launch_record_t* records) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(count, "count");
    if (records != nullptr) {
      for (uint32_t i = 0; i < *count; ++i) {
        require_size(records[i].struct_size, sizeof(spyre_launch_record_t), "spyre_launch_record_t");
      }
    }
    rt.query(d.get(), [&] {
      const auto& all = d->chip->stats().launch_records;
      if (records == nullptr) {
        *count = static_cast<uint32_t>(all.size());
        return;
      }
      const uint32_t n = std::min<uint32_t>(*count, static_cast<uint32_t>(all.size()));
      for (uint32_t i = 0; i < n; ++i) {
        const auto& r = all[i];
        spyre_launch_record_t& out = records[i];
        const uint32_t size = out.struct_size;
        std::memset(&out, 0, sizeof out);
        out.struct_size = size;
        copy_string(out.name, sizeof out.name, r.name);
        out.queue = reinterpret_cast<spyre_queue_t>(r.queue_tag);
        out.start_ps = r.start;
        out.end_ps = r.end;
        for (std::size_t m = 0; m < r.macs.size(); ++m) out.macs[m] = r.macs[m];
        out.dram_read_bytes = r.dram_read_bytes;
        out.dram_write_bytes = r.dram_write_bytes;
        out.ring_bytes = r.ring_bytes;
        out.cores = static_cast<uint32_t>(r.cores.size());
        out.faulted = r.fault.has_value();
      }
      *count = n;
    });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGetReport(spyre_device_t device, char* json, size_t* bytes) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(bytes, "bytes");
    std::string text;
    rt.query(d.get(), [&] {
      // Over the span of the recorded work, so the report does not change between the
      // two calls of the size-query pattern unless work completes in between.
      auto report = d->chip->report(d->chip->active_span());
      report["config"] = {{"name", d->config.chip.name},
                          {"hash", d->config.hash},
                          {"source", d->config.source},
                          {"overrides", d->config.overrides},
                          {"resolved", spyre::config::to_json(d->config.chip)}};
      report["derived"] = spyre::config::to_json(d->chip->figures());
      text = report.dump();
    });
    const std::size_t needed = text.size() + 1;
    if (json == nullptr) {
      *bytes = needed;
      return SPYRE_SUCCESS;
    }
    if (*bytes < needed) {
      const std::size_t given = *bytes;
      *bytes = needed;
      raise(SPYRE_ERROR_INVALID_SIZE, fmt::format("the report needs {} bytes, the buffer has {}", needed, given));
    }
    std::memcpy(json, text.c_str(), needed);
    *bytes = needed;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceResetStats(spyre_device_t device) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    rt.block_until(d.get(), [&] {
      if (!d->firmware->device_idle()) return false;
      d->chip->reset_stats();
      return true;
    });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreTraceStart(spyre_device_t device) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    bool already = false;
    rt.query(d.get(), [&] {
      already = d->chip->tracing();
      if (!already) d->chip->start_trace();
    });
    if (already) raise(SPYRE_ERROR_INVALID_ARGUMENT, "the device is already tracing");
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreTraceStop(spyre_device_t device, const char* path) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(path, "path");
    std::string problem;
    rt.block_until(d.get(), [&] {
      if (!d->firmware->device_idle()) return false;
      if (!d->chip->tracing()) {
        problem = "the device is not tracing";
        return true;
      }
      try {
        d->chip->stop_trace(path);
      } catch (const std::exception& e) {
        problem = e.what();
      }
      return true;
    });
    if (!problem.empty()) raise(SPYRE_ERROR_INVALID_ARGUMENT, problem);
    return SPYRE_SUCCESS;
  });
}

}  // extern "C"
