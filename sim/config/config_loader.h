// Loading a chip config: YAML file (or the embedded default) + "--set" overrides,
// parsed once into ChipConfig and validated. Every error names where it came from.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/chip_config.h"

namespace spyre::config {

// A bad config. what() is one line: "<where>: <key>: <message>", where <where> is
// "file:line:column" or the "--set key=value" that introduced the value.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string where, std::string key, std::string message);
  const std::string& where() const { return where_; }
  const std::string& key() const { return key_; }
  const std::string& message() const { return message_; }

 private:
  std::string where_;
  std::string key_;
  std::string message_;
};

struct LoadedConfig {
  ChipConfig chip;
  std::string source;  // the file path, or "<embedded spyre.yaml>"
  std::vector<std::string> overrides;
  std::string hash;  // 16 hex digits over the resolved values, stable across runs/hosts
};

// The text of configs/spyre.yaml, compiled into the binary.
std::string_view embedded_default_config();
inline constexpr std::string_view kEmbeddedSourceName = "<embedded spyre.yaml>";

// Loads `path` (the embedded default when empty), applies each override
// ("cores.count=16", a YAML value after '=') in order, then validates.
// Throws ConfigError.
LoadedConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// As load_config, from YAML text; `source_name` is used in error messages.
LoadedConfig load_config_text(std::string_view yaml, const std::string& source_name,
                              const std::vector<std::string>& overrides = {});

// Splits "a=1;b.c=2" (the SPYRE_SIM_SET form) into overrides; empty items are skipped.
std::vector<std::string> split_overrides(std::string_view list);

// The resolved config as JSON (same keys as the YAML; sizes in bytes).
nlohmann::json to_json(const ChipConfig& chip);

// FNV-1a 64 over the canonical JSON dump, as 16 hex digits.
std::string config_hash(const ChipConfig& chip);

}  // namespace spyre::config
