// The C ABI (include/spyre/spyre_drv.h), part of it: events: records, waits (across devices too), queries, timestamps.
// Arguments are validated here, then the runtime and the device facade do the work;
// every entry point is wrapped by `guarded` (abi_support.h).
#include <fmt/format.h>

#include "driver/abi_support.h"

using namespace spyre::driver;
using namespace spyre::driver::abi;

extern "C" {

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

}  // extern "C"
