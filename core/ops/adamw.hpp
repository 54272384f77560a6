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

// One update of step `step` (1-based) over flat parameter, gradient and moment arrays.
// The gradient is used times grad_scale (global-norm clipping folds in here, saving a pass).
template <class ExecutionSpace, class Param, class Grad, class Moment>
void adamw_update(ExecutionSpace const& space, Param const& param, Grad const& grad,
                  Moment const& m, Moment const& v, AdamWConfig const& cfg, long step,
                  double grad_scale = 1.0) {
  using T = typename Param::non_const_value_type;
  int const n = param.extent(0);
  require(step >= 1, "adamw_update", "step must be >= 1, got " + std::to_string(step));
  require(int(grad.extent(0)) == n && int(m.extent(0)) == n && int(v.extent(0)) == n,
          "adamw_update", "param " + shape_of(param) + ", grad " + shape_of(grad) + ", m " +
                              shape_of(m) + ", v " + shape_of(v));
  // Scalars computed once on the host in double, then used in the kernel's precision.
  T const lr = cfg.lr, beta1 = cfg.beta1, beta2 = cfg.beta2, eps = cfg.eps;
  T const decay = 1.0 - cfg.lr * cfg.weight_decay;
  T const bias1 = 1.0 - std::pow(cfg.beta1, double(step));
  T const bias2 = 1.0 - std::pow(cfg.beta2, double(step));
  T const scale = grad_scale;
  Kokkos::parallel_for(
      label("adamw_update"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      KOKKOS_LAMBDA(int i) {
        T const g = grad(i) * scale;
        T const mi = beta1 * m(i) + (T(1) - beta1) * g;
        T const vi = beta2 * v(i) + (T(1) - beta2) * g * g;
        m(i) = mi;
        v(i) = vi;
        T p = param(i) * decay;
        p -= lr * (mi / bias1) / (math::sqrt(vi / bias2) + eps);
        param(i) = p;
      });
}

}  // namespace joule
