// bf16 GEMMs through cuBLASLt (core/precision/detail/cublaslt_gemm.hpp). joule's tensors are
// row-major and cuBLASLt's column-major: a row-major X [r, c] is the column-major X^T, so
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with the operands swapped and each keeping
// its own transpose flag.
#include "core/precision/detail/cublaslt_gemm.hpp"

#include "core/precision/detail/alignment.hpp"

#include <Kokkos_Macros.hpp>

#include <stdexcept>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <mutex>
#include <cstdint>
#include <tuple>
#include <utility>
#endif

namespace joule::detail {

#if defined(KOKKOS_ENABLE_CUDA)

namespace {

std::string shape_text(bool ta, bool tb, int m, int n, int k, bool c_bf16) {
  return std::string("C[") + std::to_string(m) + ", " + std::to_string(n) + "] (" + (c_bf16 ? "bf16" : "fp32") +
         ") = op" + (ta ? "T" : "N") + "(A) op" + (tb ? "T" : "N") + "(B), k = " + std::to_string(k);
}

// shape(): the GEMM in words, made only for an error message (a step's calls allocate nothing).
template <class Shape>
void check(cublasStatus_t s, char const* what, Shape const& shape) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("joule: cuBLASLt ") + what + " failed (status " + std::to_string(int(s)) +
                             ") for the bf16 GEMM " + shape());
}

// One matmul shape: its descriptors and the algorithm the heuristic chose for it.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// ..., BiasKind, batch count and strides, and the alignments of B, A and C (the heuristic's choice
// depends on them: a plan for 256-byte aligned pointers must not run on 16-byte aligned ones)
using Key = std::tuple<bool, bool, int, int, int, int, int, int, bool, std::size_t, int, int, long long, long long, long long,
                       std::uint32_t, std::uint32_t, std::uint32_t>;

struct Library {
  std::mutex mutex;
  cublasLtHandle_t handle = nullptr;
  std::map<Key, Plan> plans;  // kept for the process: a training step's few shapes
};

Library& library() {
  static Library lib;
  return lib;
}

Plan make_plan(cublasLtHandle_t handle, bool ta, bool tb, int m, int n, int k, int lda, int ldb, int ldc, bool c_bf16,
               std::size_t workspace_bytes, BiasKind bias, GemmBatch const& batch, std::uint32_t align_first,
               std::uint32_t align_second, std::uint32_t align_out, std::function<std::string()> const& shape) {
  Plan p;
  check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate", shape);
  // Column-major C^T [n, m] = op(B)^T [n, k] * op(A)^T [k, m]: B is the first operand, A the second.
  cublasOperation_t const op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first),
        "MatmulDescSetAttribute(TRANSA)", shape);
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second),
        "MatmulDescSetAttribute(TRANSB)", shape);
  if (bias != BiasKind::none) {  // D = alpha op op + beta C + bias, per row of the column-major D (a column of ours)
    cublasLtEpilogue_t const epilogue = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t const bias_type = bias == BiasKind::bf16 ? CUDA_R_16BF : CUDA_R_32F;
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
          "MatmulDescSetAttribute(EPILOGUE)", shape);
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type),
          "MatmulDescSetAttribute(BIAS_DATA_TYPE)", shape);
  }
  // Stored (column-major) shapes: B^T is [n, k] (tb: B [n, k] row-major is [k, n]); A^T [k, m] likewise.
  check(cublasLtMatrixLayoutCreate(&p.first, CUDA_R_16BF, tb ? k : n, tb ? n : k, ldb), "MatrixLayoutCreate(B)", shape);
  check(cublasLtMatrixLayoutCreate(&p.second, CUDA_R_16BF, ta ? m : k, ta ? k : m, lda), "MatrixLayoutCreate(A)", shape);
  check(cublasLtMatrixLayoutCreate(&p.out, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, n, m, ldc), "MatrixLayoutCreate(C)", shape);
  if (batch.count > 1) {  // the first operand is B, the second A (above)
    for (auto const& [layout, stride] : {std::pair<cublasLtMatrixLayout_t, long long>{p.first, batch.stride_b},
                                         {p.second, batch.stride_a}, {p.out, batch.stride_c}}) {
      int const count = batch.count;
      check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
            "MatrixLayoutSetAttribute(BATCH_COUNT)", shape);
      std::int64_t const offset = stride;
      check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                             sizeof offset),
            "MatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", shape);
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "MatmulPreferenceCreate", shape);
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                             sizeof workspace_bytes),
        "MatmulPreferenceSetAttribute", shape);
  // The alignment of this call's pointers: unless told, cuBLASLt assumes 256 bytes, and an
  // algorithm chosen so need not run on Kokkos' 128-byte aligned data, nor on a batch or a
  // parameter group's tensor that starts at 64 bytes or less. cuBLASLt's A is our B (above); C is also D.
  using Alignment = std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t>;
  for (auto const& [attribute, bytes] : {Alignment{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_first},
                                         Alignment{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_second},
                                         Alignment{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_out},
                                         Alignment{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_out}})
    check(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &bytes, sizeof bytes),
          "MatmulPreferenceSetAttribute(MIN_ALIGNMENT)", shape);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t const s =
      cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.first, p.second, p.out, p.out, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check(s, "MatmulAlgoGetHeuristic", shape);
  if (found == 0) throw std::runtime_error("joule: cuBLASLt has no algorithm for the bf16 GEMM " + shape());
  p.algo = result.algo;
  return p;
}

}  // namespace

