#pragma once
// Tensors in joule are Kokkos::Views in LayoutRight (row-major, as in PyTorch and llm.c).
// Activations are 2-D: one row per token, row = b * seq_len + t.
#include "core/compat.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

namespace joule {

template <class T, class MemorySpace>
using Tensor1 = Kokkos::View<T*, Kokkos::LayoutRight, MemorySpace>;
template <class T, class MemorySpace>
using Tensor2 = Kokkos::View<T**, Kokkos::LayoutRight, MemorySpace>;
template <class T, class MemorySpace>
using Tensor4 = Kokkos::View<T****, Kokkos::LayoutRight, MemorySpace>;

// Every kernel and allocation label carries the project prefix, so profiling tools group them.
inline std::string label(char const* name) { return std::string("joule::") + name; }

// Shape checks run on the host before a kernel starts; a wrong shape is a programming error in
// the caller, reported with the operator's name and both shapes.
inline void require(bool ok, char const* op, std::string const& what) {
  if (!ok) throw std::invalid_argument(std::string("joule::") + op + ": " + what);
}

template <class View>
std::string shape_of(View const& v) {
  std::string s = "[";
  for (unsigned r = 0; r < unsigned(View::rank); ++r) {
    if (r) s += ", ";
    s += std::to_string(v.extent(r));
  }
  return s + "]";
}

}  // namespace joule
