#pragma once
// The token-embedding backward's scratch (core/ops/embedding.hpp), apart from the kernels, so that
// the model's declarations need none of them.
#include "core/tensor.hpp"

#include <cstddef>
#include <string>

namespace joule {

namespace detail {
inline constexpr int kEmbeddingRankBlock = 128;  // rows per block of the stable sort's ranking
inline constexpr int kEmbeddingPiece = 16;       // sorted rows per partial sum

inline int embedding_rank_blocks(int n) { return (n + kEmbeddingRankBlock - 1) / kEmbeddingRankBlock; }
// Pieces: each token's sorted rows cut into runs of kEmbeddingPiece, so at most
// floor(n / piece) + one per token that occurs.
inline int embedding_max_pieces(int vocab, int n) { return n / kEmbeddingPiece + (vocab < n ? vocab : n); }
}  // namespace detail

// The scratch of token_embedding_backward, allocated once by its owner: a training step must not
// allocate (freeing device memory synchronises the whole device). For V tokens, N rows of C
// channels: ints ceil(N / 128) * V + 1 + 2 N + V + 1, values of T (N / 16 + min(V, N)) * C
// (the medium config, 4,096 text rows of 384: 67 KB and 791 KB).
template <class MemorySpace, class T = float>
struct EmbeddingBackwardWorkspace {
  // [ceil(N / 128) * V + 1]: per (rank block b, token v) at b * V + v, the rows of v in block b;
  // then, scanned in token-major order, where they start among the rows sorted by token; at
  // [blocks * V]: N.
  Kokkos::View<int*, MemorySpace> block_counts;
  Kokkos::View<int*, MemorySpace> rank;     // [N] a row's place among its block's rows of its token
  Kokkos::View<int*, MemorySpace> rows;     // [N] the rows sorted by token, stable
  Kokkos::View<int*, MemorySpace> pieces;   // [V + 1] each token's first piece; [V]: the pieces
  Kokkos::View<T*, MemorySpace> partials;   // [max pieces * C] the pieces' sums
  EmbeddingBackwardWorkspace() = default;
  EmbeddingBackwardWorkspace(int vocab, int n, int channels, std::string const& name)
      : block_counts(label((name + ".block_counts").c_str()), std::size_t(detail::embedding_rank_blocks(n)) * vocab + 1),
        rank(Kokkos::view_alloc(Kokkos::WithoutInitializing, label((name + ".rank").c_str())), n),
        rows(Kokkos::view_alloc(Kokkos::WithoutInitializing, label((name + ".sorted_rows").c_str())), n),
        pieces(label((name + ".pieces").c_str()), vocab + 1),
        partials(Kokkos::view_alloc(Kokkos::WithoutInitializing, label((name + ".partials").c_str())),
                 std::size_t(detail::embedding_max_pieces(vocab, n)) * channels) {}
};

}  // namespace joule
