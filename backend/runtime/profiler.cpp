#include "runtime/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <kineto/IActivityProfiler.h>
#include <kineto/libkineto.h>
#include <kineto/time_since_epoch.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "runtime/driver.h"
#include "runtime/streams.h"

namespace spyre::backend::profiler {
namespace {

using libkineto::ActivityType;

// Kineto's correlation ids of the ops running on this thread (pushed as each op starts).
thread_local std::vector<std::uint64_t> t_correlation;

// A launch made while a session recorded, and the device's record of it once found.
struct Launch {
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;
  spyre_queue_t queue = nullptr;
  std::string name;
  std::int64_t host_ns = 0;  // when the launch call was made (system clock, as Kineto's)
  std::uint64_t correlation = 0;
  std::optional<spyre_launch_record_t> record;
};

class Session;
std::mutex g_mutex;
Session* g_session = nullptr;  // the session that records (under g_mutex)
std::atomic<bool> g_recording{false};

std::int64_t now_ns() { return libkineto::timeSinceEpoch(std::chrono::system_clock::now()); }

void synchronize_device(c10::DeviceIndex d) {
  c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->synchronizeDevice(d);
}

std::uint64_t device_time_ps(c10::DeviceIndex d) {
  spyre_device_stats_t s{};
  s.struct_size = sizeof s;
  SPYRE_CHECK(spyreDeviceGetStats(driver_device(d), &s));
  return s.time_ps;
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    // Earlier work completes first: every record that starts after this device time
    // belongs to this session.
    const c10::DeviceIndex n = device_count_or_zero();
    start_ps_.assign(static_cast<std::size_t>(n), 0);
    for (c10::DeviceIndex d = 0; d < n; ++d) {
      synchronize_device(d);
      start_ps_[static_cast<std::size_t>(d)] = device_time_ps(d);
    }
    const std::lock_guard lock(g_mutex);
    g_session = this;
    g_recording = true;
  }

  void stop() override {
    {
      const std::lock_guard lock(g_mutex);
      g_recording = false;
      if (g_session == this) g_session = nullptr;
    }
    for (c10::DeviceIndex d = 0; d < static_cast<c10::DeviceIndex>(start_ps_.size()); ++d) synchronize_device(d);
    for (c10::DeviceIndex d = 0; d < static_cast<c10::DeviceIndex>(start_ps_.size()); ++d) harvest(d);
  }

