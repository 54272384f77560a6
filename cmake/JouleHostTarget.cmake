# The CPU that joule's own code is compiled for: JOULE_HOST_TARGET.
#
# The host kernels (row operators, attention tiles, the offloaded AdamW) are written so that the
# compiler vectorises them; without a target flag x86-64 compilers stop at SSE2 (4 floats) and
# aarch64 compilers at plain NEON, with no SVE. The values:
#   native   this build machine's CPU (-march=native, or -mcpu=native where there is no -march):
#            the default of a CPU build, as PyTorch and OpenBLAS pick their kernels for the machine
#   grace    NVIDIA Grace's Neoverse V2 (Armv9.0-A: SVE2 at 128 bits, BF16, I8MM): Kokkos' own flags
#            where the Kokkos was built with Kokkos_ARCH_ARMV9_GRACE (Kokkos 4.4 and newer), else
#            -mcpu=neoverse-v2 (GCC 13 and newer, recent Clang), or -mcpu=demeter (GCC 12's name for the same
#            core). The gh200 preset's value. Through nvcc_wrapper the flag reaches the host compiler
#            (nvcc_wrapper hands every option it does not know to it)
#   kokkos   nothing of joule's: only what the Kokkos build adds (its Kokkos_ARCH_* host flags)
#   generic  no target flag: binaries that must run on other CPUs of the same architecture
#   -...     these compiler flags, e.g. "-mcpu=neoverse-v2 -msve-vector-bits=128"
# Empty (the default): native for a CPU build with JOULE_NATIVE_ARCH on (its default), generic for
# a GPU build (CUDA, HIP, SYCL) or with JOULE_NATIVE_ARCH=OFF. A value the compiler refuses stops
# the configuration, naming the flag. `joule info` and `joule --version` print the result
# (JOULE_HOST_TARGET_TEXT) and the instruction sets the compiler enabled.
# Sets JOULE_HOST_TARGET_FLAGS (a list, for joule_target_options) and JOULE_HOST_TARGET_TEXT.
include(CheckCXXCompilerFlag)
include(CheckCXXSourceCompiles)

set(_joule_native_default OFF)
if(NOT Kokkos_ENABLE_CUDA AND NOT Kokkos_ENABLE_HIP AND NOT Kokkos_ENABLE_SYCL)
  set(_joule_native_default ON)
endif()
option(JOULE_NATIVE_ARCH "Compile joule's own code for this machine's CPU (-march/-mcpu=native) where JOULE_HOST_TARGET is empty"
       ${_joule_native_default})
set(JOULE_HOST_TARGET "" CACHE STRING
    "CPU target of joule's own code: native, grace, kokkos, generic, or compiler flags (-mcpu=...); empty: native on a CPU build, else generic")
set_property(CACHE JOULE_HOST_TARGET PROPERTY STRINGS "" native grace kokkos generic)

# Kokkos' host architecture, if it was built with one (its flags reach every target linking it).
set(_joule_kokkos_host_arch "")
foreach(_arch IN LISTS Kokkos_ARCH)
  if(NOT _arch MATCHES "^(KEPLER|MAXWELL|PASCAL|VOLTA|TURING|AMPERE|ADA|HOPPER|BLACKWELL|VEGA|NAVI|AMD_GFX|INTEL_)")
    set(_joule_kokkos_host_arch "${_arch}")
  endif()
endforeach()

# joule_check_flags(OUT FLAGS...): OUT is true when the compiler takes every flag;
# JOULE_REFUSED_FLAGS lists those it refused.
function(joule_check_flags out)
  set(_ok TRUE)
  set(_refused "")
  foreach(_flag IN LISTS ARGN)
    string(MAKE_C_IDENTIFIER "JOULE_HAS${_flag}" _var)
    check_cxx_compiler_flag("${_flag}" ${_var})
    if(NOT ${_var})
      set(_ok FALSE)
      list(APPEND _refused "${_flag}")
    endif()
  endforeach()
  set(${out} ${_ok} PARENT_SCOPE)
  set(JOULE_REFUSED_FLAGS "${_refused}" PARENT_SCOPE)
endfunction()

set(_target "${JOULE_HOST_TARGET}")
set(_explicit TRUE)
if(_target STREQUAL "")
  set(_explicit FALSE)
  if(JOULE_NATIVE_ARCH)
    set(_target native)
  else()
    set(_target generic)
  endif()
endif()

set(JOULE_HOST_TARGET_FLAGS "")
set(JOULE_HOST_TARGET_TEXT "")
if(_target STREQUAL "native")
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang|NVIDIA")
    foreach(_flag -march=native -mcpu=native)
      joule_check_flags(_ok ${_flag})
      if(_ok)
        set(JOULE_HOST_TARGET_FLAGS ${_flag})
        break()
      endif()
    endforeach()
  endif()
  if(JOULE_HOST_TARGET_FLAGS)
    set(JOULE_HOST_TARGET_TEXT "native (${JOULE_HOST_TARGET_FLAGS}, the build machine's CPU)")
  elseif(_explicit)
    message(FATAL_ERROR "JOULE_HOST_TARGET=native: the compiler ${CMAKE_CXX_COMPILER} (${CMAKE_CXX_COMPILER_ID}) "
                        "accepts neither -march=native nor -mcpu=native; pass flags it takes "
                        "(-DJOULE_HOST_TARGET=-m...) or -DJOULE_HOST_TARGET=generic")
  else()
    set(JOULE_HOST_TARGET_TEXT "generic (the compiler takes no -march=native or -mcpu=native)")
  endif()
