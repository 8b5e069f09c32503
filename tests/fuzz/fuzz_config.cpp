// Fuzz target: chip configs. Input = YAML text, then '\0'-separated --set overrides.
// Any outcome but a loaded config or a ConfigError (with where/key/message) is a
// finding: an exception of another type, a crash, a hang, or derived figures that are
// not finite.
#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config_loader.h"
#include "config/derived_figures.h"
#include "fuzz_harness.h"

const char* fuzz_target_name() { return "fuzz_config"; }

int fuzz_one(std::span<const std::uint8_t> input) {
  const std::string all(input.begin(), input.end());
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= all.size(); ++i) {
    if (i == all.size() || all[i] == '\0') {
      parts.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  try {
    const auto loaded = spyre::config::load_config_text(parts[0], "fuzz.yaml", overrides);
    const auto figures = spyre::config::derive(loaded.chip);
    const nlohmann::json j = spyre::config::to_json(figures);
    for (const auto& [key, value] : j.items()) {
      if (value.is_number() && !std::isfinite(value.get<double>())) {
        std::fprintf(stderr, "fuzz_config: derived figure %s is %f\n", key.c_str(), value.get<double>());
        return 1;
      }
    }
    (void)spyre::config::config_hash(loaded.chip);
  } catch (const spyre::config::ConfigError& e) {
    if (e.where().empty() || e.message().empty()) {
      std::fprintf(stderr, "fuzz_config: a ConfigError without where or message: %s\n", e.what());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_config: not a ConfigError: %s\n", e.what());
    return 1;
  }
  return 0;
}

std::vector<std::string> fuzz_dictionary() {
  return {":", "\n", "  ", "    ", "- ", "[", "]", "{", "}", ",", "---", "...", "&a ", "*a", "<<: ", "!!str ", "!!int ",
          "#", "'", "\"", "~", "null", "true", "0", "-1", "1e-300", "1e300", "nan", ".inf", "18446744073709551615",
          "4294967296", "1024", "1025", " KiB", " MiB", " GiB", " TiB", "cores", "count", "scratchpad", "bytes",
          "usable_bytes", "memory", "capacity_bytes", "channels", "clock_ghz", "peak_gbps", "efficiency", "ring",
          "memory_stops", "interleave_bytes", "stick_bytes", "watchdog_cycles", "simd_depth", "op_cycles", "energy",
          "cores.count=", "memory.capacity_bytes=", "clock_ghz=", "name=", "cores.scratchpad.bytes=", "\xff", "\xc3"};
}

std::vector<std::vector<std::uint8_t>> fuzz_seeds() {
  const std::string base(spyre::config::embedded_default_config());
  const auto bytes = [](const std::string& s) { return std::vector<std::uint8_t>(s.begin(), s.end()); };
  return {bytes(base), bytes(base + std::string(1, '\0') + "cores.count=2" + std::string(1, '\0') + "energy=~"),
          bytes(base + std::string(1, '\0') + "memory.peak_gbps=409.6"), bytes("name: x\n")};
}