  // (under g_mutex)
  void add(Launch launch) {
    const c10::DeviceIndex d = launch.device;
    unmatched_[launch.queue].push_back(launches_.size());
    launches_.push_back(std::move(launch));
    // The device keeps its latest launch records only: collect completed ones as we go.
    if (++since_harvest_[d] >= 256) {
      since_harvest_[d] = 0;
      harvest(d);
    }
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, std::int64_t,
                    std::int64_t) override {
    std::map<std::pair<c10::DeviceIndex, c10::StreamId>, std::int64_t> stream_end;  // placed end per stream
    std::size_t missing = 0;
    for (const Launch& l : launches_) {
      if (!l.record) {
        ++missing;
        continue;
      }
      const spyre_launch_record_t& r = *l.record;
      auto& end = stream_end[{l.device, l.stream}];
      libkineto::GenericTraceActivity a;
      a.activityType = ActivityType::CONCURRENT_KERNEL;
      a.activityName = l.name + " kernel";  // (not the op's own name: key_averages() keeps them apart)
      a.device = l.device;
      a.resource = static_cast<std::int32_t>(l.stream);
      a.startTime = std::max(l.host_ns, end);
      const auto simulated_ns = static_cast<std::int64_t>((r.end_ps - r.start_ps + 999) / 1000);
      a.endTime = a.startTime + std::max<std::int64_t>(1, simulated_ns);
      end = a.endTime;
      a.id = static_cast<std::int32_t>(l.correlation != 0 ? l.correlation : ++anonymous_);
      if (l.correlation != 0 && linked) a.linked = linked(static_cast<std::int32_t>(l.correlation));
      a.addMetadata("device", l.device);
      a.addMetadata("stream", l.stream);
      a.addMetadata("correlation", l.correlation);
      a.addMetadata("simulated start ps", r.start_ps);
      a.addMetadata("simulated end ps", r.end_ps);
      a.addMetadata("cores", r.cores);
      a.addMetadata("dram read bytes", r.dram_read_bytes);
      a.addMetadata("dram write bytes", r.dram_write_bytes);
      a.addMetadata("ring bytes", r.ring_bytes);
      a.log(logger);
      resources_.insert({l.device, l.stream});
    }
    if (missing > 0) {
      errors_.push_back(fmt::format("spyre: {} of {} kernels are missing from the trace: the device keeps its latest "
                                    "launch records only, or its statistics were reset while the profiler recorded",
                                    missing, launches_.size()));
      TORCH_WARN(errors_.back());
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    if (resources_.empty()) return nullptr;
    const c10::DeviceIndex d = resources_.begin()->first;
    return std::make_unique<libkineto::DeviceInfo>(d, d, fmt::format("spyre:{}", d),
                                                   fmt::format("spyre:{} (simulated)", d));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [d, s] : resources_) {
      out.emplace_back(d, static_cast<std::int64_t>(s), static_cast<std::int64_t>(s), fmt::format("stream {}", s));
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(std::uint64_t id) override { t_correlation.push_back(id); }
  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
  }

 private:
  // Matches the device's new records to launches: per queue (in order, as a queue runs
  // its launches in order), each record that started after the session did and after
  // the queue's last matched one goes to the queue's next launch without one.
  void harvest(c10::DeviceIndex d) {
    std::uint32_t count = 0;
    SPYRE_CHECK(spyreDeviceGetLaunchRecords(driver_device(d), &count, nullptr));
    std::vector<spyre_launch_record_t> records(count);
    for (auto& r : records) r.struct_size = sizeof r;
    SPYRE_CHECK(spyreDeviceGetLaunchRecords(driver_device(d), &count, records.data()));
    records.resize(count);
    for (const spyre_launch_record_t& r : records) {
      if (r.start_ps < start_ps_[static_cast<std::size_t>(d)]) continue;
      auto& last = last_start_[r.queue];
      if (last.has_value() && r.start_ps <= *last) continue;
      auto& waiting = unmatched_[r.queue];
      if (waiting.empty()) continue;
      launches_[waiting.front()].record = r;
      waiting.pop_front();
      last = r.start_ps;
    }
  }

  std::vector<std::uint64_t> start_ps_;
  std::vector<Launch> launches_;
  std::map<c10::DeviceIndex, int> since_harvest_;
  std::map<spyre_queue_t, std::optional<std::uint64_t>> last_start_;
  std::map<spyre_queue_t, std::deque<std::size_t>> unmatched_;  // launches_ without a record yet, per queue
  std::set<std::pair<c10::DeviceIndex, c10::StreamId>> resources_;
  std::vector<std::string> errors_;
  std::int32_t anonymous_ = 0;
};

class ActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                const libkineto::Config&) override {
    // Only when device activities were asked for (ProfilerActivity.PrivateUse1).
    if (types.count(ActivityType::CONCURRENT_KERNEL) == 0) return nullptr;
    return std::make_unique<Session>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(std::int64_t, std::int64_t,
                                                                const std::set<ActivityType>& types,
                                                                const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  const std::string name_ = "spyre";
  const std::set<ActivityType> activities_ = {ActivityType::CONCURRENT_KERNEL};
};

// The legacy profiler's device timing (torch.autograd.profiler.profile(use_device=
// "spyre") without use_kineto): driver events around each op, elapsed in simulated time.
// (PyTorch 2.6 keeps those times only for a backend still named "privateuseone"; with
// use_kineto=True the activities above give the device time.)
struct EventStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              std::int64_t* cpu_ns) const override {
    const c10::DeviceIndex d = current_device();
    if (device != nullptr) *device = d;
    spyre_event_t e = nullptr;
    SPYRE_CHECK(spyreEventCreate(driver_device(d), &e));
    *event = std::shared_ptr<void>(e, [](void* p) { spyreEventDestroy(static_cast<spyre_event_t>(p)); });
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
    SPYRE_CHECK(spyreEventRecord(e, queue_of(current_stream(d))));
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* a,
                const torch::profiler::impl::ProfilerVoidEventStub* b) const override {
    auto* end = static_cast<spyre_event_t>(b->get());
    SPYRE_CHECK(spyreEventSynchronize(end));
    double ns = 0;
    SPYRE_CHECK(spyreEventElapsedTime(static_cast<spyre_event_t>(a->get()), end, &ns));
    return static_cast<float>(ns / 1000);  // microseconds, as CUDA's stubs return
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex d = 0; d < device_count_or_zero(); ++d) {
      const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, d));
      op(d);
    }
  }
  void synchronize() const override {
    for (c10::DeviceIndex d = 0; d < device_count_or_zero(); ++d) synchronize_device(d);
  }
};

struct Registration {
  Registration() {
    libkineto::api().registerProfilerFactory([] { return std::make_unique<ActivityProfiler>(); });
    static EventStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
const Registration registration;

}  // namespace

void note_launch(c10::Stream stream, const std::string& name) {
  if (!g_recording.load(std::memory_order_relaxed)) return;
  Launch l;
  l.device = stream.device_index();
  l.stream = stream.id();
  l.queue = queue_of(stream);
  l.name = name;
  l.host_ns = now_ns();
  l.correlation = t_correlation.empty() ? 0 : t_correlation.back();
  const std::lock_guard lock(g_mutex);
  if (g_session != nullptr) g_session->add(std::move(l));
}

}  // namespace spyre::backend::profiler
