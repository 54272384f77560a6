#pragma once
// AdamW (Loshchilov & Hutter), as PyTorch's torch.optim.AdamW defines it:
//   p <- p * (1 - lr * weight_decay)                        (decoupled weight decay)
//   m <- beta1 m + (1 - beta1) g;  v <- beta2 v + (1 - beta2) g^2
//   p <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// computed as PyTorch's own kernel arranges it, with the step's constants folded once per step:
//   p <- p * decay - (step_size * m) / (sqrt(v) * inv_sqrt_bias2 + eps),
//   step_size = lr / (1 - beta1^t), inv_sqrt_bias2 = 1 / sqrt(1 - beta2^t)
// so each element costs one square root, one division and multiply-adds (fused where the CPU has
// FMA). Against a double-precision update from the same float inputs, one float step's error is at
// most 4u (|beta1 m| + |(1 - beta1) g|) in m (its terms: m itself may cancel), 6u v in v, and
// 4u |p| + 8u |step at m's terms| in p, u = 2^-24 (tests/test_cross_entropy_adamw.cpp; the largest
// seen there is 0.41 of each bound).
// No reciprocal square root: eps is added after the square root, and the hardware estimates
// (SVE/NEON FRSQRTE, the GPU's MUFU.RSQ) differ, which would break the host/device agreement below.
// Written once for any execution space: the same code updates device-resident state and,
// in the offload issue, host-resident state on the Grace cores.
#include "core/detail/launch_shape.hpp"
#include "core/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace joule {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

