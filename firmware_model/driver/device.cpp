#include "driver/device.h"

#include <nlohmann/json.hpp>

namespace spyre::driver {

Device::Device(std::uint32_t device_index, config::LoadedConfig loaded, sim::Timing timing, sim::Data data,
               std::optional<std::size_t> record_limit, std::function<Picoseconds()> host_clock,
               std::function<void()> progress)
    : index(device_index), config(std::move(loaded)),
      call_overhead(std::max<Picoseconds>(1, timing::ns_to_ps(config.chip.host.call_overhead_ns))),
      chip_(std::make_unique<sim::Chip>(config.chip, device_index, timing, data)) {
  chip_->set_launch_record_limit(record_limit);
  chip_->set_host_clock(std::move(host_clock));
  firmware_ = firmware::make_firmware(*chip_, std::move(progress));
}

Device::~Device() = default;

sim::DeviceMemory& Device::memory() { return chip_->memory(); }
std::uint32_t Device::num_cores() const { return chip_->num_cores(); }
isa::Limits Device::program_limits() const { return chip_->limits(chip_->num_cores()); }
const config::DerivedFigures& Device::figures() const { return chip_->figures(); }

void Device::add_queue(std::shared_ptr<firmware::Queue> queue) { firmware_->add_queue(std::move(queue)); }
void Device::remove_queue(const firmware::Queue* queue) { firmware_->remove_queue(queue); }
void Device::submit(const std::shared_ptr<firmware::Queue>& queue, firmware::CommandBody body) {
  firmware_->submit(queue, std::move(body));
}
bool Device::idle(const firmware::Queue& queue) const { return firmware_->idle(queue); }
bool Device::idle() const { return firmware_->device_idle(); }
bool Device::any_queue_faulted() const {
  for (const auto& q : firmware_->queues()) {
    if (q->error) return true;
  }
  return false;
}
void Device::acknowledge(firmware::Queue& queue) { firmware_->acknowledge(queue); }
timing::CardLinks::Port Device::link_port() {
  return {.out = &chip_->host_link(sim::Chip::HostDirection::to_host),
          .in = &chip_->host_link(sim::Chip::HostDirection::to_device)};
}

void Device::join_system(timing::CardLinks* links) {
  links_ = links;
  firmware_->set_card_links(links);
  chip_->set_host_uplink(links->host_uplink(true), links->host_uplink(false), links->host_uplink_latency());
}

std::size_t Device::abort_stalled_launches() { return chip_->abort_stalled_launches(); }

const sim::ChipStats& Device::stats() const { return chip_->stats(); }
nlohmann::json Device::report() const {
  nlohmann::json report = chip_->report(chip_->active_span());
  report["derived"] = config::to_json(chip_->figures());
  if (links_ != nullptr && links_->cards() > 1) report["system"] = links_->report(chip_->active_span());
  return report;
}
void Device::reset_stats() {
  chip_->reset_stats();
  if (links_ != nullptr) links_->reset_stats();
}
bool Device::tracing() const { return chip_->tracing(); }
void Device::start_trace() { chip_->start_trace(); }
void Device::stop_trace(const std::string& path) { chip_->stop_trace(path); }
void Device::trace_host_call(const std::string& name, std::uint64_t flow) {
  if (!chip_->tracing()) return;
  const Picoseconds now = chip_->now();
  chip_->trace_host_call(name, now > call_overhead ? now - call_overhead : 0, now, flow);
}

}  // namespace spyre::driver
