// Cross-entropy with an ignore index (against a naive log-softmax and finite differences), with
// padding columns (against the unpadded logits), argmax over padded rows, and AdamW (against a
// plain host loop over several steps).
#include "core/ops/adamw.hpp"
#include "core/ops/argmax.hpp"
#include "core/ops/cross_entropy.hpp"
#include "support/test_support.hpp"

#include <limits>

using namespace joule;
using namespace joule::test;

TEMPLATE_TEST_CASE("cross entropy: ignored rows count for nothing; backward matches finite differences",
                   "[ops][cross_entropy][gradcheck]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(31);
  int const n = 29, vocab = 31;
  Tensor2<double, Mem> logits("logits", n, vocab), d_logits("d_logits", n, vocab);
  Tensor1<double, Mem> lse("lse", n), losses("losses", n);
  Kokkos::View<int*, Mem> targets("targets", n);
  fill_uniform(logits, rng, -6, 6);
  std::vector<int> ht(n);
  {
    auto h = Kokkos::create_mirror_view(targets);
    std::uniform_int_distribution<int> pick(0, vocab - 1);
    for (int i = 0; i < n; ++i) h(i) = ht[i] = (i % 4 == 1) ? kIgnoreIndex : pick(rng);
    Kokkos::deep_copy(targets, h);
  }
  auto const result = cross_entropy_forward(space, lse, losses, logits, targets);
  auto const hl = to_vector(logits);
  double naive = 0;
  int counted = 0;
  for (int i = 0; i < n; ++i) {
    if (ht[i] == kIgnoreIndex) continue;
    double m = -1e300, s = 0;
    for (int v = 0; v < vocab; ++v) m = std::max(m, hl[i * vocab + v]);
    for (int v = 0; v < vocab; ++v) s += std::exp(hl[i * vocab + v] - m);
    naive += m + std::log(s) - hl[i * vocab + ht[i]];
    ++counted;
  }
  REQUIRE(result.counted_rows == counted);
  REQUIRE(counted < n);
  REQUIRE(result.loss == Approx(naive / counted).epsilon(1e-12));

  double const d_loss = 0.7;
  cross_entropy_backward(space, d_logits, logits, lse, targets, result.counted_rows, d_loss);
  auto const g = to_vector(d_logits);
  for (int v = 0; v < vocab; ++v) REQUIRE(g[1 * vocab + v] == 0.0);  // row 1 is ignored
  auto loss = [&] { return d_loss * cross_entropy_forward(space, lse, losses, logits, targets).loss; };
  JOULE_REQUIRE_GRADIENT("d_logits", logits, g, loss, rng);

  set_element(targets, 3, vocab);
  REQUIRE_THROWS_WITH(cross_entropy_forward(space, lse, losses, logits, targets),
                      Contains("neither ignore_index"));
}

