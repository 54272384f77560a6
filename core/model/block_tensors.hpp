#pragma once
// The tensors of one transformer block (core/model/block.hpp has its forward and backward):
// shape, parameters, saved activations and backward scratch, apart from the kernels, so that
// code that holds a model (the trainer, the scheduler, the command) parses no operator.
#include "core/model/parameter_group.hpp"
#include "core/model/sequence_shards.hpp"
#include "core/ops/attention_gemm_workspace.hpp"
#include "core/ops/attention_mask.hpp"
#include "core/ops/column_sum_workspace.hpp"
#include "core/ops/linear_scratch.hpp"
#include "core/precision/bf16.hpp"
#include "core/precision/gemm_workspace.hpp"
#include "core/tensor.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

namespace joule {

// seq is the whole sequence; with shards > 1 (Ulysses) a rank holds seq/shards tokens of each
// sample and runs heads/shards heads of attention over all seq tokens.
struct BlockShape {
  int batch = 1, seq = 1, channels = 1, heads = 1, mlp_hidden = 4, shards = 1;
  AttentionMask mask = AttentionMask::causal();
  int tokens() const { return batch * seq / shards; }  // rows this rank holds
  int local_heads() const { return heads / shards; }
};

// C = channels, M = mlp_hidden. All tensors live in one contiguous `storage` buffer, in the
// order of layout(), so a whole block can be zeroed, moved or updated as one group.
template <class T, class MemorySpace>
struct BlockParameters {
  Tensor1<T, MemorySpace> ln1_weight, ln1_bias;    // [C]
  Tensor2<T, MemorySpace> qkv_weight;              // [3C, C]
  Tensor1<T, MemorySpace> qkv_bias;                // [3C]
  Tensor2<T, MemorySpace> proj_weight;             // [C, C]
  Tensor1<T, MemorySpace> proj_bias;               // [C]
  Tensor1<T, MemorySpace> ln2_weight, ln2_bias;    // [C]
  Tensor2<T, MemorySpace> fc_weight;               // [M, C]
  Tensor1<T, MemorySpace> fc_bias;                 // [M]
  Tensor2<T, MemorySpace> fc_proj_weight;          // [C, M]
  Tensor1<T, MemorySpace> fc_proj_bias;            // [C]
  Tensor1<T, MemorySpace> storage;                 // everything above, back to back
  BlockShape shape;

  BlockParameters() = default;
  BlockParameters(std::string const& name, BlockShape const& s) : shape(s) {
    allocate_group(*this, name);
  }

  // Every tensor with its PyTorch-style name, its role and its [rows] or [rows, cols] (cols = 0).
  template <class Self, class F>
  static void layout(Self& self, F&& f) {
    using R = ParamRole;
    int const c = self.shape.channels, m = self.shape.mlp_hidden;
    f("ln1.weight", R::norm_scale, self.ln1_weight, c, 0);
    f("ln1.bias", R::norm_shift, self.ln1_bias, c, 0);
    f("attn.qkv.weight", R::matrix, self.qkv_weight, 3 * c, c);
    f("attn.qkv.bias", R::bias, self.qkv_bias, 3 * c, 0);
    f("attn.proj.weight", R::residual_projection, self.proj_weight, c, c);
    f("attn.proj.bias", R::bias, self.proj_bias, c, 0);
    f("ln2.weight", R::norm_scale, self.ln2_weight, c, 0);
    f("ln2.bias", R::norm_shift, self.ln2_bias, c, 0);
    f("mlp.fc.weight", R::matrix, self.fc_weight, m, c);
    f("mlp.fc.bias", R::bias, self.fc_bias, m, 0);
    f("mlp.proj.weight", R::residual_projection, self.fc_proj_weight, c, m);
    f("mlp.proj.bias", R::bias, self.fc_proj_bias, c, 0);
  }

  template <class F>
  void for_each(F&& f) const {
    layout(*this, [&](char const* name, ParamRole, auto const& view, int, int) { f(std::string(name), view); });
  }
};

// What the forward pass keeps for the backward pass. N = B*S/P tokens held, H heads, P shards
// (P = 1: qkv_heads and att_heads are qkv and att themselves). T: the activations' storage type;
// the statistics (R = compute_t<T>) are fp32 for bf16 activations (core/precision/precision.hpp).
template <class T, class MemorySpace>
struct BlockActivations {
  using R = compute_t<T>;
  Tensor2<T, MemorySpace> ln1;                 // [N, C]
  Tensor1<R, MemorySpace> ln1_mean, ln1_rstd;  // [N]
  Tensor2<T, MemorySpace> qkv;                 // [N, 3C]
  Tensor2<T, MemorySpace> att;                 // [N, C]
  Tensor2<R, MemorySpace> att_lse;             // [B*H/P, S]
  Tensor2<T, MemorySpace> qkv_heads;           // [B*S, 3C/P]  this rank's heads, every token
  Tensor2<T, MemorySpace> att_heads;           // [B*S, C/P]
  Tensor2<T, MemorySpace> x2;                  // [N, C]  residual stream after attention
  Tensor2<T, MemorySpace> ln2;                 // [N, C]
  Tensor1<R, MemorySpace> ln2_mean, ln2_rstd;  // [N]
  Tensor2<T, MemorySpace> fc;                  // [N, M]  before GELU
  Tensor2<T, MemorySpace> fc_gelu;             // [N, M]

