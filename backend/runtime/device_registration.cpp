#include "runtime/device_registration.h"

#include "spyre/spyre_drv.h"

namespace spyre::backend {
namespace {

// Registration happens when the shared library is loaded (torch.ops.load_library or
// a C++ program linking it), before any "spyre" device string is parsed.
struct BackendNameRegistration {
  BackendNameRegistration() { c10::register_privateuse1_backend(kBackendName); }
};
const BackendNameRegistration registration;

}  // namespace

std::uint32_t driver_api_version() {
  std::uint32_t version = 0;
  const spyre_result_t rc = spyreDriverGetApiVersion(&version);
  TORCH_CHECK(rc == SPYRE_SUCCESS, "spyreDriverGetApiVersion failed: ", spyreResultString(rc));
  return version;
}

}  // namespace spyre::backend
