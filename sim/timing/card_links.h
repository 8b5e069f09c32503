// The links between the cards of one system (config::SystemConfig) and the one rule
// that times a transfer over them. Plain C++, no SystemC: peer copies between the
// chips of one simulation use it, and so will collectives between processes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/chip_config.h"
#include "timing/timing_rules.h"

namespace spyre::timing {

class CardLinks {
 public:
  // A card's PCIe port (its host link), each direction: out of the card, into it.
  // Under a switch these are the card's only links, shared with its host traffic.
  struct Port {
    Server* out = nullptr;
    Server* in = nullptr;
  };

  // `ports[i]` belongs to card i; the cards are ports.size(). Throws
  // std::invalid_argument for no ports or a null server.
  CardLinks(const config::ChipConfig& chip, std::vector<Port> ports);

  std::uint32_t cards() const { return static_cast<std::uint32_t>(ports_.size()); }
  config::Topology topology() const { return system_.topology; }

  // The servers a copy from card `src` to card `dst` (src != dst) passes, in order:
  //   switch: src's port out, then dst's port in (the switch itself never blocks);
  //   ring:   one link per hop the shorter way round, clockwise (k -> k+1) on a tie;
  //   full:   the src -> dst link.
  // Throws std::out_of_range for a card index past cards() or src == dst.
  std::vector<Server*> route(std::uint32_t src, std::uint32_t dst);
  // The names of those links, as report() names them ("spyre:0 port out", "spyre:1 ->
  // spyre:2", "spyre:1 -> spyre:0 (ccw)").
  std::vector<std::string> route_names(std::uint32_t src, std::uint32_t dst) const;
  // Hops on that route: switch 1 (through the switch), ring the shorter distance, full 1.
  std::uint32_t hops(std::uint32_t src, std::uint32_t dst) const;
  // From a byte leaving `src` to it arriving at `dst`:
  //   switch: host_link.latency_ns + switch_latency_ns;
  //   ring, full: hops x link.latency_ns.
  Picoseconds latency(std::uint32_t src, std::uint32_t dst) const;

  // Books `bytes` from `src` to `dst` as one pipelined flow no earlier than `ready`
  // (`now`: the simulation time of the call, as Server::reserve_bytes takes it): each
  // server on the route is occupied for bytes / its rate, starting no earlier than the
  // flow's start on the server before it, so a busy link delays the links after it and
  // not those before. Returns {start on the first server, the latest end}; the last
  // byte arrives latency(src, dst) after that end.
  Server::Interval transfer(Picoseconds now, Picoseconds ready, std::uint32_t src, std::uint32_t dst,
                            std::uint64_t bytes);

  // The switch's port to the host that every card's host traffic also passes
  // (system.host_uplink), for traffic to the device or from it; null when there is none.
  Server* host_uplink(bool to_device) {
    if (!has_uplink_) return nullptr;
    return to_device ? &uplink_down_ : &uplink_up_;
  }

  // What the switch's port to the host adds to a host transfer's latency:
  // switch_latency_ns + host_uplink.latency_ns (0 without one).
  Picoseconds host_uplink_latency() const { return uplink_latency_ps_; }

  // Every link with its bytes, requests, busy time and utilisation over `elapsed_ps`.
  nlohmann::json report(Picoseconds elapsed_ps) const;
  // Clears the statistics of the links this object owns (the cards' ports are their
  // chips').
  void reset_stats();

 private:
  // A link: a card's port (out or in), a ring link from a card (clockwise or not), or
  // the direct link from one card to another.
  struct LinkId {
    enum class Kind { port_out, port_in, ring_cw, ring_ccw, direct } kind;
    std::uint32_t from = 0, to = 0;  // ports: the card; ring links: from; direct: both
  };
  std::vector<LinkId> path(std::uint32_t src, std::uint32_t dst) const;
  const Server& server(const LinkId& link) const;
  Server& server(const LinkId& link) { return const_cast<Server&>(std::as_const(*this).server(link)); }
  std::string name(const LinkId& link) const;

  config::SystemConfig system_;
  Picoseconds host_link_latency_ps_ = 0;
  std::vector<Port> ports_;
  std::vector<Server> cw_, ccw_;  // ring: cw_[k] joins k -> k+1, ccw_[k] joins k -> k-1
  std::vector<Server> full_;      // full: [src x cards + dst]
  bool has_uplink_ = false;
  Server uplink_down_, uplink_up_;  // host -> switch, switch -> host
  Picoseconds uplink_latency_ps_ = 0;
};

// One transfer of a schedule between the cards of a system.
struct LinkTransfer {
  std::uint32_t src = 0, dst = 0;
  std::uint64_t bytes = 0;
};

// The time a schedule takes on an idle system of `cards` cards connected as `chip`'s
// `system` section says (each card's port like its host_link): the steps run one after
// another, the transfers of a step start together (booked in order, contending where
// they share a link), and a step ends when its last byte has landed: the latest of
// CardLinks::transfer's end + latency(src, dst). A collective's algorithm is its steps:
// a ring all-reduce of S bytes on N cards is 2(N - 1) steps in which every card k sends
// S/N bytes to k + 1, which behind a switch or on a ring share no link, so it takes
//   2(N - 1) x (S / N / link rate + latency).
// Throws std::invalid_argument for fewer than 2 cards, std::out_of_range for a bad card.
Picoseconds schedule_time(const config::ChipConfig& chip, std::uint32_t cards,
                          const std::vector<std::vector<LinkTransfer>>& steps);

// The bytes of `transfers` that leave card `card` on each link of their routes in that
// system, by link name (CardLinks::route_names): what a card's report counts of a
// collective, so that summing every card's counts each byte on each link once.
// Transfers from other cards are skipped. Throws as schedule_time.
std::map<std::string, std::uint64_t> sent_link_bytes(const config::ChipConfig& chip, std::uint32_t cards,
                                                     std::uint32_t card, const std::vector<LinkTransfer>& transfers);

}  // namespace spyre::timing
