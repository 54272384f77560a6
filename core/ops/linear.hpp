#pragma once
// Linear layer with bias: out[N, O] = in[N, I] · weight[O, I]^T + bias[O]  (PyTorch's layout).
// The matrix products go through KokkosBlas::gemm, so they run on OpenBLAS (host) or cuBLAS
// (CUDA) where Kokkos-Kernels has those TPLs, and on Kokkos-Kernels' own kernels otherwise.
#include "core/ops/detail/column_sum.hpp"
#include "core/ops/detail/row_kernels.hpp"
#include "core/compat_kernels.hpp"
#include "core/tensor.hpp"

namespace joule {

// out = in · weight^T + bias   (an empty bias view means no bias)
template <class ExecutionSpace, class Out, class In, class Weight, class Bias>
void linear_forward(ExecutionSpace const& space, Out const& out, In const& in,
                    Weight const& weight, Bias const& bias) {
  using T = typename Out::non_const_value_type;
  int const n = in.extent(0), n_in = in.extent(1), n_out = weight.extent(0);
  bool const has_bias = bias.data() != nullptr;
  require(int(weight.extent(1)) == n_in && int(out.extent(0)) == n && int(out.extent(1)) == n_out &&
              (!has_bias || int(bias.extent(0)) == n_out),
          "linear_forward",
          "in " + shape_of(in) + ", weight " + shape_of(weight) + ", bias " + shape_of(bias) +
              ", out " + shape_of(out));
  if (!has_bias) {
    compat::gemm(space, "N", "T", T(1), in, weight, T(0), out);
    return;
  }
  detail::for_each_element(space, "linear_forward_bias", n, n_out,
                           KOKKOS_LAMBDA(int r, int o) { out(r, o) = bias(o); });
  compat::gemm(space, "N", "T", T(1), in, weight, T(1), out);
}

// d_in = d_out · weight (overwritten);  d_weight += d_out^T · in;  d_bias += column sums of d_out.
// Parameter gradients accumulate so that micro-batches can be summed; d_in is an activation
// gradient and is overwritten. Pass an empty d_in to skip it (first layer), an empty d_bias for
// a layer without bias. `work`: the bias sum's scratch (a ColumnSumWorkspace, which a training
// step passes); without one the sum allocates its own where it needs it.
template <class ExecutionSpace, class DIn, class DWeight, class DBias, class DOut, class In,
          class Weight, class... Work>
void linear_backward(ExecutionSpace const& space, DIn const& d_in, DWeight const& d_weight,
                     DBias const& d_bias, DOut const& d_out, In const& in, Weight const& weight,
                     Work const&... work) {
  static_assert(sizeof...(Work) <= 1, "linear_backward: at most one workspace");
  using T = typename DWeight::non_const_value_type;
  require(d_out.extent(0) == in.extent(0) && d_out.extent(1) == weight.extent(0) &&
              d_weight.extent(0) == weight.extent(0) && d_weight.extent(1) == weight.extent(1) &&
              (d_bias.data() == nullptr || d_bias.extent(0) == weight.extent(0)),
          "linear_backward",
          "d_out " + shape_of(d_out) + ", in " + shape_of(in) + ", weight " + shape_of(weight));
  if (d_in.data() != nullptr) {
    require(d_in.extent(0) == in.extent(0) && d_in.extent(1) == in.extent(1), "linear_backward",
            "d_in " + shape_of(d_in) + " must match in " + shape_of(in));
    compat::gemm(space, "N", "N", T(1), d_out, weight, T(0), d_in);
  }
  compat::gemm(space, "T", "N", T(1), d_out, in, T(1), d_weight);
  if (d_bias.data() != nullptr)
    detail::accumulate_column_sums(space, "linear_backward_bias", d_bias, d_out, work...);
}

}  // namespace joule
