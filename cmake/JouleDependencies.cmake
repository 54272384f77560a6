# Finds what joule builds on. Kokkos: an existing target (joule added as a subproject), else
# find_package (Kokkos_ROOT, e.g. the cache prefix of apps/scripts/install-deps.sh or a user's
# CUDA build on a GH200 node).
if(NOT TARGET Kokkos::kokkos)
  find_package(Kokkos 3.4 REQUIRED)
endif()
# What joule's fp32 GEMMs call (core/compat_kernels.hpp): Kokkos-Kernels, with its BLAS TPLs
# (cuBLAS, OpenBLAS) under it, or the same vendor BLAS called directly (core/detail/blas_gemm.hpp):
# many Kokkos installs come without Kokkos-Kernels, Debian's libkokkos-dev 5.2 among them.
set(JOULE_GEMM auto CACHE STRING
    "What joule's fp32 GEMMs call: auto (Kokkos-Kernels where found, else the BLAS directly), kokkos-kernels, blas")
set_property(CACHE JOULE_GEMM PROPERTY STRINGS auto kokkos-kernels blas)
if(NOT JOULE_GEMM MATCHES "^(auto|kokkos-kernels|blas)$")
  message(FATAL_ERROR "JOULE_GEMM is '${JOULE_GEMM}'; allowed: auto, kokkos-kernels, blas")
endif()
if(NOT TARGET Kokkos::kokkoskernels AND NOT JOULE_GEMM STREQUAL "blas")
  # Kokkos-Kernels is normally installed next to Kokkos; KokkosKernels_ROOT overrides.
  if(JOULE_GEMM STREQUAL "auto")
    find_package(KokkosKernels QUIET HINTS ${Kokkos_ROOT} $ENV{Kokkos_ROOT} ${Kokkos_DIR}/../../..)
  else()
    find_package(KokkosKernels REQUIRED HINTS ${Kokkos_ROOT} $ENV{Kokkos_ROOT} ${Kokkos_DIR}/../../..)
  endif()
  # Trilinos' Kokkos-Kernels (Debian's libtrilinos-kokkos-kernels-dev) exports its library under
  # Trilinos' names: KokkosKernels::all_libs, headers in include/trilinos. One name for joule.
  if(KokkosKernels_FOUND AND NOT TARGET Kokkos::kokkoskernels)
    foreach(_kk_target KokkosKernels::kokkoskernels KokkosKernels::all_libs KokkosKernels::trilinos_kokkoskernels)
      if(TARGET ${_kk_target})
        add_library(Kokkos::kokkoskernels INTERFACE IMPORTED)
        target_link_libraries(Kokkos::kokkoskernels INTERFACE ${_kk_target})
        get_target_property(_kk_target_includes ${_kk_target} INTERFACE_INCLUDE_DIRECTORIES)
        if(_kk_target_includes)
          set_target_properties(Kokkos::kokkoskernels PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_kk_target_includes}")
        endif()
        message(STATUS "joule: Kokkos-Kernels as ${_kk_target} (${KokkosKernels_DIR})")
        break()
      endif()
    endforeach()
    if(NOT TARGET Kokkos::kokkoskernels)
      message(FATAL_ERROR "Kokkos-Kernels at ${KokkosKernels_DIR} exports none of the targets joule knows "
                          "(Kokkos::kokkoskernels, KokkosKernels::kokkoskernels, KokkosKernels::all_libs, "
                          "KokkosKernels::trilinos_kokkoskernels)")
    endif()
  endif()
endif()
if(TARGET Kokkos::kokkoskernels AND NOT JOULE_GEMM STREQUAL "blas")
  set(JOULE_GEMM_PATH kokkos-kernels)
else()
  set(JOULE_GEMM_PATH blas)
endif()

