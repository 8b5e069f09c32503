// Calling the driver ABI from the backend: every result is checked, and a failure
// becomes a c10::Error (Python RuntimeError) with the driver's explanation.
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include "spyre/spyre_drv.h"
#include "spyre_torch/spyre_torch.h"

namespace spyre::backend {

// Throws DeviceFaultError with `message` (the fault record, see describe_fault).
[[noreturn]] void raise_device_fault(const std::string& message);

// Throws c10::Error naming `what`, the result code and the driver's message
// (DeviceFaultError for SPYRE_ERROR_DEVICE_FAULT, c10::OutOfMemoryError for out of
// host or device memory).
[[noreturn]] void driver_failure(spyre_result_t rc, const char* what);

// A queue reported a device fault: the fault record as text ("kernel 'x' on core 3 at
// pc 7 [dma_load ...]: ... 16 bytes past the end of a 4096-byte allocation ...").
std::string describe_fault(spyre_queue_t queue);

#define SPYRE_CHECK(call)                                              \
  do {                                                                 \
    const spyre_result_t spyre_rc_ = (call);                           \
    if (spyre_rc_ != SPYRE_SUCCESS) ::spyre::backend::driver_failure(spyre_rc_, #call); \
  } while (0)

inline constexpr const char* kBackendName = "spyre";

// The driver's device handle for a PyTorch device index.
spyre_device_t driver_device(c10::DeviceIndex index);
c10::DeviceIndex device_count_or_zero() noexcept;
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
void check_device_index(c10::DeviceIndex index);

// The driver ABI version this backend was loaded against (throws c10::Error on failure).
std::uint32_t driver_api_version();

// spyreDriverConfigure: what the devices are built from (a YAML file or YAML text,
// overrides, a device count, a mode "timed" | "functional" | "no-data"; empty or 0
// values fall back to the environment). Only before the devices are first used:
// afterwards c10::Error says so.
void configure_driver(const std::string& config_path, const std::string& config_yaml,
                      const std::vector<std::string>& overrides, std::int64_t devices, const std::string& mode);

}  // namespace spyre::backend
