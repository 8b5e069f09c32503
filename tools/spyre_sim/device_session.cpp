#include "spyre_sim/device_session.h"

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "config/config_loader.h"

namespace spyre::tools {

c10::ScalarType dtype_of(const std::string& s) {
  if (s == "fp16" || s == "float16" || s == "half") return c10::kHalf;
  if (s == "bf16" || s == "bfloat16") return c10::kBFloat16;
  if (s == "fp32" || s == "float32" || s == "float") return c10::kFloat;
  throw UsageError("unknown dtype '" + s + "' (expected fp16, bf16 or fp32)");
}

std::int64_t positive_integer(const std::string& s, const std::string& what) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("{}: expected a positive integer, found '{}'", what, s));
}

void configure_driver(const ConfigOptions& config, spyre_device_mode_t mode, std::uint32_t devices) {
  // Validate the config here (a clear usage error), then hand it to the driver.
  (void)config::load_config(config.config_path, config.overrides);
  // Each --set goes to the driver as it is (no joined string to split again).
  std::vector<const char*> overrides;
  for (const auto& s : config.overrides) overrides.push_back(s.c_str());
  const spyre_driver_config_t start{.struct_size = sizeof(spyre_driver_config_t),
                                    .config_path = config.config_path.c_str(),
                                    .overrides = overrides.data(),
                                    .num_overrides = static_cast<std::uint32_t>(overrides.size()),
                                    .device_count = devices,
                                    .config_yaml = nullptr,
                                    .mode = mode};
  if (spyreDriverConfigure(&start) != SPYRE_SUCCESS) throw UsageError(spyreGetLastErrorMessage());
}

spyre_device_t device_handle(int index) {
  spyre_device_t d = nullptr;
  if (spyreDeviceGet(index, &d) != SPYRE_SUCCESS) {
    throw UsageError(fmt::format("card spyre:{}: {}", index, spyreGetLastErrorMessage()));
  }
  return d;
}

nlohmann::json device_report(int index) {
  return nlohmann::json::parse(backend::device_report_json(device_handle(index)));
}

void add_mode_option(CLI::App& command, spyre_device_mode_t& mode, const char* help) {
  command.add_option("--mode", mode, help)
      ->transform(CLI::CheckedTransformer(std::map<std::string, spyre_device_mode_t>{
          {"timed", SPYRE_MODE_TIMED}, {"no-data", SPYRE_MODE_NO_DATA}, {"functional", SPYRE_MODE_FUNCTIONAL}}));
}

}  // namespace spyre::tools