# The host BLAS's C interface (cblas.h and its library; Debian: libopenblas-dev): the direct path's
# host GEMMs, and the test that holds it bitwise to Kokkos-Kernels' path where both are built.
# A host BLAS library's name for `joule info` and the run log, from its file (links resolved:
# Debian's libblas.so.3 is an alternative that may be OpenBLAS): .../libopenblas.so -> OpenBLAS.
function(joule_blas_name library out)
  set(_path "${library}")
  if(EXISTS "${library}")
    file(REAL_PATH "${library}" _path)
  endif()
  string(TOLOWER "${_path}" _lower)
  foreach(_known IN ITEMS OpenBLAS MKL BLIS ArmPL ATLAS Accelerate)
    string(TOLOWER "${_known}" _key)
    if(_lower MATCHES "${_key}")
      set(${out} "${_known}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  get_filename_component(_name "${_path}" NAME_WE)
  string(REGEX REPLACE "^lib" "" _name "${_name}")
  set(${out} "${_name}" PARENT_SCOPE)
endfunction()

find_path(JOULE_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-openmp
          DOC "folder of the host BLAS's cblas.h")
find_library(JOULE_CBLAS_LIBRARY NAMES openblas cblas blas DOC "the host BLAS library with the cblas_* functions")
if(JOULE_CBLAS_INCLUDE_DIR AND JOULE_CBLAS_LIBRARY)
  add_library(joule::cblas INTERFACE IMPORTED)
  set_target_properties(joule::cblas PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${JOULE_CBLAS_INCLUDE_DIR}"
                                                INTERFACE_LINK_LIBRARIES "${JOULE_CBLAS_LIBRARY}")
  if(JOULE_GEMM_PATH STREQUAL "blas")
    joule_blas_name("${JOULE_CBLAS_LIBRARY}" JOULE_HOST_BLAS_NAME)
  endif()
elseif(JOULE_GEMM_PATH STREQUAL "blas")
  message(FATAL_ERROR "joule's GEMMs call the BLAS directly (JOULE_GEMM=${JOULE_GEMM}, Kokkos-Kernels "
                      "${KokkosKernels_DIR}), and no cblas was found: cblas.h ${JOULE_CBLAS_INCLUDE_DIR}, "
                      "library ${JOULE_CBLAS_LIBRARY}. Install OpenBLAS (Debian: libopenblas-dev), or name "
                      "them with -DJOULE_CBLAS_INCLUDE_DIR=... -DJOULE_CBLAS_LIBRARY=..., or give Kokkos-Kernels "
                      "(KokkosKernels_ROOT)")
endif()
if(JOULE_GEMM_PATH STREQUAL "blas")
  message(STATUS "joule: GEMMs call the BLAS directly (no Kokkos-Kernels): ${JOULE_CBLAS_LIBRARY}")
endif()
message(STATUS "joule: Kokkos ${Kokkos_VERSION}, devices: ${Kokkos_DEVICES}")

# joule's kernels are lambdas; a CUDA build needs them enabled in Kokkos (always on from 4.0).
if(Kokkos_ENABLE_CUDA)
  if(Kokkos_VERSION VERSION_LESS 4.0)
    kokkos_check(OPTIONS CUDA_LAMBDA)
  endif()
  # fmt 9 turns its C++14 constexpr off under nvcc (__NVCC__) but keeps its C++20 constexpr on,
  # so in C++20 (Kokkos 5) constexpr functions call non-constexpr ones and the host compiler
  # rejects them. The host compilers nvcc uses support relaxed constexpr: turn it back on.
  add_compile_definitions(FMT_USE_CONSTEXPR=1)
endif()

# What the GEMMs run on: Kokkos-Kernels' BLAS TPLs, read from its configuration header. Only
# unconditional defines count (depth 1: inside the include guard, outside any other #if): the
# header also defines TPL_BLAS inside "#if defined(...MKL) || defined(...ARMPL)".
set(_kk_includes "")
if(JOULE_GEMM_PATH STREQUAL "kokkos-kernels")
  get_target_property(_kk_includes Kokkos::kokkoskernels INTERFACE_INCLUDE_DIRECTORIES)
endif()
set(JOULE_KK_TPLS "")
foreach(_dir IN LISTS _kk_includes)
  if(EXISTS "${_dir}/KokkosKernels_config.h")
    file(STRINGS "${_dir}/KokkosKernels_config.h" _lines REGEX "^#[ ]*(if|endif|define KOKKOSKERNELS_ENABLE_TPL_)")
    set(_depth 0)
    foreach(_line IN LISTS _lines)
      if(_line MATCHES "^#[ ]*if")
        math(EXPR _depth "${_depth} + 1")
      elseif(_line MATCHES "^#[ ]*endif")
        math(EXPR _depth "${_depth} - 1")
      elseif(_depth EQUAL 1 AND _line MATCHES "^#define KOKKOSKERNELS_ENABLE_TPL_(BLAS|MKL|ARMPL|CUBLAS)([ ]|$)")
        list(APPEND JOULE_KK_TPLS ${CMAKE_MATCH_1})
      endif()
    endforeach()
    break()
  endif()
endforeach()
list(REMOVE_DUPLICATES JOULE_KK_TPLS)
# Kokkos-Kernels' version for `joule info` and `joule --version`: its header's (4.x), else its
# CMake package's.
set(JOULE_KOKKOS_KERNELS_VERSION "")
foreach(_dir IN LISTS _kk_includes)
  if(EXISTS "${_dir}/KokkosKernels_config.h")
    file(STRINGS "${_dir}/KokkosKernels_config.h" _lines REGEX "^#define KOKKOSKERNELS_VERSION [0-9]+")
    if(_lines MATCHES "KOKKOSKERNELS_VERSION ([0-9]+)")
      math(EXPR _major "${CMAKE_MATCH_1} / 10000")
      math(EXPR _minor "${CMAKE_MATCH_1} / 100 % 100")
      math(EXPR _patch "${CMAKE_MATCH_1} % 100")
      set(JOULE_KOKKOS_KERNELS_VERSION "${_major}.${_minor}.${_patch}")
    endif()
    break()
  endif()
endforeach()
if(NOT JOULE_KOKKOS_KERNELS_VERSION AND KokkosKernels_VERSION)
  set(JOULE_KOKKOS_KERNELS_VERSION "${KokkosKernels_VERSION}")
endif()
if(JOULE_GEMM_PATH STREQUAL "kokkos-kernels")
  # The host BLAS under Kokkos-Kernels' gemm: MKL or ArmPL by its TPL, else the library its BLAS
  # target links (Kokkos::BLAS in 3.x, KokkosKernels::BLAS in 4.x).
  set(JOULE_HOST_BLAS_NAME "")
  if("MKL" IN_LIST JOULE_KK_TPLS)
    set(JOULE_HOST_BLAS_NAME MKL)
  elseif("ARMPL" IN_LIST JOULE_KK_TPLS)
    set(JOULE_HOST_BLAS_NAME ArmPL)
  elseif("BLAS" IN_LIST JOULE_KK_TPLS)
    foreach(_target IN ITEMS KokkosKernels::BLAS Kokkos::BLAS)
      if(TARGET ${_target} AND NOT JOULE_HOST_BLAS_NAME)
        get_target_property(_libs ${_target} INTERFACE_LINK_LIBRARIES)
        foreach(_lib IN LISTS _libs)
          if(_lib AND NOT _lib MATCHES "::|^-" AND NOT JOULE_HOST_BLAS_NAME)
            joule_blas_name("${_lib}" JOULE_HOST_BLAS_NAME)
          endif()
        endforeach()
      endif()
    endforeach()
    if(NOT JOULE_HOST_BLAS_NAME)
      set(JOULE_HOST_BLAS_NAME "the BLAS Kokkos-Kernels was built with")
    endif()
  endif()
  message(STATUS "joule: Kokkos-Kernels BLAS TPLs: ${JOULE_KK_TPLS} (host BLAS: ${JOULE_HOST_BLAS_NAME})")
endif()

# The GH200 build (CMakePresets.json "gh200"): CUDA for Hopper, OpenMP for the Grace cores,
# cuBLAS under the GEMMs. Stop at configure time, saying what is missing, rather than build
# something slower or broken.
option(JOULE_GH200 "Require a Grace Hopper configuration of Kokkos (CUDA + OpenMP, Hopper, cuBLAS)" OFF)
if(JOULE_GH200)
  if(Kokkos_VERSION VERSION_LESS 4.0)
    message(FATAL_ERROR "JOULE_GH200: Kokkos ${Kokkos_VERSION} found at ${Kokkos_DIR}; a GH200 build "
                        "needs Kokkos 4.x or 5.x built with -DKokkos_ENABLE_CUDA=ON "
                        "-DKokkos_ENABLE_OPENMP=ON -DKokkos_ARCH_HOPPER90=ON (pass its prefix as Kokkos_ROOT)")
  endif()
  kokkos_check(DEVICES CUDA OPENMP)
  kokkos_check(ARCH HOPPER90)
  if(JOULE_GEMM_PATH STREQUAL "kokkos-kernels" AND NOT "CUBLAS" IN_LIST JOULE_KK_TPLS)
    message(FATAL_ERROR "JOULE_GH200: Kokkos-Kernels at ${KokkosKernels_DIR} was built without the cuBLAS "
                        "TPL (KokkosKernels_config.h has no KOKKOSKERNELS_ENABLE_TPL_CUBLAS); rebuild it with "
                        "-DKokkosKernels_ENABLE_TPL_CUBLAS=ON")
  endif()
endif()

find_package(OpenMP)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
