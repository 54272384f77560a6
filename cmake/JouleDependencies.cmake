# Finds what joule builds on. Kokkos: an existing target (joule added as a subproject), else
# find_package (Kokkos_ROOT, e.g. the cache prefix of apps/scripts/install-deps.sh or a user's
# CUDA build on a GH200 node).
if(NOT TARGET Kokkos::kokkos)
  find_package(Kokkos 3.4 REQUIRED)
endif()
if(NOT TARGET Kokkos::kokkoskernels)
  # Kokkos-Kernels is normally installed next to Kokkos; KokkosKernels_ROOT overrides.
  find_package(KokkosKernels REQUIRED HINTS ${Kokkos_ROOT} $ENV{Kokkos_ROOT} ${Kokkos_DIR}/../../..)
endif()
message(STATUS "joule: Kokkos ${Kokkos_VERSION}, devices: ${Kokkos_DEVICES}")

# joule's kernels are lambdas; a CUDA build needs them enabled in Kokkos.
if(Kokkos_ENABLE_CUDA)
  kokkos_check(OPTIONS CUDA_LAMBDA)
endif()

find_package(OpenMP)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
