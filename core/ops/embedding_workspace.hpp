#pragma once
// The token-embedding backward's scratch (core/ops/embedding.hpp), apart from the kernels, so that
// the model's declarations need none of them.
#include "core/tensor.hpp"

#include <string>

namespace joule {

// The scratch of token_embedding_backward (bucket offsets and cursors per token, rows sorted by
// token), allocated once by its owner: a training step must not allocate (freeing device memory
// synchronises the whole device).
template <class MemorySpace>
struct EmbeddingBackwardWorkspace {
  Kokkos::View<int*, MemorySpace> offsets;  // [V + 1]
  Kokkos::View<int*, MemorySpace> cursor;   // [V]
  Kokkos::View<int*, MemorySpace> rows;     // [N]
  EmbeddingBackwardWorkspace() = default;
  EmbeddingBackwardWorkspace(int vocab, int n, std::string const& name)
      : offsets(label((name + ".bucket_offsets").c_str()), vocab + 1),
        cursor(label((name + ".bucket_cursor").c_str()), vocab),
        rows(Kokkos::view_alloc(Kokkos::WithoutInitializing, label((name + ".bucket_rows").c_str())), n) {}
};

}  // namespace joule
