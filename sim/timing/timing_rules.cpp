#include "timing/timing_rules.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "spyre/cost/systolic.h"

namespace spyre::timing {

std::uint64_t array_matmul_cycles(config::Dataflow dataflow, std::uint64_t rows, std::uint64_t cols,
                                  std::uint64_t m, std::uint64_t n, std::uint64_t k, std::uint64_t simd_depth) {
  if (rows == 0 || cols == 0 || m == 0 || n == 0 || k == 0 || simd_depth == 0) {
    throw std::invalid_argument("array_matmul_cycles: every dimension and the SIMD depth must be positive");
  }
  return cost::array_matmul_cycles(static_cast<cost::Dataflow>(dataflow), rows, cols, m, n, k, simd_depth);
}

std::uint64_t core_matmul_cycles(const config::ChipConfig& chip, config::MacType type, std::uint64_t m,
                                 std::uint64_t n, std::uint64_t k) {
  const auto& array = chip.cores.compute_array;
  const std::uint64_t depth = config::simd_depth(array.simd_depth, type);
  if (depth == 0) throw std::invalid_argument("the compute array does not support this operand type");
  // (cost::core_matmul_cycles, with the argument checks of array_matmul_cycles.)
  return array_matmul_cycles(array.dataflow, array.rows, array.cols, m, cost::div_up(n, chip.cores.corelets), k, depth);
}

std::uint64_t matmul_scratchpad_bytes(const config::ChipConfig& chip, std::uint64_t m, std::uint64_t n,
                                      std::uint64_t k, std::uint64_t in_size, std::uint64_t out_size, bool accumulate) {
  const auto& array = chip.cores.compute_array;
  const std::uint64_t corelets = std::max<std::uint64_t>(1, chip.cores.corelets);
  const std::uint64_t share = cost::div_up(n, corelets);
  std::uint64_t elements = 0;
  for (std::uint64_t c = 0, done = 0; c < corelets && done < n; ++c) {
    const std::uint64_t cols = std::min(share, n - done);
    elements += cost::array_operand_elements(static_cast<cost::Dataflow>(array.dataflow), array.rows, array.cols, m,
                                             cols, k);
    done += cols;
  }
  return elements * in_size + m * n * out_size * (accumulate ? 2 : 1);
}

std::uint64_t vector_cycles(const config::ChipConfig& chip, double op_cycles, std::uint64_t elements) {
  const auto& v = chip.cores.vector;
  const std::uint64_t width = v.lanes * v.units_per_corelet * chip.cores.corelets;
  const std::uint64_t vectors = ceil_div(elements, width);
  return static_cast<std::uint64_t>(std::ceil(static_cast<double>(vectors) * op_cycles)) + v.pipeline_latency_cycles;
}

Picoseconds Clock::ps(std::uint64_t cycles) const {
  return static_cast<Picoseconds>(std::llround(static_cast<double>(cycles) * 1000.0 / ghz_));
}

Picoseconds transfer_ps(std::uint64_t bytes, double bytes_per_s) {
  return static_cast<Picoseconds>(std::ceil(static_cast<double>(bytes) * 1e12 / bytes_per_s - 1e-9));
}

Server::Interval Server::reserve_bytes(Picoseconds now, Picoseconds ready, std::uint64_t bytes) {
  return reserve(now, ready, transfer_ps(bytes, bytes_per_s_), bytes);
}

Server::Interval Server::reserve(Picoseconds now, Picoseconds ready, Picoseconds duration, std::uint64_t bytes) {
  // Forget what ended before now: no request can use it.
  while (head_ < busy_.size() && busy_[head_].end <= now) ++head_;
  if (head_ >= 64 && 2 * head_ >= busy_.size()) {
    busy_.erase(busy_.begin(), busy_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
  // The earliest start at or after `ready` whose [start, start + duration) is idle.
  const auto first = busy_.begin() + static_cast<std::ptrdiff_t>(head_);
  auto it = std::upper_bound(first, busy_.end(), ready, [](Picoseconds v, const Interval& i) { return v < i.start; });
  Picoseconds start = ready;
  if (it != first && std::prev(it)->end > start) start = std::prev(it)->end;
  while (it != busy_.end() && it->start < start + duration) {
    start = std::max(start, it->end);
    ++it;
  }
  const Picoseconds end = start + duration;
  busy_ps_ += duration;
  bytes_ += bytes;
  ++requests_;
  if (duration > 0) {
    // Insert [start, end) before `it`, merged with the neighbours it touches.
    const bool joins_prev = it != first && std::prev(it)->end == start;
    const bool joins_next = it != busy_.end() && it->start == end;
    if (joins_prev && joins_next) {
      std::prev(it)->end = it->end;
      busy_.erase(it);
    } else if (joins_prev) {
      std::prev(it)->end = end;
    } else if (joins_next) {
      it->start = start;
    } else {
      busy_.insert(it, Interval{start, end});
    }
  }
  return {start, end};
}

Server::Interval DramChannel::reserve(Picoseconds now, Picoseconds ready, std::uint64_t bytes, Direction direction) {
  if (turnaround_ == 0) return server_.reserve_bytes(now, ready, bytes);
  if (ready >= busy_until_ + 2 * turnaround_) since_[0] = since_[1] = 0;
  since_[direction == Direction::read ? 0 : 1] += bytes;
  const std::uint64_t trips = std::min(since_[0], since_[1]) / batch_;
  since_[0] -= trips * batch_;
  since_[1] -= trips * batch_;
  turnarounds_ += 2 * trips;
  const auto iv = server_.reserve(now, ready, transfer_ps(bytes, server_.bytes_per_s()) + 2 * trips * turnaround_, bytes);
  busy_until_ = std::max(busy_until_, iv.end);
  return iv;
}

}  // namespace spyre::timing
