// Typed, validated description of a simulated chip (configs/*.yaml).
//
// Every struct lists its fields once, in describe(); the YAML reader, the JSON writer
// and the hash all walk that one description, so a field cannot be parsed but not
// reported, or reported under another name.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "spyre/isa/isa.h"

namespace spyre::config {

// Bounds for a numeric field; `min_exclusive` makes the lower bound strict. The bounds
// are what the model can represent: sizes whose sums and products (addresses, host
// buffers) fit 64 bits and the host, rates and clocks whose picosecond times fit too.
struct Range {
  double min = 0;
  double max = 1e300;
  bool min_exclusive = false;
};

// Shared bounds (see Range).
inline constexpr double kMaxCores = 1024;          // launch core masks hold 1024 bits (isa::kMaxStreams)
inline constexpr Range kScratchpadBytes{64, 1 << 30};
inline constexpr Range kDeviceMemoryBytes{1 << 20, 1ull << 40};  // 1 MiB .. 1 TiB
inline constexpr Range kEfficiency{1e-3, 1};
inline constexpr Range kOpCycles{1e-3, 1e6};
// Scratchpads of all cores together (committed host memory), checked in validate().
inline constexpr std::uint64_t kMaxTotalScratchpadBytes = 16ull << 30;

// The numbers are spyre::cost::Dataflow's and the ABI's (spyre_device_properties_t).
enum class Dataflow { output_stationary = 0, weight_stationary = 1, input_stationary = 2 };

// Values a string field may take, with their spelling in YAML.
template <class E>
using Choices = std::vector<std::pair<std::string_view, E>>;

inline const Choices<Dataflow>& dataflow_choices() {
  static const Choices<Dataflow> choices = {{"os", Dataflow::output_stationary},
                                            {"ws", Dataflow::weight_stationary},
                                            {"is", Dataflow::input_stationary}};
  return choices;
}

// MACs one processing element completes per cycle for each operand type ("SIMD depth").
// 0 means the array does not support that type.
struct SimdDepth {
  std::uint64_t fp32 = 0, fp16 = 0, bf16 = 0, fp8 = 0, int8 = 0, int4 = 0;

  template <class V>
  void describe(V& v) {
    const Range depth{0, 1024};
    v.integer("fp32", fp32, depth);
    v.integer("fp16", fp16, depth);
    v.integer("bf16", bf16, depth);
    v.integer("fp8", fp8, depth);
    v.integer("int8", int8, depth);
    v.integer("int4", int4, depth);
  }
};

struct ComputeArrayConfig {
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  Dataflow dataflow = Dataflow::output_stationary;
  SimdDepth simd_depth;

  template <class V>
  void describe(V& v) {
    v.integer("rows", rows, Range{1, 4096});
    v.integer("cols", cols, Range{1, 4096});
    v.choice("dataflow", dataflow, dataflow_choices());
    v.section("simd_depth", simd_depth);
  }
};

// The cycles a cost class (isa::VectorCost) defaults to when a config leaves it out:
// the classes added after configs were written, so older configs still load; the rest
// are required. sin, cos: like tanh, a range reduction and a polynomial (ASSUMPTION:
// 6). transpose: a block's rows to columns (the card's restickify), one vector per cycle
// like copy. random: Philox4x32-10's ten rounds of two 32-bit multiplies give four
// numbers (ASSUMPTION: 4 cycles per vector); random_normal adds Box-Muller's log, square
// root and cosine on the pair (ASSUMPTION: 12). pow: a log, a multiply and an exp with
// the sign rules' selects (ASSUMPTION: 4 + 1 + 4 + 1 = 10). hardswish and hardsigmoid: an
// add, a clamp and a multiply (ASSUMPTION: 3, the multiply by x fused).
constexpr std::optional<double> default_op_cycles(isa::VectorCost c) {
  switch (c) {
    case isa::VectorCost::sin:
    case isa::VectorCost::cos: return 6;
    case isa::VectorCost::transpose: return 1;
    case isa::VectorCost::random: return 4;
    case isa::VectorCost::random_normal: return 12;
    case isa::VectorCost::pow: return 10;
    case isa::VectorCost::hardswish:
    case isa::VectorCost::hardsigmoid: return 3;
    default: return std::nullopt;
  }
}

// Issue interval, in cycles, of one vector of `lanes` elements for each cost class
// (cores.vector.op_cycles.<isa::to_string(class)>).
struct VectorOpCycles {
  std::array<double, isa::kNumVectorCosts> cycles{};

