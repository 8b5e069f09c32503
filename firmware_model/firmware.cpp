#include "firmware.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace spyre::firmware {

std::string_view to_string(CommandKind kind) {
  switch (kind) {
    case CommandKind::copy: return "copy";
    case CommandKind::fill: return "fill";
    case CommandKind::launch: return "launch";
    case CommandKind::event_record: return "event record";
    case CommandKind::event_wait: return "event wait";
    case CommandKind::fence: return "fence";
    case CommandKind::external: return "external work";
  }
  return "?";
}

namespace {

FaultRecord fault_record(const sim::Fault& f) {
  FaultRecord r;
  r.kernel = f.kernel;
  r.core = f.core;
  r.pc = f.pc;
  r.instruction = f.instruction;
  r.address = f.address.value_or(0);
  r.reason = f.reason;
  return r;
}

CommandKind kind_of(const CommandBody& body) {
  return std::visit(
      [](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, Copy>) return CommandKind::copy;
        else if constexpr (std::is_same_v<T, Fill>) return CommandKind::fill;
        else if constexpr (std::is_same_v<T, Launch>) return CommandKind::launch;
        else if constexpr (std::is_same_v<T, EventRecord>) return CommandKind::event_record;
        else if constexpr (std::is_same_v<T, EventWait>) return CommandKind::event_wait;
        else if constexpr (std::is_same_v<T, External>) return CommandKind::external;
        else return CommandKind::fence;
      },
      body);
}

}  // namespace

Firmware::Firmware(sim::Chip& chip) : chip_(chip) {}

Firmware::~Firmware() = default;

void Firmware::add_queue(std::shared_ptr<Queue> queue) { queues_.push_back(std::move(queue)); }

void Firmware::remove_queue(const Queue* queue) {
  std::erase_if(queues_, [queue](const auto& q) { return q.get() == queue; });
}

bool Firmware::device_idle() const {
  return std::all_of(queues_.begin(), queues_.end(), [this](const auto& q) { return idle(*q); });
}

void Firmware::acknowledge(Queue& queue) {
  queue.error = false;
  queue.fault.reset();
  queue.skipped = 0;
}

void Firmware::complete(Queue& queue, std::uint64_t index, CommandBody& body) {
  const CommandKind kind = kind_of(body);
  if (queue.error && kind != CommandKind::event_record) {
    // A faulted queue completes later commands unexecuted until the host
    // acknowledges; event records still complete so no other queue waits forever, and
    // skipped external work is cancelled (its host side may have peers waiting).
    ++queue.skipped;
    if (auto* work = std::get_if<External>(&body); work != nullptr && work->cancel) work->cancel(chip_.now());
  } else {
    std::optional<FaultRecord> fault;
    execute(queue, body, fault);
    if (fault && !queue.error) {
      fault->command = kind;
      fault->command_index = index;
      fault->time = chip_.now();
      spdlog::warn("spyre:{} queue {}: {} {} failed: {}", chip_.device_index(), queue.id, to_string(kind), index,
                   fault->reason);
      queue.fault = std::move(fault);
      queue.error = true;
    }
  }
  ++queue.completed;
}

void Firmware::execute(Queue& queue, CommandBody& body, std::optional<FaultRecord>& fault) {
  if (auto* copy = std::get_if<Copy>(&body)) return execute_copy(*copy, fault);
  if (auto* fill = std::get_if<Fill>(&body)) return execute_fill(*fill, fault);
  if (auto* launch = std::get_if<Launch>(&body)) {
    const sim::LaunchRecord record = run_launch(queue, *launch);
    if (record.fault) fault = fault_record(*record.fault);
    return;
  }
  if (auto* record = std::get_if<EventRecord>(&body)) {
    if (record->generation > record->event->completed) {
      record->event->completed = record->generation;
      record->event->time = chip_.now();
      for (sc_core::sc_event* waiter : record->event->waiters) waiter->notify(sc_core::SC_ZERO_TIME);
    }
    return;
  }
  if (auto* wait = std::get_if<EventWait>(&body)) return await(*wait);
  if (auto* work = std::get_if<External>(&body)) return execute_external(*work, fault);
  await_fence(queue);
}

