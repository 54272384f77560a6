#pragma once
// One pre-LN transformer block, forward and backward, as plain functions (llm.c style):
//   ln1 = LN(x);  qkv = ln1 Wqkv^T + bqkv;  att = attention(qkv, mask)
//   x2  = x + att Wproj^T + bproj
//   ln2 = LN(x2); fc = ln2 Wfc^T + bfc;  h = gelu(fc)
//   y   = x2 + h Wfcproj^T + bfcproj
// Parameters, activations and backward workspace are named tensors in one struct each. T is the
// activations' type and the weights' (fp32, or bf16 with its workspace's GEMM scratch); parameter
// gradients G are fp32 for either.
#include "core/model/block_tensors.hpp"
#include "core/ops/attention.hpp"
#include "core/ops/attention_gemm.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/layernorm.hpp"
#include "core/ops/linear.hpp"
#include "core/model/parameter_group.hpp"
#include "core/model/sequence_shards.hpp"

#include <string>

namespace joule {

namespace detail {
// The attention of the workspace's path (core/ops/attention_gemm_workspace.hpp).
template <class ExecutionSpace, class T, class MemorySpace, class Out, class Lse, class Qkv>
void block_attention_forward(ExecutionSpace const& space, BlockWorkspace<T, MemorySpace> const& w, Out const& out,
                             Lse const& lse, Qkv const& qkv, int batch, int heads, AttentionMask const& mask) {
  if constexpr (std::is_same_v<T, bf16>)
    if (w.attention.allocated()) return attention_forward_gemm(space, out, lse, qkv, batch, heads, mask, w.attention);
  attention_forward(space, out, lse, qkv, batch, heads, mask);
}
template <class ExecutionSpace, class T, class MemorySpace, class DQkv, class DOut, class Qkv, class Out, class Lse>
void block_attention_backward(ExecutionSpace const& space, BlockWorkspace<T, MemorySpace> const& w, DQkv const& d_qkv,
                              DOut const& d_out, Qkv const& qkv, Out const& out, Lse const& lse, int batch, int heads,
                              AttentionMask const& mask) {
  if constexpr (std::is_same_v<T, bf16>)
    if (w.attention.allocated())
      return attention_backward_gemm(space, d_qkv, w.delta, d_out, qkv, out, lse, batch, heads, mask, w.attention);
  attention_backward(space, d_qkv, w.delta, d_out, qkv, out, lse, batch, heads, mask);
}
}  // namespace detail

// y [N, C] = block(x [N, C]). With s.shards > 1, `exchange` runs the Ulysses all-to-alls. `w`: the
// bf16 GEMMs' scratch (w.gemm) and the tensor-core attention's (w.attention), otherwise unused by the
// forward pass.
template <class ExecutionSpace, class T, class MemorySpace, class Y, class X>
void block_forward(ExecutionSpace const& space, BlockShape const& s, Y const& y,
                   BlockActivations<T, MemorySpace> const& a,
                   BlockParameters<T, MemorySpace> const& p, X const& x, BlockWorkspace<T, MemorySpace> const& w,
                   SequenceExchange<T, MemorySpace> const* exchange = nullptr) {
  compat::ScopedRegion region(space, "joule::block_forward");
  layernorm_forward(space, a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1_weight, p.ln1_bias);
  linear_forward(space, a.qkv, a.ln1, p.qkv_weight, p.qkv_bias, w.gemm);
  require(s.shards == 1 || exchange != nullptr, "block_forward", "sequence shards need an exchange");
  if (s.shards > 1 && exchange != nullptr) {
    exchange->to_heads(space, a.qkv_heads, a.qkv, 3);
    detail::block_attention_forward(space, w, a.att_heads, a.att_lse, a.qkv_heads, s.batch, s.local_heads(), s.mask);
    exchange->to_local(space, a.att, a.att_heads, 1);
  } else {
    detail::block_attention_forward(space, w, a.att, a.att_lse, a.qkv, s.batch, s.heads, s.mask);
  }
  linear_forward(space, a.x2, a.att, p.proj_weight, p.proj_bias, w.gemm);
  residual_forward(space, a.x2, a.x2, x);
  layernorm_forward(space, a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, p.ln2_weight, p.ln2_bias);
  linear_forward(space, a.fc, a.ln2, p.fc_weight, p.fc_bias, w.gemm);
  gelu_forward(space, a.fc_gelu, a.fc);
  linear_forward(space, y, a.fc_gelu, p.fc_proj_weight, p.fc_proj_bias, w.gemm);
  residual_forward(space, y, y, a.x2);
}

// d_x (overwritten) and parameter gradients `g` (accumulated) from d_y.
template <class ExecutionSpace, class G, class T, class MemorySpace, class DX, class DY, class X>
void block_backward(ExecutionSpace const& space, BlockShape const& s, DX const& d_x,
                    BlockParameters<G, MemorySpace> const& g, BlockWorkspace<T, MemorySpace> const& w,
                    DY const& d_y, X const& x, BlockActivations<T, MemorySpace> const& a,
                    BlockParameters<T, MemorySpace> const& p,
                    SequenceExchange<T, MemorySpace> const* exchange = nullptr) {
  compat::ScopedRegion region(space, "joule::block_backward");
  // MLP branch, then the skip connection around it.
  linear_backward(space, w.d_fc, g.fc_proj_weight, g.fc_proj_bias, d_y, a.fc_gelu, p.fc_proj_weight,
                  w.column_sums, w.gemm);
  gelu_backward(space, w.d_fc, w.d_fc, a.fc);
  linear_backward(space, w.d_ln, g.fc_weight, g.fc_bias, w.d_fc, a.ln2, p.fc_weight, w.column_sums, w.gemm);
  layernorm_backward(space, w.d_x2, g.ln2_weight, g.ln2_bias, w.d_ln, a.x2, p.ln2_weight,
                     a.ln2_mean, a.ln2_rstd, w.column_sums);
  residual_backward(space, w.d_x2, d_y);
  // Attention branch, then the skip connection around it.
  linear_backward(space, w.d_att, g.proj_weight, g.proj_bias, w.d_x2, a.att, p.proj_weight, w.column_sums,
                  w.gemm);
  require(s.shards == 1 || exchange != nullptr, "block_backward", "sequence shards need an exchange");
  if (s.shards > 1 && exchange != nullptr) {
    exchange->to_heads(space, w.d_att_heads, w.d_att, 1);
    detail::block_attention_backward(space, w, w.d_qkv_heads, w.d_att_heads, a.qkv_heads, a.att_heads, a.att_lse,
                                     s.batch, s.local_heads(), s.mask);
    exchange->to_local(space, w.d_qkv, w.d_qkv_heads, 3);
  } else {
    detail::block_attention_backward(space, w, w.d_qkv, w.d_att, a.qkv, a.att, a.att_lse, s.batch, s.heads, s.mask);
  }
  linear_backward(space, w.d_ln, g.qkv_weight, g.qkv_bias, w.d_qkv, a.ln1, p.qkv_weight, w.column_sums, w.gemm);
  layernorm_backward(space, d_x, g.ln1_weight, g.ln1_bias, w.d_ln, x, p.ln1_weight, a.ln1_mean,
                     a.ln1_rstd, w.column_sums);
  residual_backward(space, d_x, w.d_x2);
}

}  // namespace joule