  VectorOpCycles() {
    for (std::uint8_t i = 0; i < isa::kNumVectorCosts; ++i) {
      cycles[i] = default_op_cycles(static_cast<isa::VectorCost>(i)).value_or(0.0);
    }
  }
  double operator[](isa::VectorCost c) const { return cycles[static_cast<std::size_t>(c)]; }
  double& operator[](isa::VectorCost c) { return cycles[static_cast<std::size_t>(c)]; }

  template <class V>
  void describe(V& v) {
    for (std::uint8_t i = 0; i < isa::kNumVectorCosts; ++i) {
      const auto c = static_cast<isa::VectorCost>(i);
      if (const auto fallback = default_op_cycles(c)) {
        v.real(isa::to_string(c), cycles[i], kOpCycles, *fallback);
      } else {
        v.real(isa::to_string(c), cycles[i], kOpCycles);
      }
    }
  }
};

struct VectorConfig {
  std::uint64_t units_per_corelet = 0;
  std::uint64_t lanes = 0;
  std::uint64_t pipeline_latency_cycles = 0;
  VectorOpCycles op_cycles;

  template <class V>
  void describe(V& v) {
    v.integer("units_per_corelet", units_per_corelet, Range{1, 64});
    v.integer("lanes", lanes, Range{1, 65536});
    v.integer("pipeline_latency_cycles", pipeline_latency_cycles, Range{0, 1e6});
    v.section("op_cycles", op_cycles);
  }
};

struct ScratchpadConfig {
  std::uint64_t bytes = 0;
  std::uint64_t usable_bytes = 0;
  std::uint64_t ports = 0;
  std::uint64_t bytes_per_cycle_per_port = 0;
  std::uint64_t latency_cycles = 0;

  template <class V>
  void describe(V& v) {
    // Scratchpad addresses are 32-bit in the ISA; every core's scratchpad is host memory.
    v.bytes("bytes", bytes, kScratchpadBytes);
    v.bytes("usable_bytes", usable_bytes, kScratchpadBytes);
    v.integer("ports", ports, Range{1, 64});
    v.integer("bytes_per_cycle_per_port", bytes_per_cycle_per_port, Range{1, 1 << 20});
    v.integer("latency_cycles", latency_cycles, Range{0, 1e6});
  }
};

struct CoresConfig {
  std::uint64_t count = 0;
  std::uint64_t corelets = 0;
  std::uint64_t queue_depth = 8;  // instructions each unit (array, vector) holds waiting
  ComputeArrayConfig compute_array;
  VectorConfig vector;
  ScratchpadConfig scratchpad;

  template <class V>
  void describe(V& v) {
    v.integer("count", count, Range{1, kMaxCores});
    v.integer("corelets", corelets, Range{1, 64});
    v.integer("queue_depth", queue_depth, Range{0, 4096}, std::uint64_t{8});
    v.section("compute_array", compute_array);
    v.section("vector", vector);
    v.section("scratchpad", scratchpad);
  }
};

struct DmaConfig {
  std::uint64_t engines_per_core = 0;
  std::uint64_t setup_cycles = 0;
  std::uint64_t bytes_per_cycle = 0;
  std::uint64_t stick_bytes = 0;
  // Stick requests one engine keeps in flight (optional; 0 or absent: no limit). Each
  // waits the DRAM latency, so an engine moves at most outstanding x stick / latency.
  std::uint64_t outstanding_requests = 0;

  template <class V>
  void describe(V& v) {
    v.integer("engines_per_core", engines_per_core, Range{1, 64});
    v.integer("setup_cycles", setup_cycles, Range{0, 1e6});
    v.integer("bytes_per_cycle", bytes_per_cycle, Range{1, 1 << 20});
    v.bytes("stick_bytes", stick_bytes, Range{1, 1 << 16});
    v.integer("outstanding_requests", outstanding_requests, Range{0, 1 << 20}, std::uint64_t{0});
  }
};

// Which channel a DRAM address's interleave granule g lives on, of C channels.
// skewed: (the sum of g's digits in base C) mod C, so each run of C granules still
// covers every channel once, and a stride of a whole round (C granules) or of C^2 moves
// to the next channel instead of staying on the same one; interleaved: g mod C.
enum class ChannelMap { skewed, interleaved };
inline const Choices<ChannelMap>& channel_map_choices() {
  static const Choices<ChannelMap> choices = {{"skewed", ChannelMap::skewed}, {"interleaved", ChannelMap::interleaved}};
  return choices;
}

struct MemoryConfig {
  std::uint64_t capacity_bytes = 0;
  std::uint64_t usable_bytes = 0;
  std::uint64_t channels = 0;
  double peak_gbps = 0;
  double efficiency = 0;
  double latency_ns = 0;
  std::uint64_t interleave_bytes = 0;
  ChannelMap channel_map = ChannelMap::skewed;  // optional; absent: skewed
  // Read/write turnaround (optional; absent: none): a channel's bus alternates between
  // reading and writing in batches of write_batch_bytes, each switch costing
  // turnaround_ns (docs/ARCHITECTURE.md §4).
  double turnaround_ns = 0;
  std::uint64_t write_batch_bytes = 512;

