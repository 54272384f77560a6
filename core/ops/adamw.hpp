#pragma once
// AdamW (Loshchilov & Hutter), as PyTorch's torch.optim.AdamW computes it:
//   p <- p * (1 - lr * weight_decay)                        (decoupled weight decay)
//   m <- beta1 m + (1 - beta1) g;  v <- beta2 v + (1 - beta2) g^2
//   p <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// Written once for any execution space: the same code updates device-resident state and,
// in the offload issue, host-resident state on the Grace cores.
#include "core/tensor.hpp"

#include <cmath>

namespace joule {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

namespace detail {
// The update of one element; every policy below runs exactly this.
template <class T>
struct AdamWElement {
  T lr, beta1, beta2, eps, decay, bias1, bias2, scale;
  template <class Param, class Grad, class Moment>
  KOKKOS_INLINE_FUNCTION void operator()(Param const& param, Grad const& grad, Moment const& m,
                                         Moment const& v, int i) const {
    T const g = grad(i) * scale;
    T const mi = beta1 * m(i) + (T(1) - beta1) * g;
    T const vi = beta2 * v(i) + (T(1) - beta2) * g * g;
    m(i) = mi;
    v(i) = vi;
    T p = param(i) * decay;
    p -= lr * (mi / bias1) / (math::sqrt(vi / bias2) + eps);
    param(i) = p;
  }
};
template <class ExecutionSpace, class T>
void adamw_chunks(ExecutionSpace const& space, AdamWElement<T> const& e, T* param, T const* grad,
                  T* m, T* v, int n, int threads) {
  int const chunk = (n + threads - 1) / threads;
  Kokkos::parallel_for(
      label("adamw_update_host"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, threads),
      KOKKOS_LAMBDA(int t) {
        T* KOKKOS_RESTRICT p = param;
        T const* KOKKOS_RESTRICT g = grad;
        T* KOKKOS_RESTRICT mm = m;
        T* KOKKOS_RESTRICT vv = v;
        int const end = (t + 1) * chunk < n ? (t + 1) * chunk : n;
        for (int i = t * chunk; i < end; ++i) {
          T const gi = g[i] * e.scale;
          T const mi = e.beta1 * mm[i] + (T(1) - e.beta1) * gi;
          T const vi = e.beta2 * vv[i] + (T(1) - e.beta2) * gi * gi;
          mm[i] = mi;
          vv[i] = vi;
          T pi = p[i] * e.decay;
          pi -= e.lr * (mi / e.bias1) / (math::sqrt(vi / e.bias2) + e.eps);
          p[i] = pi;
        }
      });
}
}  // namespace detail

// One update of step `step` (1-based) over flat parameter, gradient and moment arrays.
// The gradient is used times grad_scale (global-norm clipping folds in here, saving a pass).
// threads > 0 runs the update as that many contiguous chunks, one per thread: on host spaces it
// caps the threads used (the scheduler trades Grace power for speed with it); the arithmetic is
// the same either way.
template <class ExecutionSpace, class Param, class Grad, class Moment>
void adamw_update(ExecutionSpace const& space, Param const& param, Grad const& grad,
                  Moment const& m, Moment const& v, AdamWConfig const& cfg, long step,
                  double grad_scale = 1.0, int threads = 0) {
  using T = typename Param::non_const_value_type;
  int const n = param.extent(0);
  require(step >= 1, "adamw_update", "step must be >= 1, got " + std::to_string(step));
  require(int(grad.extent(0)) == n && int(m.extent(0)) == n && int(v.extent(0)) == n,
          "adamw_update", "param " + shape_of(param) + ", grad " + shape_of(grad) + ", m " +
                              shape_of(m) + ", v " + shape_of(v));
  // Scalars computed once on the host in double, then used in the kernel's precision.
  detail::AdamWElement<T> const e{T(cfg.lr),
                                  T(cfg.beta1),
                                  T(cfg.beta2),
                                  T(cfg.eps),
                                  T(1.0 - cfg.lr * cfg.weight_decay),
                                  T(1.0 - std::pow(cfg.beta1, double(step))),
                                  T(1.0 - std::pow(cfg.beta2, double(step))),
                                  T(grad_scale)};
  constexpr bool host = Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;
  bool const contiguous = param.span_is_contiguous() && grad.span_is_contiguous() &&
                          m.span_is_contiguous() && v.span_is_contiguous();
  if (threads <= 0 && (!host || !contiguous)) {
    Kokkos::parallel_for(
        label("adamw_update"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
        KOKKOS_LAMBDA(int i) { e(param, grad, m, v, i); });
    return;
  }
  if (threads <= 0) threads = space.concurrency();
  if (contiguous) {
    // Host: one contiguous chunk per thread over non-aliasing pointers, so the compiler
    // vectorises the loop (IEEE sqrt and division are exact in vector form too: same bits).
    detail::adamw_chunks(space, e, param.data(), grad.data(), m.data(), v.data(), n, threads);
    return;
  }
  int const chunk = (n + threads - 1) / threads;
  Kokkos::parallel_for(
      label("adamw_update_chunked"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, threads),
      KOKKOS_LAMBDA(int t) {
        int const end = (t + 1) * chunk < n ? (t + 1) * chunk : n;
        for (int i = t * chunk; i < end; ++i) e(param, grad, m, v, i);
      });
}

}  // namespace joule
