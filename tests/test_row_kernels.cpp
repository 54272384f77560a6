// The vectorised row kernels (core/detail/row_kernels.hpp) in float, the type training runs
// in: the polynomial exp against libm, the lane-split row reductions at awkward lengths against
// naive double loops, and the float operators built on them (LayerNorm, GELU, cross-entropy)
// against double references. (The gradient checks of the operators run in double, where exp is
// libm's; these tests cover the float path.)
#include "core/ops/cross_entropy.hpp"
#include "core/detail/row_kernels.hpp"
#include "core/ops/elementwise.hpp"
#include "core/ops/layernorm.hpp"
#include "support/test_support.hpp"

#include <cmath>
#include <cstring>

using namespace joule;
using namespace joule::test;

TEST_CASE("exp_polynomial: within 3 ulp of exp on [-87, 88], clamped outside", "[ops][row_kernels]") {
  double worst_ulps = 0;
  float worst_x = 0;
  Rng rng(41);
  std::uniform_real_distribution<float> pick(-87.0f, 88.0f);
  auto check = [&](float x) {
    double const want = std::exp(double(x));
    float const got = detail::exp_polynomial(x);
    double const ulp = std::nextafter(float(want), INFINITY) - float(want);
    double const ulps = std::abs(got - want) / ulp;
    if (ulps > worst_ulps) worst_ulps = ulps, worst_x = x;
  };
  for (int i = 0; i < 200000; ++i) check(pick(rng));
  for (float x : {-87.0f, -10.0f, -1.0f, -0.5f, -1e-7f, 0.0f, 1e-7f, 0.3465f, 0.5f, 1.0f, 20.0f, 88.0f}) check(x);
  INFO("worst " << worst_ulps << " ulp at x = " << worst_x);
  REQUIRE(worst_ulps <= 3.0);
  REQUIRE(detail::exp_polynomial(0.0f) == 1.0f);
  REQUIRE(detail::exp_polynomial(-1000.0f) == detail::exp_polynomial(-87.0f));
  REQUIRE(detail::exp_polynomial(-1000.0f) < 1e-37f);
  REQUIRE(std::isfinite(detail::exp_polynomial(1000.0f)));
  REQUIRE(detail::exp_polynomial(1000.0f) == detail::exp_polynomial(88.0f));
  REQUIRE(detail::exp_polynomial(INFINITY) == detail::exp_polynomial(88.0f));
  REQUIRE(detail::exp_polynomial(-INFINITY) == detail::exp_polynomial(-87.0f));
  REQUIRE(std::isnan(detail::exp_polynomial(NAN)));
  REQUIRE(std::isnan(detail::exp_polynomial(-NAN)));
}

TEMPLATE_TEST_CASE("row reductions: sums and maxima of rows of awkward lengths", "[ops][row_kernels]",
                   JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(42);
  for (int c : {1, 7, 15, 16, 17, 33, 100, 259}) {
    int const n = 37;
    Tensor2<float, Mem> x("x", n, c);
    Tensor1<float, Mem> sum("sum", n), max("max", n), sum_sq("sum_sq", n);
    fill_uniform(x, rng, -3, 2);
    detail::for_each_row(space, "test_row_reductions", detail::KernelWork{}, n,
                         KOKKOS_LAMBDA(detail::RowMember<TestType> const& team, int r) {
      float const s = detail::vector_sum<TestType, float>(team, c, [&](int i) { return x(r, i); });
      float const m = detail::vector_max<TestType, float>(team, c, [&](int i) { return x(r, i); });
      float a = 0, b = 0;
      detail::vector_sum2<TestType, float>(
          team, c,
          [&](int i, float& u, float& v) {
            u += x(r, i);
            v += x(r, i) * x(r, i);
          },
          a, b);
      detail::once_per_row(team, [&]() {
        sum(r) = s;
        max(r) = m;
        sum_sq(r) = b;
        if (a != s) sum_sq(r) = -1;  // the paired sum takes the same order as the single one
      });
    });
    auto const hx = to_vector(x);
    std::vector<double> want_sum(n), want_max(n, -1e300), want_sq(n);
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < c; ++i) {
        double const v = hx[r * c + i];
        want_sum[r] += v, want_sq[r] += v * v, want_max[r] = std::max(want_max[r], v);
      }
    INFO("row length " << c);
    JOULE_REQUIRE_CLOSE("row sums", to_vector(sum), want_sum, 1e-5, 1e-5);
    JOULE_REQUIRE_CLOSE("row sums of squares", to_vector(sum_sq), want_sq, 1e-5, 1e-5);
    JOULE_REQUIRE_CLOSE("row maxima", to_vector(max), want_max, 0, 0);
  }
}

