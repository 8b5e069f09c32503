// Several cards in one simulation (the config's `system` section) through the driver
// ABI: how many cards, peer copies timed over the card links of each topology, and
// copies between different pairs contending exactly where the topology shares a link.
// Every expected time is the arithmetic below, from the default chip (configs/spyre.yaml).
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "spyre/spyre_drv.h"

using Catch::Matchers::ContainsSubstring;

namespace {

#define OK(call) require_ok((call), #call)
void require_ok(spyre_result_t rc, const char* what) {
  INFO(what << " -> " << spyreResultString(rc) << ": " << spyreGetLastErrorMessage());
  REQUIRE(rc == SPYRE_SUCCESS);
}

constexpr std::uint64_t kBytes = 256ull << 20;  // 256 MiB

// The default chip's host link, PCIe Gen5 x16 at 85%:
//   32 GT/s x 16 lanes x 128/130 / 8 bits x 0.85 = 53,563,076,923.08 B/s
// so 256 MiB = 268,435,456 B take ceil(268435456 x 1e12 / 53563076923.08) ps:
const double kLinkRate = 32e9 * 16 * 128.0 / 130.0 / 8.0 * 0.85;
const std::uint64_t kT = 5'011'576'471;  // ps (5,011,576,470.59 rounded up): 5.0116 ms
// A copy between two events on its queue: the copy's command fetch and the second
// record's (300 cycles each at 1.5 GHz = 200 ns each), the transfer, the route's
// latency and the destination's DRAM latency (120 ns).
constexpr std::uint64_t kFetches = 400'000;  // ps
constexpr std::uint64_t kDram = 120'000;     // ps
// Latencies: a switch adds switch_latency_ns (150) to host_link.latency_ns (1000); a
// ring hop or a direct link without a system.link is like the host link (1000 ns).
constexpr std::uint64_t kSwitch = 1'150'000;
constexpr std::uint64_t kHop = 1'000'000;

std::uint64_t expected(std::uint64_t transfers, std::uint64_t latency) {
  return kFetches + transfers * kT + latency + kDram;
}

void start(std::vector<std::string> overrides) {
  spyreDriverShutdown();
  unsetenv("SPYRE_SIM_DEVICES");
  unsetenv("SPYRE_SIM_SET");
  unsetenv("SPYRE_SIM_CONFIG");
  std::vector<const char*> texts;
  for (const auto& o : overrides) texts.push_back(o.c_str());
  spyre_driver_config_t c{};
  c.struct_size = sizeof c;
  c.config_path = SPYRE_SOURCE_DIR "/configs/spyre.yaml";
  c.overrides = texts.data();
  c.num_overrides = static_cast<std::uint32_t>(texts.size());
  c.mode = SPYRE_MODE_TIMED;
  OK(spyreDriverConfigure(&c));
  OK(spyreDriverInit(SPYRE_API_VERSION_CURRENT));
}

spyre_device_t device(std::uint32_t i) {
  spyre_device_t d = nullptr;
  OK(spyreDeviceGet(i, &d));
  return d;
}

std::uint64_t timestamp(spyre_event_t e) {
  std::uint64_t t = 0;
  OK(spyreEventGetTimestamp(e, &t));
  return t;
}

constexpr std::uint32_t kHost = ~0u;  // a copy's source in pinned host memory

// Runs 256 MiB copies (src card or kHost, dst card) that all start at the same simulated
// instant: each on its own queue of its source card (of its destination for a host
// source), held by a wait on one event recorded after a fill on card 0. Returns each
// copy's time between events around it (ps) and checks that the bytes landed.
std::vector<std::uint64_t> copies_at_once(const std::vector<std::pair<std::uint32_t, std::uint32_t>>& pairs) {
  struct One {
    void *src = nullptr, *dst = nullptr;
    bool host = false;
    spyre_queue_t queue = nullptr;
    spyre_event_t before = nullptr, after = nullptr;
  };
  std::vector<One> copies(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    auto& c = copies[i];
    c.host = pairs[i].first == kHost;
    const spyre_device_t owner = device(c.host ? pairs[i].second : pairs[i].first);
    const std::uint32_t pattern = 0x01010101u * static_cast<std::uint32_t>(i + 1);
    if (c.host) {
      OK(spyreHostAlloc(kBytes, &c.src));
      std::fill_n(static_cast<std::uint32_t*>(c.src), kBytes / 4, pattern);
    } else {
      OK(spyreMemAlloc(owner, kBytes, &c.src));
      OK(spyreMemFill(c.src, &pattern, 4, kBytes));
    }
    OK(spyreMemAlloc(device(pairs[i].second), kBytes, &c.dst));
    OK(spyreQueueCreate(owner, SPYRE_QUEUE_PRIORITY_NORMAL, &c.queue));
    OK(spyreEventCreate(owner, &c.before));
    OK(spyreEventCreate(owner, &c.after));
  }
  // The gate: an event recorded after 64 MiB of fill on card 0, long after every copy
  // is queued behind it.
  spyre_queue_t gate_queue = nullptr;
  spyre_event_t gate = nullptr;
  void* scratch = nullptr;
  OK(spyreQueueCreate(device(0), SPYRE_QUEUE_PRIORITY_NORMAL, &gate_queue));
  OK(spyreEventCreate(device(0), &gate));
  OK(spyreMemAlloc(device(0), 64 << 20, &scratch));
  const std::uint32_t zero = 0;
  OK(spyreMemFillAsync(gate_queue, scratch, &zero, 4, 64 << 20));
  OK(spyreEventRecord(gate, gate_queue));
  for (auto& c : copies) {
    OK(spyreQueueWaitEvent(c.queue, gate));
    OK(spyreEventRecord(c.before, c.queue));
  }
  for (auto& c : copies) {
    OK(spyreMemcpyAsync(c.queue, c.dst, c.src, kBytes));
    OK(spyreEventRecord(c.after, c.queue));
  }
  std::vector<std::uint64_t> times;
  for (std::size_t i = 0; i < copies.size(); ++i) {
    auto& c = copies[i];
    OK(spyreQueueSynchronize(c.queue));
    times.push_back(timestamp(c.after) - timestamp(c.before));
    // The bytes landed: the first and last words of the destination.
    std::uint32_t words[2] = {};
    OK(spyreMemcpy(&words[0], c.dst, 4));
    OK(spyreMemcpy(&words[1], static_cast<char*>(c.dst) + kBytes - 4, 4));
    CHECK(words[0] == 0x01010101u * (i + 1));
    CHECK(words[1] == 0x01010101u * (i + 1));
  }
  for (auto& c : copies) {
    OK(c.host ? spyreHostFree(c.src) : spyreMemFree(c.src));
    OK(spyreMemFree(c.dst));
    OK(spyreEventDestroy(c.before));
    OK(spyreEventDestroy(c.after));
    OK(spyreQueueDestroy(c.queue));
  }
  OK(spyreMemFree(scratch));
  OK(spyreEventDestroy(gate));
  OK(spyreQueueDestroy(gate_queue));
  return times;
}

std::vector<std::uint64_t> sorted(std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("given the arithmetic, the link rate and a 256 MiB transfer's picoseconds agree", "[timed]") {
  CHECK(static_cast<std::uint64_t>(static_cast<double>(kBytes) * 1e12 / kLinkRate) + 1 == kT);
}

TEST_CASE("given system.cards, the driver builds that many cards; SPYRE_SIM_DEVICES and device_count win", "[timed]") {
  start({"system.cards=4"});
  std::uint32_t n = 0;
  OK(spyreDeviceGetCount(&n));
  CHECK(n == 4);
  spyreDriverShutdown();
  setenv("SPYRE_SIM_DEVICES", "3", 1);
  setenv("SPYRE_SIM_SET", "system.cards=4", 1);
  OK(spyreDriverConfigure(nullptr));
  OK(spyreDeviceGetCount(&n));
  CHECK(n == 3);
  spyreDriverShutdown();
  unsetenv("SPYRE_SIM_DEVICES");
  unsetenv("SPYRE_SIM_SET");
}

TEST_CASE("given a bad system section, configuring the driver names the key and what was expected", "[timed]") {
  spyreDriverShutdown();
  const char* overrides[] = {"system.topology=ring", "system.host_uplink.pcie_gen=4", "system.host_uplink.lanes=16",
                             "system.host_uplink.latency_ns=100", "system.host_uplink.efficiency=0.9"};
  spyre_driver_config_t c{};
  c.struct_size = sizeof c;
  c.overrides = overrides;
  c.num_overrides = 5;
  CHECK(spyreDriverConfigure(&c) == SPYRE_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(spyreGetLastErrorMessage(), ContainsSubstring("system.host_uplink"));
  CHECK_THAT(spyreGetLastErrorMessage(), ContainsSubstring("ring"));
  const char* topology[] = {"system.topology=mesh"};
  c.overrides = topology;
  c.num_overrides = 1;
  CHECK(spyreDriverConfigure(&c) == SPYRE_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(spyreGetLastErrorMessage(), ContainsSubstring("system.topology"));
  OK(spyreDriverConfigure(nullptr));
}

TEST_CASE("given 2 cards behind a switch, a 256 MiB peer copy takes the link time and the latencies", "[timed]") {
  start({"system.cards=2"});
  // Out of card 0's port and into card 1's, pipelined: one transfer time.
  CHECK(copies_at_once({{0, 1}}) == std::vector<std::uint64_t>{expected(1, kSwitch)});
  // The report names the peer bytes and the links.
  std::size_t bytes = 0;
  OK(spyreDeviceGetReport(device(1), nullptr, &bytes));
  std::string json(bytes, '\0');
  OK(spyreDeviceGetReport(device(1), json.data(), &bytes));
  CHECK_THAT(json, ContainsSubstring("\"received_bytes\":268435456"));
  CHECK_THAT(json, ContainsSubstring("\"topology\":\"switch\""));
  // Both cards communicate from the first byte on the links to the last landing (the
  // transfer, the route's latency, the DRAM latency) and compute nothing meanwhile.
  CHECK_THAT(json, ContainsSubstring("\"card_busy_ps\":{\"communication\":" + std::to_string(kT + kSwitch + kDram) +
                                     ",\"compute\":0,\"overlap\":0}"));
}

TEST_CASE("given host.threads per_card, a card's commands arrive at its own host clock", "[timed]") {
  // 20 calls for card 0, then one record on card 1: the two records' times.
  const auto run = [](const char* threads) {
    start({"system.cards=2", std::string("host.threads=") + threads});
    spyre_queue_t q0 = nullptr, q1 = nullptr;
    spyre_event_t e0 = nullptr, e1 = nullptr;
    OK(spyreQueueCreate(device(0), SPYRE_QUEUE_PRIORITY_NORMAL, &q0));
    OK(spyreEventCreate(device(0), &e0));
    for (int i = 0; i < 20; ++i) OK(spyreEventRecord(e0, q0));
    OK(spyreQueueCreate(device(1), SPYRE_QUEUE_PRIORITY_NORMAL, &q1));
    OK(spyreEventCreate(device(1), &e1));
    OK(spyreEventRecord(e1, q1));
    OK(spyreQueueSynchronize(q0));
    OK(spyreQueueSynchronize(q1));
    return std::pair{timestamp(e0), timestamp(e1)};
  };
  // One host thread: card 1's record arrives after card 0's 20 calls (1 us each), so it
  // completes after card 0's last record.
  const auto [one0, one1] = run("one");
  CHECK(one1 > one0);
  // A host per card: card 1's clock has only its own calls (its queue, its event, the
  // record), so its record completes more than 15 of card 0's calls earlier.
  const auto [own0, own1] = run("per_card");
  CHECK(own1 + 15'000'000 < own0);
  // Deterministic either way (simulated time goes on across restarts of the driver:
  // compare the gap between the records).
  const auto [again0, again1] = run("one");
  CHECK(again1 - again0 == one1 - one0);
  const auto [own_again0, own_again1] = run("per_card");
  CHECK(own_again0 - own_again1 == own0 - own1);
}

TEST_CASE("given 4 cards behind a switch, copies contend only where they share a card's port", "[timed]") {
  start({"system.cards=4"});
  // Different cards throughout: no shared port.
  CHECK(copies_at_once({{0, 1}, {2, 3}}) == std::vector<std::uint64_t>{expected(1, kSwitch), expected(1, kSwitch)});
  // Both leave card 0: its way out carries them one after the other.
  CHECK(sorted(copies_at_once({{0, 1}, {0, 2}})) ==
        std::vector<std::uint64_t>{expected(1, kSwitch), expected(2, kSwitch)});
  // Both enter card 2.
  CHECK(sorted(copies_at_once({{0, 2}, {1, 2}})) ==
        std::vector<std::uint64_t>{expected(1, kSwitch), expected(2, kSwitch)});
  // Opposite directions of one pair use different directions of each port.
  CHECK(copies_at_once({{0, 1}, {1, 0}}) == std::vector<std::uint64_t>{expected(1, kSwitch), expected(1, kSwitch)});
}

TEST_CASE("given a switch with a port to the host, host copies to two cards share it", "[timed]") {
  // Without one, each card's host copies are limited by its own port only.
  start({"system.cards=2"});
  CHECK(copies_at_once({{kHost, 0}, {kHost, 1}}) ==
        std::vector<std::uint64_t>{expected(1, kHop), expected(1, kHop)});
  // The switch's port to the host at Gen5 x16 x 0.85 like the cards', with no latency
  // of its own: each host copy passes it and then its card's port, so the two take it
  // one after the other. Latency: host link 1000 ns + switch 150 ns + port 0 ns.
  start({"system.cards=2", "system.host_uplink.pcie_gen=5", "system.host_uplink.lanes=16",
         "system.host_uplink.latency_ns=0", "system.host_uplink.efficiency=0.85"});
  CHECK(sorted(copies_at_once({{kHost, 0}, {kHost, 1}})) ==
        std::vector<std::uint64_t>{expected(1, kSwitch), expected(2, kSwitch)});
}

TEST_CASE("given a ring of 4 cards, copies share a link only where their routes overlap", "[timed]") {
  start({"system.cards=4", "system.topology=ring"});
  // 0 -> 2 is a tie, so clockwise (0 -> 1 -> 2): two hops. 1 -> 2 uses the link 1 -> 2 too.
  const auto overlap = copies_at_once({{0, 2}, {1, 2}});
  const bool two_hop_first = overlap[0] < overlap[1];
  if (two_hop_first) {
    CHECK(overlap == std::vector<std::uint64_t>{expected(1, 2 * kHop), expected(2, kHop)});
  } else {
    CHECK(overlap == std::vector<std::uint64_t>{expected(2, 2 * kHop), expected(1, kHop)});
  }
  // 0 -> 1 and 2 -> 3, and the two directions between 0 and 1: separate links.
  CHECK(copies_at_once({{0, 1}, {2, 3}}) == std::vector<std::uint64_t>{expected(1, kHop), expected(1, kHop)});
  CHECK(copies_at_once({{0, 1}, {1, 0}}) == std::vector<std::uint64_t>{expected(1, kHop), expected(1, kHop)});
}

TEST_CASE("given a ring of 8 cards, a copy half way round takes four hops' latency and one transfer time", "[timed]") {
  start({"system.cards=8", "system.topology=ring"});
  // 0 -> 4 clockwise (a tie) and 0 -> 5 counter-clockwise (3 hops): disjoint links.
  CHECK(copies_at_once({{0, 4}, {0, 5}}) == std::vector<std::uint64_t>{expected(1, 4 * kHop), expected(1, 3 * kHop)});
}

TEST_CASE("given 8 cards behind a switch or fully connected, disjoint copies never wait", "[timed]") {
  start({"system.cards=8"});
  CHECK(copies_at_once({{0, 7}, {3, 4}}) == std::vector<std::uint64_t>{expected(1, kSwitch), expected(1, kSwitch)});
  // Fully connected with 4 cards: two copies out of card 0 and one more into card 1
  // each have their own link (the cards' DRAM moves 2 x 256 MiB in 3.6 ms, under T).
  start({"system.cards=4", "system.topology=full"});
  CHECK(copies_at_once({{0, 1}, {0, 2}, {3, 1}}) ==
        std::vector<std::uint64_t>{expected(1, kHop), expected(1, kHop), expected(1, kHop)});
}

namespace {

// External work that doubles the int32 values of its one range and ends 5 us after
// its arrival (a stand-in for a collective's data movement and modelled time).
struct Doubling {
  std::uint64_t arrival = 0;
  std::uint32_t count = 0;
  std::uint32_t calls = 0;
  std::uint32_t cancelled = 0;
  bool fail = false;
};

int doubling(void* user, uint64_t arrival_ps, void* const* views, uint64_t* end_ps, char* message, size_t size) {
  auto* d = static_cast<Doubling*>(user);
  if (views == nullptr) {  // skipped: the queue had faulted
    ++d->cancelled;
    return 0;
  }
  ++d->calls;
  if (d->fail) {
    std::snprintf(message, size, "peer 3 hung up");
    return 1;
  }
  d->arrival = arrival_ps;
  auto* values = static_cast<std::int32_t*>(views[0]);
  for (std::uint32_t i = 0; i < d->count; ++i) values[i] *= 2;
  *end_ps = arrival_ps + 5'000'000;
  return 0;
}

}  // namespace

TEST_CASE("given external work on a queue, it runs when the queue reaches it, ends when it says, and is reported", "[timed]") {
  start({});
  constexpr std::uint32_t n = 1024;
  void* buffer = nullptr;
  OK(spyreMemAlloc(device(0), n * 4, &buffer));
  std::vector<std::int32_t> host(n);
  for (std::uint32_t i = 0; i < n; ++i) host[i] = static_cast<std::int32_t>(i);
  OK(spyreMemcpy(buffer, host.data(), n * 4));
  spyre_queue_t q = nullptr;
  spyre_event_t before = nullptr, after = nullptr;
  OK(spyreQueueCreate(device(0), SPYRE_QUEUE_PRIORITY_NORMAL, &q));
  OK(spyreEventCreate(device(0), &before));
  OK(spyreEventCreate(device(0), &after));
  Doubling work{.count = n};
  void* buffers[] = {buffer};
  size_t sizes[] = {n * 4};
  spyre_external_desc_t desc{};
  desc.struct_size = sizeof desc;
  desc.name = "all_reduce";
  desc.buffers = buffers;
  desc.sizes = sizes;
  desc.num_buffers = 1;
  desc.fn = doubling;
  desc.user = &work;
  desc.bytes = 4096;
  // This card is card 0 of 4 behind the default switch, sending 100 bytes to card 2 and
  // 10 to card 3 (card 1's 50 are card 1's to count): the report counts them on the
  // links of their routes, card 0's port out and the others' ports in.
  const spyre_link_transfer_t transfers[] = {{0, 2, 100}, {1, 2, 50}, {0, 3, 10}};
  desc.card = 0;
  desc.cards = 4;
  desc.transfers = transfers;
  desc.num_transfers = 3;
  OK(spyreEventRecord(before, q));
  OK(spyreQueueExternal(q, &desc));
  OK(spyreEventRecord(after, q));
  OK(spyreQueueSynchronize(q));
  CHECK(work.calls == 1);
  // Arrival: the record's completion + the command's fetch (300 cycles = 200 ns), as
  // the event's own timestamp + 200 ns if the host had submitted it by then; the end
  // 5 us later, then the second record's fetch.
  CHECK(timestamp(after) - work.arrival == 5'000'000 + 200'000);
  CHECK(work.arrival >= timestamp(before) + 200'000);
  OK(spyreMemcpy(host.data(), buffer, n * 4));
  CHECK(host[0] == 0);
  CHECK(host[n - 1] == 2 * static_cast<std::int32_t>(n - 1));
  std::size_t bytes = 0;
  OK(spyreDeviceGetReport(device(0), nullptr, &bytes));
  std::string json(bytes, '\0');
  OK(spyreDeviceGetReport(device(0), json.data(), &bytes));
  CHECK_THAT(json, ContainsSubstring("\"communication\":{\"bytes\":4096,\"collectives\":1,\"link_bytes\":{"
                                     "\"spyre:0 port out\":110,\"spyre:2 port in\":100,\"spyre:3 port in\":10},"
                                     "\"time_ps\":5000000}"));
  CHECK_THAT(json, ContainsSubstring("\"card_busy_ps\":{\"communication\":5000000,\"compute\":0,\"overlap\":0}"));

  // A failing work faults the queue with its reason; work behind it is cancelled (its
  // function called with no views); the device keeps working.
  work.fail = true;
  Doubling behind{.count = n};
  spyre_external_desc_t second = desc;
  second.user = &behind;
  OK(spyreQueueExternal(q, &desc));
  OK(spyreQueueExternal(q, &second));
  CHECK(spyreQueueSynchronize(q) == SPYRE_ERROR_DEVICE_FAULT);
  CHECK(behind.calls == 0);
  CHECK(behind.cancelled == 1);
  spyre_fault_t fault{};
  fault.struct_size = sizeof fault;
  OK(spyreQueueGetFault(q, &fault));
  CHECK(fault.command == SPYRE_COMMAND_EXTERNAL);
  CHECK_THAT(std::string(fault.reason), ContainsSubstring("all_reduce: peer 3 hung up"));
  OK(spyreQueueAcknowledgeError(q));

  // Ranges outside the queue's device memory are refused at submission.
  void* outside[] = {static_cast<char*>(buffer) + n * 4 - 16};
  desc.buffers = outside;
  CHECK(spyreQueueExternal(q, &desc) == SPYRE_ERROR_INVALID_SIZE);
  void* host_range[] = {host.data()};
  desc.buffers = host_range;
  CHECK(spyreQueueExternal(q, &desc) == SPYRE_ERROR_INVALID_DEVICE_POINTER);
  desc.buffers = buffers;
  // Transfers naming a card past the system, or this card past it, are refused; a
  // caller of 0.8 (a descriptor without the transfers) is served.
  desc.card = 4;
  CHECK(spyreQueueExternal(q, &desc) == SPYRE_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(spyreGetLastErrorMessage()), ContainsSubstring("desc->card 4 of desc->cards 4"));
  desc.card = 0;
  const spyre_link_transfer_t to_itself[] = {{0, 0, 8}};
  desc.transfers = to_itself;
  desc.num_transfers = 1;
  CHECK(spyreQueueExternal(q, &desc) == SPYRE_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(spyreGetLastErrorMessage()), ContainsSubstring("expected two different cards below 4, found 0 -> 0"));
  work.fail = false;
  desc.struct_size = offsetof(spyre_external_desc_t, card);
  OK(spyreQueueExternal(q, &desc));
  OK(spyreQueueSynchronize(q));
  desc.struct_size = sizeof desc;
  desc.fn = nullptr;
  CHECK(spyreQueueExternal(q, &desc) == SPYRE_ERROR_INVALID_NULL_POINTER);
  OK(spyreMemFree(buffer));
}

TEST_CASE("given a schedule, spyreSystemScheduleTime gives its time over the configured links", "[timed]") {
  start({});
  // One 256 MiB transfer behind a switch: T + 1150 ns (the arithmetic at the top).
  spyre_link_transfer_t one{0, 1, kBytes};
  const uint32_t sizes[] = {1};
  std::uint64_t t = 0;
  OK(spyreSystemScheduleTime(device(0), 8, &one, sizes, 1, &t));
  CHECK(t == kT + kSwitch);
  spyre_link_transfer_t bad{0, 8, 1};
  CHECK(spyreSystemScheduleTime(device(0), 8, &bad, sizes, 1, &t) == SPYRE_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(spyreGetLastErrorMessage(), ContainsSubstring("expected two different cards below 8, found 0 -> 8"));
  CHECK(spyreSystemScheduleTime(device(0), 1, &one, sizes, 1, &t) == SPYRE_ERROR_INVALID_ARGUMENT);
}
