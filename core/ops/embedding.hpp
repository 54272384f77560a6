#pragma once
// Token embedding (gather from wte[V, C]) and learned position embedding (wpe[S_max, C]).
// Activations are [B*S, C] with row = b * seq_len + t.
//
// The token-embedding backward is a scatter-add: many rows can carry the same token. Instead of
// float atomics (non-deterministic order), the rows are sorted by token (a stable counting sort),
// each token's rows summed in fixed pieces, the pieces in order (token_embedding_backward):
// race-free on every backend and bitwise reproducible.
//
// Precision: activations and their gradients may be bf16 with fp32 (or bf16) tables; every
// element is widened as read, sums and parameter gradients are in the gradients' type (fp32), and
// each activation is rounded once as stored.
#include "core/ops/embedding_workspace.hpp"
#include "core/ops/detail/column_sum.hpp"
#include "core/detail/row_kernels.hpp"
#include "core/precision/bf16.hpp"
#include "core/tensor.hpp"

#include <string>

namespace joule {

// Who checks that every token is in [0, V): the operator, on the device (a wait for the host), or
// the caller, who had the tokens on the host (the model checks its staged batch).
enum class TokenCheck { on_device, by_caller };

namespace detail {
// Throws, naming `op`, if a token is outside [0, vocab): a device reduction the host waits for.
template <class ExecutionSpace, class Tokens>
void check_tokens_on_device(ExecutionSpace const& space, char const* op, Tokens const& tokens, int vocab) {
  int bad = 0;
  Kokkos::parallel_reduce(
      label("embedding_check_tokens"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, tokens.extent(0)),
      KOKKOS_LAMBDA(int r, int& count) { count += (tokens(r) < 0 || tokens(r) >= vocab) ? 1 : 0; }, bad);
  require(bad == 0, op, std::to_string(bad) + " token(s) outside the vocabulary [0, " + std::to_string(vocab) + ")");
}
}  // namespace detail

// out[r, c] = wte[tokens[r], c]. Throws if a token is outside [0, V) (TokenCheck::on_device).
template <class ExecutionSpace, class Out, class Tokens, class Wte>
void token_embedding_forward(ExecutionSpace const& space, Out const& out, Tokens const& tokens,
                             Wte const& wte, TokenCheck check = TokenCheck::on_device) {
  int const n = out.extent(0), c = out.extent(1), vocab = wte.extent(0);
  require(int(tokens.extent(0)) == n && int(wte.extent(1)) == c, "token_embedding_forward",
          "out " + shape_of(out) + ", tokens " + shape_of(tokens) + ", wte " + shape_of(wte));
  if (check == TokenCheck::on_device) detail::check_tokens_on_device(space, "token_embedding_forward", tokens, vocab);
  int const bytes = sizeof(typename Out::value_type) + sizeof(typename Wte::value_type);
  detail::for_each_row(space, "token_embedding_forward", detail::streaming_work(double(n) * c, bytes, 0, 0, bytes), n,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const t = tokens(r);
    detail::vector_for(team, c, [&](int i) { out(r, i) = narrow<typename Out::non_const_value_type>(widen(wte(t, i))); });
  });
}

// x[r, c] += wpe[r % seq_len, c]   (image tokens: patch embedding plus position)
template <class ExecutionSpace, class X, class Wpe>
void position_embedding_forward(ExecutionSpace const& space, X const& x, Wpe const& wpe,
                                int seq_len) {
  int const n = x.extent(0), c = x.extent(1);
  require(int(wpe.extent(1)) == c && seq_len > 0 && n % seq_len == 0 &&
              int(wpe.extent(0)) >= seq_len,
          "position_embedding_forward", "x " + shape_of(x) + ", wpe " + shape_of(wpe) +
                                            ", seq_len " + std::to_string(seq_len));
  int const read = 2 * sizeof(typename X::value_type);
  detail::for_each_row(space, "position_embedding_forward",
                       detail::streaming_work(double(n) * c, read, sizeof(typename X::value_type), 1, read), n,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const t = r % seq_len;
    detail::vector_for(team, c, [&](int i) { x(r, i) = narrow<typename X::non_const_value_type>(widen(x(r, i)) + widen(wpe(t, i))); });
  });
}

