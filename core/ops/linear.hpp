#pragma once
// Linear layer with bias: out[N, O] = in[N, I] · weight[O, I]^T + bias[O]  (PyTorch's layout).
// The matrix products go through KokkosBlas::gemm, so they run on OpenBLAS (host) or cuBLAS
// (CUDA) where Kokkos-Kernels has those TPLs, and on Kokkos-Kernels' own kernels otherwise.
// bf16 tensors (in, out, weight, d_out, d_in; the bias and the parameter gradients stay fp32) go
// through gemm_bf16 (cuBLASLt on CUDA, the bias in its epilogue) with fp32 accumulation; they need
// a Bf16GemmWorkspace among `work`.
#include "core/detail/workspace_of.hpp"
#include "core/ops/detail/column_sum.hpp"
#include "core/detail/row_kernels.hpp"
#include "core/compat_kernels.hpp"
#include "core/ops/linear_scratch.hpp"
#include "core/precision/gemm.hpp"
#include "core/tensor.hpp"

#include <algorithm>
#include <cstddef>

namespace joule {

// out = in · weight^T + bias   (an empty bias view means no bias)
template <class ExecutionSpace, class Out, class In, class Weight, class Bias, class... Work>
void linear_forward(ExecutionSpace const& space, Out const& out, In const& in,
                    Weight const& weight, Bias const& bias, Work const&... work) {
  using T = typename Out::non_const_value_type;
  using I = typename In::non_const_value_type;  // bf16 inputs may give fp32 outputs (the logits)
  int const n = in.extent(0), n_in = in.extent(1), n_out = weight.extent(0);
  bool const has_bias = bias.data() != nullptr;
  require(int(weight.extent(1)) == n_in && int(out.extent(0)) == n && int(out.extent(1)) == n_out &&
              (!has_bias || int(bias.extent(0)) == n_out),
          "linear_forward",
          "in " + shape_of(in) + ", weight " + shape_of(weight) + ", bias " + shape_of(bias) +
              ", out " + shape_of(out));
  if constexpr (std::is_same_v<I, bf16>) {  // the bias is added before the one rounding
    auto const gemm_work = detail::workspace_of<Bf16GemmWorkspace>(work...);
    static_assert(!std::is_null_pointer_v<decltype(gemm_work)>, "linear_forward in bf16 needs a Bf16GemmWorkspace");
    if constexpr (!std::is_null_pointer_v<decltype(gemm_work)>) {
      if (has_bias)
        gemm_bf16_bias(space, "N", "T", 1.0f, in, weight, out, bias, *gemm_work);
      else
        gemm_bf16(space, "N", "T", 1.0f, in, weight, 0.0f, out, *gemm_work);
    }
  } else if (!has_bias) {
    compat::gemm(space, "N", "T", T(1), in, weight, T(0), out);
  } else {
    detail::fill_rows(space, "linear_forward_bias", out, bias);
    compat::gemm(space, "N", "T", T(1), in, weight, T(1), out);
  }
}

// d_in = d_out · weight (overwritten);  d_weight += d_out^T · in;  d_bias += column sums of d_out.
// Parameter gradients accumulate so that micro-batches can be summed; d_in is an activation
// gradient and is overwritten. Pass an empty d_in to skip it (first layer), an empty d_bias for
// a layer without bias. `work`: the bias sum's scratch (a ColumnSumWorkspace, which a training
// step passes; without one the sum allocates its own where it needs it) and, for bf16, a
// Bf16GemmWorkspace. d_weight and d_bias are fp32 for bf16 tensors too.
template <class ExecutionSpace, class DIn, class DWeight, class DBias, class DOut, class In,
          class Weight, class... Work>
void linear_backward(ExecutionSpace const& space, DIn const& d_in, DWeight const& d_weight,
                     DBias const& d_bias, DOut const& d_out, In const& in, Weight const& weight,
                     Work const&... work) {
  static_assert(sizeof...(Work) <= 2, "linear_backward: a column-sum and a bf16 GEMM workspace at most");
  using T = typename DWeight::non_const_value_type;
  auto const gemm_work = detail::workspace_of<Bf16GemmWorkspace>(work...);
  auto const sums = detail::workspace_of<ColumnSumWorkspace>(work...);
  require(d_out.extent(0) == in.extent(0) && d_out.extent(1) == weight.extent(0) &&
              d_weight.extent(0) == weight.extent(0) && d_weight.extent(1) == weight.extent(1) &&
              (d_bias.data() == nullptr || d_bias.extent(0) == weight.extent(0)),
          "linear_backward",
          "d_out " + shape_of(d_out) + ", in " + shape_of(in) + ", weight " + shape_of(weight));
  if (d_in.data() != nullptr) {
    require(d_in.extent(0) == in.extent(0) && d_in.extent(1) == in.extent(1), "linear_backward",
            "d_in " + shape_of(d_in) + " must match in " + shape_of(in));
    gemm_any(space, "N", "N", 1, d_out, weight, 0, d_in, gemm_work);
  }
  gemm_any(space, "T", "N", T(1), d_out, in, T(1), d_weight, gemm_work);
  if (d_bias.data() != nullptr) {
    if constexpr (std::is_null_pointer_v<decltype(sums)>)
      detail::accumulate_column_sums(space, "linear_backward_bias", d_bias, d_out);
    else
      detail::accumulate_column_sums(space, "linear_backward_bias", d_bias, d_out, *sums);
  }
}

}  // namespace joule
