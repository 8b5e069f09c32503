#include "timing/card_links.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/derived_figures.h"

namespace spyre::timing {

namespace {

const config::HostLinkConfig& card_link(const config::ChipConfig& chip, const config::SystemConfig& system) {
  return system.link ? *system.link : chip.host_link;
}

nlohmann::json server_json(const std::string& name, const Server& s, Picoseconds elapsed_ps) {
  return {{"name", name},
          {"bytes", s.bytes()},
          {"requests", s.requests()},
          {"busy_ps", s.busy_ps()},
          {"bytes_per_s", s.bytes_per_s()},
          {"utilization", elapsed_ps == 0 ? 0.0 : static_cast<double>(s.busy_ps()) / static_cast<double>(elapsed_ps)}};
}

}  // namespace

CardLinks::CardLinks(const config::ChipConfig& chip, std::vector<Port> ports)
    : system_(chip.system_or_default()),
      host_link_latency_ps_(ns_to_ps(chip.host_link.latency_ns)),
      ports_(std::move(ports)) {
  if (ports_.empty()) throw std::invalid_argument("CardLinks: a system needs at least one card");
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    if (ports_[i].out == nullptr || ports_[i].in == nullptr) {
      throw std::invalid_argument(fmt::format("CardLinks: card {} has no host-link port", i));
    }
  }
  const std::uint32_t n = cards();
  const double link_rate = config::pcie_effective_bytes_per_s(card_link(chip, system_));
  switch (system_.topology) {
    case config::Topology::switched:
      if (system_.host_uplink) {
        has_uplink_ = true;
        const double rate = config::pcie_effective_bytes_per_s(*system_.host_uplink);
        uplink_down_ = Server(rate);
        uplink_up_ = Server(rate);
        uplink_latency_ps_ = ns_to_ps(system_.switch_latency_ns) + ns_to_ps(system_.host_uplink->latency_ns);
      }
      break;
    case config::Topology::ring:
      cw_.assign(n, Server(link_rate));
      ccw_.assign(n, Server(link_rate));
      break;
    case config::Topology::full:
      full_.assign(static_cast<std::size_t>(n) * n, Server(link_rate));
      break;
  }
}

std::uint32_t CardLinks::hops(std::uint32_t src, std::uint32_t dst) const {
  const std::uint32_t n = cards();
  if (src >= n || dst >= n || src == dst) {
    throw std::out_of_range(fmt::format("card link route {} -> {}: expected two different cards below {}", src, dst, n));
  }
  if (system_.topology != config::Topology::ring) return 1;
  const std::uint32_t cw = (dst + n - src) % n;
  return std::min(cw, n - cw);
}

Picoseconds CardLinks::latency(std::uint32_t src, std::uint32_t dst) const {
  const std::uint32_t h = hops(src, dst);
  if (system_.topology == config::Topology::switched) return host_link_latency_ps_ + ns_to_ps(system_.switch_latency_ns);
  const double link_ns = system_.link ? system_.link->latency_ns : static_cast<double>(host_link_latency_ps_) / 1000.0;
  return h * ns_to_ps(link_ns);
}

Server& CardLinks::ring_link(std::uint32_t from, bool clockwise) { return clockwise ? cw_[from] : ccw_[from]; }

std::vector<Server*> CardLinks::route(std::uint32_t src, std::uint32_t dst) {
  const std::uint32_t h = hops(src, dst);
  const std::uint32_t n = cards();
  switch (system_.topology) {
    case config::Topology::switched:
      return {ports_[src].out, ports_[dst].in};
    case config::Topology::full:
      return {&full_[static_cast<std::size_t>(src) * n + dst]};
    case config::Topology::ring: {
      // Clockwise when it is no longer than the other way (so on a tie).
      const bool clockwise = (dst + n - src) % n == h;
      std::vector<Server*> out;
      out.reserve(h);
      std::uint32_t at = src;
      for (std::uint32_t i = 0; i < h; ++i) {
        out.push_back(&ring_link(at, clockwise));
        at = clockwise ? (at + 1) % n : (at + n - 1) % n;
      }
      return out;
    }
  }
  return {};
}

Server::Interval CardLinks::transfer(Picoseconds now, Picoseconds ready, std::uint32_t src, std::uint32_t dst,
                                     std::uint64_t bytes) {
  Server::Interval flow{ready, ready};
  bool first = true;
  Picoseconds start = ready;
  for (Server* s : route(src, dst)) {
    const Server::Interval iv = s->reserve_bytes(now, start, bytes);
    if (first) flow.start = iv.start;
    first = false;
    start = iv.start;
    flow.end = std::max(flow.end, iv.end);
  }
  return flow;
}

nlohmann::json CardLinks::report(Picoseconds elapsed_ps) const {
  nlohmann::json links = nlohmann::json::array();
  const std::uint32_t n = cards();
  switch (system_.topology) {
    case config::Topology::switched:
      for (std::uint32_t i = 0; i < n; ++i) {
        links.push_back(server_json(fmt::format("spyre:{} port out", i), *ports_[i].out, elapsed_ps));
        links.push_back(server_json(fmt::format("spyre:{} port in", i), *ports_[i].in, elapsed_ps));
      }
      if (has_uplink_) {
        links.push_back(server_json("switch -> host", uplink_up_, elapsed_ps));
        links.push_back(server_json("host -> switch", uplink_down_, elapsed_ps));
      }
      break;
    case config::Topology::ring:
      for (std::uint32_t i = 0; i < n && n > 1; ++i) {
        links.push_back(server_json(fmt::format("spyre:{} -> spyre:{}", i, (i + 1) % n), cw_[i], elapsed_ps));
        links.push_back(server_json(fmt::format("spyre:{} -> spyre:{} (ccw)", i, (i + n - 1) % n), ccw_[i], elapsed_ps));
      }
      break;
    case config::Topology::full:
      for (std::uint32_t i = 0; i < n; ++i) {
        for (std::uint32_t j = 0; j < n; ++j) {
          if (i != j) {
            links.push_back(server_json(fmt::format("spyre:{} -> spyre:{}", i, j), full_[std::size_t{i} * n + j], elapsed_ps));
          }
        }
      }
      break;
  }
  std::string topology;
  for (const auto& [name, value] : config::topology_choices()) {
    if (value == system_.topology) topology = name;
  }
  return {{"cards", n},
          {"topology", topology},
          {"links", links}};
}

void CardLinks::reset_stats() {
  for (auto& s : cw_) s.reset_stats();
  for (auto& s : ccw_) s.reset_stats();
  for (auto& s : full_) s.reset_stats();
  uplink_down_.reset_stats();
  uplink_up_.reset_stats();
}

Picoseconds schedule_time(const config::ChipConfig& chip, std::uint32_t cards,
                          const std::vector<std::vector<LinkTransfer>>& steps) {
  if (cards < 2) throw std::invalid_argument(fmt::format("a schedule needs 2 or more cards, found {}", cards));
  const double port_rate = config::pcie_effective_bytes_per_s(chip.host_link);
  std::vector<Server> out(cards, Server(port_rate)), in(cards, Server(port_rate));
  std::vector<CardLinks::Port> ports;
  for (std::uint32_t i = 0; i < cards; ++i) ports.push_back({&out[i], &in[i]});
  CardLinks links(chip, std::move(ports));
  Picoseconds t = 0;
  for (const auto& step : steps) {
    Picoseconds end = t;
    for (const LinkTransfer& x : step) {
      end = std::max(end, links.transfer(t, t, x.src, x.dst, x.bytes).end + links.latency(x.src, x.dst));
    }
    t = end;
  }
  return t;
}

}  // namespace spyre::timing