// d_wpe[t, c] += sum_b d_out[b * seq_len + t, c]: a column sum of d_out seen as [batch, seq_len * C]
// (detail/column_sum.hpp; samples in chunks in ascending order). `work`: its scratch (a
// ColumnSumWorkspace for batch rows of seq_len * C columns), which a training step passes;
// without one it allocates its own where it needs it.
template <class ExecutionSpace, class DWpe, class DOut, class... Work>
void position_embedding_backward(ExecutionSpace const& space, DWpe const& d_wpe,
                                 DOut const& d_out, int seq_len, Work const&... work) {
  static_assert(sizeof...(Work) <= 1, "position_embedding_backward: at most one workspace");
  using T = typename DWpe::non_const_value_type;
  int const n = d_out.extent(0), c = d_out.extent(1);
  require(int(d_wpe.extent(1)) == c && seq_len > 0 && n % seq_len == 0 && int(d_wpe.extent(0)) >= seq_len,
          "position_embedding_backward", "d_out " + shape_of(d_out) + ", d_wpe " + shape_of(d_wpe));
  int const batch = n / seq_len, cols = seq_len * c, read = sizeof(typename DOut::value_type);
  auto const sum = [&](auto const& f, auto const& add) {
    if constexpr (sizeof...(Work) == 0)
      detail::column_sums<T>(space, "position_embedding_backward", read, batch, cols, f, add);
    else
      detail::column_sums(space, "position_embedding_backward", read, batch, cols, f, add, work...);
  };
  // Row-major without gaps (every tensor the model passes): flat indices, no division per element.
  if (d_out.span_is_contiguous() && std::size_t(d_out.stride(0)) == std::size_t(c) &&
      std::size_t(d_wpe.stride(0)) == std::size_t(c) && d_out.stride(1) == 1 && d_wpe.stride(1) == 1) {
    auto const* const src = d_out.data();
    T* const dst = d_wpe.data();
    sum(KOKKOS_LAMBDA(int b, int j) { return widen(src[std::size_t(b) * cols + j]); },
        KOKKOS_LAMBDA(int j, T v) { dst[j] += v; });
  } else {
    sum(KOKKOS_LAMBDA(int b, int j) { return widen(d_out(b * seq_len + j / c, j % c)); },
        KOKKOS_LAMBDA(int j, T v) { d_wpe(j / c, j % c) += v; });
  }
}

