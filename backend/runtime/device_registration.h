// Device identity: "spyre" is PyTorch's PrivateUse1 backend once this library loads.
#pragma once

#include <cstdint>

namespace spyre::backend {

inline constexpr const char* kBackendName = "spyre";

// The driver ABI version this backend was loaded against (throws c10::Error on failure).
std::uint32_t driver_api_version();

}  // namespace spyre::backend