elseif(_target STREQUAL "grace")
  if(_joule_kokkos_host_arch STREQUAL "ARMV9_GRACE")
    # Kokkos adds -mcpu=neoverse-n2 -msve-vector-bits=128 (Neoverse V2's instructions; N2's tuning)
    # to every target that links it, after joule's own options: a flag of joule's would lose.
    set(JOULE_HOST_TARGET_TEXT "grace (Kokkos_ARCH_ARMV9_GRACE: Kokkos' flags)")
  else()
    if(_joule_kokkos_host_arch)
      message(WARNING "JOULE_HOST_TARGET=grace, but Kokkos at ${Kokkos_DIR} was built with Kokkos_ARCH_${_joule_kokkos_host_arch}: "
                      "its flag comes after joule's on every command line and may replace the Grace target. "
                      "Rebuild Kokkos with -DKokkos_ARCH_ARMV9_GRACE=ON (Kokkos 4.4+) or without a host architecture.")
    endif()
    foreach(_flag -mcpu=neoverse-v2 -mcpu=demeter)
      joule_check_flags(_ok ${_flag})
      if(_ok)
        set(JOULE_HOST_TARGET_FLAGS ${_flag})
        break()
      endif()
    endforeach()
    if(NOT JOULE_HOST_TARGET_FLAGS)
      message(FATAL_ERROR "JOULE_HOST_TARGET=grace: the compiler ${CMAKE_CXX_COMPILER} (${CMAKE_CXX_COMPILER_ID} "
                          "${CMAKE_CXX_COMPILER_VERSION}, for ${CMAKE_SYSTEM_PROCESSOR}) accepts neither -mcpu=neoverse-v2 "
                          "(GCC 13 and newer, recent Clang) nor -mcpu=demeter (GCC 12). Grace's code needs an aarch64 compiler that "
                          "knows Neoverse V2 (through nvcc_wrapper: the host compiler, NVCC_WRAPPER_DEFAULT_COMPILER). "
                          "For a build that is not for a Grace, pass -DJOULE_HOST_TARGET=generic (or native).")
    endif()
    set(JOULE_HOST_TARGET_TEXT "grace (${JOULE_HOST_TARGET_FLAGS}: Neoverse V2)")
  endif()
elseif(_target STREQUAL "kokkos")
  if(_joule_kokkos_host_arch)
    set(JOULE_HOST_TARGET_TEXT "kokkos (Kokkos_ARCH_${_joule_kokkos_host_arch}: Kokkos' flags)")
  else()
    set(JOULE_HOST_TARGET_TEXT "kokkos (this Kokkos has no host architecture: generic)")
  endif()
elseif(_target STREQUAL "generic")
  set(JOULE_HOST_TARGET_TEXT "generic (no target flag)")
elseif(_target MATCHES "^-")
  separate_arguments(JOULE_HOST_TARGET_FLAGS UNIX_COMMAND "${_target}")
  joule_check_flags(_ok ${JOULE_HOST_TARGET_FLAGS})
  if(NOT _ok)
    message(FATAL_ERROR "JOULE_HOST_TARGET='${_target}': the compiler ${CMAKE_CXX_COMPILER} (${CMAKE_CXX_COMPILER_ID} "
                        "${CMAKE_CXX_COMPILER_VERSION}) refuses ${JOULE_REFUSED_FLAGS}")
  endif()
  string(REPLACE ";" " " _text "${JOULE_HOST_TARGET_FLAGS}")
  set(JOULE_HOST_TARGET_TEXT "${_text}")
else()
  message(FATAL_ERROR "JOULE_HOST_TARGET='${_target}': allowed are native, grace, kokkos, generic, empty (the "
                      "default), or compiler flags starting with '-' (e.g. \"-mcpu=neoverse-v2\")")
endif()

# Grace without SVE would be a Grace build in name only: check that the flags turn SVE on.
if(_target STREQUAL "grace" AND JOULE_HOST_TARGET_FLAGS)
  string(REPLACE ";" " " CMAKE_REQUIRED_FLAGS "${JOULE_HOST_TARGET_FLAGS}")
  check_cxx_source_compiles("#ifndef __ARM_FEATURE_SVE\n#error no SVE\n#endif\nint main() { return 0; }"
                            JOULE_HOST_TARGET_HAS_SVE)
  unset(CMAKE_REQUIRED_FLAGS)
  if(NOT JOULE_HOST_TARGET_HAS_SVE)
    message(FATAL_ERROR "JOULE_HOST_TARGET=grace: ${JOULE_HOST_TARGET_FLAGS} does not turn on SVE "
                        "(__ARM_FEATURE_SVE) with ${CMAKE_CXX_COMPILER}")
  endif()
endif()
message(STATUS "joule: host target ${JOULE_HOST_TARGET_TEXT}")
# The flags the host code gets, for `make vec-report` (apps/scripts/vec_report.sh): joule's, or
# those Kokkos_ARCH_ARMV9_GRACE adds (Kokkos 4.4 to 5.x: cmake/kokkos_arch.cmake).
set(_vec_flags "${JOULE_HOST_TARGET_FLAGS}")
if(_target MATCHES "^(grace|kokkos)$" AND _joule_kokkos_host_arch STREQUAL "ARMV9_GRACE")
  set(_vec_flags -mcpu=neoverse-n2 -msve-vector-bits=128)
endif()
string(REPLACE ";" " " _vec_flags "${_vec_flags}")
file(WRITE "${CMAKE_BINARY_DIR}/joule_host_target_flags.txt" "${_vec_flags}\n")
