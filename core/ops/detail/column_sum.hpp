#pragma once
// Column sums of a row-major matrix, added into a vector. Used for every parameter gradient that
// sums over tokens (biases, LayerNorm weights, position embeddings). One thread owns each output
// element and adds the rows in order, so the result is race-free and bitwise reproducible: no
// atomics, and the same sum whatever the thread count.
#include "core/tensor.hpp"

namespace joule::detail {

// out[c] += sum_r f(r, c), rows summed in order.
template <class ExecutionSpace, class Out, class F>
void accumulate_column_sums_of(ExecutionSpace const& space, char const* name, Out const& out,
                               int rows, F const& f) {
  using T = typename Out::non_const_value_type;
  int const cols = out.extent(0);
  Kokkos::parallel_for(
      label(name), Kokkos::RangePolicy<ExecutionSpace>(space, 0, cols), KOKKOS_LAMBDA(int c) {
        T sum = 0;
        for (int r = 0; r < rows; ++r) sum += f(r, c);
        out(c) += sum;
      });
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
