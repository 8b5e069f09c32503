#include "aten/kernel_cache.h"

#include <set>

#include "compiler/does_not_fit.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <stdexcept>

#include <ATen/ops/arange.h>
#include <c10/core/DeviceGuard.h>

#include "runtime/driver.h"
#include "runtime/launch.h"
#include "spyre/isa/program.h"

namespace spyre::backend {
namespace {

struct DeviceInfo {
  compiler::Target target;
  std::string hash;
};

std::mutex g_mutex;
std::map<std::pair<c10::DeviceIndex, std::string>, spyre_program_t> g_programs;
KernelCacheStats g_stats;

const DeviceInfo& info(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, DeviceInfo> infos;
  const std::lock_guard lock(mutex);
  auto it = infos.find(device);
  if (it == infos.end()) {
    spyre_device_properties_t p{};
    p.struct_size = sizeof p;
    SPYRE_CHECK(spyreDeviceGetProperties(driver_device(device), &p));
    DeviceInfo d;
    d.target.cores = p.cores;
    d.target.scratchpad_bytes = p.scratchpad_usable_bytes;
    d.target.stick_bytes = p.stick_bytes;
    d.target.core_macs_per_s = p.cores > 0 ? p.peak_macs_per_s[SPYRE_MAC_FP16] / p.cores : 0;
    d.target.dram_bytes_per_s = p.dram_deliverable_bytes_per_s;
    d.target.array_rows = p.array_rows;
    d.target.array_cols = p.array_cols;
    d.target.simd_depth[static_cast<std::size_t>(isa::DType::fp32)] = p.simd_depth[SPYRE_MAC_FP32];
    d.target.simd_depth[static_cast<std::size_t>(isa::DType::fp16)] = p.simd_depth[SPYRE_MAC_FP16];
    d.target.simd_depth[static_cast<std::size_t>(isa::DType::bf16)] = p.simd_depth[SPYRE_MAC_BF16];
    d.target.simd_depth[static_cast<std::size_t>(isa::DType::int8)] = p.simd_depth[SPYRE_MAC_INT8];
    d.target.dataflow = static_cast<cost::Dataflow>(p.dataflow);
    d.target.corelets = std::max<std::uint32_t>(1, p.corelets_per_core);
    d.target.clock_hz = p.clock_ghz * 1e9;
    d.target.vector_latency_cycles = p.vector_pipeline_latency_cycles;
    d.target.dram_latency_s = p.dram_latency_ns * 1e-9;
    d.target.dma_setup_s = p.clock_ghz > 0 ? p.dma_setup_cycles / (p.clock_ghz * 1e9) : 0;
    d.target.dma_engine_bytes_per_s = p.dma_bytes_per_cycle * p.clock_ghz * 1e9;
    d.target.dma_engines = std::max<std::uint32_t>(1, p.dma_engines_per_core);
    d.target.ring_hop_s = p.clock_ghz > 0 ? p.ring_hop_latency_cycles / (p.clock_ghz * 1e9) : 0;
    d.target.ring_link_bytes_per_s = p.ring_link_bytes_per_s;
    d.target.memory_stops = std::max<std::uint32_t>(1, p.ring_memory_stops);
    d.target.scratchpad_latency_s = p.clock_ghz > 0 ? p.scratchpad_latency_cycles / (p.clock_ghz * 1e9) : 0;
    d.target.vector_elements_per_s =
        static_cast<double>(p.vector_lanes) * p.vector_units_per_corelet * p.corelets_per_core * p.clock_ghz * 1e9;
    // The vector unit's cycles per cost class, the DRAM channel map, and the derived
    // engine rate and read/write turnaround (ABI 0.10).
    const std::uint32_t given = std::min<std::uint32_t>(p.vector_cost_count, isa::kNumVectorCosts);
    for (std::uint32_t i = 0; i < given; ++i) d.target.vector_op_cycles[i] = p.vector_op_cycles[i];
    d.target.dram_channels = p.memory_channels;
    d.target.dram_interleave_bytes = p.dram_interleave_bytes;
    d.target.dram_channels_skewed = p.dram_channel_map != SPYRE_DRAM_CHANNEL_MAP_INTERLEAVED;
    if (p.dma_engine_bytes_per_s > 0) d.target.dma_engine_bytes_per_s = p.dma_engine_bytes_per_s;
    d.target.dram_turnaround_s_per_byte = p.dram_turnaround_s_per_byte;
    d.hash = p.config_hash;
    it = infos.emplace(device, std::move(d)).first;
  }
  return it->second;
}

}  // namespace

const compiler::Target& target(c10::DeviceIndex device) { return info(device).target; }

const at::Tensor& device_positions(c10::Device device) {
  static std::mutex mutex;
  static auto* kept = new std::map<c10::DeviceIndex, at::Tensor>();  // (never destroyed: see kernel_cache.h)
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = kept->find(device.index());
  if (it == kept->end()) {
    const at::Tensor host = at::arange(kDevicePositions, at::TensorOptions().dtype(at::kFloat));
    it = kept->emplace(device.index(), host.to(device)).first;
  }
  return it->second;
}
const std::string& config_hash(c10::DeviceIndex device) { return info(device).hash; }

namespace {

// Keys whose compile found no tiling that fits (cached_program_if_fits's nullptr).
std::set<std::pair<c10::DeviceIndex, std::string>> g_unfit;

spyre_program_t lookup_or_compile(c10::DeviceIndex device, const std::string& key,
                                  const std::function<std::vector<std::uint8_t>()>& compile, const std::string& name,
                                  bool unfit_is_null) {
  const std::string full_key = key + "|" + config_hash(device);
  const std::lock_guard lock(g_mutex);
  auto it = g_programs.find({device, full_key});
  if (it != g_programs.end()) {
    ++g_stats.hits;
    return it->second;
  }
  if (unfit_is_null && g_unfit.count({device, full_key}) != 0) return nullptr;
  ++g_stats.misses;
  std::vector<std::uint8_t> blob;
  try {
    blob = compile();
  } catch (const compiler::DoesNotFit& e) {
    if (unfit_is_null) {
      g_unfit.insert({device, full_key});
      return nullptr;
    }
    TORCH_CHECK(false, "spyre: cannot compile ", name, ": ", e.what());
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "spyre: cannot compile ", name, ": ", e.what());
  }
  const char* dump = std::getenv("SPYRE_DUMP_KERNELS");
  if (dump != nullptr && *dump != '\0' && std::string(dump) != "0") {
    std::cerr << isa::disassemble(isa::Program(blob)) << std::flush;
  }
  spyre_program_t program = load_program(device, blob, name);
  g_programs.emplace(std::make_pair(device, full_key), program);
  return program;
}

}  // namespace

