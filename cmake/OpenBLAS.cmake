# OpenBLAS (the pthread build from libopenblas0-pthread/libopenblas-dev) as
# OpenBLAS::openblas. Its CMake package files are not usable from a minimal root, so
# import it by hand.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread REQUIRED)
find_library(OPENBLAS_LIBRARY openblas REQUIRED)
add_library(OpenBLAS::openblas UNKNOWN IMPORTED)
set_target_properties(OpenBLAS::openblas PROPERTIES
  IMPORTED_LOCATION "${OPENBLAS_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${OPENBLAS_INCLUDE_DIR}")
