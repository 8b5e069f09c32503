# spyre_add_catch_test(NAME LABEL SOURCES... LIBS ... [ENV VAR=VALUE...])
# One Catch2 executable; each TEST_CASE becomes its own ctest test labelled LABEL.
function(spyre_add_catch_test name label)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;ENV" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} Catch2::Catch2WithMain spyre_warnings)
  target_compile_definitions(${name} PRIVATE SPYRE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  set(properties LABELS ${label})
  if(ARG_ENV)
    list(APPEND properties ENVIRONMENT "${ARG_ENV}")
  endif()
  catch_discover_tests(${name}
    TEST_PREFIX "${label}:"
    PROPERTIES ${properties}
    DISCOVERY_MODE PRE_TEST)
endfunction()

# spyre_add_pytest(NAME LABEL PATH... [ENV VAR=VALUE...])
# pytest on PATH (files or folders) as one ctest test LABEL:NAME, with the build's
# binaries and Python package on the paths. Each run leaves JUnit XML with every test's
# duration in <build>/Testing/pytest/NAME.xml (what tests/README.md's times come from).
# Exit code 5 (nothing collected: `tools/dev check` deselects the tests marked slow
# through PYTEST_ADDOPTS, and a file may hold only slow ones) counts as skipped.
function(spyre_add_pytest name label)
  cmake_parse_arguments(ARG "" "" "ENV" ${ARGN})
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  add_test(NAME ${label}:${name}
    COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider -W ignore::UserWarning
            --junitxml=${CMAKE_BINARY_DIR}/Testing/pytest/${name}.xml ${ARG_UNPARSED_ARGUMENTS}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${label}:${name} PROPERTIES LABELS ${label} SKIP_RETURN_CODE 5
    ENVIRONMENT "PATH=${CMAKE_BINARY_DIR}/bin:$ENV{PATH};SPYRE_BUILD_DIR=${CMAKE_BINARY_DIR};PYTHONPATH=${PROJECT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1;${ARG_ENV}")
endfunction()