TEMPLATE_TEST_CASE("cross entropy and argmax: columns past `classes` are padding, never read, their gradient 0",
                   "[ops][cross_entropy]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(33);
  int const n = 23, vocab = 37, padded = 40;  // as the model's 259 classes in rows of 264
  Tensor2<double, Mem> logits("logits", n, vocab), d_logits("d_logits", n, vocab);
  Tensor2<double, Mem> wide("wide", n, padded), d_wide("d_wide", n, padded);
  Tensor1<double, Mem> lse("lse", n), losses("losses", n), wide_lse("wide_lse", n), wide_losses("wide_losses", n);
  Kokkos::View<int*, Mem> targets("targets", n), picks("picks", n), wide_picks("wide_picks", n);
  fill_uniform(logits, rng, -6, 6);
  {
    auto const h = to_vector(logits);
    std::vector<double> w(std::size_t(n) * padded);
    for (int i = 0; i < n; ++i)
      for (int v = 0; v < padded; ++v)  // padding that would win every max and every sum if it were read
        w[std::size_t(i) * padded + v] = v < vocab ? h[std::size_t(i) * vocab + v] : (v % 2 ? 1e3 : std::nan(""));
    from_vector(wide, w);
    auto t = Kokkos::create_mirror_view(targets);
    std::uniform_int_distribution<int> pick(0, vocab - 1);
    for (int i = 0; i < n; ++i) t(i) = (i % 5 == 2) ? kIgnoreIndex : pick(rng);
    Kokkos::deep_copy(targets, t);
  }
  auto const want = cross_entropy_forward(space, lse, losses, logits, targets);
  auto const got = cross_entropy_forward(space, wide_lse, wide_losses, wide, targets, kIgnoreIndex, vocab);
  REQUIRE(got.counted_rows == want.counted_rows);
  REQUIRE(got.loss == want.loss);  // the same columns in the same order: the same bits
  REQUIRE(to_vector(wide_lse) == to_vector(lse));
  REQUIRE(to_vector(wide_losses) == to_vector(losses));

  cross_entropy_backward(space, d_logits, logits, lse, targets, want.counted_rows, 0.7);
  Kokkos::deep_copy(d_wide, std::nan(""));
  cross_entropy_backward(space, d_wide, wide, wide_lse, targets, got.counted_rows, 0.7, kIgnoreIndex, vocab);
  auto const g = to_vector(d_logits), gw = to_vector(d_wide);
  for (int i = 0; i < n; ++i)
    for (int v = 0; v < padded; ++v) {
      CAPTURE(i, v);
      REQUIRE(gw[std::size_t(i) * padded + v] == (v < vocab ? g[std::size_t(i) * vocab + v] : 0.0));
    }

  row_argmax(space, picks, logits);
  row_argmax(space, wide_picks, wide, vocab);
  REQUIRE(to_vector(wide_picks) == to_vector(picks));
  row_argmax(space, wide_picks, wide);  // every column: the padding's 1e3 wins
  for (double p : to_vector(wide_picks)) REQUIRE(p >= vocab);

  REQUIRE_THROWS_WITH(cross_entropy_forward(space, wide_lse, wide_losses, wide, targets, kIgnoreIndex, padded + 1),
                      Contains("41 classes in logits of 40 columns"));
  REQUIRE_THROWS_WITH(row_argmax(space, picks, wide, 0), Contains("classes 0"));
}

TEMPLATE_TEST_CASE("adamw: matches a plain loop over several steps, in float and double",
                   "[ops][adamw]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(32);
  int const n = 1001;
  AdamWConfig cfg;
  cfg.lr = 2e-2;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-6;
  cfg.weight_decay = 0.3;

  Tensor1<double, Mem> p("p", n), g("g", n), m("m", n), v("v", n);
  Tensor1<float, Mem> pf("pf", n), gf("gf", n), mf("mf", n), vf("vf", n);
  fill_uniform(p, rng);
  auto ref_p = to_vector(p);
  from_vector(pf, ref_p);
  ref_p = to_vector(pf);  // start the float and double runs from the same (float) values
  from_vector(p, ref_p);
  std::vector<double> ref_m(n, 0), ref_v(n, 0);
  for (int step = 1; step <= 5; ++step) {
    fill_uniform(g, rng, -2, 2);
    auto const hg = to_vector(g);
    from_vector(gf, hg);
    adamw_update(space, p, g, m, v, cfg, step);
    adamw_update(space, pf, gf, mf, vf, cfg, step);
    for (int i = 0; i < n; ++i) {
      ref_m[i] = cfg.beta1 * ref_m[i] + (1 - cfg.beta1) * hg[i];
      ref_v[i] = cfg.beta2 * ref_v[i] + (1 - cfg.beta2) * hg[i] * hg[i];
      double const mhat = ref_m[i] / (1 - std::pow(cfg.beta1, step));
      double const vhat = ref_v[i] / (1 - std::pow(cfg.beta2, step));
      ref_p[i] = ref_p[i] * (1 - cfg.lr * cfg.weight_decay) - cfg.lr * mhat / (std::sqrt(vhat) + cfg.eps);
    }
  }
  JOULE_REQUIRE_CLOSE("adamw double params", to_vector(p), ref_p, 1e-12, 1e-14);
  JOULE_REQUIRE_CLOSE("adamw double m", to_vector(m), ref_m, 1e-12, 1e-14);
  JOULE_REQUIRE_CLOSE("adamw double v", to_vector(v), ref_v, 1e-12, 1e-14);
  JOULE_REQUIRE_CLOSE("adamw float params", to_vector(pf), ref_p, 1e-5, 1e-6);
  REQUIRE_THROWS(adamw_update(space, p, g, m, v, cfg, 0));
}