  template <class V>
  void describe(V& v) {
    // The device's address space and backing store are reserved in the host's.
    v.bytes("capacity_bytes", capacity_bytes, kDeviceMemoryBytes);
    v.bytes("usable_bytes", usable_bytes, kDeviceMemoryBytes);
    v.integer("channels", channels, Range{1, 1024});
    v.real("peak_gbps", peak_gbps, Range{1e-3, 1e7});
    v.real("efficiency", efficiency, kEfficiency);
    v.real("latency_ns", latency_ns, Range{0, 1e6});
    v.bytes("interleave_bytes", interleave_bytes, Range{1, 1 << 30});
    v.choice("channel_map", channel_map, channel_map_choices(), std::optional{ChannelMap::skewed});
    v.real("turnaround_ns", turnaround_ns, Range{0, 1e6}, 0.0);
    v.bytes("write_batch_bytes", write_batch_bytes, Range{1, 1 << 30}, std::uint64_t{512});
  }
};

struct RingConfig {
  std::uint64_t bytes_per_cycle = 0;
  std::uint64_t hop_latency_cycles = 0;
  std::uint64_t memory_stops = 0;

  template <class V>
  void describe(V& v) {
    v.integer("bytes_per_cycle", bytes_per_cycle, Range{1, 1 << 20});
    v.integer("hop_latency_cycles", hop_latency_cycles, Range{0, 1e6});
    v.integer("memory_stops", memory_stops, Range{1, 1024});
  }
};

struct HostLinkConfig {
  std::uint64_t pcie_gen = 0;
  std::uint64_t lanes = 0;
  double latency_ns = 0;
  double efficiency = 0;

  template <class V>
  void describe(V& v) {
    v.integer("pcie_gen", pcie_gen, Range{1, 6});
    v.integer("lanes", lanes, Range{1, 32});
    v.real("latency_ns", latency_ns, Range{0, 1e9});
    v.real("efficiency", efficiency, kEfficiency);
  }
};

// How the cards of one system are connected (the optional `system` section).
//   switch: every card's one PCIe port (its host_link) goes to a switch; a copy from
//           card i to card j leaves through i's port and enters through j's, so it
//           contends with their host traffic; the switch itself does not block.
//   ring:   card k has a link to k+1 and one to k-1 (mod cards), each direction its own;
//           a copy takes the shorter way round (clockwise on a tie), hop by hop.
//   full:   a link from every card to every other card, each direction its own.
// Host traffic uses each card's host_link in every topology; under a switch it can
// also share the switch's port to the host (host_uplink).
enum class Topology { switched, ring, full };
inline const Choices<Topology>& topology_choices() {
  static const Choices<Topology> choices = {
      {"switch", Topology::switched}, {"ring", Topology::ring}, {"full", Topology::full}};
  return choices;
}

struct SystemConfig {
  std::uint64_t cards = 1;  // devices the driver builds (SPYRE_SIM_DEVICES overrides it)
  Topology topology = Topology::switched;
  // switch: added to host_link.latency_ns for a peer copy. ASSUMPTION: 150 ns, the
  // order of a PCIe Gen5 switch's cut-through port-to-port latency.
  double switch_latency_ns = 150.0;
  // ring, full: each card-to-card link, per direction (absent: like host_link).
  std::optional<HostLinkConfig> link;
  // switch: the switch's port to the host, which every card's host traffic passes,
  // adding switch_latency_ns and its own latency_ns to a host copy (absent: the host
  // side is no bottleneck; each card is limited by its own port).
  std::optional<HostLinkConfig> host_uplink;

