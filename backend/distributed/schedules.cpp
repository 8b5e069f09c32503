#include "distributed/schedules.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace spyre::distributed {

Schedule ring(int n, int steps, std::uint64_t bytes) {
  Schedule s;
  for (int i = 0; i < steps; ++i) {
    auto& step = s.steps.emplace_back();
    for (int k = 0; k < n; ++k) step.push_back({static_cast<uint32_t>(k), static_cast<uint32_t>((k + 1) % n), bytes});
  }
  return s;
}

Schedule tree(int n, int root, std::uint64_t bytes, bool up) {
  Schedule s;
  for (int span = 1; span < n; span *= 2) {
    auto& step = s.steps.emplace_back();
    for (int rel = 0; rel < span && rel + span < n; ++rel) {
      const auto a = static_cast<uint32_t>((root + rel) % n), b = static_cast<uint32_t>((root + rel + span) % n);
      step.push_back(up ? spyre_link_transfer_t{b, a, bytes} : spyre_link_transfer_t{a, b, bytes});
    }
  }
  if (up) std::reverse(s.steps.begin(), s.steps.end());
  return s;
}

Schedule star(int n, int root, const std::function<std::uint64_t(int)>& bytes, bool to_root) {
  Schedule s;
  auto& step = s.steps.emplace_back();
  for (int k = 0; k < n; ++k) {
    if (k == root) continue;
    const auto a = static_cast<uint32_t>(k), r = static_cast<uint32_t>(root);
    step.push_back(to_root ? spyre_link_transfer_t{a, r, bytes(k)} : spyre_link_transfer_t{r, a, bytes(k)});
  }
  return s;
}

Schedule all_to_all(const std::vector<std::vector<std::uint64_t>>& sizes) {
  const int n = static_cast<int>(sizes.size());
  Schedule s;
  for (int i = 1; i < n; ++i) {
    auto& step = s.steps.emplace_back();
    for (int k = 0; k < n; ++k) {
      const int to = (k + i) % n;
      step.push_back({static_cast<uint32_t>(k), static_cast<uint32_t>(to), sizes[k][to]});
    }
  }
  return s;
}

FlatSchedule flatten(const Schedule& s) {
  FlatSchedule f;
  for (const auto& step : s.steps) {
    f.counts.push_back(static_cast<std::uint32_t>(step.size()));
    f.transfers.insert(f.transfers.end(), step.begin(), step.end());
  }
  return f;
}

std::uint64_t sent_by(const Schedule& s, int rank) {
  std::uint64_t sent = 0;
  for (const auto& step : s.steps) {
    for (const auto& t : step) sent += static_cast<int>(t.src) == rank ? t.bytes : 0;
  }
  return sent;
}

std::vector<int> everyone_but(int rank, int size) {
  std::vector<int> peers;
  for (int k = 0; k < size; ++k) {
    if (k != rank) peers.push_back(k);
  }
  return peers;
}

std::vector<spyre_link_transfer_t> own_transfers(int rank, const std::vector<std::uint64_t>& sends) {
  std::vector<spyre_link_transfer_t> out;
  for (std::size_t k = 0; k < sends.size(); ++k) {
    if (static_cast<int>(k) != rank && sends[k] > 0) {
      out.push_back({static_cast<uint32_t>(rank), static_cast<uint32_t>(k), sends[k]});
    }
  }
  return out;
}

std::string with_sizes(const std::vector<std::uint64_t>& sizes, const std::string& data) {
  std::string out(reinterpret_cast<const char*>(sizes.data()), sizes.size() * sizeof(std::uint64_t));
  return out + data;
}

std::vector<std::uint64_t> sizes_of(const std::string& payload, int n) {
  if (payload.size() < n * sizeof(std::uint64_t)) throw std::runtime_error("an all-to-all message without its sizes");
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(n));
  std::memcpy(sizes.data(), payload.data(), sizes.size() * sizeof(std::uint64_t));
  return sizes;
}

std::string strip_sizes(const std::string& payload, int n) { return payload.substr(n * sizeof(std::uint64_t)); }

}  // namespace spyre::distributed
