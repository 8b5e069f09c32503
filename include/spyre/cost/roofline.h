// The roofline, defined once for the chip model's reports, the benchmarks and the
// kernel compiler's cost model. Standard library only. docs/ARCHITECTURE.md §4.
#pragma once

namespace spyre::cost {

// Seconds of DRAM time for `read` and `written` bytes at the memory model's best for that
// mix: the deliverable one-directional rate, plus the read/write turnaround on the
// scarcer direction (the chip's derived dram_turnaround_s_per_byte).
//   (R + W) / bytes_per_s + turnaround_s_per_byte x min(R, W)
// (Default chip, 1 GB read + 1 GB written: 2 / 149.5 GB/s + 4.883 ps/B x 1 GB
// = 13.378 + 4.883 = 18.261 ms, 109.5 GB/s.)
constexpr double dram_time_s(double read, double written, double bytes_per_s, double turnaround_s_per_byte) {
  if (bytes_per_s <= 0) return 0;
  return (read + written) / bytes_per_s + turnaround_s_per_byte * (read < written ? read : written);
}

// The least time an operation can take: its FLOPs at the peak for its operands' dtype,
// or its minimum DRAM traffic at the memory model's best, whichever is longer. Reports
// give an op's minimum traffic (each input once, each output once), not the bytes its
// kernel happened to move, so wasted traffic shows as distance from the roofline.
constexpr double roofline_s(double flops, double peak_flops_per_s, double read, double written, double bytes_per_s,
                            double turnaround_s_per_byte) {
  const double compute = peak_flops_per_s > 0 ? flops / peak_flops_per_s : 0;
  const double memory = dram_time_s(read, written, bytes_per_s, turnaround_s_per_byte);
  return compute > memory ? compute : memory;
}

static_assert(dram_time_s(1000, 0, 1000, 1) == 1);
static_assert(dram_time_s(1000, 500, 1000, 0.001) == 1.5 + 0.5);
static_assert(roofline_s(4000, 1000, 1000, 0, 1000, 0) == 4);

}  // namespace spyre::cost