void Firmware::execute_copy(Copy& c, std::optional<FaultRecord>& fault) {
  using Direction = Copy::Direction;
  const auto check = [&](sim::DeviceMemory& mem, std::uint64_t base, std::uint64_t pitch, const char* what) {
    for (std::uint64_t r = 0; r < c.rows; ++r) {
      if (auto err = mem.check(base + r * pitch, c.width)) {
        fault = FaultRecord{};
        fault->address = err->address;
        fault->reason = fmt::format("copy {}: {}", what, err->description);
        return false;
      }
    }
    return true;
  };
  sim::Chip* src = c.src_device ? &c.src_device->chip() : nullptr;
  sim::Chip* dst = c.dst_device ? &c.dst_device->chip() : nullptr;
  if (src && !check(src->memory(), c.src, c.src_pitch, "source")) return;
  if (dst && !check(dst->memory(), c.dst, c.dst_pitch, "destination")) return;

  {
    const std::uint64_t bytes = c.width * c.rows;
    const Picoseconds now = chip_.now();
    Picoseconds end = now;
    switch (c.direction) {
      case Direction::host_to_device:
        end = dst->host_transfer(now, sim::Chip::HostDirection::to_device, c.dst, bytes);
        break;
      case Direction::device_to_host:
        end = src->host_transfer(now, sim::Chip::HostDirection::to_host, c.src, bytes);
        break;
      case Direction::device_to_device:
        end = src->dram_copy(now, c.dst, c.src, bytes);
        break;
      case Direction::peer:
        end = peer_copy(*src, *dst, c, now, bytes, fault);
        if (fault) return;
        break;
    }
    wait_until(end);
  }
  // The bytes land when the copy completes.
  for (std::uint64_t r = 0; r < c.rows; ++r) {
    std::uint8_t* to = dst ? dst->memory().host(c.dst + r * c.dst_pitch) : c.host_dst + r * c.dst_pitch;
    const std::uint8_t* from = src ? src->memory().host(c.src + r * c.src_pitch)
                               : c.snapshot.empty() ? c.host_src + r * c.src_pitch
                                                    : c.snapshot.data() + r * c.width;
    std::memmove(to, from, c.width);
  }
}

Picoseconds Firmware::peer_copy(sim::Chip& src, sim::Chip& dst, const Copy& c, Picoseconds now, std::uint64_t bytes,
                                std::optional<FaultRecord>& fault) {
  using HostDirection = sim::Chip::HostDirection;
  const std::uint32_t from = src.device_index(), to = dst.device_index();
  if (card_links_ == nullptr || from >= card_links_->cards() || to >= card_links_->cards()) {
    fault = FaultRecord{};
    fault->address = c.dst;
    fault->reason = fmt::format("copy: spyre:{} -> spyre:{} is a peer copy, but the cards share no system links",
                                from, to);
    return now;
  }
  if (chip_.timing() == sim::Timing::untimed) {
    src.peer_transfer(now, HostDirection::to_host, c.src, bytes);
    dst.peer_transfer(now, HostDirection::to_device, c.dst, bytes);
    return now;
  }
  // One pipelined flow, as a host transfer: the source card's channels read from when
  // the first link takes the bytes and the destination's write from then too; the last
  // byte lands the route's latency plus the destination's DRAM latency after the
  // slowest of them. Alone and link-bound:
  //   time = bytes / link rate + CardLinks::latency(from, to) + memory.latency_ns.
  const timing::Server::Interval flow = card_links_->transfer(now, now, from, to, bytes);
  const Picoseconds read_end = src.peer_transfer(flow.start, HostDirection::to_host, c.src, bytes);
  const Picoseconds write_end = dst.peer_transfer(flow.start, HostDirection::to_device, c.dst, bytes);
  const Picoseconds end = std::max({flow.end, read_end, write_end}) + card_links_->latency(from, to) +
                          timing::ns_to_ps(dst.config().memory.latency_ns);
  const std::string what = fmt::format("{:.1f} MiB spyre:{} -> spyre:{}", static_cast<double>(bytes) / (1 << 20), from, to);
  src.record_peer_copy(what, flow.start, end);
  dst.record_peer_copy(what, flow.start, end);
  return end;
}

void Firmware::execute_external(External& work, std::optional<FaultRecord>& fault) {
  std::vector<void*> views;
  for (const auto& [address, bytes] : work.ranges) {
    if (auto err = chip_.memory().check(address, bytes)) {
      fault = FaultRecord{};
      fault->address = err->address;
      fault->reason = fmt::format("{}: {}", work.name, err->description);
      return;
    }
    views.push_back(chip_.memory().host(address));
  }
  const Picoseconds arrival = chip_.now();
  Picoseconds end = arrival;
  std::string reason;
  if (!work.fn(arrival, views, end, reason)) {
    fault = FaultRecord{};
    fault->reason = fmt::format("{}: {}", work.name, reason);
    return;
  }
  end = std::max(end, arrival);
  chip_.record_external(work.name, arrival, end, work.bytes, work.link_bytes);
  wait_until(end);
}

void Firmware::execute_fill(const Fill& f, std::optional<FaultRecord>& fault) {
  if (auto err = chip_.memory().check(f.dst, f.bytes)) {
    fault = FaultRecord{};
    fault->address = err->address;
    fault->reason = "fill: " + err->description;
    return;
  }
  wait_until(chip_.dram_fill(chip_.now(), f.dst, f.bytes));
  std::uint8_t* dst = chip_.memory().host(f.dst);
  for (std::uint64_t i = 0; i < f.bytes; i += f.pattern_size) std::memcpy(dst + i, &f.pattern, f.pattern_size);
}

}  // namespace spyre::firmware
