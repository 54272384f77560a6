#pragma once
// bf16 GEMMs with fp32 accumulation: C = alpha op(A) op(B) + beta C for bf16 A and B, and C in fp32
// (a parameter gradient accumulating across micro-batches) or bf16 (an activation, rounded once
// from the fp32 result: what cuBLASLt's epilogue does).
//
//   CUDA    cuBLASLt on the instance's stream: Hopper's bf16 tensor cores (core/precision/cublaslt_gemm.cpp)
//   others  A and B widened to fp32 (exact) into the workspace, Kokkos-Kernels' fp32 gemm (OpenBLAS
//           on CPUs), the result rounded into a bf16 C: correct everywhere; the products and sums
//           are the fp32 GEMM's, so it differs from cuBLASLt only in summation order.
// (A CPU with bf16 instructions could take a oneDNN path; none of the machines here has them.)
#include "core/compat_kernels.hpp"
#include "core/detail/row_kernels.hpp"
#include "core/precision/bf16.hpp"
#include "core/precision/convert.hpp"
#include "core/precision/detail/cublaslt_gemm.hpp"
#include "core/precision/gemm_workspace.hpp"
#include "core/tensor.hpp"

#include <cstddef>
#include <string>
#include <type_traits>

namespace joule {

namespace detail {

// A [rows, cols] matrix over the front of `buffer` (not owning it: a View made from a pointer is
// unmanaged), of the model's own tensor type, so that its GEMMs are the instantiations fp32 layers use.
template <class T, class MemorySpace>
Tensor2<T, MemorySpace> matrix_in(Kokkos::View<T*, MemorySpace> const& buffer, std::size_t rows, std::size_t cols,
                                  char const* what) {
  require(buffer.extent(0) >= rows * cols, "gemm_bf16",
          std::string("workspace for ") + what + " holds " + std::to_string(buffer.extent(0)) + " floats, needs " +
              std::to_string(rows * cols));
  return Tensor2<T, MemorySpace>(buffer.data(), rows, cols);
}

}  // namespace detail

namespace detail {

// c[r, o] = values(o) for every row: a bias written into C before a GEMM adds onto it.
template <class ExecutionSpace, class C, class Values>
void fill_rows(ExecutionSpace const& space, char const* name, C const& c, Values const& values) {
  int const bytes = sizeof(typename C::value_type);
  for_each_element(space, name, streaming_work(double(c.extent(0)) * c.extent(1), 0, bytes, 0, bytes), int(c.extent(0)),
                   int(c.extent(1)), KOKKOS_LAMBDA(int r, int o) { c(r, o) = narrow<typename C::non_const_value_type>(widen(values(o))); });
}

// bias: nullptr, or n fp32 or bf16 values (BiasT) added to every row of C before its one rounding (then beta = 0).
template <class BiasT = float, class ExecutionSpace, class A, class B, class C, class MemorySpace>
void gemm_bf16_impl(ExecutionSpace const& space, char const* trans_a, char const* trans_b, float alpha, A const& a,
                    B const& b, float beta, C const& c, Bf16GemmWorkspace<MemorySpace> const& work,
                    BiasT const* bias) {
  static_assert(std::is_same_v<BiasT, float> || std::is_same_v<BiasT, bf16>, "gemm_bf16: an fp32 or bf16 bias");
  static_assert(std::is_same_v<typename A::non_const_value_type, bf16> &&
                    std::is_same_v<typename B::non_const_value_type, bf16>,
                "gemm_bf16: A and B are bf16");
  using CT = typename C::non_const_value_type;
  static_assert(std::is_same_v<CT, float> || std::is_same_v<CT, bf16>, "gemm_bf16: C is fp32 or bf16");
  bool const ta = trans_a[0] == 'T', tb = trans_b[0] == 'T';
  int const m = int(c.extent(0)), n = int(c.extent(1));
  int const k = int(ta ? a.extent(0) : a.extent(1));
  int const am = int(ta ? a.extent(1) : a.extent(0));
  int const bk = int(tb ? b.extent(1) : b.extent(0)), bn = int(tb ? b.extent(0) : b.extent(1));
  require(am == m && bk == k && bn == n, "gemm_bf16",
          std::string("op") + trans_a + "(A) of " + shape_of(a) + " times op" + trans_b + "(B) of " + shape_of(b) +
              " into C " + shape_of(c));
  // cuBLASLt's one call, its bias in the epilogue (read once per column tile: counted once)
  detail::KernelWork note = detail::gemm_work(m, n, k, 1, 2, 2, sizeof(CT), !bias && beta != 0.0f, true);
  if (bias) note.bytes += double(n) * sizeof(BiasT);
  detail::note_library_launch(bias ? "gemm_bf16_bias" : "gemm_bf16", note);
  if constexpr (bf16_gemm_on_cublaslt<ExecutionSpace>()) {
#if defined(KOKKOS_ENABLE_CUDA)
    require(work.cublaslt.extent(0) > 0, "gemm_bf16", "no cuBLASLt workspace (make it with Bf16GemmWorkspace::for_space)");
    detail::cublaslt_gemm_bf16(space.cuda_stream(), ta, tb, m, n, k, alpha, a.data(), int(a.stride(0)), b.data(),
                               int(b.stride(0)), beta, c.data(), int(c.stride(0)), std::is_same_v<CT, bf16>,
                               work.cublaslt.data(), work.cublaslt.extent(0), bias,
                               std::is_same_v<BiasT, bf16> ? BiasKind::bf16 : BiasKind::fp32);
#endif
  } else {
    detail::NotOnCuda const widening;  // CUDA makes the one call above
    auto const fa = detail::matrix_in(work.a, a.extent(0), a.extent(1), "A");
    auto const fb = detail::matrix_in(work.b, b.extent(0), b.extent(1), "B");
    convert_precision(space, fa, a);
    convert_precision(space, fb, b);
    // The bias goes into the fp32 C first and the GEMM adds onto it (as fp32 linear_forward does).
    Tensor1<BiasT const, MemorySpace> const bias_row(bias, bias ? std::size_t(n) : 0);
    if constexpr (std::is_same_v<CT, float>) {
      if (bias) fill_rows(space, "gemm_bf16_bias", c, bias_row);
      compat::gemm(space, trans_a, trans_b, alpha, fa, fb, bias ? 1.0f : beta, c);
    } else {
      auto const fc = detail::matrix_in(work.c, c.extent(0), c.extent(1), "C");
      if (bias)
        fill_rows(space, "gemm_bf16_bias", fc, bias_row);
      else if (beta != 0.0f)
        convert_precision(space, fc, c);
      compat::gemm(space, trans_a, trans_b, alpha, fa, fb, bias ? 1.0f : beta, fc);
      convert_precision(space, c, fc);
    }
  }
}

}  // namespace detail

// C = alpha op(A) op(B) + beta C. A, B: bf16 row-major matrices; C: fp32 or bf16 (beta applies to
// its value as stored). trans_a / trans_b: "N" or "T" (as compat::gemm).
template <class ExecutionSpace, class A, class B, class C, class MemorySpace>
void gemm_bf16(ExecutionSpace const& space, char const* trans_a, char const* trans_b, float alpha, A const& a,
               B const& b, float beta, C const& c, Bf16GemmWorkspace<MemorySpace> const& work) {
  detail::gemm_bf16_impl(space, trans_a, trans_b, alpha, a, b, beta, c, work, static_cast<float const*>(nullptr));
}

// C = alpha op(A) op(B) + bias (bias [n] fp32 or bf16, widened and added to every row before C's one
// rounding): a linear layer's forward (cuBLASLt's bias epilogue on CUDA: no pass of its own).
template <class ExecutionSpace, class A, class B, class C, class MemorySpace, class Bias>
void gemm_bf16_bias(ExecutionSpace const& space, char const* trans_a, char const* trans_b, float alpha, A const& a,
                    B const& b, C const& c, Bias const& bias, Bf16GemmWorkspace<MemorySpace> const& work) {
  require(bias.extent(0) == c.extent(1), "gemm_bf16_bias", "bias " + shape_of(bias) + " for C " + shape_of(c));
  detail::gemm_bf16_impl(space, trans_a, trans_b, alpha, a, b, 0.0f, c, work, bias.data());
}

// A batch of row-major matrices: the i-th is [rows, cols] at data + i * stride, its rows ld apart.
template <class T>
struct MatrixBatch {
  T* data = nullptr;
  int rows = 0, cols = 0, ld = 0;
  long long stride = 0;
};

namespace detail {
// dst [rows, cols] (contiguous) = src (rows ld apart), converted element by element.
template <class ExecutionSpace, class To, class From>
void copy_matrix(ExecutionSpace const& space, char const* name, To* dst, int dst_ld, From const* src, int src_ld,
                 int rows, int cols) {
  for_each_element(space, name, moved_work(double(rows) * cols, sizeof(From)), rows, cols, KOKKOS_LAMBDA(int r, int c) {
    dst[std::size_t(r) * dst_ld + c] = narrow<To>(widen(src[std::size_t(r) * src_ld + c]));
  });
}
}  // namespace detail

// C_i = alpha op(A_i) op(B_i) + beta C_i for i in [0, count): A and B bf16, C fp32 or bf16 (rounded
// once). CUDA: one strided-batched cuBLASLt call. Elsewhere the GEMMs in turn, each through the
// widening path (work's a, b and c hold one matrix each).
template <class ExecutionSpace, class CT, class MemorySpace>
void gemm_bf16_batched(ExecutionSpace const& space, char const* trans_a, char const* trans_b, float alpha,
                       MatrixBatch<bf16 const> const& a, MatrixBatch<bf16 const> const& b, float beta,
                       MatrixBatch<CT> const& c, int count, Bf16GemmWorkspace<MemorySpace> const& work,
                       double model_flops = -1) {
  static_assert(std::is_same_v<CT, float> || std::is_same_v<CT, bf16>, "gemm_bf16_batched: C is fp32 or bf16");
  bool const ta = trans_a[0] == 'T', tb = trans_b[0] == 'T';
  int const m = c.rows, n = c.cols, k = ta ? a.rows : a.cols;
  require((ta ? a.cols : a.rows) == m && (tb ? b.cols : b.rows) == k && (tb ? b.rows : b.cols) == n &&
              a.ld >= a.cols && b.ld >= b.cols && c.ld >= c.cols && count >= 0,
          "gemm_bf16_batched",
          std::string("op") + trans_a + "(A) of [" + std::to_string(a.rows) + ", " + std::to_string(a.cols) +
              "] times op" + trans_b + "(B) of [" + std::to_string(b.rows) + ", " + std::to_string(b.cols) +
              "] into C [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) + "]");
  detail::KernelWork note = detail::gemm_work(m, n, k, count, 2, 2, sizeof(CT), beta != 0.0f, true);
  if (model_flops >= 0) note.model_flops = model_flops;
  detail::note_library_launch("gemm_bf16_batched", note);
  if constexpr (bf16_gemm_on_cublaslt<ExecutionSpace>()) {
#if defined(KOKKOS_ENABLE_CUDA)
    require(work.cublaslt.extent(0) > 0, "gemm_bf16_batched", "no cuBLASLt workspace (make it with Bf16GemmWorkspace::for_space)");
    detail::cublaslt_gemm_bf16_batched(space.cuda_stream(), ta, tb, m, n, k, alpha, a.data, a.ld, b.data, b.ld, beta,
                                       c.data, c.ld, std::is_same_v<CT, bf16>, work.cublaslt.data(),
                                       work.cublaslt.extent(0), detail::GemmBatch{count, a.stride, b.stride, c.stride});
#endif
  } else {
    detail::NotOnCuda const widening;  // CUDA makes the one call above
    auto const fa = detail::matrix_in(work.a, a.rows, a.cols, "A");
    auto const fb = detail::matrix_in(work.b, b.rows, b.cols, "B");
    auto const fc = detail::matrix_in(work.c, c.rows, c.cols, "C");
    for (int i = 0; i < count; ++i) {
      detail::copy_matrix(space, "gemm_bf16_batched_widen", fa.data(), a.cols, a.data + i * a.stride, a.ld, a.rows, a.cols);
      detail::copy_matrix(space, "gemm_bf16_batched_widen", fb.data(), b.cols, b.data + i * b.stride, b.ld, b.rows, b.cols);
      if (beta != 0.0f)
        detail::copy_matrix(space, "gemm_bf16_batched_widen", fc.data(), c.cols, c.data + i * c.stride, c.ld, c.rows, c.cols);
      compat::gemm(space, trans_a, trans_b, alpha, fa, fb, beta, fc);
      detail::copy_matrix(space, "gemm_bf16_batched_store", c.data + i * c.stride, c.ld, fc.data(), c.cols, c.rows, c.cols);
    }
  }
}

// What operators call so that one source serves every precision: compat::gemm for float and double
// operands, gemm_bf16 for bf16 ones, whose scratch `work` (a Bf16GemmWorkspace pointer, from
// detail::workspace_of) must then be given: a missing one is a compile-time error.
template <class ExecutionSpace, class A, class B, class C, class Work>
void gemm_any(ExecutionSpace const& space, char const* trans_a, char const* trans_b,
              compute_t<typename C::non_const_value_type> alpha, A const& a, B const& b,
              compute_t<typename C::non_const_value_type> beta, C const& c, Work work) {
  if constexpr (std::is_same_v<typename A::non_const_value_type, bf16>) {
    static_assert(!std::is_null_pointer_v<Work>, "a bf16 GEMM needs a Bf16GemmWorkspace among the workspaces");
    if constexpr (!std::is_null_pointer_v<Work>) gemm_bf16(space, trans_a, trans_b, float(alpha), a, b, float(beta), c, *work);
  } else {
    (void)work;
    compat::gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
  }
}

}  // namespace joule