TEMPLATE_TEST_CASE("adamw: one float step is within the documented error of a double-precision step from "
                   "the same inputs, at awkward sizes and steps", "[ops][adamw]", JOULE_TEST_SPACES) {
  // The bounds core/ops/adamw.hpp states, in units u = 2^-24 of the magnitudes that form each result
  // (m may cancel to far below its terms, so a bound relative to m itself would not hold).
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(34);
  AdamWConfig cfg;
  cfg.lr = 3e-4;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weight_decay = 0.1;
  double const u = std::ldexp(1.0, -24);
  double worst_m = 0, worst_v = 0, worst_p = 0;  // the largest error, in units of its bound
  for (int n : {1, 17, 4099}) {
    for (long step : {1L, 2L, 9L, 1000L}) {
      Tensor1<float, Mem> p("p", n), g("g", n), m("m", n), v("v", n);
      fill_uniform(p, rng, -2, 2);
      fill_uniform(g, rng, -3, 3);
      fill_uniform(m, rng, -0.5, 0.5);
      fill_uniform(v, rng, 0, 1);
      auto hv = to_vector(v);
      for (int i = 0; i < n; i += 3) hv[std::size_t(i)] *= 1e-12 * (i % 7);  // near and at 0: eps matters
      from_vector(v, hv);
      auto const p0 = to_vector(p), g0 = to_vector(g), m0 = to_vector(m), v0 = to_vector(v);
      double const scale = 0.37;
      adamw_update(space, p, g, m, v, cfg, step, scale);
      auto const p1 = to_vector(p), m1 = to_vector(m), v1 = to_vector(v);
      for (int i = 0; i < n; ++i) {
        double const gi = double(float(g0[i]) * float(scale));  // the kernel scales in float first
        double const mi = cfg.beta1 * m0[i] + (1 - cfg.beta1) * gi;
        double const vi = cfg.beta2 * v0[i] + (1 - cfg.beta2) * gi * gi;
        double const update = cfg.lr * (mi / (1 - std::pow(cfg.beta1, double(step)))) /
                              (std::sqrt(vi / (1 - std::pow(cfg.beta2, double(step)))) + cfg.eps);
        double const pi = p0[i] * (1 - cfg.lr * cfg.weight_decay) - update;
        double const m_terms = std::fabs(cfg.beta1 * m0[i]) + std::fabs((1 - cfg.beta1) * gi);
        double const update_terms = std::fabs(update) * m_terms / std::max(std::fabs(mi), 1e-300);
        worst_m = std::max(worst_m, std::fabs(m1[i] - mi) / (4 * u * m_terms));
        worst_v = std::max(worst_v, std::fabs(v1[i] - vi) / (6 * u * vi + 1e-300));
        worst_p = std::max(worst_p, std::fabs(p1[i] - pi) / (4 * u * std::fabs(p0[i]) + 8 * u * update_terms));
      }
    }
  }
  INFO("largest error over its bound: m " << worst_m << ", v " << worst_v << ", p " << worst_p);
  CHECK(worst_m <= 1);
  CHECK(worst_v <= 1);
  CHECK(worst_p <= 1);
  CHECK(worst_p > 0);  // the float step did round: this compared something
}