  template <class V>
  void describe(V& v) {
    v.integer("cards", cards, Range{1, 64}, std::uint64_t{1});
    v.choice("topology", topology, topology_choices(), std::optional{Topology::switched});
    v.real("switch_latency_ns", switch_latency_ns, Range{0, 1e9}, 150.0);
    v.optional_section("link", link);
    v.optional_section("host_uplink", host_uplink);
  }
};

// Who drives the cards (the driver's virtual host clock, docs/ARCHITECTURE.md §8):
//   one:      one host thread; every driver call advances its one clock.
//   per_card: each card as if by a host of its own (one process per card, as
//             tensor-parallel serving runs); a call advances the clock of the card it
//             is for, so one real thread issuing work for N cards costs each card only
//             its own calls.
enum class HostThreads { one, per_card };
inline const Choices<HostThreads>& host_threads_choices() {
  static const Choices<HostThreads> choices = {{"one", HostThreads::one}, {"per_card", HostThreads::per_card}};
  return choices;
}

struct HostConfig {
  double call_overhead_ns = 0;
  HostThreads threads = HostThreads::one;

  template <class V>
  void describe(V& v) {
    v.real("call_overhead_ns", call_overhead_ns, Range{0, 1e9});
    v.choice("threads", threads, host_threads_choices(), std::optional{HostThreads::one});
  }
};

struct FirmwareConfig {
  std::uint64_t command_fetch_cycles = 0;
  std::uint64_t launch_cycles = 0;
  std::uint64_t watchdog_cycles = 0;

  template <class V>
  void describe(V& v) {
    v.integer("command_fetch_cycles", command_fetch_cycles, Range{0, 1e9});
    v.integer("launch_cycles", launch_cycles, Range{0, 1e9});
    v.integer("watchdog_cycles", watchdog_cycles, Range{1, 1e18});
  }
};

struct MacEnergy {
  double fp32 = 0, fp16 = 0, bf16 = 0, fp8 = 0, int8 = 0, int4 = 0;

  template <class V>
  void describe(V& v) {
    const Range pj{0, 1e6};
    v.real("fp32", fp32, pj);
    v.real("fp16", fp16, pj);
    v.real("bf16", bf16, pj);
    v.real("fp8", fp8, pj);
    v.real("int8", int8, pj);
    v.real("int4", int4, pj);
  }
};

struct ByteEnergy {
  double dram = 0, ring = 0, scratchpad = 0, pcie = 0;

  template <class V>
  void describe(V& v) {
    const Range pj{0, 1e6};
    v.real("dram", dram, pj);
    v.real("ring", ring, pj);
    v.real("scratchpad", scratchpad, pj);
    v.real("pcie", pcie, pj);
  }
};

struct EnergyConfig {
  MacEnergy pj_per_mac;
  ByteEnergy pj_per_byte;
  double static_watts = 0;

  template <class V>
  void describe(V& v) {
    v.section("pj_per_mac", pj_per_mac);
    v.section("pj_per_byte", pj_per_byte);
    v.real("static_watts", static_watts, Range{0, 1e6});
  }
};

// How the device computes with 16-bit floats. ieee: fp16/bf16 operands and results are
// exactly what their formats hold (math in fp32). dl16: they pass through the card's
// DL16 format (sim/functional/dl16.h) on their way into and out of the math, as on the
// card, so results show its numerics.
enum class HalfPrecision { ieee, dl16 };
inline const Choices<HalfPrecision>& half_precision_choices() {
  static const Choices<HalfPrecision> choices = {{"ieee", HalfPrecision::ieee}, {"dl16", HalfPrecision::dl16}};
  return choices;
}

struct NumericsConfig {
  HalfPrecision half_precision = HalfPrecision::ieee;

  template <class V>
  void describe(V& v) {
    v.choice("half_precision", half_precision, half_precision_choices());
  }
};

struct ChipConfig {
  std::string name;
  double clock_ghz = 0;
  CoresConfig cores;
  DmaConfig dma;
  MemoryConfig memory;
  RingConfig ring;
  HostLinkConfig host_link;
  HostConfig host;
  FirmwareConfig firmware;
  std::optional<EnergyConfig> energy;
  std::optional<NumericsConfig> numerics;  // absent: ieee
  std::optional<SystemConfig> system;      // absent: one card behind a switch (SystemConfig{})

  bool half_through_dl16() const { return numerics && numerics->half_precision == HalfPrecision::dl16; }
  SystemConfig system_or_default() const { return system ? *system : SystemConfig{}; }

  template <class V>
  void describe(V& v) {
    v.text("name", name);
    v.real("clock_ghz", clock_ghz, Range{1e-3, 100});
    v.section("cores", cores);
    v.section("dma", dma);
    v.section("memory", memory);
    v.section("ring", ring);
    v.section("host_link", host_link);
    v.section("host", host);
    v.section("firmware", firmware);
    v.optional_section("energy", energy);
    v.optional_section("numerics", numerics);
    v.optional_section("system", system);
  }
};

}  // namespace spyre::config
