// Streams: each c10::Stream of the spyre device is a driver queue. Per device: the
// default stream (id 0) and pools of normal- and high-priority streams handed out
// round robin (like CUDA's). The current stream is per thread and per device.
#pragma once

#include <vector>

#include <c10/core/Stream.h>

#include "runtime/driver.h"

namespace spyre::backend {

inline constexpr int kStreamsPerPool = 8;

c10::Stream default_stream(c10::DeviceIndex device);
// Makes `stream` current for its device on this thread; returns the previous one.
c10::Stream exchange_stream(c10::Stream stream);

// The driver queues of the device's streams that have been used so far.
std::vector<spyre_queue_t> created_queues(c10::DeviceIndex device);

// Synchronizes a queue; a device fault becomes a c10::Error naming `what` and the
// fault record, after which the queue is usable again.
void synchronize_queue(spyre_queue_t queue, const char* what);

}  // namespace spyre::backend