TEMPLATE_TEST_CASE("adamw: the multi-tensor launch over runs of several arrays is adamw_update on each run",
                   "[ops][adamw]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(33);
  AdamWConfig decayed;
  decayed.lr = 1e-2;
  decayed.weight_decay = 0.1;
  AdamWConfig plain = decayed;
  plain.weight_decay = 0.0;
  // Two arrays (two groups), cut into runs of awkward lengths: [0, 37) decayed, [37, 40) not,
  // [40, 1003) decayed of the first; all 5 elements of the second, not decayed.
  Tensor1<float, Mem> p1("p1", 1003), g1("g1", 1003), m1("m1", 1003), v1("v1", 1003);
  Tensor1<float, Mem> p2("p2", 5), g2("g2", 5), m2("m2", 5), v2("v2", 5);
  for (auto* t : {&p1, &g1, &p2, &g2}) fill_uniform(*t, rng, -1, 1);
  auto q1 = Tensor1<float, Mem>("q1", 1003), q2 = Tensor1<float, Mem>("q2", 5);
  auto n1 = Tensor1<float, Mem>("n1", 1003), w1 = Tensor1<float, Mem>("w1", 1003);
  auto n2 = Tensor1<float, Mem>("n2", 5), w2 = Tensor1<float, Mem>("w2", 5);
  Kokkos::deep_copy(q1, p1);
  Kokkos::deep_copy(q2, p2);
  std::vector<AdamWRun<float>> runs{{p1.data(), g1.data(), m1.data(), v1.data(), 0, 1},
                                    {p1.data() + 37, g1.data() + 37, m1.data() + 37, v1.data() + 37, 37, 0},
                                    {p1.data() + 40, g1.data() + 40, m1.data() + 40, v1.data() + 40, 40, 1},
                                    {p2.data(), g2.data(), m2.data(), v2.data(), 1003, 0}};
  Kokkos::View<AdamWRun<float>*, Mem> table("runs", runs.size());
  auto h = Kokkos::create_mirror_view(table);
  std::copy(runs.begin(), runs.end(), h.data());
  Kokkos::deep_copy(table, h);
  auto slice = [](auto const& t, int b, int e) { return Kokkos::subview(t, std::make_pair(b, e)); };
  for (long step = 1; step <= 3; ++step) {
    adamw_update_runs(space, table, 1008, detail::make_adamw_element<float>(decayed, step, 0.7),
                      detail::make_adamw_element<float>(plain, step, 0.7));
    adamw_update(space, slice(q1, 0, 37), slice(g1, 0, 37), slice(n1, 0, 37), slice(w1, 0, 37), decayed, step, 0.7);
    adamw_update(space, slice(q1, 37, 40), slice(g1, 37, 40), slice(n1, 37, 40), slice(w1, 37, 40), plain, step, 0.7);
    adamw_update(space, slice(q1, 40, 1003), slice(g1, 40, 1003), slice(n1, 40, 1003), slice(w1, 40, 1003), decayed,
                 step, 0.7);
    adamw_update(space, q2, g2, n2, w2, plain, step, 0.7);
  }
  space.fence();
  // The same bits: on a host space both are the host loop of adamw_host.cpp (the runs in one region,
  // cut into a chunk per thread across the runs' boundaries), on CUDA both are AdamWElement::apply
  // with its rounding intrinsics.
  REQUIRE(to_vector(p1) == to_vector(q1));
  REQUIRE(to_vector(m1) == to_vector(n1));
  REQUIRE(to_vector(v1) == to_vector(w1));
  REQUIRE(to_vector(p2) == to_vector(q2));
  REQUIRE(to_vector(m2) == to_vector(n2));
  REQUIRE(to_vector(v2) == to_vector(w2));
  REQUIRE(to_vector(p1) != to_vector(g1));  // something was updated
}

namespace {
// AdamW on one element with every rounding spelled out: volatile stores keep the compiler from
// fusing a multiply and an add on its own; the three multiply-adds are fused exactly where the
// build's AdamW fuses them (JOULE_ADAMW_FMA: the target has FMA), with std::fma.
float reference_mul_add(float a, float b, float c) {
#if JOULE_ADAMW_FMA
  return std::fma(a, b, c);
#else
  volatile float product = a * b;
  return product + c;
#endif
}
void adamw_reference_step(float& p, float& m, float& v, float g_raw, AdamWConfig const& c, long step) {
  float const b1 = float(c.beta1), one_minus_b1 = float(1.0 - c.beta1), b2 = float(c.beta2),
              one_minus_b2 = float(1.0 - c.beta2), eps = float(c.eps), decay = float(1.0 - c.lr * c.weight_decay),
              step_size = float(c.lr / (1.0 - std::pow(c.beta1, double(step)))),
              inv_sqrt_bias2 = float(1.0 / std::sqrt(1.0 - std::pow(c.beta2, double(step))));
  volatile float g = g_raw * 1.0f, t1 = one_minus_b1 * g;
  m = reference_mul_add(b1, m, t1);
  volatile float t2 = one_minus_b2 * g, t3 = t2 * g;
  v = reference_mul_add(b2, v, t3);
  volatile float root = std::sqrt(v);
  volatile float denominator = reference_mul_add(root, inv_sqrt_bias2, eps);
  volatile float t4 = step_size * m, t5 = t4 / denominator;
  p = reference_mul_add(p, decay, -t5);
}
}  // namespace

