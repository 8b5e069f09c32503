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

std::vector<CardLinks::LinkId> CardLinks::path(std::uint32_t src, std::uint32_t dst) const {
  using Kind = LinkId::Kind;
  const std::uint32_t h = hops(src, dst);
  const std::uint32_t n = cards();
  switch (system_.topology) {
    case config::Topology::switched:
      return {{Kind::port_out, src, src}, {Kind::port_in, dst, dst}};
    case config::Topology::full:
      return {{Kind::direct, src, dst}};
    case config::Topology::ring: {
      // Clockwise when it is no longer than the other way (so on a tie).
      const bool clockwise = (dst + n - src) % n == h;
      std::vector<LinkId> out;
      out.reserve(h);
      std::uint32_t at = src;
      for (std::uint32_t i = 0; i < h; ++i) {
        const std::uint32_t next = clockwise ? (at + 1) % n : (at + n - 1) % n;
        out.push_back({clockwise ? Kind::ring_cw : Kind::ring_ccw, at, next});
        at = next;
      }
      return out;
    }
  }
  return {};
}

const Server& CardLinks::server(const LinkId& link) const {
  switch (link.kind) {
    case LinkId::Kind::port_out:
      return *ports_[link.from].out;
    case LinkId::Kind::port_in:
      return *ports_[link.from].in;
    case LinkId::Kind::ring_cw:
      return cw_[link.from];
    case LinkId::Kind::ring_ccw:
      return ccw_[link.from];
    case LinkId::Kind::direct:
      break;
  }
  return full_[static_cast<std::size_t>(link.from) * cards() + link.to];
}

std::string CardLinks::name(const LinkId& link) const {
  switch (link.kind) {
    case LinkId::Kind::port_out:
      return fmt::format("spyre:{} port out", link.from);
    case LinkId::Kind::port_in:
      return fmt::format("spyre:{} port in", link.from);
    case LinkId::Kind::ring_ccw:
      return fmt::format("spyre:{} -> spyre:{} (ccw)", link.from, link.to);
    case LinkId::Kind::ring_cw:
    case LinkId::Kind::direct:
      break;
  }
  return fmt::format("spyre:{} -> spyre:{}", link.from, link.to);
}

std::vector<Server*> CardLinks::route(std::uint32_t src, std::uint32_t dst) {
  std::vector<Server*> out;
  for (const LinkId& link : path(src, dst)) out.push_back(&server(link));
  return out;
}

std::vector<std::string> CardLinks::route_names(std::uint32_t src, std::uint32_t dst) const {
  std::vector<std::string> out;
  for (const LinkId& link : path(src, dst)) out.push_back(name(link));
  return out;
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
  using Kind = LinkId::Kind;
  nlohmann::json links = nlohmann::json::array();
  const std::uint32_t n = cards();
  const auto add = [&](const LinkId& link) { links.push_back(server_json(name(link), server(link), elapsed_ps)); };
  switch (system_.topology) {
    case config::Topology::switched:
      for (std::uint32_t i = 0; i < n; ++i) {
        add({Kind::port_out, i, i});
        add({Kind::port_in, i, i});
      }
      if (has_uplink_) {
        links.push_back(server_json("switch -> host", uplink_up_, elapsed_ps));
        links.push_back(server_json("host -> switch", uplink_down_, elapsed_ps));
      }
      break;
    case config::Topology::ring:
      for (std::uint32_t i = 0; i < n && n > 1; ++i) {
        add({Kind::ring_cw, i, (i + 1) % n});
        add({Kind::ring_ccw, i, (i + n - 1) % n});
      }
      break;
    case config::Topology::full:
      for (std::uint32_t i = 0; i < n; ++i) {
        for (std::uint32_t j = 0; j < n; ++j) {
          if (i != j) add({Kind::direct, i, j});
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

std::map<std::string, std::uint64_t> sent_link_bytes(const config::ChipConfig& chip, std::uint32_t cards,
                                                     std::uint32_t card, const std::vector<LinkTransfer>& transfers) {
  if (cards < 2) throw std::invalid_argument(fmt::format("a schedule needs 2 or more cards, found {}", cards));
  if (card >= cards) throw std::out_of_range(fmt::format("card {}: expected one below {}", card, cards));
  // Naming needs no servers' state: idle stand-ins for the ports.
  std::vector<Server> out(cards, Server(1.0)), in(cards, Server(1.0));
  std::vector<CardLinks::Port> ports;
  for (std::uint32_t i = 0; i < cards; ++i) ports.push_back({&out[i], &in[i]});
  const CardLinks links(chip, std::move(ports));
  std::map<std::string, std::uint64_t> bytes;
  for (const LinkTransfer& t : transfers) {
    if (t.src != card) continue;
    for (const std::string& link : links.route_names(t.src, t.dst)) bytes[link] += t.bytes;
  }
  return bytes;
}

}  // namespace spyre::timing