// d_wte[v, c] += sum over rows r with tokens[r] == v of d_out[r, c], deterministic and parallel:
//   1. a stable counting sort of the rows by token: rows in blocks of kEmbeddingRankBlock; each
//      row's rank among the earlier rows of its block with its token, and each (block, token)'s
//      count; an exclusive scan of the counts in token-major order gives where each (block,
//      token) starts; a row goes to start + rank. Rows of a token keep ascending order.
//   2. each token's sorted rows cut into pieces of kEmbeddingPiece, each summed per column in
//      ascending row order (on GPUs a thread per (piece, column));
//   3. a token's piece sums added in piece order, the result into d_wte (tokens of one piece: in
//      step 2 directly).
// So every d_wte[v, c] adds its rows in ascending order in runs of 16, then the runs in order:
// the same on every backend and for every thread count.
template <class ExecutionSpace, class DWte, class DOut, class Tokens, class MemorySpace, class T>
void token_embedding_backward(ExecutionSpace const& space, DWte const& d_wte, DOut const& d_out,
                              Tokens const& tokens, EmbeddingBackwardWorkspace<MemorySpace, T> const& work) {
  int const n = d_out.extent(0), c = d_out.extent(1), vocab = d_wte.extent(0);
  require(int(tokens.extent(0)) == n && int(d_wte.extent(1)) == c, "token_embedding_backward",
          "d_out " + shape_of(d_out) + ", tokens " + shape_of(tokens) + ", d_wte " + shape_of(d_wte));
  constexpr int B = detail::kEmbeddingRankBlock, P = detail::kEmbeddingPiece;
  int const blocks = detail::embedding_rank_blocks(n), max_pieces = detail::embedding_max_pieces(vocab, n);
  // Kernel indices are ints (64-bit division costs GPU threads a call and a stack frame).
  require(double(blocks) * vocab < 2e9 && double(max_pieces) * c < 2e9 && double(vocab) * c < 2e9,
          "token_embedding_backward", "vocabulary " + std::to_string(vocab) + " x " + std::to_string(n) +
                                          " rows of " + std::to_string(c) + " outside int indices");
  int const counts = blocks * vocab;
  require(work.block_counts.extent(0) == std::size_t(counts) + 1 && int(work.rank.extent(0)) == n &&
              int(work.rows.extent(0)) == n && int(work.pieces.extent(0)) == vocab + 1 &&
              work.partials.extent(0) >= std::size_t(max_pieces) * c,
          "token_embedding_backward", "workspace block_counts " + shape_of(work.block_counts) + ", rank " +
                                          shape_of(work.rank) + ", rows " + shape_of(work.rows) + ", pieces " +
                                          shape_of(work.pieces) + ", partials " + shape_of(work.partials) +
                                          " for vocabulary " + std::to_string(vocab) + ", " +
                                          std::to_string(n) + " rows of " + std::to_string(c));
  if (n == 0 || c == 0) return;
  auto const block_counts = work.block_counts, rank = work.rank, rows = work.rows, pieces = work.pieces;
  auto const partials = work.partials;
  constexpr bool host = Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;

  // 1. Ranks and counts per (block, token). The launch shapes are those a GPU runs: there, the
  // counts are cleared first, then a warp per row compares its block's tokens; a CPU walks each
  // block in order instead (the same integers).
  double const token_bytes = sizeof(typename Tokens::value_type), row_bytes = sizeof(typename DOut::value_type);
  detail::note_launch("embedding_backward_clear", detail::streaming_work(counts, 0, 4, 0, 4), long(counts), 0);
  constexpr int kRowsPerTeam = 8, kLanes = 32;
  int const rank_teams = (n + kRowsPerTeam - 1) / kRowsPerTeam;
  detail::note_launch("embedding_backward_rank", detail::streaming_work(n, token_bytes, 8, B, int(token_bytes)),
                      long(rank_teams) * kRowsPerTeam * kLanes, kRowsPerTeam * kLanes, 0, kRowsPerTeam);
  if constexpr (host) {
    Kokkos::parallel_for(
        label("embedding_backward_rank"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, blocks),
        KOKKOS_LAMBDA(int b) {
          int* const count = &block_counts(std::size_t(b) * vocab);
          for (int v = 0; v < vocab; ++v) count[v] = 0;
          int const r1 = (b + 1) * B < n ? (b + 1) * B : n;
          for (int r = b * B; r < r1; ++r) rank(r) = count[tokens(r)]++;
        });
  } else {
    Kokkos::parallel_for(
        label("embedding_backward_clear"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, counts),
        KOKKOS_LAMBDA(int i) { block_counts(i) = 0; });
    using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
    Kokkos::parallel_for(
        label("embedding_backward_rank"), Policy(space, rank_teams, kRowsPerTeam, kLanes),
        KOKKOS_LAMBDA(typename Policy::member_type const& team) {
          int const r = team.league_rank() * kRowsPerTeam + team.team_rank();
          if (r >= n) return;
          int const t = tokens(r), b = r / B, b0 = b * B, b1 = b0 + B < n ? b0 + B : n;
          // Same-token rows before r (low 16 bits) and after r (high bits); a block has <= 128.
          int both = 0;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, b0, b1),
              [&](int k, int& sum) {
                if (k != r && tokens(k) == t) sum += k < r ? 1 : 1 << 16;
              },
              both);
          Kokkos::single(Kokkos::PerThread(team), [&]() {
            int const before = both & 0xffff;
            rank(r) = before;
            if ((both >> 16) == 0) block_counts(std::size_t(b) * vocab + t) = before + 1;  // its last row
          });
        });
  }
  // Where each (block, token) starts in token order: exclusive scan, token-major, in place.
  // block_counts[0, V) then hold where each token starts, block_counts[blocks * V] = N.
  detail::note_launch("embedding_backward_scan", detail::streaming_work(counts + 1.0, 4, 4, 1, 4), long(counts) + 1, 0);
  Kokkos::parallel_scan(
      label("embedding_backward_scan"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, counts + 1),
      KOKKOS_LAMBDA(int i, int& partial, bool final) {
        int const at = i < counts ? (i % blocks) * vocab + i / blocks : counts;
        int const count = i < counts ? block_counts(at) : 0;
        if (final) block_counts(at) = partial;
        partial += count;
      });
  detail::note_launch("embedding_backward_scatter", detail::streaming_work(n, token_bytes + 8, 4, 0, 4), n, 0);
  Kokkos::parallel_for(
      label("embedding_backward_scatter"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, n), KOKKOS_LAMBDA(int r) {
        rows(block_counts(std::size_t(r / B) * vocab + tokens(r)) + rank(r)) = r;
      });
  // The start of token v in sorted order: block_counts(v); of the token after the last: N.
  auto const token_start = KOKKOS_LAMBDA(int v) { return v < vocab ? block_counts(v) : block_counts(counts); };
  detail::note_launch("embedding_backward_pieces", detail::streaming_work(vocab + 1.0, 8, 4, 2, 4), vocab + 1, 0);
  Kokkos::parallel_scan(
      label("embedding_backward_pieces"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, vocab + 1),
      KOKKOS_LAMBDA(int v, int& partial, bool final) {
        int const count = v < vocab ? (token_start(v + 1) - token_start(v) + P - 1) / P : 0;
        if (final) pieces(v) = partial;
        partial += count;
      });
  // The token of piece p: the last v with pieces(v) <= p (tokens without rows have no pieces).
  auto const token_of = KOKKOS_LAMBDA(int p) {
    int lo = 0, hi = vocab - 1;
    while (lo < hi) {
      int const mid = (lo + hi + 1) / 2;
      if (pieces(mid) <= p) lo = mid; else hi = mid - 1;
    }
    return lo;
  };

  // 2. Piece sums.
  // every row of d_out read once; pieces' sums written (at most one per piece)
  detail::KernelWork piece_sums = detail::streaming_work(double(n) * c, row_bytes, 0, 1, int(row_bytes));
  piece_sums.bytes += double(max_pieces) * c * sizeof(T);
  detail::note_launch("embedding_backward_piece_sums", piece_sums, long(max_pieces) * c, 0);
  if constexpr (host) {
    Kokkos::parallel_for(
        label("embedding_backward_piece_sums"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, max_pieces),
        KOKKOS_LAMBDA(int p) {
          if (p >= pieces(vocab)) return;
          int const v = token_of(p), first = token_start(v) + (p - pieces(v)) * P;
          int const last = first + P < token_start(v + 1) ? first + P : token_start(v + 1);
          T* const part = &partials(std::size_t(p) * c);
          for (int i = 0; i < c; ++i) part[i] = 0;
          for (int k = first; k < last; ++k) {
            int const r = rows(k);
            for (int i = 0; i < c; ++i) part[i] += widen(d_out(r, i));
          }
          if (pieces(v + 1) - pieces(v) == 1)
            for (int i = 0; i < c; ++i) d_wte(v, i) += part[i];
        });
  } else {
    Kokkos::parallel_for(
        label("embedding_backward_piece_sums"),
        Kokkos::RangePolicy<ExecutionSpace>(space, 0, max_pieces * c), KOKKOS_LAMBDA(int idx) {
          int const p = idx / c, i = idx % c;
          if (p >= pieces(vocab)) return;
          int const v = token_of(p), first = token_start(v) + (p - pieces(v)) * P;
          int const last = first + P < token_start(v + 1) ? first + P : token_start(v + 1);
          T sum = 0;
          for (int k = first; k < last; ++k) sum += widen(d_out(rows(k), i));
          if (pieces(v + 1) - pieces(v) == 1)
            d_wte(v, i) += sum;
          else
            partials(idx) = sum;
        });
  }
  // 3. Tokens of several pieces: their sums in piece order (a short pass; the PAD token of a
  // mostly padded batch has the most pieces, N / 16 at most).
  detail::note_launch("embedding_backward_wte", detail::streaming_work(double(vocab) * c, 2 * sizeof(T), sizeof(T), 1, sizeof(T)),
                      long(vocab) * c, 0);
  if constexpr (host) {
    Kokkos::parallel_for(
        label("embedding_backward_wte"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, vocab), KOKKOS_LAMBDA(int v) {
          int const p0 = pieces(v), p1 = pieces(v + 1);
          if (p1 - p0 < 2) return;
          T* const total = &partials(std::size_t(p0) * c);
          for (int p = p0 + 1; p < p1; ++p) {
            T const* const part = &partials(std::size_t(p) * c);
            for (int i = 0; i < c; ++i) total[i] += part[i];
          }
          for (int i = 0; i < c; ++i) d_wte(v, i) += total[i];
        });
  } else {
    Kokkos::parallel_for(
        label("embedding_backward_wte"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, vocab * c),
        KOKKOS_LAMBDA(int idx) {
          int const v = idx / c, i = idx % c;
          int const p0 = pieces(v), p1 = pieces(v + 1);
          if (p1 - p0 < 2) return;
          T total = partials(p0 * c + i);
          for (int p = p0 + 1; p < p1; ++p) total += partials(p * c + i);
          d_wte(v, i) += total;
        });
  }
}

