#pragma once
// LayerNorm over the last dimension: out = (x - mean) * rstd * weight + bias, per row.
// The forward pass saves mean[N] and rstd[N] for the backward pass. Any storage precision (x,
// out, d_out, d_x in bf16 with fp32 statistics and parameter gradients, or all fp32/fp64): the
// arithmetic is in the output's compute type (compute_t), every element widened on reading and
// rounded once on writing.
#include "core/ops/detail/column_sum.hpp"
#include "core/detail/row_kernels.hpp"
#include "core/precision/bf16.hpp"
#include "core/tensor.hpp"

namespace joule {

template <class ExecutionSpace, class Out, class Mean, class Rstd, class In, class Weight,
          class Bias>
void layernorm_forward(ExecutionSpace const& space, Out const& out, Mean const& mean,
                       Rstd const& rstd, In const& x, Weight const& weight, Bias const& bias,
                       double eps = 1e-5) {
  using S = typename Out::non_const_value_type;
  using T = compute_t<S>;
  int const n = x.extent(0), c = x.extent(1);
  require(out.extent(0) == x.extent(0) && out.extent(1) == x.extent(1) && int(mean.extent(0)) == n &&
              int(rstd.extent(0)) == n && int(weight.extent(0)) == c && int(bias.extent(0)) == c,
          "layernorm_forward", "x " + shape_of(x) + ", out " + shape_of(out) + ", weight " +
                                   shape_of(weight) + ", mean " + shape_of(mean));
  T const epsilon = eps;
  // Two sweeps for the statistics (mean, then squared deviations: no cancellation), one for the
  // output; the row stays in L1 between them.
  int const in_bytes = sizeof(typename In::value_type);
  // x read once (the row stays in L1 between the sweeps), out written, mean and rstd
  detail::KernelWork work = detail::streaming_work(double(n) * c, in_bytes, sizeof(S), 8, in_bytes);
  work.bytes += 8.0 * n;
  detail::for_each_row(space, "layernorm_forward", work, n, KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    T const m = detail::vector_sum<ExecutionSpace, T>(team, c, [&](int i) { return T(widen(x(r, i))); }) / c;
    T const var = detail::vector_sum<ExecutionSpace, T>(team, c, [&](int i) {
                    T const d = widen(x(r, i)) - m;
                    return d * d;
                  }) / c;
    T const rs = T(1) / math::sqrt(var + epsilon);
    detail::vector_for(team, c, [&](int i) {
      out(r, i) = narrow<S>((widen(x(r, i)) - m) * rs * widen(weight(i)) + widen(bias(i)));
    });
    detail::once_per_row(team, [&]() {
      mean(r) = m;
      rstd(r) = rs;
    });
  });
}

// d_x = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = d_out * weight   (overwritten)
// d_weight += sum_rows d_out * xhat;  d_bias += sum_rows d_out              (accumulated)
// `work`: the column sums' scratch (a ColumnSumWorkspace, which a training step passes); without
// one they allocate their own where they need it.
template <class ExecutionSpace, class DIn, class DWeight, class DBias, class DOut, class In,
          class Weight, class Mean, class Rstd, class... Work>
void layernorm_backward(ExecutionSpace const& space, DIn const& d_x, DWeight const& d_weight,
                        DBias const& d_bias, DOut const& d_out, In const& x, Weight const& weight,
                        Mean const& mean, Rstd const& rstd, Work const&... work) {
  static_assert(sizeof...(Work) <= 1, "layernorm_backward: at most one workspace");
  using S = typename DIn::non_const_value_type;
  using T = compute_t<S>;
  int const n = x.extent(0), c = x.extent(1);
  require(d_x.extent(0) == x.extent(0) && d_x.extent(1) == x.extent(1) &&
              d_out.extent(0) == x.extent(0) && d_out.extent(1) == x.extent(1) &&
              int(d_weight.extent(0)) == c && int(d_bias.extent(0)) == c,
          "layernorm_backward", "x " + shape_of(x) + ", d_out " + shape_of(d_out) + ", d_x " +
                                    shape_of(d_x) + ", d_weight " + shape_of(d_weight));
  // Both row sums in one sweep, d_x in a second.
  int const read = sizeof(typename DOut::value_type) + sizeof(typename In::value_type);
  detail::for_each_row(space, "layernorm_backward_input", detail::streaming_work(double(n) * c, read, sizeof(S), 12, read), n,
                       KOKKOS_LAMBDA(detail::RowMember<ExecutionSpace> const& team, int r) {
    T const m = mean(r), rs = rstd(r);
    T g_sum = 0, g_xhat_sum = 0;
    detail::vector_sum2<ExecutionSpace, T>(
        team, c,
        [&](int i, T& a, T& b) {
          T const g = widen(d_out(r, i)) * widen(weight(i));
          a += g;
          b += g * ((widen(x(r, i)) - m) * rs);
        },
        g_sum, g_xhat_sum);
    T const g_mean = g_sum / c, g_xhat_mean = g_xhat_sum / c;
    detail::vector_for(team, c, [&](int i) {
      T const xhat = (widen(x(r, i)) - m) * rs;
      d_x(r, i) = narrow<S>(rs * (widen(d_out(r, i)) * widen(weight(i)) - g_mean - xhat * g_xhat_mean));
    });
  });
  detail::accumulate_column_sums_of(
      space, "layernorm_backward_weight", d_weight, int(sizeof(typename DOut::value_type) + sizeof(typename In::value_type)), n,
      KOKKOS_LAMBDA(int r, int i) { return widen(d_out(r, i)) * (widen(x(r, i)) - mean(r)) * rstd(r); }, work...);
  detail::accumulate_column_sums(space, "layernorm_backward_bias", d_bias, d_out, work...);
}

}  // namespace joule
