// The compiler's target description, and the simplest elementwise entry points:
// unary and binary ops over contiguous tensors of equal shape (shorthands for
// compile_pointwise in pointwise.h). Pure ISA code generation: no torch, no driver.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "spyre/cost/roofline.h"
#include "spyre/cost/systolic.h"
#include "spyre/isa/isa.h"

namespace spyre::compiler {

// What the compiler needs to know about the target device.
struct Target {
  std::uint32_t cores = 1;
  std::uint64_t scratchpad_bytes = 0;  // usable by kernels
  std::uint32_t stick_bytes = 128;
  // For cost models (0: unknown, plans then favour using every core).
  double core_macs_per_s = 0;   // one core's fp16 multiply-accumulates per second
  double dram_bytes_per_s = 0;  // the whole device's deliverable DRAM bandwidth
  // The compute array, from the device properties (0: unknown: no fill/drain cost,
  // one MAC per PE per cycle). simd_depth is indexed by isa::DType (fp32, fp16, bf16).
  std::uint32_t array_rows = 0, array_cols = 0;
  std::array<std::uint32_t, isa::kNumDTypes> simd_depth{};
  // The vector units, for streaming kernels' cost: elements one core's vector units
  // take per second at one cycle per vector (lanes x units x corelets x clock; 0:
  // unknown), and the config's cycles per vector of each cost class (isa::VectorCost;
  // 0: unknown, charged 1).
  double vector_elements_per_s = 0;
  std::array<double, isa::kNumVectorCosts> vector_op_cycles{};
  // The rest of the device properties the cost model uses (0: unknown). The memory
  // system's numbers come from the device, so a what-if config that changes how DRAM,
  // DMA or the ring behave changes the predictions with it.
  cost::Dataflow dataflow = cost::Dataflow::output_stationary;
  std::uint32_t corelets = 1;
  double clock_hz = 0;
  std::uint32_t vector_latency_cycles = 0;
  double dram_latency_s = 0;
  // Read/write turnaround: DRAM time = (R + W) / dram_bytes_per_s + this x min(R, W).
  double dram_turnaround_s_per_byte = 0;
  double dma_setup_s = 0, dma_engine_bytes_per_s = 0;
  std::uint32_t dma_engines = 1;
  double ring_hop_s = 0, ring_link_bytes_per_s = 0;
  std::uint32_t memory_stops = 1;
  // DRAM channels, their interleave granule (0: unknown) and how granules map to them
  // (spyre/cost/channels.h).
  std::uint32_t dram_channels = 0;
  std::uint64_t dram_interleave_bytes = 0;
  bool dram_channels_skewed = true;  // (the chip's default, memory.channel_map)
  double scratchpad_latency_s = 0;

  // MACs per PE per cycle for matmul operands of `t` (1 when unknown).
  std::uint32_t depth(isa::DType t) const {
    const std::uint32_t d = simd_depth[static_cast<std::size_t>(t)];
    return d == 0 ? 1 : d;
  }
  double op_cycles(isa::VectorCost c) const {
    const double cycles = vector_op_cycles[static_cast<std::size_t>(c)];
    return cycles > 0 ? cycles : 1.0;
  }
  // Seconds of DRAM time for `read` and `written` bytes: the deliverable bandwidth plus
  // the read/write turnaround on the scarcer direction (0 when the bandwidth is unknown).
  double dram_s(double read, double written) const {
    return cost::dram_time_s(read, written, dram_bytes_per_s, dram_turnaround_s_per_byte);
  }
  // One core's multiply-accumulates per second for operands of `t` (0: unknown).
  double macs_per_s(isa::DType t) const {
    const std::uint32_t fp16 = simd_depth[static_cast<std::size_t>(isa::DType::fp16)];
    return fp16 == 0 ? core_macs_per_s : core_macs_per_s * depth(t) / fp16;
  }
};

// out[i] = a[i] <op> b[i] for `count` elements of `dtype`. Arguments at launch:
// 0 = a, 1 = b, 2 = out (device addresses). Throws std::invalid_argument with the
// op, sizes and the bytes needed when no tiling fits the scratchpad.
std::vector<std::uint8_t> compile_binary(isa::BinaryOp op, isa::DType dtype, std::uint64_t count, const Target& target,
                                         const std::string& name);

// out[i] = op(a[i]) for `count` elements of `dtype`. Arguments: 0 = a, 1 = out.
std::vector<std::uint8_t> compile_unary(isa::UnaryOp op, isa::DType dtype, std::uint64_t count, const Target& target,
                                        const std::string& name);

}  // namespace spyre::compiler
