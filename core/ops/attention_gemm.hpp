#pragma once
// Attention on tensor cores: the same operator as core/ops/attention.hpp (same arguments, mask rule,
// lse and delta), computed as per-head batched bf16 GEMMs (cuBLASLt's strided batches on CUDA:
// Hopper's tensor cores) around row kernels that keep every statistic in fp32:
//
//   forward   q, k, v  = the heads of qkv, packed [B*H, S, hd] (bf16)
//             scores   = q k^T / sqrt(hd)                        [B*H, S, ld] fp32   (GEMM)
//             lse, p   = each row's log-sum-exp over the keys it sees, p = exp(s - lse) (bf16; 0 past the mask)
//             o        = p v                                      -> out [B*S, C]     (GEMM)
//   backward  delta    = rowsum(d_out * out) (fp32), scores again, p = exp(s - lse)
//             dv = p^T dO, dp = dO v^T (fp32), ds = p (dp - delta) (bf16), dq = ds k / sqrt(hd),
//             dk = ds^T q / sqrt(hd)                              -> d_qkv [B*S, 3C]   (GEMMs)
//
// Unlike the fused kernel it forms the S x S scores of every head (fp32, plus as many bf16 for p
// and ds; ld = S rounded up to 8 so that every row of p starts 16-byte aligned, as tensor-core
// loads want): B*H*S*ld*6 bytes of workspace, sized once by AttentionGemmWorkspace. Masked keys
// are still multiplied (the GEMMs are dense); their probabilities are exact zeros.
// Where bf16 GEMMs widen to fp32 (CPUs) this path runs too, GEMM by GEMM: the tests check it there.
#include "core/ops/attention.hpp"
#include "core/ops/attention_gemm_workspace.hpp"
#include "core/ops/detail/packs.hpp"
#include "core/detail/row_kernels.hpp"
#include "core/detail/vector_math.hpp"
#include "core/precision/gemm.hpp"

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>

