# Debian's libsystemc-dev ships neither a CMake package nor, in a minimal root,
# pkg-config: import the library by hand as SystemC::systemc.
find_path(SYSTEMC_INCLUDE_DIR systemc.h REQUIRED)
find_library(SYSTEMC_LIBRARY systemc REQUIRED)
add_library(SystemC::systemc UNKNOWN IMPORTED)
set_target_properties(SystemC::systemc PROPERTIES
  IMPORTED_LOCATION "${SYSTEMC_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${SYSTEMC_INCLUDE_DIR}"
  # Debian builds SystemC 3.0.1 as C++17; C++20 code must say so or it fails to link
  # (docs/ARCHITECTURE.md §2).
  INTERFACE_COMPILE_DEFINITIONS "SC_CPLUSPLUS=201703L")