  BlockActivations() = default;
  explicit BlockActivations(BlockShape const& s, std::string const& prefix = "block") {
    auto const label = [&](char const* n) { return joule::label((prefix + "." + n).c_str()); };
    int const n = s.tokens(), c = s.channels, m = s.mlp_hidden;
    ln1 = decltype(ln1)(label("ln1"), n, c);
    ln1_mean = decltype(ln1_mean)(label("ln1_mean"), n);
    ln1_rstd = decltype(ln1_rstd)(label("ln1_rstd"), n);
    qkv = decltype(qkv)(label("qkv"), n, 3 * c);
    att = decltype(att)(label("att"), n, c);
    att_lse = decltype(att_lse)(label("att_lse"), s.batch * s.local_heads(), s.seq);
    qkv_heads = s.shards > 1 ? decltype(qkv_heads)(label("qkv_heads"), s.batch * s.seq, 3 * c / s.shards) : qkv;
    att_heads = s.shards > 1 ? decltype(att_heads)(label("att_heads"), s.batch * s.seq, c / s.shards) : att;
    x2 = decltype(x2)(label("x2"), n, c);
    ln2 = decltype(ln2)(label("ln2"), n, c);
    ln2_mean = decltype(ln2_mean)(label("ln2_mean"), n);
    ln2_rstd = decltype(ln2_rstd)(label("ln2_rstd"), n);
    fc = decltype(fc)(label("fc"), n, m);
    fc_gelu = decltype(fc_gelu)(label("fc_gelu"), n, m);
  }
};

// Scratch for the backward pass (and, in bf16, the forward pass's GEMMs); one set can serve every
// block in turn.
template <class T, class MemorySpace>
struct BlockWorkspace {
  using R = compute_t<T>;
  Tensor2<T, MemorySpace> d_x2;    // [N, C]
  Tensor2<T, MemorySpace> d_ln;    // [N, C]
  Tensor2<T, MemorySpace> d_att;   // [N, C]
  Tensor2<T, MemorySpace> d_qkv;   // [N, 3C]
  Tensor2<T, MemorySpace> d_fc;    // [N, M]
  Tensor2<R, MemorySpace> delta;   // [B*H/P, S]
  Tensor2<T, MemorySpace> d_qkv_heads, d_att_heads;  // [B*S, 3C/P], [B*S, C/P] (P = 1: d_qkv, d_att)
  ColumnSumWorkspace<R, MemorySpace> column_sums;   // the bias and LayerNorm gradients' block sums
  Bf16GemmWorkspace<MemorySpace> gemm;               // bf16 blocks' GEMMs (empty for fp32)
  AttentionGemmWorkspace<MemorySpace> attention;     // the tensor-core attention's (empty on the fused path)

  // The GEMM scratch of the block's four linear layers, forward and backward.
  static LinearGemmScratch gemm_scratch_for(BlockShape const& s) {
    int const n = s.tokens(), c = s.channels, m = s.mlp_hidden;
    return max_scratch({linear_gemm_scratch(n, c, 3 * c), linear_gemm_scratch(n, c, c),
                        linear_gemm_scratch(n, c, m), linear_gemm_scratch(n, m, c)});
  }

  // Elements of column_sums: the largest of the block's column sums (N rows of C, 3C or M).
  static std::size_t column_sum_scratch_for(BlockShape const& s) {
    std::size_t most = 0;
    for (int cols : {s.channels, 3 * s.channels, s.mlp_hidden})
      most = std::max(most, column_sum_scratch(s.tokens(), cols));
    return most;
  }

  BlockWorkspace() = default;
  // shared_gemm: a bf16 GEMM workspace its owner shares with other layers (at least
  // gemm_scratch_for(s)); without one a bf16 workspace allocates its own. attention_path: which
  // attention the block runs (the GEMM path needs bf16).
  template <class ExecutionSpace = Kokkos::DefaultExecutionSpace>
  explicit BlockWorkspace(BlockShape const& s, std::string const& prefix = "block",
                          Bf16GemmWorkspace<MemorySpace> const& shared_gemm = {},
                          AttentionPath attention_path = default_attention_path<ExecutionSpace, T>()) {
    auto const label = [&](char const* n) { return joule::label((prefix + "." + n).c_str()); };
    int const n = s.tokens(), c = s.channels, m = s.mlp_hidden;
    d_x2 = decltype(d_x2)(label("d_x2"), n, c);
    d_ln = decltype(d_ln)(label("d_ln"), n, c);
    d_att = decltype(d_att)(label("d_att"), n, c);
    d_qkv = decltype(d_qkv)(label("d_qkv"), n, 3 * c);
    d_fc = decltype(d_fc)(label("d_fc"), n, m);
    delta = decltype(delta)(label("delta"), s.batch * s.local_heads(), s.seq);
    d_qkv_heads = s.shards > 1 ? decltype(d_qkv)(label("d_qkv_heads"), s.batch * s.seq, 3 * c / s.shards) : d_qkv;
    d_att_heads = s.shards > 1 ? decltype(d_att)(label("d_att_heads"), s.batch * s.seq, c / s.shards) : d_att;
    column_sums = decltype(column_sums)(column_sum_scratch_for(s), prefix);
    if constexpr (std::is_same_v<T, bf16>) {
      auto const g = gemm_scratch_for(s);
      bool const shared = shared_gemm.a.data() != nullptr || shared_gemm.cublaslt.data() != nullptr;
      gemm = shared ? shared_gemm : Bf16GemmWorkspace<MemorySpace>::template for_space<ExecutionSpace>(g.a, g.b, g.c, prefix);
    }
    require(attention_path == AttentionPath::fused || std::is_same_v<T, bf16>, "BlockWorkspace",
            "the tensor-core attention path runs bf16 blocks only");
    if (attention_path == AttentionPath::gemm)
      attention = AttentionGemmWorkspace<MemorySpace>::template for_space<ExecutionSpace>(
          s.batch * s.local_heads(), s.seq, c / s.heads, prefix, gemm);
  }
};

}  // namespace joule
