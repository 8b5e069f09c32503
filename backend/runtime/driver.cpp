#include "runtime/driver.h"

#include <map>
#include <mutex>
#include <vector>

namespace spyre::backend {
namespace {

// Registration happens when the shared library is loaded (torch.ops.load_library or
// a C++ program linking it), before any "spyre" device string is parsed.
struct BackendNameRegistration {
  BackendNameRegistration() { c10::register_privateuse1_backend(kBackendName); }
};
const BackendNameRegistration registration;

thread_local c10::DeviceIndex t_current_device = 0;

}  // namespace

void raise_device_fault(const std::string& message) {
  throw DeviceFaultError({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)}, message);
}

void driver_failure(spyre_result_t rc, const char* what) {
  const std::string message = c10::str("spyre driver: ", what, " failed with ", spyreResultString(rc), ": ",
                                       spyreGetLastErrorMessage());
  if (rc == SPYRE_ERROR_DEVICE_FAULT) raise_device_fault(message);
  TORCH_CHECK_WITH(OutOfMemoryError, rc != SPYRE_ERROR_OUT_OF_DEVICE_MEMORY && rc != SPYRE_ERROR_OUT_OF_HOST_MEMORY,
                   message);
  TORCH_CHECK(false, message);
}

std::string describe_fault(spyre_queue_t queue) {
  spyre_fault_t f{};
  f.struct_size = sizeof f;
  if (spyreQueueGetFault(queue, &f) != SPYRE_SUCCESS) return "a device fault (no fault record)";
  std::string s = f.kernel[0] != '\0' ? std::string("kernel '") + f.kernel + "' faulted on core " +
                                            std::to_string(f.core) + " at pc " + std::to_string(f.pc)
                                      : std::string("a device command failed");
  if (f.instruction[0] != '\0') s += std::string(" [") + f.instruction + "]";
  s += std::string(": ") + f.reason;
  if (f.skipped_commands > 0) s += " (" + std::to_string(f.skipped_commands) + " later command(s) skipped)";
  return s;
}

c10::DeviceIndex device_count_or_zero() noexcept {
  static const c10::DeviceIndex count = [] {
    std::uint32_t n = 0;
    if (spyreDeviceGetCount(&n) != SPYRE_SUCCESS) {
      TORCH_WARN("spyre: no devices: ", spyreGetLastErrorMessage());
      return c10::DeviceIndex{0};
    }
    return static_cast<c10::DeviceIndex>(n);
  }();
  return count;
}

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count_or_zero(), "spyre: device index ", static_cast<int>(index),
              " is out of range (", static_cast<int>(device_count_or_zero()), " device(s); SPYRE_SIM_DEVICES)");
}

spyre_device_t driver_device(c10::DeviceIndex index) {
  check_device_index(index);
  static std::once_flag once;
  static std::vector<spyre_device_t> devices;
  std::call_once(once, [] {
    devices.resize(device_count_or_zero());
    for (std::size_t i = 0; i < devices.size(); ++i) SPYRE_CHECK(spyreDeviceGet(static_cast<uint32_t>(i), &devices[i]));
  });
  return devices[static_cast<std::size_t>(index)];
}

c10::DeviceIndex current_device() { return t_current_device; }

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

void configure_driver(const std::string& config_path, const std::string& config_yaml,
                      const std::vector<std::string>& overrides, std::int64_t devices, const std::string& mode) {
  static const std::map<std::string, spyre_device_mode_t> modes = {
      {"", SPYRE_MODE_DEFAULT}, {"timed", SPYRE_MODE_TIMED}, {"functional", SPYRE_MODE_FUNCTIONAL},
      {"no-data", SPYRE_MODE_NO_DATA}};
  const auto m = modes.find(mode);
  TORCH_CHECK(m != modes.end(), "spyre: configure: mode must be 'timed', 'functional' or 'no-data', not '", mode,
              "'");
  TORCH_CHECK(devices >= 0 && devices <= 64, "spyre: configure: devices must be 1 to 64 (0: SPYRE_SIM_DEVICES), not ",
              devices);
  TORCH_CHECK(config_path.empty() || config_yaml.empty(), "spyre: configure: give config or yaml, not both");
  std::vector<const char*> items;
  for (const auto& o : overrides) items.push_back(o.c_str());
  const spyre_driver_config_t c{.struct_size = sizeof(spyre_driver_config_t),
                                .config_path = config_path.c_str(),
                                .overrides = items.data(),
                                .num_overrides = static_cast<std::uint32_t>(items.size()),
                                .device_count = static_cast<std::uint32_t>(devices),
                                .config_yaml = config_yaml.empty() ? nullptr : config_yaml.c_str(),
                                .mode = static_cast<std::uint32_t>(m->second)};
  const spyre_result_t rc = spyreDriverConfigure(&c);
  TORCH_CHECK(rc == SPYRE_SUCCESS, "spyre: configure: ", spyreGetLastErrorMessage());
}

std::string device_report_json(spyre_device_t device) {
  std::size_t bytes = 0;
  SPYRE_CHECK(spyreDeviceGetReport(device, nullptr, &bytes));
  for (;;) {
    std::string text(bytes + 256, '\0');  // room for a little growth
    std::size_t capacity = text.size();
    const spyre_result_t rc = spyreDeviceGetReport(device, text.data(), &capacity);
    if (rc == SPYRE_ERROR_INVALID_SIZE && capacity > bytes) {
      bytes = capacity;  // it grew past the room: retry with what it needs now
      continue;
    }
    SPYRE_CHECK(rc);
    text.resize(capacity - 1);
    return text;
  }
}

std::uint32_t driver_api_version() {
  std::uint32_t version = 0;
  SPYRE_CHECK(spyreDriverGetApiVersion(&version));
  return version;
}

}  // namespace spyre::backend
