// The C ABI (include/spyre/spyre_drv.h), part of it: queues and the commands they carry: copies, fills, fences; faults and their acknowledgement.
// Arguments are validated here, then the runtime and the device facade do the work;
// every entry point is wrapped by `guarded` (abi_support.h).
#include <cstring>

#include <fmt/format.h>

#include "driver/abi_support.h"

using namespace spyre::driver;
using namespace spyre::driver::abi;

extern "C" {

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
    rt.post(d.get(), [dev = d.get(), fq = q->queue] { dev->add_queue(fq); });
    *queue = static_cast<spyre_queue_t>(handle);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueDestroy(spyre_queue_t queue) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = rt.lookup<QueueObject>(queue, "queue");
    rt.block_until(q->device, [&] { return q->device->idle(*q->queue); });
    if (!rt.remove(queue)) raise(SPYRE_ERROR_INVALID_HANDLE, "queue handle was destroyed meanwhile by another thread");
    rt.post(q->device, [dev = q->device, fq = q->queue] { dev->remove_queue(fq.get()); });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueQuery(spyre_queue_t queue) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = rt.lookup<QueueObject>(queue, "queue");
    bool idle = false, error = false;
    rt.query(q->device, [&] {
      idle = q->device->idle(*q->queue);
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
      if (!q->device->idle(*q->queue)) return false;
      q->device->acknowledge(*q->queue);
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

}  // extern "C"
