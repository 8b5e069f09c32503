#define SC_INCLUDE_DYNAMIC_PROCESSES
#include "driver/runtime.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <systemc>

namespace spyre::driver {
namespace {

std::mutex g_runtime_mutex;
Runtime* g_runtime = nullptr;          // the live devices and handles
std::optional<Runtime::StartConfig> g_start_config;  // spyreDriverConfigure's, for the next start
Runtime* g_thread_owner = nullptr;     // whoever owns the simulation thread (never freed)
bool g_exit_registered = false;

Picoseconds sim_now() { return sc_core::sc_time_stamp().value(); }

Mode mode_from_env() {
  const char* text = std::getenv("SPYRE_SIM_MODE");
  if (text == nullptr || *text == '\0') return Mode::timed;
  for (const Mode m : {Mode::timed, Mode::functional, Mode::no_data}) {
    if (to_string(m) == text) return m;
  }
  throw Error{SPYRE_ERROR_NOT_INITIALIZED,
              fmt::format("SPYRE_SIM_MODE: expected 'timed', 'functional' or 'no-data', found '{}'", text)};
}

config::LoadedConfig load(const Runtime::StartConfig& c) {
  return c.yaml.empty() ? config::load_config(c.path, c.overrides)
                        : config::load_config_text(c.yaml, "spyre_driver_config_t.config_yaml", c.overrides);
}

// SPYRE_SIM_DEVICES, or (unset) the config's system.cards.
std::uint32_t device_count_from_env(const config::ChipConfig& chip) {
  const char* text = std::getenv("SPYRE_SIM_DEVICES");
  if (text == nullptr || *text == '\0') return static_cast<std::uint32_t>(chip.system_or_default().cards);
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (*end != '\0' || n < 1 || n > 64) {
    throw Error{SPYRE_ERROR_NOT_INITIALIZED,
                fmt::format("SPYRE_SIM_DEVICES: expected an integer from 1 to 64, found '{}'", text)};
  }
  return static_cast<std::uint32_t>(n);
}

// SPYRE_SIM_LAUNCH_RECORDS: launch records each device keeps ("all", or a count;
// default sim::kDefaultLaunchRecordLimit). Totals are exact either way.
std::optional<std::size_t> launch_record_limit_from_env() {
  const char* text = std::getenv("SPYRE_SIM_LAUNCH_RECORDS");
  if (text == nullptr || *text == '\0') return sim::kDefaultLaunchRecordLimit;
  if (std::string_view(text) == "all") return std::nullopt;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(text, &end, 10);
  if (*end != '\0' || *text == '-' || n > (1ull << 40)) {
    throw Error{SPYRE_ERROR_NOT_INITIALIZED,
                fmt::format("SPYRE_SIM_LAUNCH_RECORDS: expected 'all' or a count from 0 to 2^40, found '{}'", text)};
  }
  return static_cast<std::size_t>(n);
}

void configure_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* level = std::getenv("SPYRE_LOG_LEVEL");
    spdlog::set_level(level != nullptr && *level != '\0' ? spdlog::level::from_str(level) : spdlog::level::warn);
    spdlog::set_pattern("[spyre %l] %v");
  });
}

}  // namespace

std::string_view to_string(Mode mode) {
  switch (mode) {
    case Mode::timed: return "timed";
    case Mode::functional: return "functional";
    case Mode::no_data: return "no-data";
  }
  return "?";
}

// Where device work runs: posting an action, and blocking the caller until a condition
// holds (Runtime::post and Runtime::block_until).
class Runtime::WorkLoop {
 public:
  virtual ~WorkLoop() = default;
  virtual void post(const Device* device, std::function<void()> action) = 0;
  virtual Picoseconds block_until(const Device* device, std::function<bool()> condition) = 0;
};

// Timed devices: actions go to the simulation thread's inbox, stamped with their
// arrival time; a blocking call registers its condition and sleeps until the
// simulation finds it true.
class Runtime::SimulationLoop final : public WorkLoop {
 public:
  explicit SimulationLoop(Runtime& rt) : rt_(rt) {}