namespace joule {

namespace detail {

// The packed form of move_heads below: rows [rows, parts*C] contiguous bf16 at `flat`.
template <bool ToHeads, class ExecutionSpace>
void move_head_packs(ExecutionSpace const& space, char const* name, bf16* flat, int rows, int parts,
                     AttentionShape const& s, bf16* a, bf16* b, bf16* c) {
  constexpr int W = 8;  // bf16 per 16-byte pack
  int const seq = s.seq, heads = s.heads, hd = s.head_dim, channels = s.channels, per_row = parts * channels / W;
  auto const work = streaming_work(double(rows) * parts * channels, 2, 2, 0, 16, WorkKind::copy);
  for_each_pack(space, name, work, (long long)(rows) * per_row, KOKKOS_LAMBDA(long long p) {
    int const r = int(p / per_row), j = int(p - (long long)(r) * per_row) * W;
    int const part = j / channels, col = j - part * channels, h = col / hd, d = col - h * hd;
    int const batch = r / seq, i = r - batch * seq;
    bf16* const packed = part == 0 ? a : part == 1 ? b : c;
    std::size_t const at = (std::size_t(batch * heads + h) * seq + i) * hd + d;
    bf16* const row_at = flat + std::size_t(r) * parts * channels + j;
    if (ToHeads)
      store_pack(packed + at, load_pack<W>(row_at));
    else
      store_pack(row_at, load_pack<W>(packed + at));
  });
}

// Between the rows of qkv-like matrices [B*S, parts*C] (heads side by side in each part) and
// packed heads [B*H, S, hd] (part 0 in a, 1 in b, 2 in c). Where the rows are contiguous bf16 and
// 16-byte aligned (every tensor the model passes; head sizes are multiples of 8), one thread per 8
// elements of a head's run (one 16-byte load and store each: packs.hpp); elsewhere one thread per
// element, neighbours on neighbouring columns. Either way coalesced on both sides.
template <bool ToHeads, class ExecutionSpace, class Rows>
void move_heads(ExecutionSpace const& space, char const* name, Rows const& rows, int parts, AttentionShape const& s,
                bf16* a, bf16* b, bf16* c) {
  int const seq = s.seq, heads = s.heads, hd = s.head_dim, channels = s.channels;
  using R = typename Rows::non_const_value_type;
  int const row_bytes = sizeof(R);
  double const elements = double(rows.extent(0)) * parts * channels;
  if constexpr (std::is_same_v<R, bf16>) {
    constexpr int W = 8;
    if (hd % W == 0 && rows.span_is_contiguous() && rows.span() == std::size_t(elements) &&
        pack_aligned<W>(rows.data()) && pack_aligned<W>(a) && (!b || pack_aligned<W>(b)) && (!c || pack_aligned<W>(c)))
      // (rows are only read when ToHeads)
      return move_head_packs<ToHeads>(space, name, const_cast<bf16*>(rows.data()), int(rows.extent(0)), parts, s, a, b,
                                      c);
  }
  auto const work = streaming_work(elements, ToHeads ? row_bytes : 2, ToHeads ? 2 : row_bytes, 0, ToHeads ? row_bytes : 2,
                                   WorkKind::copy);
  for_each_element(space, name, work, int(rows.extent(0)), parts * channels, KOKKOS_LAMBDA(int r, int j) {
    int const part = j / channels, col = j - part * channels, h = col / hd, d = col - h * hd;
    int const batch = r / seq, i = r - batch * seq;
    bf16* const packed = part == 0 ? a : part == 1 ? b : c;
    std::size_t const at = (std::size_t(batch * heads + h) * seq + i) * hd + d;
    auto&& element = rows(r, j);  // (nvcc: a device lambda may not first capture in an if constexpr)
    if constexpr (ToHeads)
      packed[at] = narrow<bf16>(widen(element));
    else
      element = narrow<typename Rows::non_const_value_type>(widen(packed[at]));
  });
}

// Forward: each score row's log-sum-exp over the keys it sees, and p = exp(s - lse) (0 past them).
template <class ExecutionSpace, class Lse, class MemorySpace>
void attention_softmax_rows(ExecutionSpace const& space, AttentionShape const& s, Lse const& lse,
                            AttentionGemmWorkspace<MemorySpace> const& w) {
  int const seq = s.seq, open = s.open_prefix, ld = w.ld;
  float const* const scores = w.scores.data();
  bf16* const probs = w.probs.data();
  // the visible scores read (the row stays in L1 between its sweeps), p written whole, lse
  double const pairs = attention_visible_pairs(s), rows = double(w.batch_heads) * seq;
  KernelWork work = streaming_work(pairs, 4, 0, 4, 4);
  work.bytes += rows * seq * sizeof(bf16) + rows * 4;
  for_each_row(space, "attention_gemm_softmax", work, w.batch_heads * seq,
               KOKKOS_LAMBDA(RowMember<ExecutionSpace> const& team, int row) {
    int const i = row % seq, end = attention_key_end(i, seq, open);
    float const* const sr = scores + std::size_t(row) * ld;
    bf16* const pr = probs + std::size_t(row) * ld;
    float const m = vector_max<ExecutionSpace, float>(team, end, [&](int j) { return sr[j]; });
    float const sum = vector_sum<ExecutionSpace, float>(team, end, [&](int j) { return exp_of<ExecutionSpace>(sr[j] - m); });
    float const row_lse = m + math::log(sum);
    vector_for(team, seq, [&](int j) { pr[j] = narrow<bf16>(j < end ? exp_of<ExecutionSpace>(sr[j] - row_lse) : 0.0f); });
    once_per_row(team, [&]() { lse(row / seq, i) = row_lse; });
  });
}

// Backward: p = exp(s - lse) again (Dp = false), or ds = p (dp - delta) in place of p (Dp = true;
// the scores then hold dp). No reduction: one thread per 4 columns of a row (a 16-byte load of
// scores, an 8-byte load and store of p: packs.hpp), the whole padded row (columns past the
// sequence get 0; the GEMMs never read them). The same bits as element by element.
template <bool Dp, class ExecutionSpace, class Stats, class MemorySpace>
void attention_gemm_rows(ExecutionSpace const& space, char const* name, AttentionShape const& s, Stats const& stats,
                         AttentionGemmWorkspace<MemorySpace> const& w) {
  constexpr int W = 4;  // fp32 scores per 16-byte pack
  int const seq = s.seq, open = s.open_prefix, ld = w.ld, per_row = ld / W;
  require(ld % W == 0 && ld >= seq && pack_aligned<W>(w.scores.data()) && pack_aligned<W>(w.probs.data()), name,
          "score rows of " + std::to_string(ld) + " elements cannot go by packs of " + std::to_string(W));
  float const* const scores = w.scores.data();
  bf16* const probs = w.probs.data();
  // the visible scores (and p for ds) read, p or ds written over whole padded rows
  double const pairs = attention_visible_pairs(s), rows = double(w.batch_heads) * seq;
  KernelWork work = streaming_work(pairs, Dp ? 4 + sizeof(bf16) : 4, 0, 2, W * (Dp ? 4 + sizeof(bf16) : 4));
  work.bytes += rows * ld * sizeof(bf16) + rows * 4;
  for_each_pack(space, name, work, (long long)(w.batch_heads) * seq * per_row, KOKKOS_LAMBDA(long long p) {
    long long const row = p / per_row;
    int const j0 = int(p - row * per_row) * W;
    int const i = int(row % seq), end = attention_key_end(i, seq, open);
    std::size_t const at = std::size_t(row) * ld + j0;
    float const stat = stats(int(row / seq), i);
    Pack<bf16, W> out;
    if (j0 >= end) {
      for (int k = 0; k < W; ++k) out.v[k] = narrow<bf16>(0.0f);
    } else {
      auto const sr = load_pack<W>(scores + at);
      Pack<bf16, W> pr{};
      if (Dp) pr = load_pack<W>(probs + at);
      for (int k = 0; k < W; ++k) {
        float value = 0.0f;
        if (j0 + k < end) value = Dp ? widen(pr.v[k]) * (sr.v[k] - stat) : exp_of<ExecutionSpace>(sr.v[k] - stat);
        out.v[k] = narrow<bf16>(value);
      }
    }
    store_pack(probs + at, out);
  });
}

template <class MemorySpace>
AttentionShape attention_gemm_shape(char const* op, int rows, int qkv_cols, int batch, int n_heads,
                                    AttentionMask const& mask, AttentionGemmWorkspace<MemorySpace> const& w) {
  auto const s = attention_shape(op, rows, qkv_cols, batch, n_heads, mask);
  require(w.allocated() && w.batch_heads == s.batch * s.heads && w.seq == s.seq && w.head_dim == s.head_dim, op,
          "the tensor-core workspace is for " + std::to_string(w.batch_heads) + " heads of " + std::to_string(w.seq) +
              " tokens, head size " + std::to_string(w.head_dim) + "; this call has " +
              std::to_string(s.batch * s.heads) + " of " + std::to_string(s.seq) + ", head size " +
              std::to_string(s.head_dim));
  return s;
}

template <class T>
MatrixBatch<T> heads_of(T* data, AttentionShape const& s) {
  return {data, s.seq, s.head_dim, s.head_dim, (long long)s.seq * s.head_dim};
}
template <class T, class MemorySpace>
MatrixBatch<T> squares_of(T* data, AttentionShape const& s, AttentionGemmWorkspace<MemorySpace> const& w) {
  return {data, s.seq, s.seq, w.ld, (long long)s.seq * w.ld};
}

// The model's FLOPs of one of the batched GEMMs (every one is [S x S] by [S x hd] per head, over
// the pairs the mask lets through).
inline double attention_gemm_flops(AttentionShape const& s) {
  return 2.0 * s.head_dim * attention_visible_pairs(s);
}

}  // namespace detail

// out [B*S, C] and lse [B*H, S] from qkv [B*S, 3C], all bf16 but lse (fp32): core/ops/attention.hpp's
// attention_forward through batched GEMMs.
template <class ExecutionSpace, class Out, class Lse, class Qkv, class MemorySpace>
void attention_forward_gemm(ExecutionSpace const& space, Out const& out, Lse const& lse, Qkv const& qkv, int batch,
                            int n_heads, AttentionMask const& mask, AttentionGemmWorkspace<MemorySpace> const& w) {
  static_assert(std::is_same_v<typename Qkv::non_const_value_type, bf16> &&
                    std::is_same_v<typename Out::non_const_value_type, bf16>,
                "attention_forward_gemm: qkv and out are bf16");
  auto const s = detail::attention_gemm_shape("attention_forward_gemm", int(qkv.extent(0)), int(qkv.extent(1)), batch,
                                              n_heads, mask, w);
  detail::check_attention_forward_views("attention_forward_gemm", s, out, lse, qkv);
  float const scale = float(detail::attention_scale(s.head_dim));
  double const product = detail::attention_gemm_flops(s);
  int const bh = w.batch_heads;
  using detail::heads_of;
  using detail::squares_of;
  detail::CountAs const attention(detail::WorkKind::attention);
  detail::move_heads<true>(space, "attention_gemm_pack_qkv", qkv, 3, s, w.q.data(), w.k.data(), w.v.data());
  gemm_bf16_batched(space, "N", "T", scale, heads_of<bf16 const>(w.q.data(), s), heads_of<bf16 const>(w.k.data(), s),
                    0.0f, squares_of(w.scores.data(), s, w), bh, w.gemm, product);
  detail::attention_softmax_rows(space, s, lse, w);
  gemm_bf16_batched(space, "N", "N", 1.0f, squares_of<bf16 const>(w.probs.data(), s, w),
                    heads_of<bf16 const>(w.v.data(), s), 0.0f, heads_of(w.o.data(), s), bh, w.gemm, product);
  detail::move_heads<false>(space, "attention_gemm_unpack_out", out, 1, s, w.o.data(), nullptr, nullptr);
}

// d_qkv (overwritten) from d_out: core/ops/attention.hpp's attention_backward through batched GEMMs.
template <class ExecutionSpace, class DQkv, class Delta, class DOut, class Qkv, class Out, class Lse, class MemorySpace>
void attention_backward_gemm(ExecutionSpace const& space, DQkv const& d_qkv, Delta const& delta, DOut const& d_out,
                             Qkv const& qkv, Out const& out, Lse const& lse, int batch, int n_heads,
                             AttentionMask const& mask, AttentionGemmWorkspace<MemorySpace> const& w) {
  static_assert(std::is_same_v<typename Qkv::non_const_value_type, bf16> &&
                    std::is_same_v<typename DQkv::non_const_value_type, bf16>,
                "attention_backward_gemm: qkv and d_qkv are bf16");
  auto const s = detail::attention_gemm_shape("attention_backward_gemm", int(qkv.extent(0)), int(qkv.extent(1)),
                                              batch, n_heads, mask, w);
  detail::check_attention_backward_views("attention_backward_gemm", s, d_qkv, delta, d_out, qkv, out, lse);
  float const scale = float(detail::attention_scale(s.head_dim));
  double const product = detail::attention_gemm_flops(s);
  int const bh = w.batch_heads;
  using detail::heads_of;
  using detail::squares_of;
  detail::CountAs const attention(detail::WorkKind::attention);
  switch (s.head_dim) {  // the fused path's delta kernel (a warp per token row)
    case 16: detail::attention_delta<16>(space, s, delta, d_out, out); break;
    case 32: detail::attention_delta<32>(space, s, delta, d_out, out); break;
    case 64: detail::attention_delta<64>(space, s, delta, d_out, out); break;
    case 128: detail::attention_delta<128>(space, s, delta, d_out, out); break;
  }
  detail::move_heads<true>(space, "attention_gemm_pack_qkv", qkv, 3, s, w.q.data(), w.k.data(), w.v.data());
  detail::move_heads<true>(space, "attention_gemm_pack_dout", d_out, 1, s, w.o.data(), nullptr, nullptr);
  auto const q = heads_of<bf16 const>(w.q.data(), s), k = heads_of<bf16 const>(w.k.data(), s),
             v = heads_of<bf16 const>(w.v.data(), s), d_o = heads_of<bf16 const>(w.o.data(), s);
  auto const p = squares_of<bf16 const>(w.probs.data(), s, w);
  gemm_bf16_batched(space, "N", "T", scale, q, k, 0.0f, squares_of(w.scores.data(), s, w), bh, w.gemm, product);
  detail::attention_gemm_rows<false>(space, "attention_gemm_probs", s, lse, w);
  gemm_bf16_batched(space, "T", "N", 1.0f, p, d_o, 0.0f, heads_of(w.dv.data(), s), bh, w.gemm, product);       // dv = p^T dO
  gemm_bf16_batched(space, "N", "T", 1.0f, d_o, v, 0.0f, squares_of(w.scores.data(), s, w), bh, w.gemm, product);  // dp = dO v^T
  detail::attention_gemm_rows<true>(space, "attention_gemm_dscores", s, delta, w);                      // ds, over p
  gemm_bf16_batched(space, "N", "N", scale, p, k, 0.0f, heads_of(w.dq.data(), s), bh, w.gemm, product);       // dq = ds k
  gemm_bf16_batched(space, "T", "N", scale, p, q, 0.0f, heads_of(w.dk.data(), s), bh, w.gemm, product);       // dk = ds^T q
  detail::move_heads<false>(space, "attention_gemm_unpack_dqkv", d_qkv, 3, s, w.dq.data(), w.dk.data(), w.dv.data());
}

}  // namespace joule
