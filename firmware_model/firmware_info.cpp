#include "firmware_info.h"

#include "kernel/sim_kernel.h"

namespace spyre::firmware {

std::string firmware_description() {
  return "spyre-firmware-model " + std::to_string(kFirmwareVersion) + " on SystemC " +
         sim::systemc_version();
}

}  // namespace spyre::firmware