  void post(const Device* device, std::function<void()> action) override {
    {
      const std::lock_guard lock(rt_.mutex_);
      rt_.inbox_.push_back({rt_.tick(device), std::move(action)});
    }
    rt_.sim_cv_.notify_one();
  }

  Picoseconds block_until(const Device* device, std::function<bool()> condition) override {
    auto waiter = std::make_shared<Waiter>();
    waiter->condition = std::move(condition);
    std::unique_lock lock(rt_.mutex_);
    const Picoseconds arrival = rt_.tick(device);
    ++rt_.waiting_;
    rt_.inbox_.push_back({arrival, [rt = &rt_, waiter] {
                            rt->waiters_.push_back(waiter);
                            rt->check_waiters();
                          }});
    rt_.sim_cv_.notify_one();
    rt_.host_cv_.wait(lock, [&] { return waiter->done; });
    Picoseconds& clock = rt_.clock_of(device);
    clock = std::max(clock, waiter->time);
    rt_.host_time_ = std::max(rt_.host_time_, clock);
    return waiter->time;
  }

 private:
  Runtime& rt_;
};

// The functional device: every action runs in the calling thread, one at a time, so
// whatever a blocking call awaits has already happened.
class Runtime::InlineLoop final : public WorkLoop {
 public:
  explicit InlineLoop(Runtime& rt) : rt_(rt) {}

  void post(const Device* device, std::function<void()> action) override {
    rt_.advance(device);
    const std::lock_guard work(work_);
    action();
  }

  Picoseconds block_until(const Device* device, std::function<bool()> condition) override {
    const Picoseconds now = rt_.advance(device);
    const std::lock_guard work(work_);
    if (!condition()) throw Error{SPYRE_ERROR_INTERNAL, "functional device: an awaited condition does not hold"};
    return now;
  }

 private:
  Runtime& rt_;
  std::recursive_mutex work_;  // device work, one action at a time (actions may post)
};

void at_exit() {
  // Complete all submitted work, then stop the simulation thread, so nothing hangs or
  // is lost at process exit. The runtime object itself is deliberately leaked: other
  // static destructors may still run driver calls' cleanup paths.
  Runtime::shutdown();
  const std::lock_guard lock(g_runtime_mutex);
  if (g_thread_owner != nullptr) g_thread_owner->stop_thread();
}

Runtime::Runtime() = default;
Runtime::~Runtime() = default;

void Runtime::configure(std::optional<StartConfig> config) {
  const std::lock_guard lock(g_runtime_mutex);
  if (g_runtime != nullptr) {
    throw Error{SPYRE_ERROR_INVALID_ARGUMENT,
                "the driver is running: configure it before its first use or after spyreDriverShutdown"};
  }
  if (config) {
    if (config->devices > 64) {
      throw Error{SPYRE_ERROR_INVALID_ARGUMENT,
                  fmt::format("device_count: expected 0 (the environment's) or 1 to 64, found {}", config->devices)};
    }
    if (!config->path.empty() && !config->yaml.empty()) {
      throw Error{SPYRE_ERROR_INVALID_ARGUMENT,
                  "config_path and config_yaml are both given: pass the chip config one way"};
    }
    try {
      load(*config);
    } catch (const config::ConfigError& e) {
      throw Error{SPYRE_ERROR_INVALID_ARGUMENT, e.what()};
    }
  }
  g_start_config = std::move(config);
}

Runtime* Runtime::current() {
  const std::lock_guard lock(g_runtime_mutex);
  return g_runtime;
}

