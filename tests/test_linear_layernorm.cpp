// Gradient checks (central finite differences, double precision, random data, awkward sizes)
// for Linear and LayerNorm, on every enabled backend.
#include "core/ops/layernorm.hpp"
#include "core/ops/linear.hpp"
#include "support/test_support.hpp"

using namespace joule;
using namespace joule::test;

TEMPLATE_TEST_CASE("linear: forward matches a naive product, backward matches finite differences",
                   "[ops][linear][gradcheck]", JOULE_TEST_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  Rng rng(11);
  int const n = 37, n_in = 23, n_out = 19;
  Tensor2<double, Mem> in("in", n, n_in), w("w", n_out, n_in), out("out", n, n_out);
  Tensor1<double, Mem> b("b", n_out);
  fill_uniform(in, rng);
  fill_uniform(w, rng);
  fill_uniform(b, rng);
  std::vector<double> r(n * n_out);
  for (auto& v : r) v = std::uniform_real_distribution<double>(-1, 1)(rng);

  linear_forward(space, out, in, w, b);
  auto const hin = to_vector(in), hw = to_vector(w), hb = to_vector(b);
  std::vector<double> naive(n * n_out);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < n_out; ++o) {
      double s = hb[o];
      for (int k = 0; k < n_in; ++k) s += hin[i * n_in + k] * hw[o * n_in + k];
      naive[i * n_out + o] = s;
    }
  JOULE_REQUIRE_CLOSE("linear forward", to_vector(out), naive, 1e-12, 1e-12);

  Tensor2<double, Mem> d_out("d_out", n, n_out), d_in("d_in", n, n_in), d_w("d_w", n_out, n_in);
  Tensor1<double, Mem> d_b("d_b", n_out);
  from_vector(d_out, r);
  // Parameter gradients accumulate: start from a known non-zero value and subtract it.
  Kokkos::deep_copy(d_w, 0.5);
  Kokkos::deep_copy(d_b, -0.25);
  linear_backward(space, d_in, d_w, d_b, d_out, in, w);
  auto gw = to_vector(d_w), gb = to_vector(d_b);
  for (auto& v : gw) v -= 0.5;
  for (auto& v : gb) v += 0.25;

  auto loss = [&] {
    linear_forward(space, out, in, w, b);
    return dot(to_vector(out), r);
  };
  JOULE_REQUIRE_GRADIENT("d_in", in, to_vector(d_in), loss, rng);
  JOULE_REQUIRE_GRADIENT("d_weight", w, gw, loss, rng);
  JOULE_REQUIRE_GRADIENT("d_bias", b, gb, loss, rng);
}

TEMPLATE_TEST_CASE("layernorm: forward statistics and backward against finite differences",
                   "[ops][layernorm][gradcheck]", JOULE_TEST_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  Rng rng(12);
  int const n = 13, c = 45;
  Tensor2<double, Mem> x("x", n, c), out("out", n, c);
  Tensor1<double, Mem> w("w", c), b("b", c), mean("mean", n), rstd("rstd", n);
  fill_uniform(x, rng, -2, 3);
  fill_uniform(w, rng, 0.5, 1.5);
  fill_uniform(b, rng);
  std::vector<double> r(n * c);
  for (auto& v : r) v = std::uniform_real_distribution<double>(-1, 1)(rng);

  layernorm_forward(space, out, mean, rstd, x, w, b);
  // The saved statistics are the row mean and 1/sqrt(var + eps), recomputed here naively.
  auto const hx = to_vector(x), hm = to_vector(mean), hr = to_vector(rstd);
  for (int i = 0; i < n; ++i) {
    double mu = 0, var = 0;
    for (int k = 0; k < c; ++k) mu += hx[i * c + k] / c;
    for (int k = 0; k < c; ++k) var += (hx[i * c + k] - mu) * (hx[i * c + k] - mu) / c;
    REQUIRE(hm[i] == Approx(mu).epsilon(1e-12));
    REQUIRE(hr[i] == Approx(1.0 / std::sqrt(var + 1e-5)).epsilon(1e-12));
  }

  Tensor2<double, Mem> d_out("d_out", n, c), d_x("d_x", n, c);
  Tensor1<double, Mem> d_w("d_w", c), d_b("d_b", c);
  from_vector(d_out, r);
  layernorm_backward(space, d_x, d_w, d_b, d_out, x, w, mean, rstd);
  auto loss = [&] {
    layernorm_forward(space, out, mean, rstd, x, w, b);
    return dot(to_vector(out), r);
  };
  auto const gx = to_vector(d_x), gw = to_vector(d_w), gb = to_vector(d_b);
  JOULE_REQUIRE_GRADIENT("d_x", x, gx, loss, rng);
  JOULE_REQUIRE_GRADIENT("d_weight", w, gw, loss, rng);
  JOULE_REQUIRE_GRADIENT("d_bias", b, gb, loss, rng);
}
