// Facts about the SystemC kernel the model runs on.
#pragma once

#include <string>

namespace spyre::sim {

// The SystemC library's version string, e.g. "3.0.1-Accellera".
std::string systemc_version();

}  // namespace spyre::sim
