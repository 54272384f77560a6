# joule_discover_tests(TARGET [PROPERTIES prop value ...]): one ctest test per Catch2 test case of
# TARGET, listed when ctest runs, not when the executable is built. Running a test executable at
# build time (Catch.cmake's default) fails on a machine that builds but cannot run it (a GPU build
# on a login node without libcuda.so.1), and would silently register no tests from it. Here the
# listing happens at test time (cmake/detail/catch_list_tests.cmake, cached until the executable
# changes), and an executable that cannot list its tests, or lists none, becomes one failing test
# that shows why. Works with Catch2 v2 and v3. Cross-compiled (CROSSCOMPILING_EMULATOR, e.g. qemu from
# cmake/toolchains/aarch64-linux-gnu.cmake), the executable is listed and run through the emulator,
# as add_test() runs a target's executable.
set(_joule_catch_list_script "${CMAKE_CURRENT_LIST_DIR}/detail/catch_list_tests.cmake")

function(joule_discover_tests target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "PROPERTIES")
  # A test spec that matches no test case must fail, not pass with nothing run: Catch2 v3 does
  # that by itself, v2 needs --warn NoTests.
  if(Catch2_VERSION VERSION_GREATER_EQUAL 3)
    set(list_args --list-tests --verbosity quiet)
    set(run_args "")
  else()
    set(list_args --list-test-names-only)
    set(run_args --warn NoTests)
  endif()
  set(ctest_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_tests.cmake")
  # Bracket arguments keep names, paths and property values as they are.
  set(props "")
  # A value that is itself a list (ENVIRONMENT's VAR=VALUE entries) keeps its semicolons escaped, so
  # that it reaches set_tests_properties as one value: unescaped, ENVIRONMENT took only the first
  # entry and the next ones became property names.
  foreach(p IN LISTS arg_PROPERTIES)
    string(REPLACE ";" "\\;" p "${p}")
    string(APPEND props " [==[${p}]==]")
  endforeach()
  # The emulator (a command and its arguments, a list) that runs TARGET's executable, if any.
  get_property(emulator TARGET ${target} PROPERTY CROSSCOMPILING_EMULATOR)
  set(emulator_args "")
  foreach(e IN LISTS emulator)
    string(APPEND emulator_args " [==[${e}]==]")
  endforeach()
  file(GENERATE OUTPUT "${ctest_file}" CONTENT
"set(JOULE_TEST_TARGET [==[${target}]==])
set(JOULE_TEST_EXECUTABLE [==[$<TARGET_FILE:${target}>]==])
set(JOULE_TEST_EMULATOR${emulator_args})
set(JOULE_TEST_WORKING_DIR [==[${CMAKE_CURRENT_BINARY_DIR}]==])
set(JOULE_TEST_LIST_ARGS ${list_args})
set(JOULE_TEST_RUN_ARGS ${run_args})
set(JOULE_TEST_PROPERTIES${props})
set(JOULE_CMAKE_COMMAND [==[${CMAKE_COMMAND}]==])
include([==[${_joule_catch_list_script}]==])
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${ctest_file}")
endfunction()
