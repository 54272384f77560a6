# Finds what joule builds on. Kokkos: an existing target (joule added as a subproject), else
# find_package (Kokkos_ROOT, e.g. the cache prefix of apps/scripts/install-deps.sh or a user's
# CUDA build on a GH200 node).
if(NOT TARGET Kokkos::kokkos)
  find_package(Kokkos 3.4 REQUIRED)
endif()
if(NOT TARGET Kokkos::kokkoskernels)
  # Kokkos-Kernels is normally installed next to Kokkos; KokkosKernels_ROOT overrides.
  find_package(KokkosKernels REQUIRED HINTS ${Kokkos_ROOT} $ENV{Kokkos_ROOT} ${Kokkos_DIR}/../../..)
  # Trilinos' Kokkos-Kernels (Debian's libtrilinos-kokkos-kernels-dev) exports its library under
  # Trilinos' names: KokkosKernels::all_libs, headers in include/trilinos. One name for joule.
  if(NOT TARGET Kokkos::kokkoskernels)
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
get_target_property(_kk_includes Kokkos::kokkoskernels INTERFACE_INCLUDE_DIRECTORIES)
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
      elseif(_depth EQUAL 1 AND _line MATCHES "^#define KOKKOSKERNELS_ENABLE_TPL_(BLAS|CUBLAS)([ ]|$)")
        list(APPEND JOULE_KK_TPLS ${CMAKE_MATCH_1})
      endif()
    endforeach()
    break()
  endif()
endforeach()
list(REMOVE_DUPLICATES JOULE_KK_TPLS)
message(STATUS "joule: Kokkos-Kernels BLAS TPLs: ${JOULE_KK_TPLS}")

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
  if(NOT "CUBLAS" IN_LIST JOULE_KK_TPLS)
    message(FATAL_ERROR "JOULE_GH200: Kokkos-Kernels at ${KokkosKernels_DIR} was built without the cuBLAS "
                        "TPL (KokkosKernels_config.h has no KOKKOSKERNELS_ENABLE_TPL_CUBLAS); rebuild it with "
                        "-DKokkosKernels_ENABLE_TPL_CUBLAS=ON")
  endif()
endif()

find_package(OpenMP)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