bool have_cublaslt() { return true; }

namespace {
void matmul(void* stream, bool trans_a, bool trans_b, int m, int n, int k, float alpha, void const* a, int lda,
            void const* b, int ldb, float beta, void* c, int ldc, bool c_bf16, void* workspace,
            std::size_t workspace_bytes, void const* bias, BiasKind bias_kind, GemmBatch const& batch) {
  if (m == 0 || n == 0 || batch.count == 0) return;
  if (!bias) bias_kind = BiasKind::none;
  auto& lib = library();
  // The lock covers the call: a plan's descriptor carries this call's bias pointer.
  std::lock_guard<std::mutex> lock(lib.mutex);
  auto const shape = [&] {
    return shape_text(trans_a, trans_b, m, n, k, c_bf16) +
           (batch.count > 1 ? ", batch of " + std::to_string(batch.count) : std::string());
  };
  if (!lib.handle) check(cublasLtCreate(&lib.handle), "Create", shape);
  // Each operand's alignment, that of every matrix of a batch (strides in elements: bf16 2 bytes).
  bool const batched = batch.count > 1;
  std::size_t const c_bytes = c_bf16 ? 2 : 4;
  std::uint32_t const align_b = pointer_alignment(b, batched ? std::size_t(batch.stride_b) * 2 : 0),
                      align_a = pointer_alignment(a, batched ? std::size_t(batch.stride_a) * 2 : 0),
                      align_c = pointer_alignment(c, batched ? std::size_t(batch.stride_c) * c_bytes : 0);
  Key const key{trans_a, trans_b, m, n, k, lda, ldb, ldc, c_bf16, workspace_bytes, int(bias_kind),
                batch.count, batch.stride_a, batch.stride_b, batch.stride_c, align_b, align_a, align_c};
  auto it = lib.plans.find(key);
  if (it == lib.plans.end())
    it = lib.plans.emplace(key, make_plan(lib.handle, trans_a, trans_b, m, n, k, lda, ldb, ldc, c_bf16,
                                          workspace_bytes, bias_kind, batch, align_b, align_a, align_c, shape)).first;
  Plan const& plan = it->second;
  if (bias)
    check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
          "MatmulDescSetAttribute(BIAS_POINTER)", shape);
  // `workspace` is shared: a model gives all its GEMMs one (work.gemm in core/model/model.cpp:
  // every block's, the attention's and the head's). That is safe because they are all queued on one
  // stream, the compute instance's (Model::forward and backward take one `space`; the optimizer's
  // other instances only copy and convert, and its host worker queues no GEMM), so stream order
  // runs each GEMM after the last one has finished with the workspace (the lock above does not:
  // the call returns before the GEMM runs). A GEMM queued on another stream with the same
  // workspace, e.g. on an instance overlapping the compute one, would break it: it needs its own.
  check(cublasLtMatmul(lib.handle, plan.desc, &alpha, b, plan.first, a, plan.second, &beta, c, plan.out, c, plan.out,
                       &plan.algo, workspace, workspace_bytes, static_cast<cudaStream_t>(stream)),
        "Matmul", shape);
}
}  // namespace

void cublaslt_gemm_bf16(void* stream, bool trans_a, bool trans_b, int m, int n, int k, float alpha, void const* a,
                        int lda, void const* b, int ldb, float beta, void* c, int ldc, bool c_bf16, void* workspace,
                        std::size_t workspace_bytes, void const* bias, BiasKind bias_kind) {
  matmul(stream, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, c_bf16, workspace, workspace_bytes,
         bias, bias_kind, GemmBatch{});
}

void cublaslt_gemm_bf16_batched(void* stream, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                void const* a, int lda, void const* b, int ldb, float beta, void* c, int ldc,
                                bool c_bf16, void* workspace, std::size_t workspace_bytes, GemmBatch const& batch) {
  matmul(stream, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, c_bf16, workspace, workspace_bytes,
         nullptr, BiasKind::none, batch);
}

#else

bool have_cublaslt() { return false; }

void cublaslt_gemm_bf16(void*, bool, bool, int, int, int, float, void const*, int, void const*, int, float, void*, int,
                        bool, void*, std::size_t, void const*, BiasKind) {
  throw std::logic_error("joule: cublaslt_gemm_bf16 called in a build without CUDA");
}

void cublaslt_gemm_bf16_batched(void*, bool, bool, int, int, int, float, void const*, int, void const*, int, float,
                                void*, int, bool, void*, std::size_t, GemmBatch const&) {
  throw std::logic_error("joule: cublaslt_gemm_bf16_batched called in a build without CUDA");
}

#endif

}  // namespace joule::detail
