#include <catch2/catch_test_macros.hpp>

#include "config/config_loader.h"
#include "timing/timing_rules.h"

using spyre::config::Dataflow;
using spyre::config::MacType;
using namespace spyre::timing;

TEST_CASE("given 64x64x64 on a 32x32 array, the cycles are the analytic model's") {
  // F = ceil(64/32) * ceil(64/32) = 4.
  // os: 4 * (64 + 32 + 32 - 2) - 1 = 4 * 126 - 1 = 503
  // ws: 4 * (64 + 64 + 32 - 2) - 1 = 4 * 158 - 1 = 631
  // is: 4 * (64 + 64 + 32 - 2) - 1 = 631
  CHECK(array_matmul_cycles(Dataflow::output_stationary, 32, 32, 64, 64, 64, 1) == 503);
  CHECK(array_matmul_cycles(Dataflow::weight_stationary, 32, 32, 64, 64, 64, 1) == 631);
  CHECK(array_matmul_cycles(Dataflow::input_stationary, 32, 32, 64, 64, 64, 1) == 631);
}

TEST_CASE("given ragged shapes, folds round up in each dataflow") {
  // M=100, N=70, K=50 on 32x32.
  // os: Sr=M=100 -> 4, Sc=N=70 -> 3, F=12, T=K=50: 12 * (50 + 62) - 1 = 1343
  // ws: Sr=K=50 -> 2, Sc=N=70 -> 3, F=6, T=M=100: 6 * (100 + 64 + 30) - 1 = 1163
  // is: Sr=K=50 -> 2, Sc=M=100 -> 4, F=8, T=N=70: 8 * (70 + 64 + 30) - 1 = 1311
  CHECK(array_matmul_cycles(Dataflow::output_stationary, 32, 32, 100, 70, 50, 1) == 1343);
  CHECK(array_matmul_cycles(Dataflow::weight_stationary, 32, 32, 100, 70, 50, 1) == 1163);
  CHECK(array_matmul_cycles(Dataflow::input_stationary, 32, 32, 100, 70, 50, 1) == 1311);
  // A non-square 16x8 array, os, 33x9x5: F = ceil(33/16)=3 * ceil(9/8)=2 = 6;
  // 6 * (5 + 16 + 8 - 2) - 1 = 6 * 27 - 1 = 161
  CHECK(array_matmul_cycles(Dataflow::output_stationary, 16, 8, 33, 9, 5, 1) == 161);
  // A single PE, os, 1x1x1: F = 1, 1 * (1 + 1 + 1 - 2) - 1 = 0 (the model counts from the first MAC).
  CHECK(array_matmul_cycles(Dataflow::output_stationary, 1, 1, 1, 1, 1, 1) == 0);
}

TEST_CASE("given a SIMD depth, K becomes ceil(K over depth) wherever it appears") {
  // os, 8x8, s=8, 64x64x64: T = ceil(64/8) = 8, F = 8 * 8 = 64: 64 * (8 + 14) - 1 = 1407
  CHECK(array_matmul_cycles(Dataflow::output_stationary, 8, 8, 64, 64, 64, 8) == 1407);
  // ws, 8x8, s=8, 64x64x60: Sr = ceil(60/8) = 8 -> 1 fold, Sc = 64 -> 8, F = 8, T = M = 64:
  // 8 * (64 + 16 + 8 - 2) - 1 = 8 * 86 - 1 = 687
  CHECK(array_matmul_cycles(Dataflow::weight_stationary, 8, 8, 64, 64, 60, 8) == 687);
  // is, 8x8, s=4, M=16 N=10 K=33: Sr = ceil(33/4) = 9 -> 2 folds, Sc = M = 16 -> 2, F = 4,
  // T = N = 10: 4 * (10 + 16 + 8 - 2) - 1 = 4 * 32 - 1 = 127
  CHECK(array_matmul_cycles(Dataflow::input_stationary, 8, 8, 16, 10, 33, 4) == 127);
}

