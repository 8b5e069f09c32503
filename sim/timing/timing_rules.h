// Timing rules: plain functions of the config, no SystemC. The SystemC model only
// orchestrates them; every formula here is unit-tested with its arithmetic written out
// (tests/sim/timing_rules_test.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/chip_config.h"
#include "config/derived_figures.h"
#include "spyre/checked.h"

namespace spyre::timing {

using Picoseconds = std::uint64_t;

using spyre::ceil_div;  // include/spyre/checked.h (one definition for the model and the compiler)

// Cycles for one R x C systolic array computing an M x N x K product with SIMD depth s
// (the SCALE-Sim analytic model with operands resident; K becomes ceil(K/s)):
//   output stationary: Sr=M,  Sc=N, T=K';  cycles = F*(T + R + C - 2) - 1
//   weight stationary: Sr=K', Sc=N, T=M;   cycles = F*(T + 2R + C - 2) - 1
//   input stationary:  Sr=K', Sc=M, T=N;   cycles = F*(T + 2R + C - 2) - 1
//   with F = ceil(Sr/R) * ceil(Sc/C).
std::uint64_t array_matmul_cycles(config::Dataflow dataflow, std::uint64_t rows, std::uint64_t cols,
                                  std::uint64_t m, std::uint64_t n, std::uint64_t k, std::uint64_t simd_depth);

// A core's MATMUL: N is split across the corelets (ceil(N/corelets) each, the rest to
// the last); the slowest corelet sets the cycles.
std::uint64_t core_matmul_cycles(const config::ChipConfig& chip, config::MacType type, std::uint64_t m,
                                 std::uint64_t n, std::uint64_t k);

// Bytes a core's MATMUL moves through its scratchpad ports: each corelet's array
// streams its operands (cost::array_operand_elements, for the corelet's share of N) at
// the input size, and the result is written once (read too when accumulating) at the
// output size. The instruction takes at least bytes / (ports x port rate).
std::uint64_t matmul_scratchpad_bytes(const config::ChipConfig& chip, std::uint64_t m, std::uint64_t n,
                                      std::uint64_t k, std::uint64_t in_size, std::uint64_t out_size, bool accumulate);

// A vector operation over `elements` values on one core: the core's vector units
// (corelets x units_per_corelet, `lanes` wide) issue one vector every `op_cycles`
// cycles, then the pipeline drains:
//   cycles = ceil(ceil(elements / (lanes * units)) * op_cycles) + pipeline_latency.
std::uint64_t vector_cycles(const config::ChipConfig& chip, double op_cycles, std::uint64_t elements);

// Clock conversions in one place. Simulated time is integer picoseconds.
class Clock {
 public:
  explicit Clock(double ghz) : ghz_(ghz) {}
  Picoseconds ps(std::uint64_t cycles) const;   // rounded to the nearest ps
  double cycles(Picoseconds ps) const { return static_cast<double>(ps) * ghz_ / 1000.0; }
  double ghz() const { return ghz_; }

 private:
  double ghz_;
};

// Time to move `bytes` at `bytes_per_s`, rounded up to whole picoseconds.
Picoseconds transfer_ps(std::uint64_t bytes, double bytes_per_s);
inline Picoseconds ns_to_ps(double ns) { return static_cast<Picoseconds>(ns * 1000.0 + 0.5); }

// A shared resource (memory channel, ring link, scratchpad port, DMA engine, host
// link): requests are served first come, first served, each occupying it for
// bytes / bandwidth. Concurrent requests therefore queue, and the aggregate rate never
// exceeds the bandwidth.
class Server {
 public:
  struct Interval {
    Picoseconds start, end;
  };

  Server() = default;
  explicit Server(double bytes_per_s) : bytes_per_s_(bytes_per_s) {}

  // Occupies the server for `bytes` (or `duration`) in the earliest idle gap at or
  // after `ready` that is long enough: a request ready now is served in a gap before a
  // reservation booked for later instead of queueing behind it. `now` is the
  // simulation time of the call (every request is ready at or after it): the calendar
  // forgets what ended before it.
  Interval reserve_bytes(Picoseconds now, Picoseconds ready, std::uint64_t bytes);
  Interval reserve(Picoseconds now, Picoseconds ready, Picoseconds duration, std::uint64_t bytes = 0);

  // When the last reservation ends (0 if none).
  Picoseconds free_at() const { return head_ == busy_.size() ? 0 : busy_.back().end; }
  Picoseconds busy_ps() const { return busy_ps_; }
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t requests() const { return requests_; }
  double bytes_per_s() const { return bytes_per_s_; }
  void reset_stats() { busy_ps_ = bytes_ = requests_ = 0; }

 private:
  double bytes_per_s_ = 0;
  // Busy intervals from busy_[head_] on: sorted, disjoint, adjacent ones merged. (A
  // flat vector: the live calendar is short, and pipelined transfers book many small
  // intervals; a map's node per booking cost 13% of a memory-bound simulation.)
  std::vector<Interval> busy_;
  std::size_t head_ = 0;
  Picoseconds busy_ps_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t requests_ = 0;
};

enum class Direction { read, write };

// A DRAM channel: a Server whose bus turns around between reading and writing. The
// controller does not switch for every request: it serves each direction in batches of
// `batch_bytes` (writes wait in its write queue until a batch is ready; reads run
// meanwhile), so while both directions have traffic the bus makes one round trip
// (read -> write -> read, two turnarounds) per batch of the scarcer direction:
//   a request's duration = bytes / bandwidth + 2 x turnaround x (round trips it completes)
// where the channel counts each direction's bytes since its last round trip and a
// request completes floor(min(reads, writes) / batch) of them. A channel idle for a
// round trip (2 x turnaround) starts counting afresh. Over a busy period with R read
// and W written bytes this costs (R + W) / bandwidth + 2 x turnaround x min(R, W) /
// batch: one-directional traffic runs at the full rate, balanced traffic slowest.
class DramChannel {
 public:
  DramChannel() = default;
  DramChannel(double bytes_per_s, Picoseconds turnaround, std::uint64_t batch_bytes)
      : server_(bytes_per_s), turnaround_(turnaround), batch_(batch_bytes) {}

  Server::Interval reserve(Picoseconds now, Picoseconds ready, std::uint64_t bytes, Direction direction);

  const Server& server() const { return server_; }
  std::uint64_t turnarounds() const { return turnarounds_; }
  void reset_stats() {
    server_.reset_stats();
    turnarounds_ = 0;
  }

 private:
  Server server_;
  Picoseconds turnaround_ = 0;
  std::uint64_t batch_ = 1;
  std::uint64_t since_[2] = {0, 0};  // bytes read, written since the last round trip
  Picoseconds busy_until_ = 0;       // end of the latest reservation
  std::uint64_t turnarounds_ = 0;
};

}  // namespace spyre::timing
