#pragma once
// Token embedding (gather from wte[V, C]) and learned position embedding (wpe[S_max, C]).
// Activations are [B*S, C] with row = b * seq_len + t.
//
// The token-embedding backward is a scatter-add: many rows can carry the same token. Instead of
// float atomics (non-deterministic order), the rows are bucketed by token (CSR), each bucket is
// sorted, and one thread per (token, channel) adds its rows in ascending order: race-free on every
// backend and bitwise reproducible.
#include "core/ops/embedding_workspace.hpp"
#include "core/ops/detail/column_sum.hpp"
#include "core/ops/detail/row_kernels.hpp"
#include "core/tensor.hpp"

#include <string>

namespace joule {

// Who checks that every token is in [0, V): the operator, on the device (a wait for the host), or
// the caller, who had the tokens on the host (the model checks its staged batch).
enum class TokenCheck { on_device, by_caller };

// out[r, c] = wte[tokens[r], c]. Throws if a token is outside [0, V) (TokenCheck::on_device).
template <class ExecutionSpace, class Out, class Tokens, class Wte>
void token_embedding_forward(ExecutionSpace const& space, Out const& out, Tokens const& tokens,
                             Wte const& wte, TokenCheck check = TokenCheck::on_device) {
  int const n = out.extent(0), c = out.extent(1), vocab = wte.extent(0);
  require(int(tokens.extent(0)) == n && int(wte.extent(1)) == c, "token_embedding_forward",
          "out " + shape_of(out) + ", tokens " + shape_of(tokens) + ", wte " + shape_of(wte));
  if (check == TokenCheck::on_device) {
    int bad = 0;
    Kokkos::parallel_reduce(
        label("embedding_check_tokens"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
        KOKKOS_LAMBDA(int r, int& count) { count += (tokens(r) < 0 || tokens(r) >= vocab) ? 1 : 0; },
        bad);
    require(bad == 0, "token_embedding_forward",
            std::to_string(bad) + " token(s) outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
  detail::for_each_row(space, "token_embedding_forward", n,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const t = tokens(r);
    detail::vector_for(team, c, [&](int i) { out(r, i) = wte(t, i); });
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
  detail::for_each_row(space, "position_embedding_forward", n,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const t = r % seq_len;
    detail::vector_for(team, c, [&](int i) { x(r, i) += wpe(t, i); });
  });
}

// d_wpe[t, c] += sum_b d_out[b * seq_len + t, c]
template <class ExecutionSpace, class DWpe, class DOut>
void position_embedding_backward(ExecutionSpace const& space, DWpe const& d_wpe,
                                 DOut const& d_out, int seq_len) {
  int const n = d_out.extent(0), c = d_out.extent(1), batch = n / seq_len;
  require(int(d_wpe.extent(1)) == c && n % seq_len == 0 && int(d_wpe.extent(0)) >= seq_len,
          "position_embedding_backward", "d_out " + shape_of(d_out) + ", d_wpe " + shape_of(d_wpe));
  // One row of d_wpe per thread, its columns over vector lanes; samples added in order.
  detail::for_each_row(space, "position_embedding_backward", seq_len,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int t) {
    detail::vector_for(team, c, [&](int i) {
      typename DWpe::non_const_value_type sum = 0;
      for (int b = 0; b < batch; ++b) sum += d_out(b * seq_len + t, i);
      d_wpe(t, i) += sum;
    });
  });
}

namespace detail {
// In-place heap sort of a[0..n), usable inside a kernel (no recursion, no allocation).
template <class A>
KOKKOS_INLINE_FUNCTION void heap_sort(A& a, int begin, int n) {
  auto sift_down = [&](int root, int end) {
    while (2 * root + 1 < end) {
      int child = 2 * root + 1;
      if (child + 1 < end && a(begin + child) < a(begin + child + 1)) ++child;
      if (!(a(begin + root) < a(begin + child))) return;
      auto tmp = a(begin + root);
      a(begin + root) = a(begin + child);
      a(begin + child) = tmp;
      root = child;
    }
  };
  for (int i = n / 2 - 1; i >= 0; --i) sift_down(i, n);
  for (int end = n - 1; end > 0; --end) {
    auto tmp = a(begin);
    a(begin) = a(begin + end);
    a(begin + end) = tmp;
    sift_down(0, end);
  }
}
}  // namespace detail


// d_wte[v, c] += sum over rows r with tokens[r] == v of d_out[r, c]   (rows in ascending order)
template <class ExecutionSpace, class DWte, class DOut, class Tokens, class MemorySpace>
void token_embedding_backward(ExecutionSpace const& space, DWte const& d_wte, DOut const& d_out,
                              Tokens const& tokens, EmbeddingBackwardWorkspace<MemorySpace> const& work) {
  int const n = d_out.extent(0), c = d_out.extent(1), vocab = d_wte.extent(0);
  require(int(tokens.extent(0)) == n && int(d_wte.extent(1)) == c, "token_embedding_backward",
          "d_out " + shape_of(d_out) + ", tokens " + shape_of(tokens) + ", d_wte " + shape_of(d_wte));
  require(int(work.offsets.extent(0)) == vocab + 1 && int(work.cursor.extent(0)) == vocab &&
              int(work.rows.extent(0)) == n,
          "token_embedding_backward", "workspace offsets " + shape_of(work.offsets) + ", cursor " +
                                          shape_of(work.cursor) + ", rows " + shape_of(work.rows) +
                                          " for vocabulary " + std::to_string(vocab) + " and " +
                                          std::to_string(n) + " rows");
  auto const offsets = work.offsets, cursor = work.cursor, rows = work.rows;
  Kokkos::deep_copy(space, offsets, 0);
  Kokkos::deep_copy(space, cursor, 0);

  // Bucket rows by token: counts -> offsets (exclusive scan) -> fill -> sort each bucket.
  Kokkos::parallel_for(
      label("embedding_backward_count"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      KOKKOS_LAMBDA(int r) { Kokkos::atomic_add(&offsets(tokens(r) + 1), 1); });
  Kokkos::parallel_scan(
      label("embedding_backward_scan"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, vocab + 1),
      KOKKOS_LAMBDA(int v, int& partial, bool final) {
        partial += offsets(v);
        if (final) offsets(v) = partial;
      });
  Kokkos::parallel_for(
      label("embedding_backward_fill"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      KOKKOS_LAMBDA(int r) {
        int const v = tokens(r);
        rows(offsets(v) + Kokkos::atomic_fetch_add(&cursor(v), 1)) = r;
      });
  Kokkos::parallel_for(
      label("embedding_backward_sort"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, vocab),
      KOKKOS_LAMBDA(int v) {
        auto rows_ = rows;
        detail::heap_sort(rows_, offsets(v), offsets(v + 1) - offsets(v));
      });
  // One token's row of d_wte per thread, its columns over vector lanes, its rows added in order.
  detail::for_each_row(space, "embedding_backward_wte", vocab,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int v) {
    int const begin = offsets(v), end = offsets(v + 1);
    if (begin == end) return;
    detail::vector_for(team, c, [&](int i) {
      typename DWte::non_const_value_type sum = 0;
      for (int k = begin; k < end; ++k) sum += d_out(rows(k), i);
      d_wte(v, i) += sum;
    });
  });
}

// The same with a workspace of its own (tests, benchmarks; a training step passes its own).
template <class ExecutionSpace, class DWte, class DOut, class Tokens>
void token_embedding_backward(ExecutionSpace const& space, DWte const& d_wte, DOut const& d_out,
                              Tokens const& tokens) {
  EmbeddingBackwardWorkspace<typename ExecutionSpace::memory_space> const work(
      int(d_wte.extent(0)), int(d_out.extent(0)), "embedding_backward");
  token_embedding_backward(space, d_wte, d_out, tokens, work);
}

// Token plus position embedding of a text-only sequence:
// out[r, c] = wte[tokens[r], c] + wpe[r % seq_len, c]
template <class ExecutionSpace, class Out, class Tokens, class Wte, class Wpe>
void embedding_forward(ExecutionSpace const& space, Out const& out, Tokens const& tokens,
                       Wte const& wte, Wpe const& wpe, int seq_len) {
  token_embedding_forward(space, out, tokens, wte);
  position_embedding_forward(space, out, wpe, seq_len);
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
  detail::for_each_row(space, "sequence_concat_forward", batch * seq,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const b = r / seq, t = r % seq;
    if (t < n_image)
      detail::vector_for(team, c, [&](int i) { x(r, i) = image(b * n_image + t, i) + wpe(t, i); });
    else
      detail::vector_for(team, c, [&](int i) { x(r, i) = text(b * text_len + t - n_image, i) + wpe(t, i); });
  });
}

// d_image, d_text overwritten; d_wpe accumulated.
template <class ExecutionSpace, class DImage, class DText, class DWpe, class DX>
void sequence_concat_backward(ExecutionSpace const& space, DImage const& d_image,
                              DText const& d_text, DWpe const& d_wpe, DX const& d_x, int n_image,
                              int text_len) {
  int const seq = n_image + text_len, c = d_x.extent(1);
  int const batch = int(d_x.extent(0)) / seq;
  require(int(d_image.extent(0)) == batch * n_image && int(d_text.extent(0)) == batch * text_len,
          "sequence_concat_backward", "d_x " + shape_of(d_x) + ", d_image " + shape_of(d_image) +
                                          ", d_text " + shape_of(d_text));
  detail::for_each_row(space, "sequence_concat_backward", batch * seq,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    int const b = r / seq, t = r % seq;
    if (t < n_image)
      detail::vector_for(team, c, [&](int i) { d_image(b * n_image + t, i) = d_x(r, i); });
    else
      detail::vector_for(team, c, [&](int i) { d_text(b * text_len + t - n_image, i) = d_x(r, i); });
  });
  position_embedding_backward(space, d_wpe, d_x, seq);
}

}  // namespace joule