// The same with a workspace of its own (tests, benchmarks; a training step passes its own).
template <class ExecutionSpace, class DWte, class DOut, class Tokens>
void token_embedding_backward(ExecutionSpace const& space, DWte const& d_wte, DOut const& d_out,
                              Tokens const& tokens) {
  EmbeddingBackwardWorkspace<typename ExecutionSpace::memory_space, typename DWte::non_const_value_type> const work(
      int(d_wte.extent(0)), int(d_out.extent(0)), int(d_out.extent(1)), "embedding_backward");
  token_embedding_backward(space, d_wte, d_out, tokens, work);
}

// Token plus position embedding of a text-only sequence, in one pass (one rounding for bf16):
// out[r, c] = wte[tokens[r], c] + wpe[r % seq_len, c]
template <class ExecutionSpace, class Out, class Tokens, class Wte, class Wpe>
void embedding_forward(ExecutionSpace const& space, Out const& out, Tokens const& tokens,
                       Wte const& wte, Wpe const& wpe, int seq_len) {
  using S = typename Out::non_const_value_type;
  int const n = out.extent(0), c = out.extent(1), vocab = wte.extent(0);
  require(int(tokens.extent(0)) == n && int(wte.extent(1)) == c && int(wpe.extent(1)) == c && seq_len > 0 &&
              n % seq_len == 0 && int(wpe.extent(0)) >= seq_len,
          "embedding_forward", "out " + shape_of(out) + ", tokens " + shape_of(tokens) + ", wte " + shape_of(wte) +
                                   ", wpe " + shape_of(wpe) + ", seq_len " + std::to_string(seq_len));
  detail::check_tokens_on_device(space, "embedding_forward", tokens, vocab);
  int const read = sizeof(typename Wte::value_type) + sizeof(typename Wpe::value_type);
  detail::for_each_row(space, "embedding_forward", detail::streaming_work(double(n) * c, read, sizeof(S), 1, read), n,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const t = tokens(r), p = r % seq_len;
    detail::vector_for(team, c, [&](int i) { out(r, i) = narrow<S>(widen(wte(t, i)) + widen(wpe(p, i))); });
  });
}

