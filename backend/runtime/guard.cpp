// DeviceGuardImplInterface for PrivateUse1: devices, streams and events as PyTorch's
// device-generic code (torch.Stream, torch.Event, DeviceGuard, autograd) sees them.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/caching_allocator.h"
#include "runtime/driver.h"
#include "runtime/launch.h"
#include "runtime/streams.h"

namespace spyre::backend {
namespace {

constexpr auto kType = c10::DeviceType::PrivateUse1;

// "spyre" without an index means the current device.
c10::DeviceIndex resolve(c10::Device d) { return d.has_index() ? d.index() : current_device(); }

struct SpyreGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kType);
    const c10::Device old = getDevice();
    if (old.index() != d.index()) set_current_device(d.index());
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kType);
    set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count_or_zero()) set_current_device(d.index());
  }

  c10::Stream getStream(c10::Device d) const noexcept override { return current_stream(resolve(d)); }
  c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(resolve(d)); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority = false) const override {
    return stream_from_pool(resolve(d), high_priority);
  }
  // As in CUDA, a negative priority is a high one.
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    return stream_from_pool(resolve(d), priority < 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return exchange_stream(s); }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count_or_zero(); }

  // Events are created lazily, on first record.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "spyre: event device index ",
                static_cast<int>(device_index), " does not match the stream's device ",
                static_cast<int>(stream.device_index()));
    auto** e = reinterpret_cast<spyre_event_t*>(event);
    if (*e == nullptr) SPYRE_CHECK(spyreEventCreate(driver_device(stream.device_index()), e));
    flush_deferred();
    SPYRE_CHECK(spyreEventRecord(*e, queue_of(stream)));
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;  // never recorded: nothing to wait for
    SPYRE_CHECK(spyreQueueWaitEvent(queue_of(stream), static_cast<spyre_event_t>(event)));
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    const spyre_result_t rc = spyreEventQuery(static_cast<spyre_event_t>(event));
    if (rc == SPYRE_NOT_READY) return false;
    if (rc != SPYRE_SUCCESS) driver_failure(rc, "spyreEventQuery");
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event != nullptr) spyreEventDestroy(static_cast<spyre_event_t>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) SPYRE_CHECK(spyreEventSynchronize(static_cast<spyre_event_t>(event)));
  }
  // Milliseconds of simulated time, like CUDA's.
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "spyre: both events must be recorded before elapsed_time");
    double ns = 0;
    SPYRE_CHECK(spyreEventSynchronize(static_cast<spyre_event_t>(end)));
    SPYRE_CHECK(spyreEventElapsedTime(static_cast<spyre_event_t>(start), static_cast<spyre_event_t>(end), &ns));
    return ns / 1e6;
  }

  bool queryStream(const c10::Stream& stream) const override {
    const spyre_result_t rc = spyreQueueQuery(queue_of(stream));
    if (rc == SPYRE_NOT_READY) return false;
    if (rc == SPYRE_ERROR_DEVICE_FAULT) synchronize_queue(queue_of(stream), "stream query");
    else if (rc != SPYRE_SUCCESS) driver_failure(rc, "spyreQueueQuery");
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize_queue(queue_of(stream), "stream synchronize");
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    // One wait for the whole device (each driver wait is a round trip to the simulation
    // thread); on a fault, the faulted stream's queue reports it with its record.
    flush_deferred();
    const spyre_result_t rc = spyreDeviceSynchronize(driver_device(device_index));
    if (rc == SPYRE_ERROR_DEVICE_FAULT) {
      for (const spyre_queue_t q : created_queues(device_index)) synchronize_queue(q, "device synchronize");
    }
    if (rc != SPYRE_SUCCESS) driver_failure(rc, "device synchronize");
  }
  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    record_stream(data, stream);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SpyreGuardImpl);

}  // namespace
}  // namespace spyre::backend