TEST_CASE("given a core with two corelets, N splits and the wider half sets the cycles") {
  const auto chip = spyre::config::load_config("").chip;  // 8x8, os, fp16 depth 8, 2 corelets
  // 128x128x128 fp16: each corelet N = 64. F = 16 * 8 = 128, T = 128/8 = 16:
  // 128 * (16 + 14) - 1 = 3839
  CHECK(core_matmul_cycles(chip, MacType::fp16, 128, 128, 128) == 3839);
  // N = 9 splits 5 + 4: the corelet with 5 columns: F = ceil(8/8) * ceil(5/8) = 1,
  // T = ceil(16/8) = 2: 1 * (2 + 14) - 1 = 15
  CHECK(core_matmul_cycles(chip, MacType::fp16, 8, 9, 16) == 15);
  // fp32 depth 2: 8x8x16 -> N per corelet 4, F = 1, T = 8: 1 * (8 + 14) - 1 = 21
  CHECK(core_matmul_cycles(chip, MacType::fp32, 8, 8, 16) == 21);
}

TEST_CASE("given vector work, cycles are vectors times the op cost plus the pipeline") {
  const auto chip = spyre::config::load_config("").chip;
  // Width = 32 lanes x 2 units x 2 corelets = 128 elements per vector.
  // exp (4 cycles) over 1000: ceil(1000/128) = 8 vectors; 8 * 4 + 8 (latency) = 40
  CHECK(vector_cycles(chip, chip.cores.vector.op_cycles[spyre::isa::VectorCost::exp], 1000) == 40);
  // add (1 cycle) over 128: 1 * 1 + 8 = 9
  CHECK(vector_cycles(chip, chip.cores.vector.op_cycles[spyre::isa::VectorCost::add], 128) == 9);
  // a fractional cost: 3 vectors at 2.5 cycles = 7.5 -> 8, + 8 = 16
  CHECK(vector_cycles(chip, 2.5, 300) == 16);
}

TEST_CASE("given a clock, cycles convert to whole picoseconds in one place") {
  const Clock clock(1.5);
  CHECK(clock.ps(3) == 2000);   // 3 / 1.5 GHz = 2 ns
  CHECK(clock.ps(1) == 667);    // 666.67 ps, rounded
  CHECK(clock.cycles(2000) == 3.0);
  CHECK(Clock(1.0).ps(503) == 503000);
}

TEST_CASE("given a transfer, its time is bytes over bandwidth rounded up to a picosecond") {
  // 4096 B at 8 GB/s = 512 ns exactly.
  CHECK(transfer_ps(4096, 8e9) == 512000);
  // 4096 B at 12.8 GB/s x 0.73 = 9.344 GB/s: 438356.16 ps -> 438357
  CHECK(transfer_ps(4096, 12.8e9 * 0.73) == 438357);
  CHECK(transfer_ps(0, 1e9) == 0);
}

TEST_CASE("given concurrent requests, a server serves them first come first served") {
  Server channel(1e9);  // 1 byte per ns
  // Four 1000-byte requests ready at 0: [0,1], [1,2], [2,3], [3,4] us; the aggregate is the
  // server's bandwidth: 4000 B in 4 us = 1 GB/s.
  for (int i = 0; i < 4; ++i) {
    const auto iv = channel.reserve_bytes(0, 0, 1000);
    CHECK(iv.start == static_cast<Picoseconds>(i) * 1000000);
    CHECK(iv.end == static_cast<Picoseconds>(i + 1) * 1000000);
  }
  CHECK(channel.busy_ps() == 4000000);
  CHECK(channel.bytes() == 4000);
  // A request ready after the server went idle starts when it is ready.
  const auto late = channel.reserve_bytes(0, 10000000, 500);
  CHECK(late.start == 10000000);
  CHECK(late.end == 10500000);
}

