// The default types Kokkos-Kernels' own perf tests are written against. Kokkos-Kernels derives them
// from its explicit instantiations (KOKKOSKERNELS_INST_*), and joule's Kokkos-Kernels is built
// with none (apps/scripts/install-deps.sh: joule instantiates the few kernels it calls), so its
// header refuses to compile; this one, found first on the include path of those perf tests only,
// names what a default build would (int ordinals and offsets, LayoutLeft, double).
#ifndef KOKKOSKERNELS_DEFAULT_TYPES_H
#define KOKKOSKERNELS_DEFAULT_TYPES_H
#include <Kokkos_Core.hpp>

typedef int default_lno_t;
typedef int default_size_type;
typedef Kokkos::LayoutLeft default_layout;
typedef double default_scalar;
typedef Kokkos::DefaultExecutionSpace default_device;

#endif
