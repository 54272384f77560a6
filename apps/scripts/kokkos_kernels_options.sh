# shellcheck shell=bash
# Kokkos-Kernels' CMake options that every joule build of it takes (install-deps.sh for the host and
# the device bundle, aarch64_cross.sh for Grace): no explicit template instantiation (joule
# instantiates only the few kernels it calls, which keeps the build to minutes), no tests, no
# examples. Sourced; defines kokkos_kernels_common_options.
kokkos_kernels_common_options=(
  -DKokkosKernels_INST_DOUBLE=OFF -DKokkosKernels_INST_FLOAT=OFF
  -DKokkosKernels_INST_COMPLEX_DOUBLE=OFF -DKokkosKernels_INST_COMPLEX_FLOAT=OFF
  -DKokkosKernels_INST_ORDINAL_INT=OFF -DKokkosKernels_INST_ORDINAL_INT64_T=OFF
  -DKokkosKernels_INST_OFFSET_INT=OFF -DKokkosKernels_INST_OFFSET_SIZE_T=OFF
  -DKokkosKernels_INST_LAYOUTLEFT=OFF -DKokkosKernels_INST_LAYOUTRIGHT=OFF
  -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF
)
