// The backend's C++ interface for programs that drive the device through PyTorch (the
// spyre-sim CLI's workloads), beside the driver ABI (spyre/spyre_drv.h) and the ops
// libspyre_torch registers. Everything else under backend/ is the library's own: a tool
// includes this header, never runtime/ or aten/ (tools/check-layers).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include "spyre/spyre_drv.h"

namespace spyre::backend {

// The simulated device reported a fault (a Python RuntimeError, like every c10::Error):
// a type of its own, so callers classify failures by type rather than by message.
class DeviceFaultError : public c10::Error {
 public:
  using c10::Error::Error;
};

// How often each aten op ran through the CPU fallback ("aten::abs" -> calls).
std::map<std::string, std::int64_t> fallback_counts();
void reset_fallback_counts();

// The device's report (spyreDeviceGetReport's JSON text). Work still running may grow
// it between the size query and the copy; the call is retried with the larger size.
std::string device_report_json(spyre_device_t device);

// Streams: each c10::Stream of the spyre device is a driver queue (created on first use).
c10::Stream stream_from_pool(c10::DeviceIndex device, bool high_priority);
c10::Stream current_stream(c10::DeviceIndex device);
spyre_queue_t queue_of(c10::Stream stream);

// Runs the launches this thread holds back (a pointwise group being collected) before
// the caller queues work of its own on the driver directly.
void flush_deferred();

namespace derived {
// The caller is about to write device memory at `address` itself (a driver copy):
// drops what the backend derived from the storage that holds it.
void note_write(const void* address);
}  // namespace derived

}  // namespace spyre::backend
