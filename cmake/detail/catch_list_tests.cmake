# Run by ctest (through TEST_INCLUDE_FILES, see cmake/JouleCatchTests.cmake) before it runs any
# test: lists the Catch2 test cases of one executable and registers each as a ctest test. The list
# is cached beside the executable until the executable changes. Test cases tagged [long] (the
# long training scenarios) get the ctest label `long`, which the sanitizer build leaves out.
# JOULE_TEST_EMULATOR (empty unless cross-compiled: e.g. qemu-aarch64 and the sysroot's loader) runs the
# executable, for the listing and for each test.
set(_list_file "${JOULE_TEST_EXECUTABLE}.test-list")
set(_long_file "${JOULE_TEST_EXECUTABLE}.long-list")
set(_failure "")
if(NOT EXISTS "${JOULE_TEST_EXECUTABLE}")
  set(_failure "the test executable ${JOULE_TEST_EXECUTABLE} does not exist (not built?)")
elseif(NOT EXISTS "${_list_file}" OR NOT EXISTS "${_long_file}" OR
       "${JOULE_TEST_EXECUTABLE}" IS_NEWER_THAN "${_list_file}")
  execute_process(COMMAND ${JOULE_TEST_EMULATOR} "${JOULE_TEST_EXECUTABLE}" ${JOULE_TEST_LIST_ARGS}
                  WORKING_DIRECTORY "${JOULE_TEST_WORKING_DIR}"
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  # Catch2 v2 exits with the number of tests it lists; v3 with 0. Either way a run that could not
  # start (a missing shared library) or crashed prints no names.
  string(REGEX REPLACE "\n+$" "" _out "${_out}")
  if(_out STREQUAL "" OR NOT _rc MATCHES "^[0-9]+$")
    string(STRIP "${_err}" _err)
    set(_failure "listing the tests of ${JOULE_TEST_EXECUTABLE} failed (exit status ${_rc}): ${_err}")
  else()
    file(WRITE "${_list_file}" "${_out}\n")
    # The same listing for the spec [long]: none of them is no error (v3 then exits non-zero).
    execute_process(COMMAND ${JOULE_TEST_EMULATOR} "${JOULE_TEST_EXECUTABLE}" "[long]" ${JOULE_TEST_LIST_ARGS}
                    WORKING_DIRECTORY "${JOULE_TEST_WORKING_DIR}"
                    OUTPUT_VARIABLE _long_out ERROR_QUIET)
    file(WRITE "${_long_file}" "${_long_out}")
  endif()
endif()

if(NOT _failure STREQUAL "")
  # One failing test names the executable and says why, so a run can never pass without it.
  set(_name "${JOULE_TEST_TARGET}: test discovery failed")
  add_test("${_name}" "${JOULE_CMAKE_COMMAND}" -E echo "joule: ${_failure}")
  set_tests_properties("${_name}" PROPERTIES FAIL_REGULAR_EXPRESSION "joule: ")
  return()
endif()

file(STRINGS "${_list_file}" _names)
file(STRINGS "${_long_file}" _long_names)
foreach(_name IN LISTS _names)
  # Catch2's test-spec syntax gives meaning to , [ ] \ : escape them in the name passed on.
  string(REGEX REPLACE "([],[\\])" "\\\\\\1" _spec "${_name}")
  add_test("${_name}" ${JOULE_TEST_EMULATOR} "${JOULE_TEST_EXECUTABLE}" "${_spec}" ${JOULE_TEST_RUN_ARGS})
  set_tests_properties("${_name}" PROPERTIES WORKING_DIRECTORY "${JOULE_TEST_WORKING_DIR}" ${JOULE_TEST_PROPERTIES})
  list(FIND _long_names "${_name}" _long_index)  # (no IN_LIST: ctest reads this under old policies)
  if(NOT _long_index EQUAL -1)
    set_tests_properties("${_name}" PROPERTIES LABELS long)
  endif()
endforeach()
