// The C ABI (include/spyre/spyre_drv.h), part of it: statistics, launch records, reports and traces.
// Arguments are validated here, then the runtime and the device facade do the work;
// every entry point is wrapped by `guarded` (abi_support.h).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driver/abi_support.h"

using namespace spyre::driver;
using namespace spyre::driver::abi;

extern "C" {

spyre_result_t spyreDeviceGetStats(spyre_device_t device, spyre_device_stats_t* stats) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(stats, "stats");
    require_size(stats->struct_size, sizeof(spyre_device_stats_t), "spyre_device_stats_t");
    const uint32_t size = stats->struct_size;
    rt.query(d.get(), [&] {
      const auto& s = d->stats();
      std::memset(stats, 0, sizeof *stats);
      stats->struct_size = size;
      stats->time_ps = spyre::sim::Simulation::now();
      for (std::size_t i = 0; i < s.macs.size(); ++i) stats->macs[i] = s.macs[i];
      stats->instructions = s.instructions;
      stats->launches = s.launches;
      stats->faults = s.faults;
      stats->dram_read_bytes = s.dram_read_bytes;
      stats->dram_write_bytes = s.dram_write_bytes;
      stats->host_to_device_bytes = s.host_to_device_bytes;
      stats->device_to_host_bytes = s.device_to_host_bytes;
    });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGetLaunchRecords(spyre_device_t device, uint32_t* count, spyre_launch_record_t* records) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(count, "count");
    if (records != nullptr) {
      for (uint32_t i = 0; i < *count; ++i) {
        require_size(records[i].struct_size, sizeof(spyre_launch_record_t), "spyre_launch_record_t");
      }
    }
    rt.query(d.get(), [&] {
      const auto& all = d->stats().launch_records;
      if (records == nullptr) {
        *count = static_cast<uint32_t>(all.size());
        return;
      }
      const uint32_t n = std::min<uint32_t>(*count, static_cast<uint32_t>(all.size()));
      for (uint32_t i = 0; i < n; ++i) {
        const auto& r = all[i];
        spyre_launch_record_t& out = records[i];
        const uint32_t size = out.struct_size;
        std::memset(&out, 0, sizeof out);
        out.struct_size = size;
        copy_string(out.name, sizeof out.name, r.name);
        out.queue = reinterpret_cast<spyre_queue_t>(r.queue_tag);
        out.start_ps = r.start;
        out.end_ps = r.end;
        for (std::size_t m = 0; m < r.macs.size(); ++m) out.macs[m] = r.macs[m];
        out.dram_read_bytes = r.dram_read_bytes;
        out.dram_write_bytes = r.dram_write_bytes;
        out.ring_bytes = r.ring_bytes;
        out.cores = static_cast<uint32_t>(r.cores.size());
        out.faulted = r.fault.has_value();
      }
      *count = n;
    });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceGetReport(spyre_device_t device, char* json, size_t* bytes) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(bytes, "bytes");
    std::string text;
    rt.query(d.get(), [&] {
      // Over the span of the recorded work, so the report does not change between the
      // two calls of the size-query pattern unless work completes in between.
      auto report = d->report();
      report["config"] = {{"name", d->config.chip.name},
                          {"hash", d->config.hash},
                          {"source", d->config.source},
                          {"overrides", d->config.overrides},
                          {"resolved", spyre::config::to_json(d->config.chip)}};
      text = report.dump();
    });
    const std::size_t needed = text.size() + 1;
    if (json == nullptr) {
      *bytes = needed;
      return SPYRE_SUCCESS;
    }
    if (*bytes < needed) {
      const std::size_t given = *bytes;
      *bytes = needed;
      raise(SPYRE_ERROR_INVALID_SIZE, fmt::format("the report needs {} bytes, the buffer has {}", needed, given));
    }
    std::memcpy(json, text.c_str(), needed);
    *bytes = needed;
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreDeviceResetStats(spyre_device_t device) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    rt.block_until(d.get(), [&] {
      if (!d->idle()) return false;
      d->reset_stats();
      return true;
    });
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreTraceStart(spyre_device_t device) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    bool already = false;
    rt.query(d.get(), [&] {
      already = d->tracing();
      if (!already) d->start_trace();
    });
    if (already) raise(SPYRE_ERROR_INVALID_ARGUMENT, "the device is already tracing");
    return SPYRE_SUCCESS;
  });
}

spyre_result_t spyreTraceStop(spyre_device_t device, const char* path) {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    auto d = rt.lookup<Device>(device, "device");
    require(path, "path");
    std::string problem;
    rt.block_until(d.get(), [&] {
      if (!d->idle()) return false;
      if (!d->tracing()) {
        problem = "the device is not tracing";
        return true;
      }
      try {
        d->stop_trace(path);
      } catch (const std::exception& e) {
        problem = e.what();
      }
      return true;
    });
    if (!problem.empty()) raise(SPYRE_ERROR_INVALID_ARGUMENT, problem);
    return SPYRE_SUCCESS;
  });
}

}  // extern "C"
