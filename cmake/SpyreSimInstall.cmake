# Installing spyre-sim.
#
# `cmake --install build --prefix P` (component sdk) gives the SDK: bin/spyre-sim,
# lib/libspyre_drv.so and lib/libspyre_torch.so, include/spyre/spyre_drv.h,
# share/spyre-sim/configs and the CMake package lib/cmake/SpyreSim
# (find_package(SpyreSim): SpyreSim::driver, SpyreSim::torch).
#
# The python component is the Python wheel's layout (pyproject.toml; scikit-build-core
# installs only it, a plain install never does): spyre_sim/lib, spyre_sim/bin,
# spyre_sim/configs next to the package's Python files.
#
# Both layouts keep the libraries in lib/ beside bin/, so one RUNPATH serves both.
set_target_properties(spyre_drv PROPERTIES INSTALL_RPATH "$ORIGIN")
set_target_properties(spyre-sim PROPERTIES INSTALL_RPATH "$ORIGIN/../lib")
set(_spyre_libs spyre_drv)
if(SPYRE_BUILD_BACKEND)
  set_target_properties(spyre_torch spyre_c10d PROPERTIES INSTALL_RPATH "$ORIGIN")
  list(APPEND _spyre_libs spyre_torch)
  # The torch.distributed extension goes with the Python package only.
  install(TARGETS spyre_c10d LIBRARY DESTINATION spyre_sim/lib COMPONENT python EXCLUDE_FROM_ALL)
endif()

install(TARGETS ${_spyre_libs} LIBRARY DESTINATION lib COMPONENT sdk)
install(TARGETS spyre-sim RUNTIME DESTINATION bin COMPONENT sdk)
install(FILES ${PROJECT_SOURCE_DIR}/include/spyre/spyre_drv.h DESTINATION include/spyre COMPONENT sdk)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION share/spyre-sim/configs COMPONENT sdk
        FILES_MATCHING PATTERN "*.yaml")

include(CMakePackageConfigHelpers)
configure_file(${PROJECT_SOURCE_DIR}/cmake/SpyreSimConfig.cmake.in ${PROJECT_BINARY_DIR}/SpyreSimConfig.cmake @ONLY)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/SpyreSimConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/SpyreSimConfig.cmake ${PROJECT_BINARY_DIR}/SpyreSimConfigVersion.cmake
        DESTINATION lib/cmake/SpyreSim COMPONENT sdk)

install(TARGETS ${_spyre_libs} LIBRARY DESTINATION spyre_sim/lib COMPONENT python EXCLUDE_FROM_ALL)
install(TARGETS spyre-sim RUNTIME DESTINATION spyre_sim/bin COMPONENT python EXCLUDE_FROM_ALL)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION spyre_sim/configs COMPONENT python EXCLUDE_FROM_ALL
        FILES_MATCHING PATTERN "*.yaml")
unset(_spyre_libs)
