// What the C ABI's entry points (abi_*.cpp) share: error reporting (`guarded`, so no
// exception crosses the ABI and every failure leaves a one-line message for
// spyreGetLastErrorMessage), argument checks, and the submission helpers (ring slots,
// synchronous commands, copies and fills built from their arguments).
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>

#include <fmt/format.h>

#include "driver/runtime.h"
#include "spyre/spyre_drv.h"

namespace spyre::driver::abi {

namespace firmware = spyre::firmware;
namespace isa = spyre::isa;

// Records `message` as the calling thread's last error; returns `code`.
spyre_result_t fail(spyre_result_t code, std::string message);
const char* last_error();

[[noreturn]] inline void raise(spyre_result_t code, std::string message) { throw Error{code, std::move(message)}; }

// Runs an entry point: its exceptions become result codes and messages.
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

void require(const void* p, const char* name);
// A versioned struct's struct_size must cover what this call reads.
void require_size(std::uint32_t struct_size, std::size_t known, const char* type);
inline std::uint64_t addr(const void* p) { return reinterpret_cast<std::uint64_t>(p); }
// Host ranges must end below this (57-bit user address spaces).
inline constexpr std::uint64_t kHostAddressLimit = std::uint64_t{1} << 57;
void copy_string(char* dst, std::size_t capacity, const std::string& s);

// Checks that [p, p + bytes) lies in one live allocation of `device`.
void check_device_range(Device& device, const void* p, std::uint64_t bytes, const char* what);
// The queue behind a handle, refused while its fault is unacknowledged.
std::shared_ptr<QueueObject> usable_queue(Runtime& rt, spyre_queue_t handle);

// Before posting a command: wait while the queue holds kMaxCommandsInFlight unfinished.
void take_ring_slot(Runtime& rt, const std::shared_ptr<QueueObject>& q);
// Posts a command without taking a ring slot (the caller took one).
void post_command(Runtime& rt, const std::shared_ptr<QueueObject>& q, firmware::CommandBody body);
void submit(Runtime& rt, const std::shared_ptr<QueueObject>& q, firmware::CommandBody body);
// Waits until the queue is idle; its fault as a result code.
spyre_result_t wait_idle(Runtime& rt, const std::shared_ptr<QueueObject>& q);
void wait_device_idle(Runtime& rt, Device* d);
// Forgets a pinned range once no submitted copy can still read or write it.
void release_pinned(Runtime& rt, void* ptr, const char* expected);
// Runs one command on the device's internal queue behind everything submitted before
// it, and waits for it; a failure is raised.
void run_synchronously(Runtime& rt, Device* d, firmware::CommandBody body);

// A copy's endpoints, classified (null: host memory).
struct Endpoints {
  Device* dst_device;
  Device* src_device;
};
firmware::Copy make_copy(Runtime& rt, void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t width, std::size_t height, bool snapshot_pageable, Endpoints& ends);
Device* queue_device_for(const Endpoints& ends);
spyre_result_t copy_async(spyre_queue_t queue, void* dst, std::size_t dst_pitch, const void* src,
                          std::size_t src_pitch, std::size_t width, std::size_t height);
firmware::Fill make_fill(Runtime& rt, void* dst, const void* pattern, std::size_t pattern_size, std::size_t bytes,
                         Device*& device);

}  // namespace spyre::driver::abi
