#include "runtime/launch.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "runtime/caching_allocator.h"
#include "runtime/derived.h"
#include "runtime/driver.h"
#include "runtime/profiler.h"
#include "runtime/streams.h"

namespace spyre::backend {

bool launch_blocking() {
  static const bool blocking = [] {
    const char* v = std::getenv("SPYRE_LAUNCH_BLOCKING");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return blocking;
}

namespace {
thread_local DeferredFlush deferred_flush = nullptr;
}  // namespace

void set_deferred_flush(DeferredFlush flush) { deferred_flush = flush; }

void flush_deferred() {
  if (deferred_flush != nullptr) deferred_flush();
}

spyre_program_t load_program(c10::DeviceIndex device, const std::vector<std::uint8_t>& blob, const std::string& name) {
  spyre_program_t program = nullptr;
  spyre_result_t rc = spyreProgramLoad(driver_device(device), blob.data(), blob.size(), name.c_str(), &program);
  if (rc == SPYRE_ERROR_OUT_OF_DEVICE_MEMORY) {
    empty_cache();
    rc = spyreProgramLoad(driver_device(device), blob.data(), blob.size(), name.c_str(), &program);
  }
  if (rc != SPYRE_SUCCESS) driver_failure(rc, "spyreProgramLoad");
  return program;
}

void launch_program(c10::DeviceIndex device, const std::vector<std::uint8_t>& blob,
                    const std::vector<std::uint64_t>& args, const std::string& op_name) {
  // Loaded programs, by device and exact bytes (the kernel compiler keys its own cache
  // by op, shapes and config; this only avoids loading identical blobs twice).
  static std::mutex mutex;
  static std::map<std::pair<c10::DeviceIndex, std::vector<std::uint8_t>>, spyre_program_t> loaded;
  spyre_program_t program = nullptr;
  {
    const std::lock_guard lock(mutex);
    auto& slot = loaded[{device, blob}];
    if (slot == nullptr) slot = load_program(device, blob, op_name);
    program = slot;
  }
  launch(device, program, args, op_name);
}

void launch(c10::DeviceIndex device, spyre_program_t program, const std::vector<std::uint64_t>& args,
            const std::string& op_name, Traffic traffic) {
  flush_deferred();
  spyre_launch_desc_t desc{};
  desc.struct_size = sizeof desc;
  desc.program = program;
  desc.args = args.data();
  desc.num_args = static_cast<std::uint32_t>(args.size());
  desc.name = op_name.c_str();
  desc.min_read_bytes = traffic.read;
  desc.min_write_bytes = traffic.written;
  const c10::Stream stream = current_stream(device);
  const spyre_queue_t queue = queue_of(stream);
  // (Which arguments the kernel stores to is in its program, not here: any of them.)
  for (const std::uint64_t a : args) derived::note_write(reinterpret_cast<const void*>(a));
  const spyre_result_t rc = spyreLaunch(queue, &desc);
  if (rc == SPYRE_ERROR_QUEUE_IN_ERROR_STATE) synchronize_queue(queue, op_name.c_str());
  if (rc != SPYRE_SUCCESS) driver_failure(rc, "spyreLaunch");
  profiler::note_launch(stream, op_name);
  if (launch_blocking()) synchronize_queue(queue, op_name.c_str());
}

}  // namespace spyre::backend
