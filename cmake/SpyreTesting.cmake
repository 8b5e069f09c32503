# spyre_add_catch_test(NAME LABEL SOURCES... LIBS ...)
# One Catch2 executable; each TEST_CASE becomes its own ctest test labelled LABEL.
function(spyre_add_catch_test name label)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} Catch2::Catch2WithMain spyre_warnings)
  target_compile_definitions(${name} PRIVATE SPYRE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  catch_discover_tests(${name}
    TEST_PREFIX "${label}:"
    PROPERTIES LABELS ${label}
    DISCOVERY_MODE PRE_TEST)
endfunction()

# spyre_add_pytest(NAME LABEL DIR)
# A pytest suite as one ctest test, with the build's binaries and Python package on
# the paths.
function(spyre_add_pytest name label dir)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  add_test(NAME ${label}:${name}
    COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${dir}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${label}:${name} PROPERTIES LABELS ${label}
    ENVIRONMENT "PATH=${CMAKE_BINARY_DIR}/bin:$ENV{PATH};SPYRE_BUILD_DIR=${CMAKE_BINARY_DIR};PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
endfunction()