TEMPLATE_TEST_CASE("float operators on the vectorised path match double references",
                   "[ops][row_kernels]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(43);
  int const n = 45, c = 83, vocab = 259;

  SECTION("layernorm forward and backward") {
    Tensor2<float, Mem> x("x", n, c), y("y", n, c), dy("dy", n, c), dx("dx", n, c);
    Tensor1<float, Mem> w("w", c), b("b", c), dw("dw", c), db("db", c), mean("mean", n), rstd("rstd", n);
    Tensor2<double, Mem> xd("xd", n, c), yd("yd", n, c), dyd("dyd", n, c), dxd("dxd", n, c);
    Tensor1<double, Mem> wd("wd", c), bd("bd", c), dwd("dwd", c), dbd("dbd", c), meand("meand", n),
        rstdd("rstdd", n);
    fill_uniform(x, rng, -2, 3), fill_uniform(w, rng), fill_uniform(b, rng), fill_uniform(dy, rng);
    from_vector(xd, to_vector(x)), from_vector(wd, to_vector(w)), from_vector(bd, to_vector(b));
    from_vector(dyd, to_vector(dy));
    layernorm_forward(space, y, mean, rstd, x, w, b);
    layernorm_forward(space, yd, meand, rstdd, xd, wd, bd);
    JOULE_REQUIRE_CLOSE("layernorm out", to_vector(y), to_vector(yd), 1e-5, 1e-5);
    layernorm_backward(space, dx, dw, db, dy, x, w, mean, rstd);
    layernorm_backward(space, dxd, dwd, dbd, dyd, xd, wd, meand, rstdd);
    JOULE_REQUIRE_CLOSE("layernorm d_x", to_vector(dx), to_vector(dxd), 1e-4, 1e-5);
    JOULE_REQUIRE_CLOSE("layernorm d_weight", to_vector(dw), to_vector(dwd), 1e-4, 1e-5);
    JOULE_REQUIRE_CLOSE("layernorm d_bias", to_vector(db), to_vector(dbd), 1e-4, 1e-5);
  }
  SECTION("gelu forward and backward") {
    Tensor2<float, Mem> x("x", n, c), y("y", n, c), dy("dy", n, c), dx("dx", n, c);
    fill_uniform(x, rng, -12, 12), fill_uniform(dy, rng);
    gelu_forward(space, y, x);
    gelu_backward(space, dx, dy, x);
    auto const hx = to_vector(x), hdy = to_vector(dy);
    std::vector<double> want_y(hx.size()), want_dx(hx.size());
    for (std::size_t i = 0; i < hx.size(); ++i) {
      double const v = hx[i], k = std::sqrt(2 / M_PI), u = k * (v + 0.044715 * v * v * v);
      double const t = std::tanh(u);
      want_y[i] = 0.5 * v * (1 + t);
      want_dx[i] = hdy[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v));
    }
    JOULE_REQUIRE_CLOSE("gelu out", to_vector(y), want_y, 1e-5, 1e-6);
    JOULE_REQUIRE_CLOSE("gelu d_x", to_vector(dx), want_dx, 1e-5, 1e-6);
  }
  SECTION("cross-entropy forward and backward") {
    Tensor2<float, Mem> logits("logits", n, vocab), dlogits("dlogits", n, vocab);
    Tensor1<float, Mem> lse("lse", n), losses("losses", n);
    Kokkos::View<int*, Mem> targets("targets", n);
    fill_uniform(logits, rng, -30, 30);
    std::vector<int> ht(n);
    {
      auto h = Kokkos::create_mirror_view(targets);
      std::uniform_int_distribution<int> pick(0, vocab - 1);
      for (int i = 0; i < n; ++i) h(i) = ht[i] = (i % 5 == 2) ? kIgnoreIndex : pick(rng);
      Kokkos::deep_copy(targets, h);
    }
    auto const result = cross_entropy_forward(space, lse, losses, logits, targets);
    cross_entropy_backward(space, dlogits, logits, lse, targets, result.counted_rows, 1.0);
    auto const hl = to_vector(logits);
    std::vector<double> want_lse(n), want_d(n * vocab);
    double total = 0;
    for (int r = 0; r < n; ++r) {
      double m = -1e300, s = 0;
      for (int v = 0; v < vocab; ++v) m = std::max(m, hl[r * vocab + v]);
      for (int v = 0; v < vocab; ++v) s += std::exp(hl[r * vocab + v] - m);
      want_lse[r] = m + std::log(s);
      if (ht[r] == kIgnoreIndex) continue;
      total += want_lse[r] - hl[r * vocab + ht[r]];
      for (int v = 0; v < vocab; ++v)
        want_d[r * vocab + v] = (std::exp(hl[r * vocab + v] - want_lse[r]) - (v == ht[r])) / result.counted_rows;
    }
    JOULE_REQUIRE_CLOSE("lse", to_vector(lse), want_lse, 1e-6, 1e-6);
    REQUIRE(result.loss == Approx(total / result.counted_rows).epsilon(1e-5));
    JOULE_REQUIRE_CLOSE("d_logits", to_vector(dlogits), want_d, 1e-5, 1e-8);
  }
}