Runtime& Runtime::get() {
  const std::lock_guard lock(g_runtime_mutex);
  if (g_runtime != nullptr) return *g_runtime;
  configure_logging();
  const Mode mode = g_start_config && g_start_config->mode ? *g_start_config->mode : mode_from_env();
  if (g_thread_owner == nullptr) {
    g_thread_owner = new Runtime();
    if (!g_exit_registered) {
      std::atexit([] { at_exit(); });
      g_exit_registered = true;
    }
  }
  Runtime& rt = *g_thread_owner;
  rt.mode_ = mode;
  if (mode == Mode::functional) {
    rt.loop_ = std::make_unique<InlineLoop>(rt);
  } else {
    rt.loop_ = std::make_unique<SimulationLoop>(rt);
    if (!rt.sim_thread_.joinable()) {
      setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);
      rt.sim_thread_ = std::thread([] { g_thread_owner->sim_main(); });
    }
  }
  rt.start_devices();
  g_runtime = &rt;
  return *g_runtime;
}

void Runtime::start_devices() {
  // (Called with g_runtime_mutex held.)
  const std::optional<std::size_t> record_limit = launch_record_limit_from_env();
  config::LoadedConfig loaded;
  if (g_start_config) {
    try {
      loaded = load(*g_start_config);
    } catch (const config::ConfigError& e) {
      throw Error{SPYRE_ERROR_NOT_INITIALIZED, fmt::format("spyreDriverConfigure: {}", e.what())};
    }
  } else {
    const char* path = std::getenv("SPYRE_SIM_CONFIG");
    const char* set = std::getenv("SPYRE_SIM_SET");
    try {
      loaded = config::load_config(path != nullptr ? path : "", config::split_overrides(set != nullptr ? set : ""));
    } catch (const config::ConfigError& e) {
      throw Error{SPYRE_ERROR_NOT_INITIALIZED, fmt::format("SPYRE_SIM_CONFIG/SPYRE_SIM_SET: {}", e.what())};
    }
  }
  const std::uint32_t count = g_start_config && g_start_config->devices != 0 ? g_start_config->devices
                                                                             : device_count_from_env(loaded.chip);
  std::vector<std::unique_ptr<Device>> devices;
  // Chips and firmware own SystemC events: on the timed device they are built in
  // simulation context (query), never on a host thread.
  const sim::Timing timing = mode_ == Mode::functional ? sim::Timing::untimed : sim::Timing::timed;
  const sim::Data data = mode_ == Mode::no_data ? sim::Data::none : sim::Data::real;
  // host.threads per_card: a clock per card, each from the host's time now.
  const bool per_card = loaded.chip.host.threads == config::HostThreads::per_card && count > 1 &&
                        mode_ != Mode::functional;
  const auto build = [&] {
    for (std::uint32_t i = 0; i < count; ++i) {
      auto d = std::make_unique<Device>(i, loaded, timing, data, record_limit, [this] { return host_time(); },
                                        [this] { check_waiters(); });
      devices.push_back(std::move(d));
    }
    // The links between the cards (config `system`): every card's firmware times its
    // peer copies over them, and host copies pass the switch's port to the host if
    // the system has one.
    std::vector<timing::CardLinks::Port> ports;
    for (auto& d : devices) ports.push_back(d->link_port());
    card_links_ = std::make_unique<timing::CardLinks>(loaded.chip, std::move(ports));
    for (auto& d : devices) d->join_system(card_links_.get());
    sorted_schedule_ = per_card;
  };
  {
    const std::lock_guard lock(mutex_);
    per_card_hosts_ = per_card;
    card_clocks_.assign(per_card ? count : 0, host_time_);
  }
  query(nullptr, build);
  devices_ = std::move(devices);
  for (auto& d : devices_) {
    d->handle = add(std::shared_ptr<Device>(d.get(), [](Device*) {}));
    d->sync_queue = std::make_shared<QueueObject>();
    d->sync_queue->device = d.get();
    d->sync_queue->queue = std::make_shared<firmware::Queue>();
    d->sync_queue->queue->priority = 1;  // synchronous work goes first, like a high-priority queue
    post(d.get(), [dev = d.get()] { dev->add_queue(dev->sync_queue->queue); });
  }
  spdlog::info("spyre driver: {} {} device(s) of '{}' ({}), config hash {}", count, to_string(mode_),
               loaded.chip.name, loaded.source, loaded.hash);
}

