// timing::CardLinks: the routes, latencies and pipelined flows of the links between
// cards, with the arithmetic written out. The cards' ports are plain servers here (a
// chip's host link in the simulator).
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config_loader.h"
#include "timing/card_links.h"

using namespace spyre::timing;
using spyre::config::load_config;

namespace {

// 1 GB/s ports (PCIe Gen1 x8: 2.5 GT/s x 8 lanes x 8/10 / 8 = 2e9 B/s, x 0.5 efficiency
// = 1e9 B/s), so 1000 bytes take 1 us; host link latency 1000 ns.
const std::vector<std::string> kSlowLinks = {"host_link.pcie_gen=1", "host_link.lanes=8", "host_link.efficiency=0.5",
                                             "host_link.latency_ns=1000"};

struct System {
  std::vector<Server> out, in;
  CardLinks links;
  System(std::uint32_t cards, std::vector<std::string> overrides)
      : out(cards, Server(1e9)), in(cards, Server(1e9)), links(make(cards, std::move(overrides))) {}

  CardLinks make(std::uint32_t cards, std::vector<std::string> overrides) {
    overrides.insert(overrides.end(), kSlowLinks.begin(), kSlowLinks.end());
    std::vector<CardLinks::Port> ports;
    for (std::uint32_t i = 0; i < cards; ++i) ports.push_back({&out[i], &in[i]});
    return CardLinks(load_config("", overrides).chip, ports);
  }
};

}  // namespace

TEST_CASE("given cards behind a switch, a copy leaves through its card's port and enters through the other's") {
  System s(4, {"system.topology=switch", "system.switch_latency_ns=150"});
  REQUIRE(s.links.cards() == 4);
  CHECK(s.links.route(0, 3) == std::vector<Server*>{&s.out[0], &s.in[3]});
  CHECK(s.links.hops(0, 3) == 1);
  // host_link.latency_ns + switch_latency_ns = 1000 + 150 ns.
  CHECK(s.links.latency(0, 3) == 1'150'000);
  // 1000 bytes at 1 GB/s: 1 us on each port, both from t = 0 (pipelined).
  const auto a = s.links.transfer(0, 0, 0, 3, 1000);
  CHECK(a.start == 0);
  CHECK(a.end == 1'000'000);
  // 0 -> 1 shares card 0's way out: it starts when the first copy has left, at 1 us.
  const auto b = s.links.transfer(0, 0, 0, 1, 1000);
  CHECK(b.start == 1'000'000);
  CHECK(b.end == 2'000'000);
  // 2 -> 3: card 2's port out is free, card 3's in is busy until 1 us: the flow starts
  // on the first server at 0 and on the second at 1 us (a busy link delays those after
  // it, not those before), so the last byte leaves at 2 us.
  const auto c = s.links.transfer(0, 0, 2, 3, 1000);
  CHECK(c.start == 0);
  CHECK(c.end == 2'000'000);
  // 2 -> 1: card 2's way out is busy until 1 us (2 -> 3), so the flow starts at 1 us;
  // card 1's way in is busy from 1 to 2 us (0 -> 1), so the bytes enter from 2 to 3 us.
  const auto d = s.links.transfer(0, 0, 2, 1, 1000);
  CHECK(d.start == 1'000'000);
  CHECK(d.end == 3'000'000);
  CHECK(s.in[3].bytes() == 2000);
  CHECK(s.out[0].bytes() == 2000);
}