namespace detail {

// What one fp32 AdamW update of `elements` parameters moves: parameter, gradient, m and v read,
// parameter, m and v written (28 bytes), 15 floating-point operations each (an FMA counts two).
inline KernelWork adamw_work(double elements) {
  return streaming_work(elements, 16, 12, 15, 16, WorkKind::optimizer);
}
// Every rounding named. The offload ratio decides whether a group is updated on the device or on
// the host; it must not change the result, so host and device AdamW give the same bits: each
// multiply-add is fused on both sides or on neither (JOULE_ADAMW_FMA, from the host compiler's
// target, which nvcc's device pass sees too: every AArch64 has FMA; x86 where -march allows it),
// device code names each other rounding (nvcc would otherwise contract a * b + c on its own), and
// the host loop lives in adamw_host.cpp, compiled with -ffp-contract=off. Division and square root
// are correctly rounded on both sides (nvcc's defaults, -prec-div/-prec-sqrt).
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define JOULE_ADAMW_FMA 1
#else
#define JOULE_ADAMW_FMA 0
#endif
template <class T>
KOKKOS_INLINE_FUNCTION T mul(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) return __fmul_rn(a, b); else return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
template <class T>
KOKKOS_INLINE_FUNCTION T add(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) return __fadd_rn(a, b); else return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
template <class T>
KOKKOS_INLINE_FUNCTION T sub(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) return __fsub_rn(a, b); else return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

// a * b + c: one rounding where the target fuses, two where it does not (never a library call).
template <class T>
KOKKOS_INLINE_FUNCTION T mul_add(T a, T b, T c) {
#if JOULE_ADAMW_FMA && defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) return __fmaf_rn(a, b, c); else return __fma_rn(a, b, c);
#elif JOULE_ADAMW_FMA
  return std::fma(a, b, c);
#else
  return add(mul(a, b), c);
#endif
}

// The update of one element; every path (device kernel, host loop) runs exactly this.
template <class T>
struct AdamWElement {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay, step_size, inv_sqrt_bias2, scale;
  KOKKOS_INLINE_FUNCTION void apply(T& p, T& m, T& v, T grad) const {
    T const g = mul(grad, scale);
    m = mul_add(beta1, m, mul(one_minus_beta1, g));
    v = mul_add(beta2, v, mul(mul(one_minus_beta2, g), g));
    T const denominator = mul_add(T(math::sqrt(v)), inv_sqrt_bias2, eps);
    p = mul_add(p, decay, -(mul(step_size, m) / denominator));
  }
  template <class Param, class Grad, class Moment>
  KOKKOS_INLINE_FUNCTION void operator()(Param const& param, Grad const& grad, Moment const& m,
                                         Moment const& v, int i) const {
    T p = param(i), mi = m(i), vi = v(i);
    apply(p, mi, vi, grad(i));
    param(i) = p;
    m(i) = mi;
    v(i) = vi;
  }
};

// Step `step`'s scalars, computed once on the host in double, then used in the kernel's precision.
template <class T>
AdamWElement<T> make_adamw_element(AdamWConfig const& cfg, long step, double grad_scale) {
  return {T(cfg.beta1),
          T(1.0 - cfg.beta1),
          T(cfg.beta2),
          T(1.0 - cfg.beta2),
          T(cfg.eps),
          T(1.0 - cfg.lr * cfg.weight_decay),
          T(cfg.lr / (1.0 - std::pow(cfg.beta1, double(step)))),
          T(1.0 / std::sqrt(1.0 - std::pow(cfg.beta2, double(step)))),
          T(grad_scale)};
}

// The host loop over elements [begin, end) of contiguous arrays (adamw_host.cpp; float, double).
template <class T>
void adamw_host_range(AdamWElement<T> const& e, T* param, T const* grad, T* m, T* v, std::size_t begin,
                      std::size_t end);
extern template void adamw_host_range<float>(AdamWElement<float> const&, float*, float const*, float*,
                                             float*, std::size_t, std::size_t);
extern template void adamw_host_range<double>(AdamWElement<double> const&, double*, double const*,
                                              double*, double*, std::size_t, std::size_t);
// Where an update reads or writes an optimizer state: master weights and the two moments.
template <class T>
struct AdamWState {
  T* param;
  T* m;
  T* v;
};
// The same update out of place: reads `in`, writes `out` (no overlap between them), leaving `in`
// as it was (a speculative step that may be dropped, core/train/optimizer.cpp). Same bits.
template <class T>
void adamw_host_range_into(AdamWElement<T> const& e, AdamWState<T const> in, T const* grad, AdamWState<T> out,
                           std::size_t begin, std::size_t end);
extern template void adamw_host_range_into<float>(AdamWElement<float> const&, AdamWState<float const>,
                                                  float const*, AdamWState<float>, std::size_t, std::size_t);
extern template void adamw_host_range_into<double>(AdamWElement<double> const&, AdamWState<double const>,
                                                   double const*, AdamWState<double>, std::size_t, std::size_t);
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
  auto const e = detail::make_adamw_element<T>(cfg, step, grad_scale);
  constexpr bool host = Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;
  if constexpr (!host) detail::note_launch("adamw_update", detail::adamw_work(n), n);  // one thread per element (host jobs: no GPU launch)
  bool const contiguous = param.span_is_contiguous() && grad.span_is_contiguous() &&
                          m.span_is_contiguous() && v.span_is_contiguous();
  if constexpr (host) {
    if (contiguous) {
      // One contiguous chunk per thread through the host loop (vectorised, never contracted).
      if (threads <= 0) threads = space.concurrency();
      std::size_t const chunk = (std::size_t(n) + threads - 1) / threads;
      T* p = param.data();
      T const* g = grad.data();
      T* mm = m.data();
      T* vv = v.data();
      Kokkos::parallel_for(label("adamw_update_host"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, threads),
                           [=](int t) {
                             std::size_t const begin = std::min(std::size_t(n), t * chunk);
                             std::size_t const end = std::min(std::size_t(n), begin + chunk);
                             detail::adamw_host_range(e, p, g, mm, vv, begin, end);
                           });
      return;
    }
  }
  if (threads <= 0 || !host) {
    Kokkos::parallel_for(
        label("adamw_update"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
        KOKKOS_LAMBDA(int i) { e(param, grad, m, v, i); });
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

// The multi-tensor form: many contiguous arrays (the device groups' runs of decayed and not decayed
// tensors) in one launch, so a step's AdamW is one kernel over every element instead of one per
// tensor (57 at medium.json, the smallest 384 threads). Run k holds elements [begin, next run's
// begin) of the concatenation. The element update is AdamWElement::apply, as everywhere: the same
// bits as adamw_update. On a host space it is one parallel region too: the concatenation cut into
// one contiguous chunk per thread, each chunk running the host loop over the pieces of the runs it
// covers (a region per tensor is a fork and a join each, and beside other work every join waits
// for the thread that shares its CPU).
template <class T>
struct AdamWRun {
  T* p;
  T const* g;
  T* m;
  T* v;
  long long begin;
  int decay;  // 1: with weight decay
};

template <class ExecutionSpace, class T, class MemorySpace>
void adamw_update_runs(ExecutionSpace const& space, Kokkos::View<AdamWRun<T>*, MemorySpace> const& runs,
                       long long total, detail::AdamWElement<T> const& with_decay,
                       detail::AdamWElement<T> const& without_decay) {
  int const n_runs = int(runs.extent(0));
  if (n_runs == 0 || total == 0) return;
  detail::note_launch("adamw_update_runs", detail::adamw_work(double(total)), long(total));
  constexpr bool host = Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;
  if constexpr (host) {
    static_assert(Kokkos::SpaceAccessibility<ExecutionSpace, MemorySpace>::accessible,
                  "adamw_update_runs: the runs must be readable where the update runs");
    int const threads = space.concurrency();
    long long const chunk = (total + threads - 1) / threads;
    AdamWRun<T> const* const list = runs.data();
    Kokkos::parallel_for(
        label("adamw_update_runs_host"), Kokkos::RangePolicy<ExecutionSpace>(space, 0, threads), [=](int t) {
          long long const begin = std::min(total, t * chunk), end = std::min(total, begin + chunk);
          for (int k = 0; k < n_runs; ++k) {  // each run's piece inside [begin, end)
            long long const run_end = k + 1 < n_runs ? list[k + 1].begin : total;
            long long const b = std::max(begin, list[k].begin), e = std::min(end, run_end);
            if (b >= e) continue;
            AdamWRun<T> const& r = list[k];
            detail::adamw_host_range(r.decay ? with_decay : without_decay, r.p, r.g, r.m, r.v,
                                     std::size_t(b - r.begin), std::size_t(e - r.begin));
          }
        });
    return;
  }
  Kokkos::parallel_for(
      label("adamw_update_runs"), Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<long long>>(space, 0, total),
      KOKKOS_LAMBDA(long long i) {
        int lo = 0, hi = n_runs - 1;  // the run holding i: the last whose begin is <= i
        while (lo < hi) {
          int const mid = (lo + hi + 1) / 2;
          if (runs(mid).begin <= i) lo = mid; else hi = mid - 1;
        }
        AdamWRun<T> const r = runs(lo);
        long long const k = i - r.begin;
        T p = r.p[k], m = r.m[k], v = r.v[k];
        (r.decay ? with_decay : without_decay).apply(p, m, v, r.g[k]);
        r.p[k] = p;
        r.m[k] = m;
        r.v[k] = v;
      });
}

}  // namespace joule