void Runtime::shutdown() {
  Runtime* rt;
  {
    const std::lock_guard lock(g_runtime_mutex);
    rt = g_runtime;
    g_runtime = nullptr;
  }
  if (rt == nullptr) return;
  for (auto& d : rt->devices_) {
    Device* dev = d.get();
    rt->block_until(dev, [dev] { return dev->idle(); });
  }
  rt->query(nullptr, [rt] {
    // Release the devices in simulation context; queue threads stay parked forever.
    rt->devices_.clear();
    rt->card_links_.reset();
  });
  const std::lock_guard lock(rt->objects_mutex_);
  // Slots keep their generations across a restart, so no handle from before the
  // shutdown becomes live again.
  rt->free_slots_.clear();
  for (std::size_t i = rt->slots_.size(); i-- > 0;) {
    rt->slots_[i].object.reset();
    if (rt->slots_[i].generation < kMaxGeneration) rt->free_slots_.push_back(static_cast<std::uint32_t>(i));
  }
  rt->pinned_.clear();
}

void Runtime::stop_thread() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  sim_cv_.notify_all();
  if (sim_thread_.joinable()) sim_thread_.join();
}

Picoseconds Runtime::advance(const Device* device) {
  const std::lock_guard lock(mutex_);
  return tick(device);
}

Picoseconds& Runtime::clock_of(const Device* device) {
  if (per_card_hosts_ && device != nullptr && device->index < card_clocks_.size()) return card_clocks_[device->index];
  return host_time_;
}

Picoseconds Runtime::tick(const Device* device) {
  Picoseconds& clock = clock_of(device);
  clock += device != nullptr ? device->call_overhead : 1;
  host_time_ = std::max(host_time_, clock);
  return clock;
}

Picoseconds Runtime::sim_limit() const {
  if (!per_card_hosts_ || card_clocks_.empty()) return host_time_;
  return *std::min_element(card_clocks_.begin(), card_clocks_.end());
}

Picoseconds Runtime::host_time() {
  const std::lock_guard lock(mutex_);
  return host_time_;
}

void Runtime::post(const Device* device, std::function<void()> action) { loop_->post(device, std::move(action)); }

Picoseconds Runtime::block_until(const Device* device, std::function<bool()> condition) {
  return loop_->block_until(device, std::move(condition));
}

void Runtime::query(const Device* device, const std::function<void()>& f) {
  block_until(device, [&f] {
    f();
    return true;
  });
}