TEST_CASE("given a reservation booked for later, an earlier-ready request uses the idle gap before it") {
  Server channel(1e9);  // 1 byte per ns
  // Booked first: 1000 B ready at 10 us -> [10, 11] us. Then 4096 B ready at 0 fit in
  // the idle [0, 10] us before it: [0, 4.096] us, not [11, 15.096] behind it.
  const auto later = channel.reserve_bytes(0, 10000000, 1000);
  CHECK(later.start == 10000000);
  const auto now = channel.reserve_bytes(0, 0, 4096);
  CHECK(now.start == 0);
  CHECK(now.end == 4096000);
  // 8000 B ready at 4.096 us do not fit before 10 us (5.904 us idle): after 11 us.
  const auto big = channel.reserve_bytes(0, 4096000, 8000);
  CHECK(big.start == 11000000);
  CHECK(big.end == 19000000);
  // 5000 B ready at 4.096 us fit the same gap: [4.096, 9.096] us.
  const auto fits = channel.reserve_bytes(0, 4096000, 5000);
  CHECK(fits.start == 4096000);
  CHECK(fits.end == 9096000);
  CHECK(channel.free_at() == 19000000);
  // Calls made later forget what ended before them; the calendar stays small.
  const auto after = channel.reserve_bytes(20000000, 20000000, 1000);
  CHECK(after.start == 20000000);
  CHECK(channel.busy_ps() == (1000 + 4096 + 8000 + 5000 + 1000) * 1000);
}

TEST_CASE("given reads and writes on one channel, the bus turns around once per write batch of the scarcer direction") {
  // 1 byte per ns, 20 ns per turnaround, 512-byte batches.
  DramChannel channel(1e9, 20000, 512);
  // Reads only: 4 x 1024 B back to back, [0, 4096] ns, no turnaround.
  for (int i = 0; i < 4; ++i) channel.reserve(0, 0, 1024, Direction::read);
  CHECK(channel.server().free_at() == 4096000);
  CHECK(channel.turnarounds() == 0);
  // Then 1024 B written while the reads are still counted: min(4096, 1024) / 512 = 2
  // round trips, 4 turnarounds: 1024 ns + 4 x 20 ns = 1104 ns.
  const auto w = channel.reserve(0, 0, 1024, Direction::write);
  CHECK(w.start == 4096000);
  CHECK(w.end == 4096000 + 1104000);
  CHECK(channel.turnarounds() == 4);
  // The reads left over (4096 - 1024 B) complete round trips with later writes: 256 B
  // written is half a batch (no trip yet), the next 256 B completes one: 256 + 40 ns.
  const auto w1 = channel.reserve(0, 0, 256, Direction::write);
  CHECK(w1.end - w1.start == 256000);
  const auto w2 = channel.reserve(0, 0, 256, Direction::write);
  CHECK(w2.end - w2.start == 256000 + 40000);
  CHECK(channel.turnarounds() == 6);
}

TEST_CASE("given a channel idle for a round trip, its read and write counts start afresh") {
  DramChannel channel(1e9, 20000, 512);
  const auto r = channel.reserve(0, 0, 4096, Direction::read);  // [0, 4096] ns
  // A write ready 40 ns after the reads ended (2 x turnaround idle): the bus turned
  // around while idle; no round trip is charged.
  const auto w = channel.reserve(0, r.end + 40000, 4096, Direction::write);
  CHECK(w.end - w.start == 4096000);
  CHECK(channel.turnarounds() == 0);
  // A read right behind the writes: 4096 B read and 4096 B written since, 8 round trips.
  const auto r2 = channel.reserve(0, 0, 4096, Direction::read);
  CHECK(r2.start == w.end);
  CHECK(r2.end - r2.start == 4096000 + 8 * 40000);
}

TEST_CASE("given a balanced stream, a channel's rate follows (R + W) / bandwidth + 2 x turnaround x min(R, W) / batch") {
  // The default chip's channel: 204.8 / 16 GB/s x 0.73 = 9.344 GB/s, 20 ns, 512 B.
  DramChannel channel(12.8e9 * 0.73, 20000, 512);
  // 64 pairs of 4 KiB read + 4 KiB write: 512 KiB at 9.344 GB/s = 56.11 us, plus
  // 2 x 20 ns x 256 KiB / 512 B = 20.48 us.
  for (int i = 0; i < 64; ++i) {
    channel.reserve(0, 0, 4096, Direction::read);
    channel.reserve(0, 0, 4096, Direction::write);
  }
  // 128 x transfer_ps(4096) = 128 x 438357 ps; 512 trips x 40 ns.
  CHECK(channel.server().free_at() == 128ull * 438357 + 512ull * 40000);
  CHECK(channel.turnarounds() == 1024);
  // Effective rate: 524288 B / 76.59 us = 6.845 GB/s (0.73 of the channel's 9.344).
}
