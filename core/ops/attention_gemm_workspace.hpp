#pragma once
// Which attention a model runs, and the scratch of the tensor-core path (core/ops/attention_gemm.hpp
// has its kernels): apart from them, so that the model's declarations parse no kernel.
#include "core/precision/bf16.hpp"
#include "core/precision/gemm_workspace.hpp"
#include "core/tensor.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace joule {

// Which attention a bf16 model runs: the fused flash-style kernel (core/ops/attention.hpp, every
// backend) or batched GEMMs on tensor cores (core/ops/attention_gemm.hpp).
enum class AttentionPath { fused, gemm };

// The path a model of element type T runs on ExecutionSpace: the GEMMs where bf16 GEMMs run on
// tensor cores (CUDA), the fused kernel elsewhere (and always in fp32).
// On CUDA: the GEMMs for bf16 models. (The roofline model records a CUDA step on a CPU with it.)
constexpr AttentionPath attention_path_on_cuda(bool bf16_model) {
  return bf16_model ? AttentionPath::gemm : AttentionPath::fused;
}
template <class ExecutionSpace, class T>
constexpr AttentionPath default_attention_path() {
  return bf16_gemm_on_cublaslt<ExecutionSpace>() ? attention_path_on_cuda(std::is_same_v<T, bf16>) : AttentionPath::fused;
}

// The path in words (joule info, the run log).
template <class ExecutionSpace, class T>
std::string attention_path_text() {
  return default_attention_path<ExecutionSpace, T>() == AttentionPath::gemm
             ? "batched bf16 GEMMs for QK^T and PV (cuBLASLt) around an fp32 masked softmax"
             : "fused flash-style kernel";
}

// The GEMM path's scratch for attention over `batch_heads` = B*H (per rank) heads of `seq` tokens.
template <class MemorySpace>
struct AttentionGemmWorkspace {
  int batch_heads = 0, seq = 0, head_dim = 0, ld = 0;  // ld: the scores' row stride
  Tensor1<bf16, MemorySpace> q, k, v, o, dq, dk, dv;  // [B*H * S * hd] each (o: dO in the backward pass)
  Tensor1<float, MemorySpace> scores;                 // [B*H * S * ld]: q k^T, then dp
  Tensor1<bf16, MemorySpace> probs;                   // [B*H * S * ld]: p, then ds
  Bf16GemmWorkspace<MemorySpace> gemm;

  static int padded(int seq) { return (seq + 7) / 8 * 8; }
  // Bytes for_space allocates (the memory model): cuBLASLt's workspace is shared with the layers' GEMMs.
  static std::size_t bytes_for(int batch_heads, int seq, int head_dim, bool on_cublaslt) {
    std::size_t const bh = std::size_t(batch_heads), s = std::size_t(seq), l = std::size_t(padded(seq)),
                      hd = std::size_t(head_dim);
    std::size_t const widest = s * std::max(l, hd);  // an A or C: a score matrix or a head
    std::size_t const widened = on_cublaslt ? 0 : sizeof(float) * (2 * widest + s * hd);  // one A, B, C
    return 7 * sizeof(bf16) * bh * s * hd + (sizeof(float) + sizeof(bf16)) * bh * s * l + widened;
  }
  bool allocated() const { return scores.data() != nullptr; }

  AttentionGemmWorkspace() = default;
  // shared: a bf16 GEMM workspace the layers use (its cuBLASLt workspace serves here too: one
  // stream orders them); on other backends the widened operands are this path's own.
  template <class ExecutionSpace>
  static AttentionGemmWorkspace for_space(int batch_heads, int seq, int head_dim, std::string const& name,
                                          Bf16GemmWorkspace<MemorySpace> const& shared = {}) {
    AttentionGemmWorkspace w;
    w.batch_heads = batch_heads;
    w.seq = seq;
    w.head_dim = head_dim;
    w.ld = padded(seq);
    auto const alloc = [&](char const* part) {
      return Kokkos::view_alloc(Kokkos::WithoutInitializing, label((name + "." + part).c_str()));
    };
    std::size_t const heads = std::size_t(batch_heads) * seq * head_dim, square = std::size_t(batch_heads) * seq * w.ld;
    for (auto [view, part] : {std::pair{&w.q, "attention_q"}, {&w.k, "attention_k"}, {&w.v, "attention_v"},
                              {&w.o, "attention_o"}, {&w.dq, "attention_dq"}, {&w.dk, "attention_dk"},
                              {&w.dv, "attention_dv"}})
      *view = Tensor1<bf16, MemorySpace>(alloc(part), heads);
    w.scores = Tensor1<float, MemorySpace>(alloc("attention_scores"), square);
    // Zeroed once: the padding columns [S, ld) are never written and must hold no NaN bits.
    w.probs = Tensor1<bf16, MemorySpace>(label((name + ".attention_probs").c_str()), square);
    if (bf16_gemm_on_cublaslt<ExecutionSpace>() && shared.cublaslt.data() != nullptr)
      w.gemm = shared;
    else
      w.gemm = Bf16GemmWorkspace<MemorySpace>::template for_space<ExecutionSpace>(
          std::size_t(seq) * std::max(w.ld, head_dim), std::size_t(seq) * head_dim,
          std::size_t(seq) * std::max(w.ld, head_dim), name + ".attention");
    return w;
  }
};

}  // namespace joule
