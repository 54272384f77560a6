#pragma once
// joule's fp32 and fp64 GEMMs where Kokkos-Kernels is absent (JOULE_GEMM=blas, or auto without
// it): the vendor BLAS called directly, cblas on the host and cuBLAS on CUDA, the same call that
// Kokkos-Kernels' BLAS layer makes, so that results are bitwise those of the Kokkos-Kernels path on
// the same library (tests/test_blas_gemm.cpp).
//
// joule's matrices are row-major (LayoutRight) and BLAS is column-major: a row-major X [r, c] is the
// column-major X^T [c, r] with leading dimension X.stride(0). C = op(A) op(B) is then computed as
// C^T = op(B)^T op(A)^T: B goes first and m and n swap, as in Kokkos-Kernels' LayoutRight case
// (KokkosBlas3_gemm_tpl_spec_decl.hpp).
#include "core/compat.hpp"
#include "core/tensor.hpp"

#include <cblas.h>
#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>
#endif

#include <algorithm>
#include <string>
#include <type_traits>

namespace joule::detail {

#if defined(KOKKOS_ENABLE_CUDA)
// The process's cuBLAS handle for these GEMMs, made on first use (core/detail/blas_gemm.cpp); its
// math mode is train.tf32's (compat::set_tf32_gemms).
cublasHandle_t cublas_handle();
void check_cublas(cublasStatus_t status, char const* what);
#endif

inline bool blas_transposed(char const* trans) { return trans[0] == 'T' || trans[0] == 't'; }


// C [m, n] = alpha op(A) op(B) + beta C; trans_a, trans_b: "N" or "T". float or double, row-major.
template <class ExecutionSpace, class A, class B, class C>
void blas_gemm(ExecutionSpace const& space, char const* trans_a, char const* trans_b,
               typename C::const_value_type alpha, A const& a, B const& b, typename C::const_value_type beta,
               C const& c) {
  using T = typename C::non_const_value_type;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "blas_gemm: float or double matrices");
  static_assert(std::is_same_v<typename A::non_const_value_type, T> && std::is_same_v<typename B::non_const_value_type, T>,
                "blas_gemm: A, B and C of one type");
  static_assert(std::is_same_v<typename A::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename B::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename C::array_layout, Kokkos::LayoutRight>,
                "blas_gemm: row-major (LayoutRight) matrices");
  bool const ta = blas_transposed(trans_a), tb = blas_transposed(trans_b);
  int const m = int(c.extent(0)), n = int(c.extent(1)), k = int(ta ? a.extent(0) : a.extent(1));
  require(int(ta ? a.extent(1) : a.extent(0)) == m && int(tb ? b.extent(1) : b.extent(0)) == k &&
              int(tb ? b.extent(0) : b.extent(1)) == n,
          "gemm", std::string("op") + trans_a[0] + "(A) of " + shape_of(a) + " times op" + trans_b[0] + "(B) of " +
                      shape_of(b) + " does not give C of " + shape_of(c));
  if (m == 0 || n == 0) return;
  // Leading dimensions as Kokkos-Kernels gives them: the row stride, at least 1.
  int const lda = std::max(1, int(a.stride(0))), ldb = std::max(1, int(b.stride(0))),
            ldc = std::max(1, int(c.stride(0)));
  if constexpr (::joule::compat::is_cuda_space<ExecutionSpace>()) {
#if defined(KOKKOS_ENABLE_CUDA)
    cublasHandle_t const handle = cublas_handle();
    check_cublas(cublasSetStream(handle, space.cuda_stream()), "cublasSetStream");
    cublasOperation_t const op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if constexpr (std::is_same_v<T, float>)
      check_cublas(cublasSgemm(handle, op_b, op_a, n, m, k, &alpha, b.data(), ldb, a.data(), lda, &beta, c.data(), ldc),
                   "cublasSgemm");
    else
      check_cublas(cublasDgemm(handle, op_b, op_a, n, m, k, &alpha, b.data(), ldb, a.data(), lda, &beta, c.data(), ldc),
                   "cublasDgemm");
#endif
  } else if constexpr (Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible) {
    space.fence();  // the host BLAS runs on this thread: what the space has queued comes first
    CBLAS_TRANSPOSE const op_b = tb ? CblasTrans : CblasNoTrans, op_a = ta ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasColMajor, op_b, op_a, n, m, k, alpha, b.data(), ldb, a.data(), lda, beta, c.data(), ldc);
    else
      cblas_dgemm(CblasColMajor, op_b, op_a, n, m, k, alpha, b.data(), ldb, a.data(), lda, beta, c.data(), ldc);
  } else {
    static_assert(sizeof(ExecutionSpace) == 0, "blas_gemm: a host execution space, or Kokkos::Cuda");
  }
}

}  // namespace joule::detail