// Simulation context: answers every waiter whose condition now holds.
void Runtime::check_waiters() {
  bool answered = false;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if ((*it)->condition()) {
      {
        const std::lock_guard lock(mutex_);
        (*it)->time = sim_now();
        (*it)->done = true;
        --waiting_;
      }
      answered = true;
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  if (answered) {
    host_cv_.notify_all();
    sc_core::sc_pause();
  }
}

void Runtime::dispatcher() {
  for (;;) {
    while (scheduled_.empty()) sc_core::wait(*dispatch_event_);
    const Picoseconds arrival = scheduled_.front().arrival, now = sim_now();
    // Arrivals are in order; one earlier than now can only come from another host
    // thread while the simulation ran ahead for a blocked one (or, per-card clocks,
    // from a card whose host is behind the card that blocked): it is delivered late.
    if (arrival > now && sorted_schedule_) {
      // An earlier arrival may be scheduled in front of this one meanwhile: look again.
      sc_core::wait(sc_core::sc_time::from_value(arrival - now), *dispatch_event_);
      continue;
    }
    if (arrival > now) sc_core::wait(sc_core::sc_time::from_value(arrival - now));
    auto action = std::move(scheduled_.front().action);
    scheduled_.pop_front();
    action();
  }
}

void Runtime::sim_main() {
  dispatch_event_ = new sc_core::sc_event();
  sc_core::sc_spawn([this] { dispatcher(); });
  std::unique_lock lock(mutex_);
  for (;;) {
    sim_cv_.wait(lock, [&] {
      return stop_ || !inbox_.empty() || (waiting_ > 0 && !starved_) || sim_limit() > sim_time_ + 1;
    });
    if (stop_ && inbox_.empty() && waiting_ == 0) break;
    std::deque<Item> items;
    items.swap(inbox_);
    if (!items.empty()) starved_ = false;
    const Picoseconds limit = sim_limit();
    const bool unbounded = waiting_ > 0;
    lock.unlock();

    for (auto& item : items) {
      if (!sorted_schedule_) {
        scheduled_.push_back(std::move(item));
        continue;
      }
      // After every item that arrives no later (so equal arrivals keep their order).
      const auto at = std::upper_bound(scheduled_.begin(), scheduled_.end(), item.arrival,
                                       [](Picoseconds a, const Item& i) { return a < i.arrival; });
      scheduled_.insert(at, std::move(item));
    }
    if (!scheduled_.empty()) dispatch_event_->notify(sc_core::SC_ZERO_TIME);
    bool starved = false;
    if (unbounded) {
      sc_core::sc_start();
      if (!sc_core::sc_pending_activity()) {
        // Nothing left to simulate: abort launches that can never finish (their
        // faults complete the commands); if none, wait for more host work.
        std::size_t aborted = 0;
        for (auto& d : devices_) aborted += d->abort_stalled_launches();
        starved = aborted == 0;
      }
    } else if (limit > sim_now() + 1) {
      sc_core::sc_start(sc_core::sc_time::from_value(limit - 1 - sim_now()));
    }

    lock.lock();
    sim_time_ = sim_now();
    starved_ = starved && waiting_ > 0;
  }
}

std::optional<std::pair<std::uintptr_t, std::size_t>> Runtime::pinned_range(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::lock_guard lock(objects_mutex_);
  auto it = pinned_.upper_bound(a);
  if (it == pinned_.begin()) return std::nullopt;
  --it;
  if (a < it->first + it->second) return *it;
  return std::nullopt;
}

bool Runtime::add_pinned(void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::lock_guard lock(objects_mutex_);
  auto next = pinned_.lower_bound(a);
  if (next != pinned_.end() && next->first < a + bytes) return false;
  if (next != pinned_.begin() && std::prev(next)->first + std::prev(next)->second > a) return false;
  pinned_[a] = bytes;
  return true;
}

bool Runtime::remove_pinned(void* p) {
  const std::lock_guard lock(objects_mutex_);
  return pinned_.erase(reinterpret_cast<std::uintptr_t>(p)) == 1;
}

bool Runtime::remove(const void* handle) {
  const auto value = reinterpret_cast<std::uintptr_t>(handle);
  const std::uint32_t kind = static_cast<std::uint32_t>(value >> 56);
  const std::uint32_t generation = static_cast<std::uint32_t>((value >> 32) & 0xffffffu);
  const std::uint64_t index = value & 0xffffffffu;
  const std::lock_guard lock(objects_mutex_);
  // The whole handle must match, as in lookup(): two threads destroying one handle must
  // not let the second remove an object that has since taken the slot.
  if (index == 0 || index > slots_.size() || !slots_[index - 1].object || slots_[index - 1].kind != kind ||
      (slots_[index - 1].generation & 0xffffffu) != generation) {
    return false;
  }
  slots_[index - 1].object.reset();
  // A slot whose generations are used up is retired (a few bytes, once per 2^24
  // reuses), never handed out again.
  if (slots_[index - 1].generation < kMaxGeneration) free_slots_.push_back(static_cast<std::uint32_t>(index - 1));
  return true;
}

Device* Runtime::device_of(const void* p) {
  const auto a = reinterpret_cast<std::uint64_t>(p);
  for (auto& d : devices_) {
    if (d->memory().contains(a)) return d.get();
  }
  return nullptr;
}

}  // namespace spyre::driver