spyre_program_t cached_program(c10::DeviceIndex device, const std::string& key,
                               const std::function<std::vector<std::uint8_t>()>& compile, const std::string& name) {
  return lookup_or_compile(device, key, compile, name, false);
}

spyre_program_t cached_program_if_fits(c10::DeviceIndex device, const std::string& key,
                                       const std::function<std::vector<std::uint8_t>()>& compile,
                                       const std::string& name) {
  return lookup_or_compile(device, key, compile, name, true);
}

void run_cached(c10::DeviceIndex device, const std::string& key, const Compile& compile,
                const std::vector<std::uint64_t>& args, const std::string& name, Traffic traffic) {
  launch(device, cached_program(device, key, [&] { return compile(target(device)); }, name), args, name, traffic);
}

bool run_cached_if_fits(c10::DeviceIndex device, const std::string& key, const Compile& compile,
                        const std::vector<std::uint64_t>& args, const std::string& name, Traffic traffic) {
  const spyre_program_t program = cached_program_if_fits(device, key, [&] { return compile(target(device)); }, name);
  if (program == nullptr) return false;
  launch(device, program, args, name, traffic);
  return true;
}

KernelCacheStats kernel_cache_stats() {
  const std::lock_guard lock(g_mutex);
  return g_stats;
}

void reset_kernel_cache_stats() {
  const std::lock_guard lock(g_mutex);
  g_stats = {};
}

}  // namespace spyre::backend
