// The C ABI (include/spyre/spyre_drv.h), part of it: driver and devices: versions, configuration, start and shutdown, result codes, the host clock, device handles, properties and synchronization.
// Arguments are validated here, then the runtime and the device facade do the work;
// every entry point is wrapped by `guarded` (abi_support.h).
#include <algorithm>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "driver/abi_support.h"

using namespace spyre::driver;
using namespace spyre::driver::abi;

extern "C" {

spyre_result_t spyreDriverGetApiVersion(uint32_t* version) {
  return guarded(__func__, [&] {
    require(version, "version");
    *version = SPYRE_API_VERSION_CURRENT;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDriverConfigure(const spyre_driver_config_t* config) {
  return guarded(__func__, [&] {
    if (config == nullptr) {
      Runtime::configure(std::nullopt);
      return SPYRE_SUCCESS;
    }
    // 0.4 callers end at device_count; config_yaml and mode are read when present.
    const std::size_t v04 = offsetof(spyre_driver_config_t, config_yaml);
    require_size(config->struct_size, v04, "spyre_driver_config_t");
    const bool v05 = config->struct_size >= sizeof(spyre_driver_config_t);
    Runtime::StartConfig c;
    c.path = config->config_path != nullptr ? config->config_path : "";
    if (v05 && config->config_yaml != nullptr) c.yaml = config->config_yaml;
    if (v05 && config->mode != SPYRE_MODE_DEFAULT) {
      switch (config->mode) {
        case SPYRE_MODE_TIMED: c.mode = spyre::driver::Mode::timed; break;
        case SPYRE_MODE_FUNCTIONAL: c.mode = spyre::driver::Mode::functional; break;
        case SPYRE_MODE_NO_DATA: c.mode = spyre::driver::Mode::no_data; break;
        default:
          raise(SPYRE_ERROR_INVALID_ARGUMENT,
                fmt::format("config->mode: expected a spyre_device_mode_t (0 to 3), found {}", config->mode));
      }
    }
    if (config->num_overrides > 0) require(config->overrides, "config->overrides");
    for (uint32_t i = 0; i < config->num_overrides; ++i) {
      if (config->overrides[i] == nullptr) {
        raise(SPYRE_ERROR_INVALID_NULL_POINTER, fmt::format("config->overrides[{}] is NULL", i));
      }
      c.overrides.emplace_back(config->overrides[i]);
    }
    c.devices = config->device_count;
    Runtime::configure(std::move(c));
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDriverInit(uint32_t api_version) {
  return guarded(__func__, [&] {
    if ((api_version >> 16) != (SPYRE_API_VERSION_CURRENT >> 16)) {
      raise(SPYRE_ERROR_UNSUPPORTED_VERSION,
            fmt::format("caller built for API {}.{}, driver implements {}.{}", api_version >> 16, api_version & 0xffff,
                        SPYRE_API_VERSION_CURRENT >> 16, SPYRE_API_VERSION_CURRENT & 0xffff));
    }
    Runtime::get();
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDriverShutdown(void) {
  return guarded(__func__, [&] {
    Runtime::shutdown();
    return SPYRE_SUCCESS;
  });
}

const char* spyreResultString(spyre_result_t result) {
  switch (result) {
#define SPYRE_RESULT_NAME(code) \
  case code:                    \
    return #code;
    SPYRE_RESULT_NAME(SPYRE_SUCCESS)
    SPYRE_RESULT_NAME(SPYRE_NOT_READY)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_ARGUMENT)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_HANDLE)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_NULL_POINTER)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_SIZE)
    SPYRE_RESULT_NAME(SPYRE_ERROR_UNSUPPORTED_VERSION)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_DEVICE_POINTER)
    SPYRE_RESULT_NAME(SPYRE_ERROR_DOUBLE_FREE)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INVALID_PROGRAM)
    SPYRE_RESULT_NAME(SPYRE_ERROR_QUEUE_IN_ERROR_STATE)
    SPYRE_RESULT_NAME(SPYRE_ERROR_OUT_OF_DEVICE_MEMORY)
    SPYRE_RESULT_NAME(SPYRE_ERROR_DEVICE_FAULT)
    SPYRE_RESULT_NAME(SPYRE_ERROR_DEVICE_LOST)
    SPYRE_RESULT_NAME(SPYRE_ERROR_INTERNAL)
    SPYRE_RESULT_NAME(SPYRE_ERROR_OUT_OF_HOST_MEMORY)
    SPYRE_RESULT_NAME(SPYRE_ERROR_NOT_INITIALIZED)
#undef SPYRE_RESULT_NAME
    case SPYRE_RESULT_FORCE_UINT32:
      break;
  }
  return "SPYRE_RESULT_UNKNOWN";
}

const char* spyreGetLastErrorMessage(void) { return last_error(); }

spyre_result_t spyreDriverGetHostTime(uint64_t* host_time_ps) {
  return guarded(__func__, [&] {
    require(host_time_ps, "host_time_ps");
    *host_time_ps = Runtime::get().host_time();
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGetCount(uint32_t* count) {
  return guarded(__func__, [&] {
    require(count, "count");
    *count = static_cast<uint32_t>(Runtime::get().devices().size());
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGet(uint32_t index, spyre_device_t* device) {
  return guarded(__func__, [&] {
    require(device, "device");
    Runtime& rt = Runtime::get();
    if (index >= rt.devices().size()) {
      raise(SPYRE_ERROR_INVALID_ARGUMENT,
            fmt::format("device index {} is out of range (there are {}; SPYRE_SIM_DEVICES)", index, rt.devices().size()));
    }
    *device = static_cast<spyre_device_t>(rt.devices()[index]->handle);
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGetProperties(spyre_device_t device, spyre_device_properties_t* p) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(p, "properties");
    // 0.5 callers end at dram_deliverable_bytes_per_s: they get what their struct holds.
    const std::size_t v05 = offsetof(spyre_device_properties_t, dataflow);
    require_size(p->struct_size, v05, "spyre_device_properties_t");
    spyre_device_properties_t all{};
    const uint32_t size = p->struct_size;
    const auto& c = d->config.chip;
    const auto& f = d->figures();
    all.isa_version = isa::kIsaVersion;
    copy_string(all.name, sizeof all.name, fmt::format("spyre:{}", d->index));
    copy_string(all.config_name, sizeof all.config_name, c.name);
    copy_string(all.config_hash, sizeof all.config_hash, d->config.hash);
    all.timed = rt.mode() == spyre::driver::Mode::functional ? 0 : 1;
    all.cores = static_cast<uint32_t>(c.cores.count);
    all.corelets_per_core = static_cast<uint32_t>(c.cores.corelets);
    all.array_rows = static_cast<uint32_t>(c.cores.compute_array.rows);
    all.array_cols = static_cast<uint32_t>(c.cores.compute_array.cols);
    for (const auto t : spyre::config::kMacTypes) {
      all.simd_depth[static_cast<int>(t)] =
          static_cast<uint32_t>(spyre::config::simd_depth(c.cores.compute_array.simd_depth, t));
      all.peak_macs_per_s[static_cast<int>(t)] = f.peak_macs_per_s[static_cast<int>(t)];
    }
    all.vector_units_per_corelet = static_cast<uint32_t>(c.cores.vector.units_per_corelet);
    all.vector_lanes = static_cast<uint32_t>(c.cores.vector.lanes);
    all.scratchpad_bytes = c.cores.scratchpad.bytes;
    all.scratchpad_usable_bytes = c.cores.scratchpad.usable_bytes;
    all.dma_engines_per_core = static_cast<uint32_t>(c.dma.engines_per_core);
    all.stick_bytes = static_cast<uint32_t>(c.dma.stick_bytes);
    all.memory_bytes = c.memory.usable_bytes;
    all.memory_channels = static_cast<uint32_t>(c.memory.channels);
    all.max_kernel_args = isa::kMaxArgs;
    all.clock_ghz = c.clock_ghz;
    all.dram_peak_bytes_per_s = f.dram_peak_bytes_per_s;
    all.dram_deliverable_bytes_per_s = f.dram_deliverable_bytes_per_s;
    all.dataflow = static_cast<uint32_t>(c.cores.compute_array.dataflow);
    all.vector_pipeline_latency_cycles = static_cast<uint32_t>(c.cores.vector.pipeline_latency_cycles);
    all.dram_channel_bytes_per_s = f.dram_channel_bytes_per_s;
    all.dram_efficiency = c.memory.efficiency;
    all.dram_latency_ns = c.memory.latency_ns;
    all.dram_interleave_bytes = c.memory.interleave_bytes;
    all.dma_setup_cycles = static_cast<uint32_t>(c.dma.setup_cycles);
    all.dma_bytes_per_cycle = static_cast<uint32_t>(c.dma.bytes_per_cycle);
    all.ring_memory_stops = static_cast<uint32_t>(c.ring.memory_stops);
    all.ring_hop_latency_cycles = static_cast<uint32_t>(c.ring.hop_latency_cycles);
    all.ring_link_bytes_per_s = f.ring_link_bytes_per_s;
    all.scratchpad_ports = static_cast<uint32_t>(c.cores.scratchpad.ports);
    all.scratchpad_latency_cycles = static_cast<uint32_t>(c.cores.scratchpad.latency_cycles);
    all.dram_channel_map = c.memory.channel_map == spyre::config::ChannelMap::interleaved
                               ? SPYRE_DRAM_CHANNEL_MAP_INTERLEAVED
                               : SPYRE_DRAM_CHANNEL_MAP_SKEWED;
    static_assert(isa::kNumVectorCosts <= SPYRE_VECTOR_COST_MAX, "the properties hold every vector cost class");
    all.vector_cost_count = isa::kNumVectorCosts;
    for (std::uint8_t i = 0; i < isa::kNumVectorCosts; ++i) {
      all.vector_op_cycles[i] = c.cores.vector.op_cycles[static_cast<isa::VectorCost>(i)];
    }
    all.dma_engine_bytes_per_s = f.dma_engine_bytes_per_s;
    all.dram_turnaround_s_per_byte = f.dram_turnaround_s_per_byte;
    std::memcpy(p, &all, std::min<std::size_t>(size, sizeof all));
    p->struct_size = size;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceSynchronize(spyre_device_t device) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    bool error = false;
    rt.block_until(d.get(), [&] {
      if (!d->idle()) return false;
      error = d->any_queue_faulted();
      return true;
    });
    if (error) return fail(SPYRE_ERROR_DEVICE_FAULT, "spyreDeviceSynchronize: a queue of the device is in error state");
    return SPYRE_SUCCESS;
  });
}

}  // extern "C"