template <class ExecutionSpace, class DWte, class DWpe, class DOut, class Tokens>
void embedding_backward(ExecutionSpace const& space, DWte const& d_wte, DWpe const& d_wpe,
                        DOut const& d_out, Tokens const& tokens, int seq_len) {
  token_embedding_backward(space, d_wte, d_out, tokens);
  position_embedding_backward(space, d_wpe, d_out, seq_len);
}

// The multimodal sequence: per sample, n_image image tokens then text_len text tokens, each plus
// its position embedding:  x[b*S + t] = (t < n_image ? image[b*n_image + t]
//                                                   : text[b*text_len + t - n_image]) + wpe[t]
template <class ExecutionSpace, class X, class Image, class Text, class Wpe>
void sequence_concat_forward(ExecutionSpace const& space, X const& x, Image const& image,
                             Text const& text, Wpe const& wpe, int n_image, int text_len) {
  int const seq = n_image + text_len, c = x.extent(1);
  int const batch = seq > 0 ? int(x.extent(0)) / seq : 0;
  require(int(x.extent(0)) == batch * seq && int(image.extent(0)) == batch * n_image &&
              int(text.extent(0)) == batch * text_len && int(wpe.extent(0)) >= seq &&
              int(image.extent(1)) == c && int(text.extent(1)) == c && int(wpe.extent(1)) == c,
          "sequence_concat_forward", "x " + shape_of(x) + ", image " + shape_of(image) +
                                         ", text " + shape_of(text) + ", wpe " + shape_of(wpe));
  using S = typename X::non_const_value_type;
  int const read = sizeof(typename Image::value_type) + sizeof(typename Wpe::value_type);
  detail::for_each_row(space, "sequence_concat_forward",
                       detail::streaming_work(double(batch) * seq * c, read, sizeof(S), 1, read), batch * seq,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const b = r / seq, t = r % seq;
    if (t < n_image)
      detail::vector_for(team, c, [&](int i) { x(r, i) = narrow<S>(widen(image(b * n_image + t, i)) + widen(wpe(t, i))); });
    else
      detail::vector_for(team, c, [&](int i) {
        x(r, i) = narrow<S>(widen(text(b * text_len + t - n_image, i)) + widen(wpe(t, i)));
      });
  });
}