TEST_CASE("given a ring of cards, a copy takes the shorter way round, clockwise on a tie, hop by hop") {
  System s(8, {"system.topology=ring", "system.link.pcie_gen=1", "system.link.lanes=8", "system.link.efficiency=0.5",
               "system.link.latency_ns=200"});
  // 0 -> 3: clockwise 3 hops (counter-clockwise 5); 0 -> 5: counter-clockwise 3 hops;
  // 0 -> 4: a tie (4 each way), clockwise.
  CHECK(s.links.hops(0, 3) == 3);
  CHECK(s.links.hops(0, 5) == 3);
  CHECK(s.links.hops(0, 4) == 4);
  CHECK(s.links.hops(6, 1) == 3);  // clockwise 6 -> 7 -> 0 -> 1
  // Latency: hops x link latency = 4 x 200 ns.
  CHECK(s.links.latency(0, 4) == 800'000);
  // The clockwise route 0 -> 4 and the counter-clockwise 0 -> 5 share no link: both
  // run from 0 for 1 us.
  CHECK(s.links.transfer(0, 0, 0, 4, 1000).end == 1'000'000);
  CHECK(s.links.transfer(0, 0, 0, 5, 1000).end == 1'000'000);
  // 2 -> 3 uses link 2 -> 3, which 0 -> 4 holds until 1 us: it runs 1 us to 2 us.
  const auto c = s.links.transfer(0, 0, 2, 3, 1000);
  CHECK(c.start == 1'000'000);
  CHECK(c.end == 2'000'000);
  // 3 -> 2 goes the other way (counter-clockwise link 3 -> 2): free.
  CHECK(s.links.transfer(0, 0, 3, 2, 1000).end == 1'000'000);
  // The ports (host links) carry none of it.
  for (const auto& p : s.out) CHECK(p.bytes() == 0);
  const auto report = s.links.report(2'000'000);
  CHECK(report["topology"] == "ring");
  CHECK(report["links"].size() == 16);
}

TEST_CASE("given fully connected cards, every ordered pair has its own link") {
  System s(4, {"system.topology=full"});
  CHECK(s.links.hops(1, 3) == 1);
  // No system.link: each link is like host_link (1 GB/s, 1000 ns).
  CHECK(s.links.latency(1, 3) == 1'000'000);
  CHECK(s.links.transfer(0, 0, 0, 1, 1000).end == 1'000'000);
  CHECK(s.links.transfer(0, 0, 0, 2, 1000).end == 1'000'000);  // another link out of card 0
  CHECK(s.links.transfer(0, 0, 1, 0, 1000).end == 1'000'000);  // the other direction
  CHECK(s.links.transfer(0, 0, 0, 1, 1000).end == 2'000'000);  // the same link again
  CHECK(s.links.report(0)["links"].size() == 12);
}

TEST_CASE("given a switch with a port to the host, that port is two servers; without one there is none") {
  System with(2, {"system.host_uplink.pcie_gen=1", "system.host_uplink.lanes=4", "system.host_uplink.efficiency=0.5",
                     "system.host_uplink.latency_ns=500"});
  REQUIRE(with.links.host_uplink(true) != nullptr);
  REQUIRE(with.links.host_uplink(false) != nullptr);
  CHECK(with.links.host_uplink(true) != with.links.host_uplink(false));
  // Gen1 x4 x 0.5: 2.5e9 x 4 x 0.8 / 8 x 0.5 = 0.5 GB/s.
  CHECK(with.links.host_uplink(true)->bytes_per_s() == 0.5e9);
  System without(2, {});
  CHECK(without.links.host_uplink(true) == nullptr);
}

TEST_CASE("given a route to itself or past the last card, CardLinks refuses it") {
  System s(2, {});
  CHECK_THROWS_AS(s.links.route(1, 1), std::out_of_range);
  CHECK_THROWS_AS(s.links.hops(0, 2), std::out_of_range);
  CHECK_THROWS_AS(CardLinks(load_config("").chip, {}), std::invalid_argument);
  CHECK_THROWS_AS(CardLinks(load_config("").chip, {{nullptr, nullptr}}), std::invalid_argument);
}

TEST_CASE("given a ring all-reduce's steps, the schedule takes 2(N-1) x (S/N / rate + latency)") {
  // The default chip's links behind a switch: Gen5 x16 x 0.85 = 53,563,076,923.08 B/s,
  // latency 1000 + 150 ns. S = 64 MiB on N = 4 cards: 6 steps of 16 MiB each, every
  // card k sending to k + 1 (no two share a port):
  //   16 MiB / rate = ceil(16777216e12 / 53563076923.08) = 313,223,530 ps (313223529.41)
  //   step = 313,223,530 + 1,150,000 = 314,373,530 ps; 6 steps = 1,886,241,180 ps.
  const auto chip = load_config("").chip;
  const std::uint32_t n = 4;
  const std::uint64_t s = 64ull << 20;
  std::vector<std::vector<LinkTransfer>> ring(2 * (n - 1));
  for (auto& step : ring) {
    for (std::uint32_t k = 0; k < n; ++k) step.push_back({k, (k + 1) % n, s / n});
  }
  CHECK(schedule_time(chip, n, ring) == 1'886'241'180);
  // On a ring of cards the same steps use the clockwise links, one hop each (1000 ns).
  const auto ring_chip = load_config("", {"system.topology=ring"}).chip;
  CHECK(schedule_time(ring_chip, n, ring) == 6 * (313'223'530 + 1'000'000));
  // A gather to card 0 behind a switch: three transfers into card 0's one port, one
  // after another: 3 x 313,223,530 + 1,150,000.
  std::vector<std::vector<LinkTransfer>> gather = {{{1, 0, s / n}, {2, 0, s / n}, {3, 0, s / n}}};
  CHECK(schedule_time(chip, n, gather) == 3 * 313'223'530ull + 1'150'000);
  // Empty steps and zero bytes: the latencies only.
  CHECK(schedule_time(chip, n, {{}, {{0, 1, 0}}}) == 1'150'000);
  CHECK_THROWS_AS(schedule_time(chip, 1, {}), std::invalid_argument);
  CHECK_THROWS_AS(schedule_time(chip, 2, {{{0, 2, 1}}}), std::out_of_range);
}

TEST_CASE("given a collective's transfers, a card counts the bytes it sends on every link of their routes") {
  const auto chip = [](const char* topology) { return load_config("", {std::string("system.topology=") + topology}).chip; };
  // Card 0 sends 100 bytes to 2 and 10 to 3; card 1's 50 to 2 are not card 0's to count.
  const std::vector<LinkTransfer> transfers = {{0, 2, 100}, {1, 2, 50}, {0, 3, 10}};
  using Bytes = std::map<std::string, std::uint64_t>;
  // Switch: out of card 0's port (110), into 2's (100) and 3's (10).
  CHECK(sent_link_bytes(chip("switch"), 4, 0, transfers) ==
        Bytes{{"spyre:0 port out", 110}, {"spyre:2 port in", 100}, {"spyre:3 port in", 10}});
  // Ring of 4: 0 -> 2 is a tie, clockwise over 0 -> 1 -> 2; 0 -> 3 one hop the other way.
  CHECK(sent_link_bytes(chip("ring"), 4, 0, transfers) ==
        Bytes{{"spyre:0 -> spyre:1", 100}, {"spyre:1 -> spyre:2", 100}, {"spyre:0 -> spyre:3 (ccw)", 10}});
  // Fully connected: one link per pair.
  CHECK(sent_link_bytes(chip("full"), 4, 0, transfers) == Bytes{{"spyre:0 -> spyre:2", 100}, {"spyre:0 -> spyre:3", 10}});
  // The names are the report's: every counted link is one the report lists.
  std::vector<Server> out(4, Server(1e9)), in(4, Server(1e9));
  std::vector<CardLinks::Port> ports;
  for (std::uint32_t i = 0; i < 4; ++i) ports.push_back({&out[i], &in[i]});
  const CardLinks ring(chip("ring"), ports);
  std::vector<std::string> listed;
  const nlohmann::json report = ring.report(1);
  for (const auto& l : report["links"]) listed.push_back(l["name"].get<std::string>());
  for (const auto& [name, bytes] : sent_link_bytes(chip("ring"), 4, 0, transfers)) {
    CHECK(std::find(listed.begin(), listed.end(), name) != listed.end());
  }
  CHECK_THROWS_AS(sent_link_bytes(chip("switch"), 4, 4, transfers), std::out_of_range);
  CHECK_THROWS_AS(sent_link_bytes(chip("switch"), 2, 0, transfers), std::out_of_range);  // card 2 of 2
}
