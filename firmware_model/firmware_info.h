// Identity of the firmware model.
#pragma once

#include <cstdint>
#include <string>

namespace spyre::firmware {

inline constexpr std::uint32_t kFirmwareVersion = 1;

// "spyre-firmware-model <version> on SystemC <version>".
std::string firmware_description();

}  // namespace spyre::firmware
