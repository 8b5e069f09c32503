#include "runtime/streams.h"

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "runtime/launch.h"

namespace spyre::backend {
namespace {

constexpr int kStreamCount = 1 + 2 * kStreamsPerPool;  // default, normal pool, high pool

struct DeviceStreams {
  std::once_flag once[kStreamCount];
  std::array<spyre_queue_t, kStreamCount> queues{};
  std::array<std::atomic<bool>, kStreamCount> created{};
  std::atomic<unsigned> next_normal{0}, next_high{0};
};

DeviceStreams& streams_of(c10::DeviceIndex device) {
  check_device_index(device);
  static std::vector<DeviceStreams> all(static_cast<std::size_t>(device_count_or_zero()));
  return all[static_cast<std::size_t>(device)];
}

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

thread_local std::vector<c10::StreamId> t_current;  // per device

}  // namespace

c10::Stream default_stream(c10::DeviceIndex device) {
  check_device_index(device);
  return make_stream(device, 0);
}

c10::Stream stream_from_pool(c10::DeviceIndex device, bool high_priority) {
  auto& s = streams_of(device);
  const unsigned n = (high_priority ? s.next_high : s.next_normal)++ % kStreamsPerPool;
  return make_stream(device, 1 + (high_priority ? kStreamsPerPool : 0) + static_cast<c10::StreamId>(n));
}

c10::Stream current_stream(c10::DeviceIndex device) {
  check_device_index(device);
  if (t_current.size() <= static_cast<std::size_t>(device)) return default_stream(device);
  return make_stream(device, t_current[static_cast<std::size_t>(device)]);
}

c10::Stream exchange_stream(c10::Stream stream) {
  const c10::DeviceIndex device = stream.device_index();
  const c10::Stream previous = current_stream(device);
  if (t_current.size() <= static_cast<std::size_t>(device)) t_current.resize(static_cast<std::size_t>(device) + 1, 0);
  t_current[static_cast<std::size_t>(device)] = stream.id();
  return previous;
}

spyre_queue_t queue_of(c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "spyre: not a spyre stream: ", stream);
  TORCH_CHECK(stream.id() >= 0 && stream.id() < kStreamCount, "spyre: unknown stream id ", stream.id());
  auto& s = streams_of(stream.device_index());
  const auto id = static_cast<std::size_t>(stream.id());
  std::call_once(s.once[id], [&] {
    const auto priority = id == 0                    ? SPYRE_QUEUE_PRIORITY_NORMAL
                          : id <= kStreamsPerPool ? SPYRE_QUEUE_PRIORITY_NORMAL
                                                  : SPYRE_QUEUE_PRIORITY_HIGH;
    SPYRE_CHECK(spyreQueueCreate(driver_device(stream.device_index()), priority, &s.queues[id]));
    s.created[id] = true;
  });
  return s.queues[id];
}

std::vector<spyre_queue_t> created_queues(c10::DeviceIndex device) {
  auto& s = streams_of(device);
  std::vector<spyre_queue_t> out;
  for (int id = 0; id < kStreamCount; ++id) {
    if (s.created[static_cast<std::size_t>(id)]) out.push_back(s.queues[static_cast<std::size_t>(id)]);
  }
  return out;
}

void synchronize_queue(spyre_queue_t queue, const char* what) {
  flush_deferred();
  const spyre_result_t rc = spyreQueueSynchronize(queue);
  if (rc == SPYRE_ERROR_DEVICE_FAULT) {
    const std::string fault = describe_fault(queue);
    spyreQueueAcknowledgeError(queue);  // the device stays usable after the error is reported
    raise_device_fault(c10::str("spyre: ", what, ": ", fault));
  }
  if (rc != SPYRE_SUCCESS) driver_failure(rc, what);
}

}  // namespace spyre::backend
