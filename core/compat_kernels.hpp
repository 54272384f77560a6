#pragma once
// The one place where Kokkos-Kernels version differences live (Kokkos core: compat.hpp).
#include "core/compat.hpp"

#include <KokkosBlas3_gemm.hpp>
#include <KokkosKernels_config.h>

namespace joule::compat {

// KokkosBlas::gemm takes an execution space instance from Kokkos-Kernels 3.7 on (the version
// macro itself only exists from then). Before, gemm runs on the default instance of the views'
// space: fence the caller's instance first so the ordering is the same.
template <class ExecutionSpace, class A, class B, class C>
void gemm(ExecutionSpace const& space, char const* trans_a, char const* trans_b,
          typename C::const_value_type alpha, A const& a, B const& b,
          typename C::const_value_type beta, C const& c) {
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 30700
  KokkosBlas::gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
#else
  space.fence();
  KokkosBlas::gemm(trans_a, trans_b, alpha, a, b, beta, c);
  typename C::execution_space().fence();
#endif
}

}  // namespace joule::compat
