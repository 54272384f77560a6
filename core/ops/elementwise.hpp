#pragma once
// Element-wise operators on [N, C] activations: GELU (tanh form) and the residual add. Any storage
// precision: computed in the output's compute type (compute_t: float for bf16), every element
// widened on reading and rounded once on writing.
#include "core/ops/detail/packs.hpp"
#include "core/detail/row_kernels.hpp"
#include "core/precision/bf16.hpp"
#include "core/tensor.hpp"

namespace joule {

namespace detail {
// Bytes of one element of each view.
template <class... V>
constexpr int element_bytes() {
  return int((sizeof(typename V::value_type) + ... + 0));
}

template <class A, class B>
void require_same_shape(char const* op, A const& a, B const& b) {
  require(a.extent(0) == b.extent(0) && a.extent(1) == b.extent(1), op,
          "shapes differ: " + shape_of(a) + " vs " + shape_of(b));
}
}  // namespace detail

// GELU, tanh approximation (PyTorch's approximate="tanh"):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// computed as x * sigmoid(2u), the same function (0.5 (1 + tanh u) = sigmoid(2u)) with one exp
// instead of one tanh: tanh is several times slower than exp in libm.
namespace detail {
template <class ExecutionSpace, class T>
struct GeluTanh {
  static constexpr T k = T(0.7978845608028654);  // sqrt(2/pi)
  static constexpr T c = T(0.044715);
  KOKKOS_INLINE_FUNCTION static T sigmoid_2u(T x) {
    return T(1) / (T(1) + exp_of<ExecutionSpace>(T(-2) * k * (x + c * x * x * x)));
  }
  KOKKOS_INLINE_FUNCTION static T value(T x) { return x * sigmoid_2u(x); }
  // d_out * gelu'(x), as gelu_backward states it
  KOKKOS_INLINE_FUNCTION static T backward(T d_out, T x) {
    T const s = sigmoid_2u(x);
    T const du = k * (T(1) + T(3) * c * x * x);
    return d_out * (s + x * T(2) * s * (T(1) - s) * du);
  }
};
}  // namespace detail

template <class ExecutionSpace, class Out, class In>
void gelu_forward(ExecutionSpace const& space, Out const& out, In const& x) {
  using S = typename Out::non_const_value_type;
  using G = detail::GeluTanh<ExecutionSpace, compute_t<S>>;
  detail::require_same_shape("gelu_forward", out, x);
  using X = typename In::non_const_value_type;
  double const n = double(x.extent(0)) * x.extent(1);
  constexpr int W = detail::pack_width<S, X>();
  if (detail::packs_here<ExecutionSpace>() && detail::packable<W>(std::size_t(n), out, x)) {  // 16-byte loads and stores (packs.hpp)
    S* const o = out.data();
    X const* const in = x.data();
    auto const work = detail::streaming_work(n, sizeof(X), sizeof(S), 12, W * sizeof(X));
    detail::for_each_pack(space, "gelu_forward", work, (long long)(n) / W, KOKKOS_LAMBDA(long long p) {
      auto const xs = detail::load_pack<W>(in + p * W);
      detail::Pack<S, W> ys;
      for (int k = 0; k < W; ++k) ys.v[k] = narrow<S>(G::value(widen(xs.v[k])));
      detail::store_pack(o + p * W, ys);
    });
    return;
  }
  auto const work = detail::streaming_work(n, detail::element_bytes<In>(), sizeof(S), 12, detail::element_bytes<In>());
  detail::for_each_element(space, "gelu_forward", work, x.extent(0), x.extent(1), KOKKOS_LAMBDA(int r, int col) {
    out(r, col) = narrow<S>(G::value(widen(x(r, col))));
  });
}

// d_x = d_out * gelu'(x)   (overwritten; may alias d_out)
//   gelu'(x) = s + x * 2 s (1 - s) * du/dx,  s = sigmoid(2u),  du/dx = sqrt(2/pi) (1 + 3c x^2)
template <class ExecutionSpace, class DIn, class DOut, class In>
void gelu_backward(ExecutionSpace const& space, DIn const& d_x, DOut const& d_out, In const& x) {
  using S = typename DIn::non_const_value_type;
  using T = compute_t<S>;
  using G = detail::GeluTanh<ExecutionSpace, T>;
  detail::require_same_shape("gelu_backward", d_x, x);
  detail::require_same_shape("gelu_backward", d_out, x);
  double const n = double(x.extent(0)) * x.extent(1);
  using X = typename In::non_const_value_type;
  using D = typename DOut::non_const_value_type;
  constexpr int W = detail::pack_width<S, X, D>();
  if (detail::packs_here<ExecutionSpace>() && detail::packable<W>(std::size_t(n), d_x, d_out, x)) {  // d_x may be d_out: each pack is read before it is written
    S* const dx = d_x.data();
    D const* const dy = d_out.data();
    X const* const in = x.data();
    auto const work = detail::streaming_work(n, sizeof(X) + sizeof(D), sizeof(S), 20, W * (sizeof(X) + sizeof(D)));
    detail::for_each_pack(space, "gelu_backward", work, (long long)(n) / W, KOKKOS_LAMBDA(long long p) {
      auto const xs = detail::load_pack<W>(in + p * W);
      auto const gs = detail::load_pack<W>(dy + p * W);
      detail::Pack<S, W> out;
      for (int k = 0; k < W; ++k) out.v[k] = narrow<S>(G::backward(widen(gs.v[k]), widen(xs.v[k])));
      detail::store_pack(dx + p * W, out);
    });
    return;
  }
  int const read = detail::element_bytes<In, DOut>();
  detail::for_each_element(space, "gelu_backward", detail::streaming_work(n, read, sizeof(S), 20, read), x.extent(0),
                           x.extent(1),
      KOKKOS_LAMBDA(int r, int col) { d_x(r, col) = narrow<S>(G::backward(widen(d_out(r, col)), widen(x(r, col)))); });
}

// out = a + b
template <class ExecutionSpace, class Out, class A, class B>
void residual_forward(ExecutionSpace const& space, Out const& out, A const& a, B const& b) {
  detail::require_same_shape("residual_forward", out, a);
  detail::require_same_shape("residual_forward", out, b);
  using O = typename Out::non_const_value_type;
  using TA = typename A::non_const_value_type;
  using TB = typename B::non_const_value_type;
  double const n = double(out.extent(0)) * out.extent(1);
  constexpr int W = detail::pack_width<O, TA, TB>();
  if (detail::packs_here<ExecutionSpace>() && detail::packable<W>(std::size_t(n), out, a, b)) {  // out may be a or b: each pack is read before it is written
    O* const o = out.data();
    TA const* const pa = a.data();
    TB const* const pb = b.data();
    auto const work = detail::streaming_work(n, sizeof(TA) + sizeof(TB), sizeof(O), 1, W * (sizeof(TA) + sizeof(TB)));
    detail::for_each_pack(space, "residual_forward", work, (long long)(n) / W, KOKKOS_LAMBDA(long long p) {
      auto const xa = detail::load_pack<W>(pa + p * W);
      auto const xb = detail::load_pack<W>(pb + p * W);
      detail::Pack<O, W> y;
      for (int k = 0; k < W; ++k) y.v[k] = narrow<O>(widen(xa.v[k]) + widen(xb.v[k]));
      detail::store_pack(o + p * W, y);
    });
    return;
  }
  int const read = detail::element_bytes<A, B>();
  auto const work = detail::streaming_work(n, read, detail::element_bytes<Out>(), 1, read);
  detail::for_each_element(space, "residual_forward", work, out.extent(0), out.extent(1),
                           KOKKOS_LAMBDA(int r, int c) {
                             out(r, c) = narrow<typename Out::non_const_value_type>(widen(a(r, c)) + widen(b(r, c)));
                           });
}

// A residual connection y = x + f(x) sends d_y both into f's backward and straight to x:
// d_x += d_out (accumulated: d_x already holds what came back through f).
template <class ExecutionSpace, class DIn, class DOut>
void residual_backward(ExecutionSpace const& space, DIn const& d_x, DOut const& d_out) {
  detail::require_same_shape("residual_backward", d_x, d_out);
  using I = typename DIn::non_const_value_type;
  using O = typename DOut::non_const_value_type;
  double const n = double(d_out.extent(0)) * d_out.extent(1);
  constexpr int W = detail::pack_width<I, O>();
  if (detail::packs_here<ExecutionSpace>() && detail::packable<W>(std::size_t(n), d_x, d_out)) {
    I* const dx = d_x.data();
    O const* const dy = d_out.data();
    auto const work = detail::streaming_work(n, sizeof(I) + sizeof(O), sizeof(I), 1, W * (sizeof(I) + sizeof(O)));
    detail::for_each_pack(space, "residual_backward", work, (long long)(n) / W, KOKKOS_LAMBDA(long long p) {
      auto x = detail::load_pack<W>(dx + p * W);
      auto const y = detail::load_pack<W>(dy + p * W);
      for (int k = 0; k < W; ++k) x.v[k] = narrow<I>(widen(x.v[k]) + widen(y.v[k]));
      detail::store_pack(dx + p * W, x);
    });
    return;
  }
  int const read = detail::element_bytes<DIn, DOut>();
  auto const work = detail::streaming_work(n, read, detail::element_bytes<DIn>(), 1, read);
  detail::for_each_element(space, "residual_backward", work, d_out.extent(0), d_out.extent(1),
                           KOKKOS_LAMBDA(int r, int c) {
                             d_x(r, c) = narrow<typename DIn::non_const_value_type>(widen(d_x(r, c)) + widen(d_out(r, c)));
                           });
}

}  // namespace joule
