#pragma once
// A parameter group is a struct of named tensors that share one contiguous `storage` buffer.
// The struct describes itself with a static layout(self, f) that calls
// f(name, role, tensor_member, rows, cols) in storage order (cols = 0 for vectors); the helpers
// here size, allocate and bind any such struct, so each group is declared exactly once.
#include "core/tensor.hpp"

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace joule {

// What a tensor is, for everything that treats tensors differently (initialisation, weight
// decay): said once, in the layout, never guessed from names.
enum class ParamRole {
  matrix,               // a linear map's weight (qkv, MLP, patch embedding, untied LM head)
  residual_projection,  // a matrix whose output is added to the residual stream (attn/MLP proj)
  embedding,            // a lookup table (token, position)
  bias,
  norm_scale,           // LayerNorm weight
  norm_shift,           // LayerNorm bias
};
// AdamW's decoupled weight decay applies to matrices only (GPT-2 / nanoGPT convention).
constexpr bool weight_decayed(ParamRole r) { return r == ParamRole::matrix || r == ParamRole::residual_projection; }

// Number of scalars in the group.
template <class Group>
std::size_t group_size(Group const& g) {
  std::size_t n = 0;
  Group::layout(g, [&](char const*, ParamRole, auto const&, int rows, int cols) {
    n += std::size_t(rows) * std::size_t(cols > 0 ? cols : 1);
  });
  return n;
}

// Points every tensor of the group into `base` (which must hold group_size() scalars).
template <class Group, class T>
void bind_group(Group& g, T* base) {
  T* p = base;
  Group::layout(g, [&](char const*, ParamRole, auto& view, int rows, int cols) {
    using View = std::decay_t<decltype(view)>;
    if constexpr (unsigned(View::rank) == 1) {
      view = View(p, rows);
      p += rows;
    } else {
      view = View(p, rows, cols);
      p += std::size_t(rows) * cols;
    }
  });
}

// Allocates the group's storage (zero-initialised) under `name` and binds its tensors to it.
// `spare` more zeros follow the storage in the same allocation, outside it: padding that a GEMM
// may read past the group's last tensor (the LM head's rows) and that nothing else sees (the
// optimizer, checkpoints and parameter counts work on `storage`).
template <class Group>
void allocate_group(Group& g, std::string const& name, std::size_t spare = 0) {
  using Storage = std::decay_t<decltype(g.storage)>;
  std::size_t const n = group_size(g);
  g.storage = Kokkos::subview(Storage(label(name.c_str()), n + spare), std::make_pair(std::size_t(0), n));
  bind_group(g, g.storage.data());
}

}  // namespace joule
