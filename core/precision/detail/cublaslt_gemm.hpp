#pragma once
// bf16 GEMMs on Hopper's tensor cores through cuBLASLt (fp32 accumulation and scaling), the one
// backend file that calls it (core/precision/cublaslt_gemm.cpp). No CUDA header here: the
// template that calls it (core/precision/gemm.hpp) is compiled on every backend.
#include <cstddef>
#include <string>

namespace joule::detail {

// Whether this build has the cuBLASLt path (a CUDA build of joule).
bool have_cublaslt();

enum class BiasKind { none, fp32, bf16 };

// Row-major C[m, n] = alpha op(A) op(B) + beta C (+ bias[n] on every row, fp32 or bf16, through cuBLASLt's
// bias epilogue, before the one rounding), queued on `stream` (a cudaStream_t); A and B
// bf16 (__nv_bfloat16 layout), C fp32 or (c_bf16) bf16, rounded once from the fp32 result. op(A) is
// [m, k] (A [m, k] with lda >= k, or A [k, m] with trans_a), op(B) [k, n] likewise. `workspace`:
// device memory of workspace_bytes for the algorithm (kCublasLtWorkspaceBytes: what Hopper's
// split-K kernels may use). Descriptors and the algorithm are chosen once per shape and kept.
// Throws std::runtime_error naming the shape if cuBLASLt has no algorithm or fails.
void cublaslt_gemm_bf16(void* stream, bool trans_a, bool trans_b, int m, int n, int k, float alpha, void const* a,
                        int lda, void const* b, int ldb, float beta, void* c, int ldc, bool c_bf16, void* workspace,
                        std::size_t workspace_bytes, void const* bias = nullptr,
                        BiasKind bias_kind = BiasKind::none);

// `batch` such GEMMs in one call (strided batching: the i-th A starts stride_a elements after the
// (i-1)-th, B and C likewise; no bias): attention's per-head products.
struct GemmBatch {
  int count = 1;
  long long stride_a = 0, stride_b = 0, stride_c = 0;
};
void cublaslt_gemm_bf16_batched(void* stream, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                void const* a, int lda, void const* b, int ldb, float beta, void* c, int ldc,
                                bool c_bf16, void* workspace, std::size_t workspace_bytes, GemmBatch const& batch);

inline constexpr std::size_t kCublasLtWorkspaceBytes = std::size_t(32) << 20;  // NVIDIA's advice for Hopper

}  // namespace joule::detail
