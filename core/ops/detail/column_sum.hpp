#pragma once
// Column sums of a row-major matrix, added into a vector. Used for every parameter gradient that
// sums over tokens (biases, LayerNorm weights, position embeddings). Each output element is owned
// by one thread, which adds the rows in ascending order: race-free, no atomics, and bitwise the
// same whatever the backend or thread count.
//
// On GPUs one thread per column (neighbouring threads read neighbouring columns: coalesced).
// On CPUs one thread per block of kHostColumnBlock columns, walking the rows: contiguous reads instead
// of one cache miss per element. The order of additions per column is the same in both.
#include "core/tensor.hpp"

namespace joule::detail {

inline constexpr int kHostColumnBlock = 32;

template <class ExecutionSpace, class Out, class F>
void column_sums_by_column(ExecutionSpace const& space, char const* name, Out const& out, int rows,
                           F const& f) {
  using T = typename Out::non_const_value_type;
  Kokkos::parallel_for(
      label(name), Kokkos::RangePolicy<ExecutionSpace>(space, 0, out.extent(0)),
      KOKKOS_LAMBDA(int c) {
        T sum = 0;
        for (int r = 0; r < rows; ++r) sum += f(r, c);
        out(c) += sum;
      });
}

template <class ExecutionSpace, class Out, class F>
void column_sums_by_block(ExecutionSpace const& space, char const* name, Out const& out, int rows,
                          F const& f) {
  using T = typename Out::non_const_value_type;
  constexpr int W = kHostColumnBlock;
  int const cols = out.extent(0);
  Kokkos::parallel_for(
      label(name), Kokkos::RangePolicy<ExecutionSpace>(space, 0, (cols + W - 1) / W),
      KOKKOS_LAMBDA(int block) {
        int const c0 = block * W;
        int const width = cols - c0 < W ? cols - c0 : W;
        T sum[W] = {};
        for (int r = 0; r < rows; ++r)
          for (int k = 0; k < width; ++k) sum[k] += f(r, c0 + k);
        for (int k = 0; k < width; ++k) out(c0 + k) += sum[k];
      });
}

// out[c] += sum_r f(r, c), rows summed in order.
template <class ExecutionSpace, class Out, class F>
void accumulate_column_sums_of(ExecutionSpace const& space, char const* name, Out const& out,
                               int rows, F const& f) {
  if constexpr (Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible)
    column_sums_by_block(space, name, out, rows, f);
  else
    column_sums_by_column(space, name, out, rows, f);
}

// out[c] += sum_r in[r, c]
template <class ExecutionSpace, class Out, class In>
void accumulate_column_sums(ExecutionSpace const& space, char const* name, Out const& out,
                            In const& in) {
  require(out.extent(0) == in.extent(1), name,
          "column sum of " + shape_of(in) + " into " + shape_of(out));
  accumulate_column_sums_of(space, name, out, int(in.extent(0)),
                            KOKKOS_LAMBDA(int r, int c) { return in(r, c); });
}

}  // namespace joule::detail
