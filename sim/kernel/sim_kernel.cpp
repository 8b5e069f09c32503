#include "kernel/sim_kernel.h"

#include <systemc>

namespace spyre::sim {

std::string systemc_version() { return sc_core::sc_release(); }

}  // namespace spyre::sim
