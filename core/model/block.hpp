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

#include <string>

namespace joule {

struct BlockShape {
  int batch = 1, seq = 1, channels = 1, heads = 1, mlp_hidden = 4;
  AttentionMask mask = AttentionMask::causal();
  int tokens() const { return batch * seq; }
};

// C = channels, M = mlp_hidden.
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

  BlockParameters() = default;
  BlockParameters(std::string const& prefix, BlockShape const& s) {
    int const c = s.channels, m = s.mlp_hidden;
    auto const name = [&](char const* n) { return label((prefix + n).c_str()); };
    ln1_weight = decltype(ln1_weight)(name("ln1.weight"), c);
    ln1_bias = decltype(ln1_bias)(name("ln1.bias"), c);
    qkv_weight = decltype(qkv_weight)(name("attn.qkv.weight"), 3 * c, c);
    qkv_bias = decltype(qkv_bias)(name("attn.qkv.bias"), 3 * c);
    proj_weight = decltype(proj_weight)(name("attn.proj.weight"), c, c);
    proj_bias = decltype(proj_bias)(name("attn.proj.bias"), c);
    ln2_weight = decltype(ln2_weight)(name("ln2.weight"), c);
    ln2_bias = decltype(ln2_bias)(name("ln2.bias"), c);
    fc_weight = decltype(fc_weight)(name("mlp.fc.weight"), m, c);
    fc_bias = decltype(fc_bias)(name("mlp.fc.bias"), m);
    fc_proj_weight = decltype(fc_proj_weight)(name("mlp.proj.weight"), c, m);
    fc_proj_bias = decltype(fc_proj_bias)(name("mlp.proj.bias"), c);
  }

  // Visits every tensor with its PyTorch-style name (without prefix), in a fixed order.
  template <class F>
  void for_each(F&& f) const {
    f("ln1.weight", ln1_weight);
    f("ln1.bias", ln1_bias);
    f("attn.qkv.weight", qkv_weight);
    f("attn.qkv.bias", qkv_bias);
    f("attn.proj.weight", proj_weight);
    f("attn.proj.bias", proj_bias);
    f("ln2.weight", ln2_weight);
    f("ln2.bias", ln2_bias);
    f("mlp.fc.weight", fc_weight);
    f("mlp.fc.bias", fc_bias);
    f("mlp.proj.weight", fc_proj_weight);
    f("mlp.proj.bias", fc_proj_bias);
  }
};

// What the forward pass keeps for the backward pass. N = B*S tokens, H heads.
template <class T, class MemorySpace>
struct BlockActivations {
  Tensor2<T, MemorySpace> ln1;                 // [N, C]
  Tensor1<T, MemorySpace> ln1_mean, ln1_rstd;  // [N]
  Tensor2<T, MemorySpace> qkv;                 // [N, 3C]
  Tensor2<T, MemorySpace> att;                 // [N, C]
  Tensor2<T, MemorySpace> att_lse;             // [B*H, S]
  Tensor2<T, MemorySpace> x2;                  // [N, C]  residual stream after attention
  Tensor2<T, MemorySpace> ln2;                 // [N, C]
  Tensor1<T, MemorySpace> ln2_mean, ln2_rstd;  // [N]
  Tensor2<T, MemorySpace> fc;                  // [N, M]  before GELU
  Tensor2<T, MemorySpace> fc_gelu;             // [N, M]

  BlockActivations() = default;
  explicit BlockActivations(BlockShape const& s) {
    int const n = s.tokens(), c = s.channels, m = s.mlp_hidden;
    ln1 = decltype(ln1)(label("block.ln1"), n, c);
    ln1_mean = decltype(ln1_mean)(label("block.ln1_mean"), n);
    ln1_rstd = decltype(ln1_rstd)(label("block.ln1_rstd"), n);
    qkv = decltype(qkv)(label("block.qkv"), n, 3 * c);
    att = decltype(att)(label("block.att"), n, c);
    att_lse = decltype(att_lse)(label("block.att_lse"), s.batch * s.heads, s.seq);
    x2 = decltype(x2)(label("block.x2"), n, c);
    ln2 = decltype(ln2)(label("block.ln2"), n, c);
    ln2_mean = decltype(ln2_mean)(label("block.ln2_mean"), n);
    ln2_rstd = decltype(ln2_rstd)(label("block.ln2_rstd"), n);
    fc = decltype(fc)(label("block.fc"), n, m);
    fc_gelu = decltype(fc_gelu)(label("block.fc_gelu"), n, m);
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
  Tensor2<T, MemorySpace> delta;   // [B*H, S]

  BlockWorkspace() = default;
  explicit BlockWorkspace(BlockShape const& s) {
    int const n = s.tokens(), c = s.channels, m = s.mlp_hidden;
    d_x2 = decltype(d_x2)(label("block.d_x2"), n, c);
    d_ln = decltype(d_ln)(label("block.d_ln"), n, c);
    d_att = decltype(d_att)(label("block.d_att"), n, c);
    d_qkv = decltype(d_qkv)(label("block.d_qkv"), n, 3 * c);
    d_fc = decltype(d_fc)(label("block.d_fc"), n, m);
    delta = decltype(delta)(label("block.delta"), s.batch * s.heads, s.seq);
  }
};

// y [N, C] = block(x [N, C])
template <class ExecutionSpace, class T, class MemorySpace, class Y, class X>
void block_forward(ExecutionSpace const& space, BlockShape const& s, Y const& y,
                   BlockActivations<T, MemorySpace> const& a,
                   BlockParameters<T, MemorySpace> const& p, X const& x) {
  compat::ScopedRegion region("joule::block_forward");
  layernorm_forward(space, a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1_weight, p.ln1_bias);
  linear_forward(space, a.qkv, a.ln1, p.qkv_weight, p.qkv_bias);
  attention_forward(space, a.att, a.att_lse, a.qkv, s.batch, s.heads, s.mask);
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
                    BlockParameters<T, MemorySpace> const& p) {
  compat::ScopedRegion region("joule::block_backward");
  // MLP branch, then the skip connection around it.
  linear_backward(space, w.d_fc, g.fc_proj_weight, g.fc_proj_bias, d_y, a.fc_gelu, p.fc_proj_weight);
  gelu_backward(space, w.d_fc, w.d_fc, a.fc);
  linear_backward(space, w.d_ln, g.fc_weight, g.fc_bias, w.d_fc, a.ln2, p.fc_weight);
  layernorm_backward(space, w.d_x2, g.ln2_weight, g.ln2_bias, w.d_ln, a.x2, p.ln2_weight,
                     a.ln2_mean, a.ln2_rstd);
  residual_backward(space, w.d_x2, d_y);
  // Attention branch, then the skip connection around it.
  linear_backward(space, w.d_att, g.proj_weight, g.proj_bias, w.d_x2, a.att, p.proj_weight);
  attention_backward(space, w.d_qkv, w.delta, w.d_att, a.qkv, a.att, a.att_lse, s.batch, s.heads,
                     s.mask);
  linear_backward(space, w.d_ln, g.qkv_weight, g.qkv_bias, w.d_qkv, a.ln1, p.qkv_weight);
  layernorm_backward(space, d_x, g.ln1_weight, g.ln1_bias, w.d_ln, x, p.ln1_weight, a.ln1_mean,
                     a.ln1_rstd);
  residual_backward(space, d_x, w.d_x2);
}

}  // namespace joule
