// Whether two trials can be told apart (scheduler/significance.hpp): the tests' false-alarm rate
// and power on random samples against what a 95% test must give, and the choice it allows
// (the search's best only when beyond the noise; else the configuration's own settings).
#include "scheduler/significance.hpp"
#include "runlog/statistics.hpp"

#include "support/catch.hpp"

#include <cmath>
#include <random>

using namespace joule::scheduler;
using joule::test::Contains;

namespace {

std::vector<double> normal_sample(std::mt19937_64& rng, int n, double mean, double sd) {
  std::normal_distribution<double> dist(mean, sd);
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(dist(rng));
  return v;
}

// A trial of n steps: times around `time_s` with relative noise `noise` (lognormal), E = P·T.
TrialRecord trial(std::mt19937_64& rng, int index, double offload, double time_s, double noise, int n = 8,
                  double watts = 100) {
  TrialRecord t;
  t.index = index;
  t.knobs.offload_ratio = offload;
  std::normal_distribution<double> z(0, 1);
  for (int i = 0; i < n; ++i) {
    double const s = time_s * std::exp(noise * z(rng));
    t.step_time_s.push_back(s);
    t.step_energy_j.push_back(watts * s);
  }
  t.time_per_step_s = median(t.step_time_s);
  t.energy_per_step_j = median(t.step_energy_j);
  t.objective = t.time_per_step_s * t.energy_per_step_j;
  t.measured_steps = n;
  return t;
}

}  // namespace

TEST_CASE("significance: Welch's test says 'different' for about 5% of equal pairs and, with a few degrees "
          "of freedom, for most pairs 4 standard errors apart", "[scheduler][significance]") {
  std::mt19937_64 rng(41);
  int const draws = 4000;
  // The last: about 2 degrees of freedom, t = 4.3, so 4 standard errors are found about half the time.
  for (auto [na, nb, sa, sb, power] : {std::tuple{8, 8, 1.0, 1.0, 0.9}, std::tuple{4, 12, 1.0, 3.0, 0.75},
                                       std::tuple{3, 5, 2.0, 0.5, 0.45}}) {
    int alarms = 0, found = 0;
    double const se = std::sqrt(sa * sa / na + sb * sb / nb);
    for (int i = 0; i < draws; ++i) {
      alarms += compare_samples(normal_sample(rng, na, 100, sa), normal_sample(rng, nb, 100, sb)).significant;
      found += compare_samples(normal_sample(rng, na, 100 + 4 * se, sa), normal_sample(rng, nb, 100, sb)).significant;
    }
    INFO("n " << na << "/" << nb << ", sd " << sa << "/" << sb << ": " << alarms << " false alarms, " << found
              << " found, of " << draws);
    // A 95% test: 5% false alarms (Welch's df approximation keeps it within a point of that).
    CHECK(alarms > 0.035 * draws);
    CHECK(alarms < 0.065 * draws);
    CHECK(found > power * draws);
  }
  // The difference is relative to the second sample; the noise is the half-width it compares with.
  auto const c = compare_samples({110, 110.5, 109.5, 110}, {100, 100.5, 99.5, 100});
  CHECK(c.difference == joule::test::Approx(0.10));
  CHECK(c.significant);
  CHECK(c.noise < 0.01);
  CHECK_FALSE(compare_samples({1}, {2, 3}).significant);  // one step: no spread to judge by
  CHECK(std::isnan(compare_samples({1}, {2, 3}).difference));
}