TEMPLATE_TEST_CASE("adamw: every backend rounds as the step-by-step reference does (FMA where the target "
                   "has it, nowhere else), the same bits", "[ops][adamw]", JOULE_TEST_SPACES) {
  // Host- and device-updated groups must agree bit for bit (the offload ratio must not change the
  // result); this pins both to one rounding sequence.
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(33);
  int const n = 4099;
  AdamWConfig cfg;
  cfg.lr = 3e-3;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weight_decay = 0.1;
  Tensor1<float, Mem> p("p", n), g("g", n), m("m", n), v("v", n);
  fill_uniform(p, rng);
  auto hp = to_vector(p);
  std::vector<float> rp(hp.begin(), hp.end()), rm(n, 0.0f), rv(n, 0.0f);
  for (long step = 1; step <= 4; ++step) {
    fill_uniform(g, rng, -3, 3);
    auto const hg = to_vector(g);
    adamw_update(space, p, g, m, v, cfg, step);
    for (int i = 0; i < n; ++i) adamw_reference_step(rp[i], rm[i], rv[i], float(hg[i]), cfg, step);
  }
  auto const got_p = to_vector(p), got_m = to_vector(m), got_v = to_vector(v);
  int differ = 0;
  for (int i = 0; i < n; ++i)
    differ += (float(got_p[i]) != rp[i]) + (float(got_m[i]) != rm[i]) + (float(got_v[i]) != rv[i]);
  REQUIRE(differ == 0);
}

TEST_CASE("adamw: the out-of-place host loop writes the in-place loop's bits and leaves its input as it was",
          "[ops][adamw]") {
  // A speculative step (core/train/optimizer.cpp) updates from the live state into a second one.
  Rng rng(71);
  std::size_t const n = 1037, begin = 3, end = 1030;  // awkward: no multiple of a vector width
  auto random = [&](float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> x(n);
    for (auto& e : x) e = u(rng);
    return x;
  };
  auto const p0 = random(-1, 1), m0 = random(-0.1f, 0.1f), v0 = random(0, 0.01f), g = random(-3, 3);
  AdamWConfig cfg;
  cfg.lr = 3e-3;
  cfg.weight_decay = 0.1;
  for (double const scale : {1.0, 0.37}) {
    INFO("gradient scale " << scale);
    auto const e = detail::make_adamw_element<float>(cfg, 7, scale);
    std::vector<float> p = p0, m = m0, v = v0;  // in place
    detail::adamw_host_range(e, p.data(), g.data(), m.data(), v.data(), begin, end);
    std::vector<float> po(n, -5.0f), mo(n, -5.0f), vo(n, -5.0f);  // out of place
    detail::adamw_host_range_into(e, detail::AdamWState<float const>{p0.data(), m0.data(), v0.data()}, g.data(),
                                  detail::AdamWState<float>{po.data(), mo.data(), vo.data()}, begin, end);
    for (std::size_t i = 0; i < n; ++i) {
      bool const inside = i >= begin && i < end;
      INFO("element " << i);
      REQUIRE(std::memcmp(&po[i], inside ? &p[i] : &po[0], sizeof(float)) == 0);  // outside: untouched (-5)
      REQUIRE(std::memcmp(&mo[i], inside ? &m[i] : &mo[0], sizeof(float)) == 0);
      REQUIRE(std::memcmp(&vo[i], inside ? &v[i] : &vo[0], sizeof(float)) == 0);
    }
    REQUIRE(po[begin] != p0[begin]);  // it did update
  }
}
