#pragma once
// Fused multi-head attention, flash-style.
//
//   qkv  [B*S, 3C]  rows = tokens; columns [0,C) queries, [C,2C) keys, [2C,3C) values, each split
//                   into H heads of hd = C/H columns (PyTorch's qkv.split(C) then view(B,S,H,hd))
//   out  [B*S, C]   softmax(q k^T / sqrt(hd) + mask) v, heads side by side
//   lse  [B*H, S]   log-sum-exp of each score row, saved for the backward pass
//
// The forward pass is tiled over keys with an online softmax: no S x S matrix is ever formed.
// The backward pass recomputes the probabilities tile by tile from lse and runs as two
// race-free kernels (one owns dK/dV of a key tile, one owns dQ of a query tile), so it needs no
// atomics and gives the same bits every run.
//
// Masks: every mode is "query i sees keys [0, key_end(i))", key_end(i) = min(S, max(i+1, p)):
//   none       p = S
//   causal     p = 0
//   prefix(n)  p = n: the first n tokens (the image) see each other freely; every later token
//              sees everything before it and itself; image tokens never see text.
#include "core/ops/attention_mask.hpp"
#include "core/ops/detail/attention_kernels.hpp"
#include "core/tensor.hpp"

#include <string>

namespace joule {


// Head sizes with a compiled kernel.
inline bool attention_supports_head_dim(int hd) {
  return hd == 16 || hd == 32 || hd == 64 || hd == 128;
}

namespace detail {
inline AttentionShape attention_shape(char const* op, int rows, int qkv_cols, int batch,
                                      int n_heads, AttentionMask const& mask) {
  require(batch > 0 && n_heads > 0 && rows % batch == 0, op,
          "qkv has " + std::to_string(rows) + " rows, not a multiple of batch " +
              std::to_string(batch));
  require(qkv_cols % 3 == 0 && (qkv_cols / 3) % n_heads == 0, op,
          "qkv has " + std::to_string(qkv_cols) + " columns; expected 3*C with C divisible by " +
              std::to_string(n_heads) + " heads");
  AttentionShape s;
  s.batch = batch;
  s.seq = rows / batch;
  s.heads = n_heads;
  s.channels = qkv_cols / 3;
  s.head_dim = s.channels / n_heads;
  s.open_prefix = mask.open_prefix(s.seq);
  require(attention_supports_head_dim(s.head_dim), op,
          "head size " + std::to_string(s.head_dim) + " has no kernel; supported: 16, 32, 64, 128");
  return s;
}

// The views' shapes against the call's: one check for every attention path (op names the caller).
template <class Out, class Lse, class Qkv>
void check_attention_forward_views(char const* op, AttentionShape const& s, Out const& out, Lse const& lse,
                                   Qkv const& qkv) {
  require(out.extent(0) == qkv.extent(0) && int(out.extent(1)) == s.channels &&
              int(lse.extent(0)) == s.batch * s.heads && int(lse.extent(1)) == s.seq,
          op, "qkv " + shape_of(qkv) + ", out " + shape_of(out) + ", lse " + shape_of(lse) +
                  " (expected lse [B*H, S])");
}

template <class DQkv, class Delta, class DOut, class Qkv, class Out, class Lse>
void check_attention_backward_views(char const* op, AttentionShape const& s, DQkv const& d_qkv, Delta const& delta,
                                    DOut const& d_out, Qkv const& qkv, Out const& out, Lse const& lse) {
  require(d_qkv.extent(0) == qkv.extent(0) && d_qkv.extent(1) == qkv.extent(1) &&
              d_out.extent(0) == out.extent(0) && d_out.extent(1) == out.extent(1) &&
              out.extent(0) == qkv.extent(0) && int(out.extent(1)) == s.channels &&
              delta.extent(0) == lse.extent(0) && delta.extent(1) == lse.extent(1) &&
              int(lse.extent(0)) == s.batch * s.heads && int(lse.extent(1)) == s.seq,
          op, "qkv " + shape_of(qkv) + ", d_qkv " + shape_of(d_qkv) + ", out " + shape_of(out) + ", d_out " +
                  shape_of(d_out) + ", lse " + shape_of(lse) + ", delta " + shape_of(delta));
}

}  // namespace detail

namespace detail {
// Block: the GPU-shaped kernels (256-thread blocks) on any backend, else the host kernels; the
// public functions below pick by backend (attention_block_default), the tests run both on the CPU.
template <bool Block, class ExecutionSpace, class Out, class Lse, class Qkv>
void attention_forward_as(ExecutionSpace const& space, Out const& out, Lse const& lse, Qkv const& qkv,
                          int batch, int n_heads, AttentionMask const& mask) {
  auto const s = attention_shape("attention_forward", qkv.extent(0), qkv.extent(1), batch,
                                 n_heads, mask);
  check_attention_forward_views("attention_forward", s, out, lse, qkv);
  switch (s.head_dim) {
    case 16: launch_attention_forward<16, Block>(space, s, out, lse, qkv); break;
    case 32: launch_attention_forward<32, Block>(space, s, out, lse, qkv); break;
    case 64: launch_attention_forward<64, Block>(space, s, out, lse, qkv); break;
    case 128: launch_attention_forward<128, Block>(space, s, out, lse, qkv); break;
  }
}

template <bool Block, class ExecutionSpace, class DQkv, class Delta, class DOut, class Qkv, class Out,
          class Lse>
void attention_backward_as(ExecutionSpace const& space, DQkv const& d_qkv, Delta const& delta,
                           DOut const& d_out, Qkv const& qkv, Out const& out, Lse const& lse,
                           int batch, int n_heads, AttentionMask const& mask) {
  auto const s = attention_shape("attention_backward", qkv.extent(0), qkv.extent(1), batch,
                                 n_heads, mask);
  check_attention_backward_views("attention_backward", s, d_qkv, delta, d_out, qkv, out, lse);
  switch (s.head_dim) {
    case 16: launch_attention_backward<16, Block>(space, s, d_qkv, delta, d_out, qkv, out, lse); break;
    case 32: launch_attention_backward<32, Block>(space, s, d_qkv, delta, d_out, qkv, out, lse); break;
    case 64: launch_attention_backward<64, Block>(space, s, d_qkv, delta, d_out, qkv, out, lse); break;
    case 128: launch_attention_backward<128, Block>(space, s, d_qkv, delta, d_out, qkv, out, lse); break;
  }
}

}  // namespace detail

template <class ExecutionSpace, class Out, class Lse, class Qkv>
void attention_forward(ExecutionSpace const& space, Out const& out, Lse const& lse, Qkv const& qkv,
                       int batch, int n_heads, AttentionMask const& mask) {
  detail::attention_forward_as<detail::attention_block_default<ExecutionSpace>()>(space, out, lse, qkv, batch,
                                                                                  n_heads, mask);
}

// d_qkv is overwritten. delta [B*H, S] is workspace (rowsum(d_out * out) per head).
template <class ExecutionSpace, class DQkv, class Delta, class DOut, class Qkv, class Out,
          class Lse>
void attention_backward(ExecutionSpace const& space, DQkv const& d_qkv, Delta const& delta,
                        DOut const& d_out, Qkv const& qkv, Out const& out, Lse const& lse,
                        int batch, int n_heads, AttentionMask const& mask) {
  detail::attention_backward_as<detail::attention_block_default<ExecutionSpace>()>(
      space, d_qkv, delta, d_out, qkv, out, lse, batch, n_heads, mask);
}

}  // namespace joule
