# Cross-compiling joule (and Kokkos, Kokkos-Kernels) for 64-bit Arm Linux, Grace's cores, with
# Debian's cross compiler (g++-aarch64-linux-gnu, GCC 12) against a sysroot of Debian arm64
# packages; test executables run under qemu-user. apps/scripts/aarch64_cross.sh makes the sysroot
# and passes all of this (docs/testing.md, "aarch64 under emulation"); by hand:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
#     -DJOULE_AARCH64_SYSROOT=<sysroot> -DJOULE_AARCH64_PREFIXES=<Kokkos prefix> -DKokkos_ROOT=<same> \
#     -DJOULE_WITH_MPI=OFF
# Settings (cache variables, or the environment variables of the same names):
#   JOULE_AARCH64_SYSROOT    the sysroot (required): arm64 libc, libstdc++, libgomp, HDF5, OpenBLAS,
#                            zlib and the header-only libraries, unpacked from Debian's packages
#   JOULE_AARCH64_PREFIXES   install prefixes outside the sysroot that hold aarch64 builds to find
#                            (the cross-built Kokkos + Kokkos-Kernels), a ;-list
#   JOULE_AARCH64_CPU_FLAGS  the target flags (default: Neoverse V2, Grace's core, below)
#   JOULE_AARCH64_FP_CONTRACT  fast (default, GCC's) or off: see below
#   JOULE_AARCH64_QEMU_CPU   qemu's CPU model (default max,sve-default-vector-length=16, below)
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

# try_compile projects re-read this file without the main project's cache: hand the settings on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES JOULE_AARCH64_SYSROOT JOULE_AARCH64_PREFIXES
     JOULE_AARCH64_CPU_FLAGS JOULE_AARCH64_FP_CONTRACT JOULE_AARCH64_QEMU_CPU)
foreach(_var JOULE_AARCH64_SYSROOT JOULE_AARCH64_PREFIXES JOULE_AARCH64_CPU_FLAGS
             JOULE_AARCH64_FP_CONTRACT JOULE_AARCH64_QEMU_CPU)
  if(NOT DEFINED ${_var} AND DEFINED ENV{${_var}})
    set(${_var} "$ENV{${_var}}")
  endif()
endforeach()
if(NOT JOULE_AARCH64_SYSROOT OR NOT EXISTS "${JOULE_AARCH64_SYSROOT}/usr/include/stdio.h")
  message(FATAL_ERROR "aarch64 toolchain: JOULE_AARCH64_SYSROOT='${JOULE_AARCH64_SYSROOT}' is not an arm64 "
                      "sysroot (no usr/include/stdio.h); make one with: bash apps/scripts/aarch64_cross.sh sysroot")
endif()

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_SYSROOT "${JOULE_AARCH64_SYSROOT}")
# Libraries, headers and packages come from the sysroot (or the prefixes built for aarch64: a
# search path already inside one of these roots is not re-rooted), programs from this machine.
set(CMAKE_FIND_ROOT_PATH "${JOULE_AARCH64_SYSROOT}" ${JOULE_AARCH64_PREFIXES})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# FindHDF5 asks the h5cc it finds for its flags; the one on PATH is this machine's (x86-64 paths
# to its own HDF5). With no wrapper FindHDF5 searches the sysroot for libhdf5 and hdf5.h itself
# (Debian's serial HDF5, in hdf5/serial).
set(HDF5_C_COMPILER_EXECUTABLE "/bin/false" CACHE FILEPATH "no HDF5 wrapper when cross-compiling")

# The target: Grace's Neoverse V2 (Armv9.0-A, SVE2 at 128 bits, BF16, I8MM). GCC 12 knows the core
# as `demeter`, its name before GCC 13 renamed it `neoverse-v2`; the same instructions as
# -mcpu=neoverse-n2 (GCC 12 defines the same feature macros for both), with V2's tuning. The first
# name the compiler accepts is taken; Kokkos gets no Kokkos_ARCH (its Arm options in 3.4 would add
# an older -march after this flag).
if(NOT DEFINED JOULE_AARCH64_CPU_FLAGS)
  set(JOULE_AARCH64_CPU_FLAGS "")
  foreach(_cpu neoverse-v2 demeter neoverse-n2)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -mcpu=${_cpu} -E -x c /dev/null
                    RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
    if(_rc EQUAL 0)
      set(JOULE_AARCH64_CPU_FLAGS "-mcpu=${_cpu}")
      break()
    endif()
  endforeach()
  if(JOULE_AARCH64_CPU_FLAGS STREQUAL "")
    set(JOULE_AARCH64_CPU_FLAGS "-march=armv8.2-a")
  endif()
endif()
# Floating-point contraction: GCC fuses a * b + c into an FMA by default in C++ (-ffp-contract=fast,
# also with -std=c++17), and every Armv8 core has FMA, so on aarch64 it does wherever it can, where
# an x86-64 build without -mfma cannot. joule's code does not depend on it (the host AdamW loop is
# compiled with -ffp-contract=off on every target, core/CMakeLists.txt); `off` here compiles
# everything without contraction, to compare results with an x86-64 build bit for bit.
if(NOT DEFINED JOULE_AARCH64_FP_CONTRACT)
  set(JOULE_AARCH64_FP_CONTRACT fast)
endif()
set(_flags "${JOULE_AARCH64_CPU_FLAGS}")
if(JOULE_AARCH64_FP_CONTRACT STREQUAL "off")
  string(APPEND _flags " -ffp-contract=off")
elseif(NOT JOULE_AARCH64_FP_CONTRACT STREQUAL "fast")
  message(FATAL_ERROR "aarch64 toolchain: JOULE_AARCH64_FP_CONTRACT=${JOULE_AARCH64_FP_CONTRACT}: fast or off")
endif()
set(CMAKE_C_FLAGS_INIT "${_flags}")
set(CMAKE_CXX_FLAGS_INIT "${_flags}")

# Test executables run under qemu-user (ctest prefixes add_test commands of built targets with
# this; joule's test discovery, cmake/JouleCatchTests.cmake, lists and runs the Catch2 test cases
# through it too), started by the sysroot's dynamic loader, which loads the libraries from the
# sysroot (--library-path; the executables' run paths point there too). Not qemu's -L <sysroot>:
# with it every absolute path the program opens is looked up in the sysroot first, "/" included, so
# a walk from the root folder by descriptor (openat, as joule's writers check an output's folders,
# core/io/commit.cpp) stays inside the sysroot and finds no /tmp. The CPU: qemu's `max` (SVE2 and
# the rest of Armv9) with SVE vectors of 128 bits, Grace's length (qemu-user's default is 512).
if(NOT DEFINED JOULE_AARCH64_QEMU_CPU)
  set(JOULE_AARCH64_QEMU_CPU "max,sve-default-vector-length=16")
endif()
find_program(JOULE_QEMU_AARCH64 qemu-aarch64 NO_CMAKE_FIND_ROOT_PATH)
if(JOULE_QEMU_AARCH64)
  set(_s "${JOULE_AARCH64_SYSROOT}")
  set(_libs "${_s}/lib/aarch64-linux-gnu:${_s}/usr/lib/aarch64-linux-gnu")
  set(CMAKE_CROSSCOMPILING_EMULATOR
      "${JOULE_QEMU_AARCH64};-cpu;${JOULE_AARCH64_QEMU_CPU};${_s}/lib/ld-linux-aarch64.so.1;--library-path;${_libs}")
else()
  message(WARNING "aarch64 toolchain: no qemu-aarch64 on PATH (Debian: apt-get install qemu-user): "
                  "the build works, its tests cannot run here")
endif()