// d_image, d_text overwritten; d_wpe accumulated. `work`: the position gradient's scratch
// (position_embedding_backward).
template <class ExecutionSpace, class DImage, class DText, class DWpe, class DX, class... Work>
void sequence_concat_backward(ExecutionSpace const& space, DImage const& d_image,
                              DText const& d_text, DWpe const& d_wpe, DX const& d_x, int n_image,
                              int text_len, Work const&... work) {
  int const seq = n_image + text_len, c = d_x.extent(1);
  int const batch = int(d_x.extent(0)) / seq;
  require(int(d_image.extent(0)) == batch * n_image && int(d_text.extent(0)) == batch * text_len,
          "sequence_concat_backward", "d_x " + shape_of(d_x) + ", d_image " + shape_of(d_image) +
                                          ", d_text " + shape_of(d_text));
  int const bytes = sizeof(typename DX::value_type);
  detail::for_each_row(space, "sequence_concat_backward",
                       detail::streaming_work(double(batch) * seq * c, bytes, sizeof(typename DImage::value_type), 0, bytes),
                       batch * seq, KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const b = r / seq, t = r % seq;
    if (t < n_image)
      detail::vector_for(team, c, [&](int i) {
        d_image(b * n_image + t, i) = narrow<typename DImage::non_const_value_type>(widen(d_x(r, i)));
      });
    else
      detail::vector_for(team, c, [&](int i) {
        d_text(b * text_len + t - n_image, i) = narrow<typename DText::non_const_value_type>(widen(d_x(r, i)));
      });
  });
  position_embedding_backward(space, d_wpe, d_x, seq, work...);
}

}  // namespace joule
