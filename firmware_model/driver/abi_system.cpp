// The C ABI (include/spyre/spyre_drv.h), part of it: the system of cards: schedules
// timed over its links, and external work (a collective's data movement between
// processes) as a queue command.
#include <cstddef>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "driver/abi_support.h"
#include "timing/card_links.h"

using namespace spyre::driver;
using namespace spyre::driver::abi;

extern "C" {

spyre_result_t spyreSystemScheduleTime(spyre_device_t device, uint32_t cards, const spyre_link_transfer_t* transfers,
                                       const uint32_t* step_sizes, uint32_t steps, uint64_t* duration_ps) {
  return guarded(__func__, [&] {
    // Never starts (or waits for) the driver: external work calls this from inside
    // the simulation, possibly while the driver shuts down.
    Runtime* running = Runtime::current();
    if (running == nullptr) raise(SPYRE_ERROR_NOT_INITIALIZED, "the driver is not running");
    auto d = running->lookup<Device>(device, "device");
    require(duration_ps, "duration_ps");
    if (steps > 0) require(step_sizes, "step_sizes");
    if (cards < 2 || cards > 1024) {
      raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("cards: expected 2 to 1024, found {}", cards));
    }
    std::vector<std::vector<spyre::timing::LinkTransfer>> schedule(steps);
    std::uint64_t next = 0;
    for (std::uint32_t s = 0; s < steps; ++s) {
      if (step_sizes[s] > 0) require(transfers, "transfers");
      if (step_sizes[s] > (std::uint64_t{1} << 24)) {
        raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("step_sizes[{}]: expected at most 2^24, found {}", s, step_sizes[s]));
      }
      for (std::uint32_t i = 0; i < step_sizes[s]; ++i, ++next) {
        const spyre_link_transfer_t& t = transfers[next];
        if (t.src >= cards || t.dst >= cards || t.src == t.dst) {
          raise(SPYRE_ERROR_INVALID_ARGUMENT,
                fmt::format("transfers[{}] (step {}): expected two different cards below {}, found {} -> {}", next, s,
                            cards, t.src, t.dst));
        }
        schedule[s].push_back({t.src, t.dst, t.bytes});
      }
    }
    *duration_ps = spyre::timing::schedule_time(d->config.chip, cards, schedule);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreQueueExternal(spyre_queue_t queue, const spyre_external_desc_t* desc) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto q = usable_queue(rt, queue);
    require(desc, "desc");
    require_size(desc->struct_size, offsetof(spyre_external_desc_t, card), "spyre_external_desc_t");
    const bool v09 = desc->struct_size >= sizeof(spyre_external_desc_t);
    if (desc->fn == nullptr) raise(SPYRE_ERROR_INVALID_NULL_POINTER, "desc->fn is NULL");
    if (desc->num_buffers > 0) {
      require(desc->buffers, "desc->buffers");
      require(desc->sizes, "desc->sizes");
    }
    firmware::External work;
    work.name = desc->name != nullptr && *desc->name != '\0' ? desc->name : "external work";
    work.bytes = desc->bytes;
    if (v09 && desc->num_transfers > 0) {
      require(desc->transfers, "desc->transfers");
      if (desc->cards < 2 || desc->cards > 1024 || desc->card >= desc->cards) {
        raise(SPYRE_ERROR_INVALID_ARGUMENT, fmt::format("desc->card {} of desc->cards {}: expected 2 to 1024 cards "
                                                        "and a card below them", desc->card, desc->cards));
      }
      std::vector<spyre::timing::LinkTransfer> transfers;
      for (std::uint32_t i = 0; i < desc->num_transfers; ++i) {
        const spyre_link_transfer_t& t = desc->transfers[i];
        if (t.src >= desc->cards || t.dst >= desc->cards || t.src == t.dst) {
          raise(SPYRE_ERROR_INVALID_ARGUMENT,
                fmt::format("desc->transfers[{}]: expected two different cards below {}, found {} -> {}", i,
                            desc->cards, t.src, t.dst));
        }
        transfers.push_back({t.src, t.dst, t.bytes});
      }
      work.link_bytes = spyre::timing::sent_link_bytes(q->device->config.chip, desc->cards, desc->card, transfers);
    }
    for (std::uint32_t i = 0; i < desc->num_buffers; ++i) {
      Device* owner = rt.device_of(desc->buffers[i]);
      if (owner != q->device) {
        raise(SPYRE_ERROR_INVALID_DEVICE_POINTER,
              fmt::format("desc->buffers[{}]: expected memory of the queue's device spyre:{}, found {}", i,
                          q->device->index, owner ? fmt::format("memory of spyre:{}", owner->index) : "no device memory"));
      }
      check_device_range(*q->device, desc->buffers[i], desc->sizes[i], "desc->buffers");
      work.ranges.emplace_back(addr(desc->buffers[i]), desc->sizes[i]);
    }
    work.fn = [fn = desc->fn, user = desc->user](spyre::sim::Picoseconds arrival, std::vector<void*>& views,
                                                 spyre::sim::Picoseconds& end, std::string& reason) {
      char message[512] = {};
      std::uint64_t e = arrival;
      static void* const kNoViews[1] = {nullptr};  // never NULL: NULL means skipped
      if (fn(user, arrival, views.empty() ? kNoViews : views.data(), &e, message, sizeof message) != 0) {
        reason = message[0] != '\0' ? std::string(message, strnlen(message, sizeof message)) : "the host's work failed";
        return false;
      }
      end = e;
      return true;
    };
    work.cancel = [fn = desc->fn, user = desc->user](spyre::sim::Picoseconds now) {
      char message[8] = {};
      std::uint64_t e = now;
      fn(user, now, nullptr, &e, message, sizeof message);
    };
    submit(rt, q, std::move(work));
    return SPYRE_SUCCESS;
  });
}

}  // extern "C"
