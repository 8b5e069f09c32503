// Cross-field checks of a parsed ChipConfig ("impossible combinations").
#pragma once

#include <functional>
#include <string>

#include "config/chip_config.h"

namespace spyre::config {

// Maps a key path ("memory.channels") to where its value came from.
using Locate = std::function<std::string(const std::string& key)>;

// Throws ConfigError naming the first offending key.
void validate(const ChipConfig& chip, const Locate& locate);

}  // namespace spyre::config
