// The C ABI (include/spyre/spyre_drv.h), part of it: memory: device allocations, pointer attributes, pinned host memory.
// Arguments are validated here, then the runtime and the device facade do the work;
// every entry point is wrapped by `guarded` (abi_support.h).
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "driver/abi_support.h"

using namespace spyre::driver;
using namespace spyre::driver::abi;

extern "C" {

spyre_result_t spyreMemAlloc(spyre_device_t device, size_t bytes, void** ptr) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(ptr, "ptr");
    rt.advance(d.get());
    auto& memory = d->memory();
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
    switch (d->memory().free(addr(ptr))) {
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
    const auto& memory = d->memory();
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
      if (const auto alloc = d->memory().find(addr(ptr))) {
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

}  // extern "C"
