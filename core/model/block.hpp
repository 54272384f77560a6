#pragma once
// One pre-LN transformer block, forward and backward, as plain functions (llm.c style):
//   ln1 = LN(x);  qkv = ln1 Wqkv^T + bqkv;  att = attention(qkv, mask)
//   x2  = x + att Wproj^T + bproj
//   ln2 = LN(x2); fc = ln2 Wfc^T + bfc;  h = gelu(fc)
//   y   = x2 + h Wfcproj^T + bfcproj
// Parameters, activations and backward workspace are named tensors in one struct each.
#include "core/ops/attention.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/layernorm.hpp"
#include "core/ops/linear.hpp"
#include "core/model/parameter_group.hpp"
#include "core/model/sequence_shards.hpp"

#include <string>

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
// (P = 1: qkv_heads and att_heads are qkv and att themselves).
template <class T, class MemorySpace>
struct BlockActivations {
  Tensor2<T, MemorySpace> ln1;                 // [N, C]
  Tensor1<T, MemorySpace> ln1_mean, ln1_rstd;  // [N]
  Tensor2<T, MemorySpace> qkv;                 // [N, 3C]
  Tensor2<T, MemorySpace> att;                 // [N, C]
  Tensor2<T, MemorySpace> att_lse;             // [B*H/P, S]
  Tensor2<T, MemorySpace> qkv_heads;           // [B*S, 3C/P]  this rank's heads, every token
  Tensor2<T, MemorySpace> att_heads;           // [B*S, C/P]
  Tensor2<T, MemorySpace> x2;                  // [N, C]  residual stream after attention
  Tensor2<T, MemorySpace> ln2;                 // [N, C]
  Tensor1<T, MemorySpace> ln2_mean, ln2_rstd;  // [N]
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

// Scratch for the backward pass; one set can serve every block in turn.
template <class T, class MemorySpace>
struct BlockWorkspace {
  Tensor2<T, MemorySpace> d_x2;    // [N, C]
  Tensor2<T, MemorySpace> d_ln;    // [N, C]
  Tensor2<T, MemorySpace> d_att;   // [N, C]
  Tensor2<T, MemorySpace> d_qkv;   // [N, 3C]
  Tensor2<T, MemorySpace> d_fc;    // [N, M]
  Tensor2<T, MemorySpace> delta;   // [B*H/P, S]
  Tensor2<T, MemorySpace> d_qkv_heads, d_att_heads;  // [B*S, 3C/P], [B*S, C/P] (P = 1: d_qkv, d_att)

  BlockWorkspace() = default;
  explicit BlockWorkspace(BlockShape const& s, std::string const& prefix = "block") {
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
  }
};

// y [N, C] = block(x [N, C]). With s.shards > 1, `exchange` runs the Ulysses all-to-alls.
template <class ExecutionSpace, class T, class MemorySpace, class Y, class X>
void block_forward(ExecutionSpace const& space, BlockShape const& s, Y const& y,
                   BlockActivations<T, MemorySpace> const& a,
                   BlockParameters<T, MemorySpace> const& p, X const& x,
                   SequenceExchange<T, MemorySpace> const* exchange = nullptr) {
  compat::ScopedRegion region(space, "joule::block_forward");
  layernorm_forward(space, a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1_weight, p.ln1_bias);
  linear_forward(space, a.qkv, a.ln1, p.qkv_weight, p.qkv_bias);
  require(s.shards == 1 || exchange != nullptr, "block_forward", "sequence shards need an exchange");
  if (s.shards > 1 && exchange != nullptr) {
    exchange->to_heads(space, a.qkv_heads, a.qkv, 3);
    attention_forward(space, a.att_heads, a.att_lse, a.qkv_heads, s.batch, s.local_heads(), s.mask);
    exchange->to_local(space, a.att, a.att_heads, 1);
  } else {
    attention_forward(space, a.att, a.att_lse, a.qkv, s.batch, s.heads, s.mask);
  }
  linear_forward(space, a.x2, a.att, p.proj_weight, p.proj_bias);
  residual_forward(space, a.x2, a.x2, x);
  layernorm_forward(space, a.ln2, a.ln2_mean, a.ln2_rstd, a.x2, p.ln2_weight, p.ln2_bias);
  linear_forward(space, a.fc, a.ln2, p.fc_weight, p.fc_bias);
  gelu_forward(space, a.fc_gelu, a.fc);
  linear_forward(space, y, a.fc_gelu, p.fc_proj_weight, p.fc_proj_bias);
  residual_forward(space, y, y, a.x2);
}

// d_x (overwritten) and parameter gradients `g` (accumulated) from d_y.
template <class ExecutionSpace, class T, class MemorySpace, class DX, class DY, class X>
void block_backward(ExecutionSpace const& space, BlockShape const& s, DX const& d_x,
                    BlockParameters<T, MemorySpace> const& g, BlockWorkspace<T, MemorySpace> const& w,
                    DY const& d_y, X const& x, BlockActivations<T, MemorySpace> const& a,
                    BlockParameters<T, MemorySpace> const& p,
                    SequenceExchange<T, MemorySpace> const* exchange = nullptr) {
  compat::ScopedRegion region(space, "joule::block_backward");
  // MLP branch, then the skip connection around it.
  linear_backward(space, w.d_fc, g.fc_proj_weight, g.fc_proj_bias, d_y, a.fc_gelu, p.fc_proj_weight);
  gelu_backward(space, w.d_fc, w.d_fc, a.fc);
  linear_backward(space, w.d_ln, g.fc_weight, g.fc_bias, w.d_fc, a.ln2, p.fc_weight);
  layernorm_backward(space, w.d_x2, g.ln2_weight, g.ln2_bias, w.d_ln, a.x2, p.ln2_weight,
                     a.ln2_mean, a.ln2_rstd);
  residual_backward(space, w.d_x2, d_y);
  // Attention branch, then the skip connection around it.
  linear_backward(space, w.d_att, g.proj_weight, g.proj_bias, w.d_x2, a.att, p.proj_weight);
  require(s.shards == 1 || exchange != nullptr, "block_backward", "sequence shards need an exchange");
  if (s.shards > 1 && exchange != nullptr) {
    exchange->to_heads(space, w.d_att_heads, w.d_att, 1);
    attention_backward(space, w.d_qkv_heads, w.delta, w.d_att_heads, a.qkv_heads, a.att_heads,
                       a.att_lse, s.batch, s.local_heads(), s.mask);
    exchange->to_local(space, w.d_qkv, w.d_qkv_heads, 3);
  } else {
    attention_backward(space, w.d_qkv, w.delta, w.d_att, a.qkv, a.att, a.att_lse, s.batch, s.heads,
                       s.mask);
  }
  linear_backward(space, w.d_ln, g.qkv_weight, g.qkv_bias, w.d_qkv, a.ln1, p.qkv_weight);
  layernorm_backward(space, d_x, g.ln1_weight, g.ln1_bias, w.d_ln, x, p.ln1_weight, a.ln1_mean,
                     a.ln1_rstd);
  residual_backward(space, d_x, w.d_x2);
}

}  // namespace joule