TEST_CASE("significance: paired rounds: 5% false alarms on ratios around 1, and a drift that moves both sides "
          "cancels", "[scheduler][significance]") {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> z(0, 1);
  int alarms = 0;
  int const draws = 4000;
  for (int i = 0; i < draws; ++i) {
    std::vector<double> ratios;
    for (int r = 0; r < 4; ++r) ratios.push_back(std::exp(0.05 * z(rng)));
    alarms += compare_ratios(ratios).significant;
  }
  CHECK(alarms > 0.035 * draws);
  CHECK(alarms < 0.065 * draws);
  // A machine slowing by 40% over the rounds, the best 10% better throughout with 1% noise: the
  // rounds' ratios see 10%, whatever the drift.
  std::vector<double> ratios;
  for (int r = 0; r < 4; ++r) {
    double const speed = 1 + 0.1 * r;
    ratios.push_back((0.9 * speed * std::exp(0.01 * z(rng))) / (speed * std::exp(0.01 * z(rng))));
  }
  auto const c = compare_ratios(ratios);
  CHECK(c.significant);
  CHECK(c.difference == joule::test::Approx(-0.10).margin(0.02));
  CHECK_FALSE(compare_ratios({0.9}).significant);
}

TEST_CASE("choice: the best is announced only beyond the noise; else the configuration's settings are kept and "
          "the verdict says how large the noise was", "[scheduler][significance]") {
  Objective edp;
  std::mt19937_64 rng(3);
  SECTION("quiet machine: 30% faster is told apart") {
    std::vector<TrialRecord> trials{trial(rng, 0, 0.0, 0.10, 0.01), trial(rng, 1, 0.5, 0.07, 0.01),
                                    trial(rng, 2, 1.0, 0.09, 0.01)};
    int const best = select_best(trials, edp);
    REQUIRE(best == 1);
    auto const d = decide_choice(trials, best, 0, "the configuration's own settings", edp);
    CHECK(d.chosen == 1);
    CHECK(d.baseline == 0);
    CHECK(d.runner_up == 2);
    CHECK(d.best_vs_baseline.significant);
    CHECK(d.best_vs_runner_up.significant);
    CHECK_THAT(d.verdict, Contains("chose trial 1: its objective is -5") &&
                              Contains("against the configuration's own settings (trial 0)"));
  }
  SECTION("noisy machine: the same 30% is not, and the configuration's settings are kept") {
    std::vector<TrialRecord> trials{trial(rng, 0, 0.0, 0.10, 0.6), trial(rng, 1, 0.5, 0.07, 0.6),
                                    trial(rng, 2, 1.0, 0.09, 0.6)};
    int const best = select_best(trials, edp);
    REQUIRE(best != 0);  // the seed gives a best other than the baseline: the case under test
    auto const d = decide_choice(trials, best, 0, "the configuration's own settings", edp);
    CHECK(d.chosen == 0);
    CHECK_FALSE(d.best_vs_baseline.significant);
    CHECK(d.best_vs_baseline.noise > std::abs(d.best_vs_baseline.difference));
    CHECK_THAT(d.verdict, Contains("kept the configuration's own settings (trial 0): no candidate was "
                                   "distinguishable from it under this machine's noise") &&
                              Contains("Welch, 95%"));
  }
  SECTION("the rounds decide where they were measured, whatever the trials say") {
    std::vector<TrialRecord> trials{trial(rng, 4, 0.0, 0.10, 0.01), trial(rng, 7, 0.5, 0.07, 0.01)};
    // The trials differ by 50% (a drift between them), the alternating rounds by nothing.
    auto const d = decide_choice(trials, 1, 0, "the configuration's own settings", edp, {1.02, 0.97, 1.01, 0.99});
    CHECK(d.chosen == 4);  // indices are the trials' own (their index in the log)
    CHECK(d.best == 7);
    CHECK_THAT(d.verdict, Contains("4 alternating rounds of the two, paired t, 95%"));
    auto const e = decide_choice(trials, 1, 0, "the configuration's own settings", edp, {0.51, 0.49, 0.5, 0.52});
    CHECK(e.chosen == 7);
    CHECK(e.confirm_ratios.size() == 4);
  }
  SECTION("no baseline measured: the best, and the verdict says nothing was compared") {
    std::vector<TrialRecord> trials{trial(rng, 0, 0.5, 0.07, 0.01)};
    auto const d = decide_choice(trials, 0, -1, "the configuration's own settings", edp);
    CHECK(d.chosen == 0);
    CHECK(d.runner_up == -1);
    CHECK_THAT(d.verdict, Contains("was not measured, so nothing was compared with it"));
  }
}
