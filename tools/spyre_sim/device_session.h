// What the commands that run work on the simulated device share (run, calibrate):
// configuring the driver, the device handle, its report, and PyTorch's errors mapped
// to the tool's exit codes.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>
#include <nlohmann/json.hpp>

#include "spyre/spyre_drv.h"
#include "spyre_torch/spyre_torch.h"
#include "spyre_sim/commands.h"

namespace spyre::tools {

// Validates the config (a clear UsageError), then hands it and the mode to the
// driver through spyreDriverConfigure (`devices` cards, linked as the config's
// system section says).
void configure_driver(const ConfigOptions& config, spyre_device_mode_t mode, std::uint32_t devices = 1);

// Card `index` of the configured driver (spyre:index); a UsageError naming the card
// when the driver has fewer.
spyre_device_t device_handle(int index = 0);

// Workload parameters: "fp16" / "bf16" / "fp32" (and their PyTorch names), and a
// positive integer; a UsageError naming `what` otherwise.
c10::ScalarType dtype_of(const std::string& s);
std::int64_t positive_integer(const std::string& s, const std::string& what);

// Card `index`'s report (launch records, per-kernel and chip statistics) as JSON.
nlohmann::json device_report(int index = 0);

// The --mode option of run and calibrate.
void add_mode_option(CLI::App& command, spyre_device_mode_t& mode, const char* help);

// Runs `body`, turning PyTorch's errors into the tool's by type: a device fault,
// memory running out, or (any other c10::Error) input the backend refused.
template <class F>
void with_torch_errors(F&& body) {
  try {
    body();
  } catch (const backend::DeviceFaultError& e) {
    throw DeviceFault(e.what_without_backtrace());
  } catch (const c10::OutOfMemoryError& e) {
    throw OutOfMemory(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    throw UsageError(e.what_without_backtrace());
  }
}

}  // namespace spyre::tools
