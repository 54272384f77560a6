#pragma once
// The one place where Kokkos-Kernels version differences live (Kokkos core: compat.hpp), and where
// joule's GEMMs pick their path: Kokkos-Kernels, or the vendor BLAS called directly where
// Kokkos-Kernels is absent (JOULE_GEMM_DIRECT_BLAS, set by CMake's JOULE_GEMM; blas_gemm.hpp).
#include "core/compat.hpp"
#include "core/detail/launch_shape.hpp"

#if defined(JOULE_GEMM_DIRECT_BLAS)
#include "core/detail/blas_gemm.hpp"
#else
#include <KokkosBlas3_gemm.hpp>
#include <KokkosKernels_config.h>

#if defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
#include <cublas_v2.h>
#if __has_include(<KokkosKernels_tpl_handles_decl.hpp>)
#include <KokkosKernels_tpl_handles_decl.hpp>  // Kokkos-Kernels 4.x: the cuBLAS handle singleton
#else
#include <KokkosBlas_tpl_spec.hpp>
#endif
#endif
#endif

#include <stdexcept>
#include <string>
#include <type_traits>

#ifndef JOULE_HOST_BLAS_NAME  // CMake names it (joule_blas_name in cmake/JouleDependencies.cmake)
#define JOULE_HOST_BLAS_NAME "unnamed"
#endif

namespace joule::compat {

// C = alpha op(A) op(B) + beta C, row-major; trans_a, trans_b: "N" or "T".
// KokkosBlas::gemm takes an execution space instance from Kokkos-Kernels 3.7 on (the version
// macro itself only exists from then). Before, gemm runs on the default instance of the views'
// space: fence the caller's instance first so the ordering is the same.
template <class ExecutionSpace, class A, class B, class C>
void gemm(ExecutionSpace const& space, char const* trans_a, char const* trans_b,
          typename C::const_value_type alpha, A const& a, B const& b,
          typename C::const_value_type beta, C const& c) {
  {  // cuBLAS's one call on CUDA (fp32 SIMT, or TF32 tensor cores: the roofline's setting)
    bool const ta = trans_a[0] == 'T';
    long const m = long(c.extent(0)), n = long(c.extent(1)), k = long(ta ? a.extent(0) : a.extent(1));
    int const bytes = sizeof(typename C::value_type);
    ::joule::detail::note_library_launch("gemm", ::joule::detail::gemm_work(m, n, k, 1, bytes, bytes, bytes, beta != 0, false));
  }
#if defined(JOULE_GEMM_DIRECT_BLAS)
  ::joule::detail::blas_gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
#elif defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 30700
  KokkosBlas::gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
#else
  space.fence();
  KokkosBlas::gemm(trans_a, trans_b, alpha, a, b, beta, c);
  typename C::execution_space().fence();
#endif
}

// TF32 tensor cores for the fp32 GEMMs that go to cuBLAS: the math mode of the cuBLAS handle they
// use (one per process: Kokkos-Kernels', or joule's own on the direct path). Returns false where no
// GEMM goes to cuBLAS (nothing changes).
inline bool set_tf32_gemms(bool on) {
#if defined(KOKKOS_ENABLE_CUDA) && (defined(JOULE_GEMM_DIRECT_BLAS) || defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS))
  cublasMath_t const mode = on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
#endif
#if defined(JOULE_GEMM_DIRECT_BLAS) && defined(KOKKOS_ENABLE_CUDA)
  ::joule::detail::check_cublas(cublasSetMathMode(::joule::detail::cublas_handle(), mode), "cublasSetMathMode");
  return true;
#elif defined(KOKKOS_ENABLE_CUDA) && defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
  cublasStatus_t const s = cublasSetMathMode(KokkosBlas::Impl::CudaBlasSingleton::singleton().handle, mode);
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("joule: cublasSetMathMode failed (cuBLAS status " + std::to_string(int(s)) + ")");
  return true;
#else
  (void)on;
  return false;
#endif
}

// Where an fp32 GEMM on ExecutionSpace goes, in words (joule info, the run log).
template <class ExecutionSpace>
std::string fp32_gemm_path() {
#if defined(JOULE_GEMM_DIRECT_BLAS)
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (is_cuda_space<ExecutionSpace>())
    return "direct BLAS: cublasSgemm, no Kokkos-Kernels (fp32; TF32 with train.tf32)";
#endif
  return "direct BLAS: cblas_sgemm on the host BLAS (" JOULE_HOST_BLAS_NAME "), no Kokkos-Kernels";
#else
#if defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS) && defined(KOKKOS_ENABLE_CUDA)
  if constexpr (is_cuda_space<ExecutionSpace>()) return "Kokkos-Kernels gemm on cuBLAS (fp32; TF32 with train.tf32)";
#endif
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  if constexpr (Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible)
    return "Kokkos-Kernels gemm on the host BLAS (" JOULE_HOST_BLAS_NAME ")";
#endif
  return "Kokkos-Kernels' own gemm kernels (fp32)";
#endif
}

}  // namespace joule::compat
