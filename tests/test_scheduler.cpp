// The scheduler's search half: objectives, the Pareto front, the statistics of a trial, and the
// search strategies on synthetic landscapes whose optimum is known by measuring all of them.
// Expected values are worked out here from E and T by the definitions, not taken from the code.
#include "scheduler/objective.hpp"
#include "runlog/statistics.hpp"
#include "scheduler/strategy.hpp"
#include "runlog/trial.hpp"

#include "support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

using namespace joule::scheduler;
using namespace joule::test;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TrialRecord trial(double time_s, double energy_j, TrialStatus status = TrialStatus::ok) {
  TrialRecord t;
  t.time_per_step_s = time_s;
  t.energy_per_step_j = energy_j;
  t.status = status;
  return t;
}

// A deterministic generator that gives the same numbers with every standard library
// (std::uniform_real_distribution does not).
struct SplitMix {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo = 0, double hi = 1) { return lo + (hi - lo) * double(next() >> 11) * 0x1.0p-53; }
  int below(int n) { return int(next() % std::uint64_t(n)); }
};

// A hand-made set (T s, E J):     edp     ed2p      E/T
//   0 A  1.00  100                100     100       100
//   1 B  0.80  130                104      83.2     162.5
//   2 C  1.25   76                 95     118.75     60.8
//   3 D  1.05   90                 94.5    99.225    85.7
//   4 failed, would win anything
//   5 ok but energy not measured (NaN), fastest of all
std::vector<TrialRecord> hand_made_set() {
  return {trial(1.00, 100), trial(0.80, 130), trial(1.25, 76), trial(1.05, 90),
          trial(0.50, 10, TrialStatus::failed), trial(0.10, kNaN)};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Trial records

TEST_CASE("scheduler: knobs describe themselves, optional knobs only when set", "[scheduler]") {
  Knobs k;
  k.offload_ratio = 0.5;
  k.recompute_depth = 2;
  CHECK(k.describe() == "offload 0.50, recompute 2, shards 1");
  k.micro_batch = 8;
  k.host_threads = 0;
  k.power_limit_w = 300;
  CHECK(k.describe() == "offload 0.50, recompute 2, shards 1, micro-batch 8, host threads all, power limit 300 W");
  k.host_threads = 12;
  CHECK(k.describe().find("host threads 12") != std::string::npos);
}

TEST_CASE("scheduler: trial status round-trips through its name; unknown names are rejected", "[scheduler]") {
  for (auto s : {TrialStatus::ok, TrialStatus::infeasible, TrialStatus::failed})
    CHECK(trial_status_from(to_string(s)) == s);
  CHECK(std::string(to_string(TrialStatus::infeasible)) == "infeasible");
  CHECK_THROWS_WITH(trial_status_from("OK"), Contains("allowed: ok, infeasible, failed"));
}

// ---------------------------------------------------------------------------------------------
// Objectives

TEST_CASE("scheduler: objective specs parse, name themselves, and bad ones name the allowed forms",
          "[scheduler][objective]") {
  CHECK(Objective::parse("edp").kind == Objective::Kind::edp);
  CHECK(Objective::parse("ed2p").kind == Objective::Kind::ed2p);
  CHECK(Objective{}.kind == Objective::Kind::edp);  // the default
  auto const weighted = Objective::parse("weighted");
  CHECK(weighted.kind == Objective::Kind::weighted);
  CHECK(weighted.eta == 0.5);
  CHECK(Objective::parse("weighted:0.3").eta == 0.3);
  CHECK(Objective::parse("weighted:1").eta == 1.0);
  auto const eus = Objective::parse("energy_under_slowdown");
  CHECK(eus.kind == Objective::Kind::energy_under_slowdown);
  CHECK(eus.max_slowdown == 0.10);
  CHECK(Objective::parse("energy_under_slowdown:0.05").max_slowdown == 0.05);

  for (std::string spec : {"edp", "ed2p", "weighted:0.3", "energy_under_slowdown:0.05"})
    CHECK(Objective::parse(spec).name() == spec);
  CHECK(Objective::parse(Objective::parse("weighted").name()).eta == 0.5);

  for (std::string bad : {"", "EDP", "edp:0.3", "ed2p:", "weighted:", "weighted:abc", "weighted:0.3x",
                          "weighted:1.5", "weighted:-0.1", "weighted:nan", "energy_under_slowdown:10",
                          "energy", "zeus", "edp "}) {
    INFO("spec '" << bad << "'");
    CHECK_THROWS_AS(Objective::parse(bad), std::invalid_argument);
    CHECK_THROWS_WITH(Objective::parse(bad), Contains("allowed: edp, ed2p, weighted") &&
                                                 Contains("energy_under_slowdown:X"));
  }
}

TEST_CASE("scheduler: objective values per trial follow their definitions", "[scheduler][objective]") {
  double const e = 120, t = 0.75;
  CHECK(objective_value(Objective::parse("edp"), e, t, 0) == Approx(90.0));
  CHECK(objective_value(Objective::parse("ed2p"), e, t, 0) == Approx(67.5));
  // 0.3·120 + 0.7·400·0.75 = 36 + 210
  CHECK(objective_value(Objective::parse("weighted:0.3"), e, t, 400) == Approx(246.0));
  // P_max from the objective when the argument is 0; the trial's own power E/T when neither is set
  Objective w = Objective::parse("weighted:0.3");
  w.p_max_w = 200;  // 36 + 0.7·200·0.75 = 141
  CHECK(objective_value(w, e, t, 0) == Approx(141.0));
  CHECK(objective_value(Objective::parse("weighted:0.3"), e, t, 0) == Approx(120.0));
  CHECK(objective_value(Objective::parse("energy_under_slowdown"), e, t, 0) == e);
}

TEST_CASE("scheduler: select_best on a hand-made set, failed and unmeasured trials ignored",
          "[scheduler][objective]") {
  auto const set = hand_made_set();
  // edp: D 1.05·90 = 94.5 < C 95 < A 100 < B 104
  CHECK(select_best(set, Objective::parse("edp")) == 3);
  // ed2p: B 0.8²·130 = 83.2 < D 99.225 < A 100 < C 118.75
  CHECK(select_best(set, Objective::parse("ed2p")) == 1);

  // weighted, eta 0.5, P_max = 100 W given: A 50+50 = 100, B 65+40 = 105, C 38+62.5 = 100.5,
  // D 45+52.5 = 97.5
  Objective w = Objective::parse("weighted:0.5");
  w.p_max_w = 100;
  CHECK(select_best(set, w) == 3);
  // P_max not given: the largest E/T among the ok comparable trials, B's 162.5 W (the failed
  // trial's 20 W and the NaN trial play no part): A 50+81.25 = 131.25, B 65+65 = 130,
  // C 38+101.5625 = 139.56, D 45+85.3125 = 130.31
  CHECK(objective_context(set, Objective::parse("weighted")).p_max_w == Approx(162.5));
  CHECK(select_best(set, Objective::parse("weighted")) == 1);
  // with eta 0.8 energy weighs more: A 80+32.5 = 112.5, B 104+26 = 130, C 60.8+40.625 = 101.425,
  // D 72+34.125 = 106.125
  CHECK(select_best(set, Objective::parse("weighted:0.8")) == 2);

  // Nothing comparable: -1
  CHECK(select_best({}, Objective{}) == -1);
  CHECK(select_best({trial(1, 1, TrialStatus::failed), trial(kNaN, 5), trial(1, kInf),
                     trial(1, 1, TrialStatus::infeasible)},
                    Objective{}) == -1);
  // Ties on the objective go to the faster trial, then the earlier one
  CHECK(select_best({trial(2, 50), trial(1, 100)}, Objective::parse("edp")) == 1);
  CHECK(select_best({trial(1, 100), trial(1, 100)}, Objective::parse("edp")) == 0);
}

TEST_CASE("scheduler: energy_under_slowdown takes the least energy within X of the fastest, and "
          "changes its choice with X",
          "[scheduler][objective]") {
  auto const set = hand_made_set();  // fastest ok comparable: B at 0.80 s (not the failed 0.50)
  auto pick = [&](char const* spec) { return select_best(set, Objective::parse(spec)); };
  CHECK(pick("energy_under_slowdown:0") == 1);     // only B itself
  CHECK(pick("energy_under_slowdown:0.10") == 1);  // <= 0.88 s: B alone
  CHECK(pick("energy_under_slowdown:0.25") == 0);  // <= 1.00 s, A included at the bound: A 100 J
  CHECK(pick("energy_under_slowdown:0.35") == 3);  // <= 1.08 s: D 90 J
  CHECK(pick("energy_under_slowdown:0.60") == 2);  // <= 1.28 s: C 76 J
  CHECK(pick("energy_under_slowdown:1") == 2);

  // Judged against a subset, in the context of the whole set: C alone is too slow for 10%, so
  // the fastest of the subset is taken
  CHECK(select_best(set, {2, 3}, Objective::parse("energy_under_slowdown:0.10")) == 3);
  CHECK(select_best(set, {0, 2, 3}, Objective::parse("energy_under_slowdown:0.35")) == 3);
  CHECK_THROWS_AS(select_best(set, {7}, Objective{}), std::out_of_range);
}

TEST_CASE("scheduler: on random sets weighted with eta 1 is least energy, eta 0 least time; "
          "energy_under_slowdown matches its definition", "[scheduler][objective]") {
  SplitMix rng{7};
  for (int round = 0; round < 50; ++round) {
    std::vector<TrialRecord> set;
    int const n = 1 + rng.below(30);
    for (int i = 0; i < n; ++i) set.push_back(trial(rng.uniform(0.2, 3), rng.uniform(10, 500)));
    int least_energy = 0, least_time = 0;
    for (int i = 1; i < n; ++i) {
      if (set[i].energy_per_step_j < set[least_energy].energy_per_step_j) least_energy = i;
      if (set[i].time_per_step_s < set[least_time].time_per_step_s) least_time = i;
    }
    CHECK(select_best(set, Objective::parse("weighted:1")) == least_energy);
    CHECK(select_best(set, Objective::parse("weighted:0")) == least_time);
    // energy_under_slowdown:0.5 by its definition: least energy among T <= 1.5·fastest
    int least_energy_within = -1;
    for (int i = 0; i < n; ++i)
      if (set[i].time_per_step_s <= 1.5 * set[least_time].time_per_step_s &&
          (least_energy_within < 0 || set[i].energy_per_step_j < set[least_energy_within].energy_per_step_j))
        least_energy_within = i;
    CHECK(select_best(set, Objective::parse("energy_under_slowdown:0.5")) == least_energy_within);
  }
}

// ---------------------------------------------------------------------------------------------
// Pareto front

TEST_CASE("scheduler: Pareto front of a hand-made set: dominated, equal-time and failed trials "
          "excluded, duplicates kept",
          "[scheduler][pareto]") {
  auto set = hand_made_set();          // 0 A(1.00,100) 1 B(0.80,130) 2 C(1.25,76) 3 D(1.05,90)
  set.push_back(trial(1.10, 95));      // 6: dominated by D (faster and less energy)
  set.push_back(trial(1.00, 120));     // 7: same time as A, more energy
  set.push_back(trial(1.00, 100));     // 8: A's duplicate
  set.push_back(trial(1.30, 76));      // 9: C's energy, slower
  set.push_back(trial(0.70, 500, TrialStatus::infeasible));
  // Sorted by time: B 0.80, A 1.00, its duplicate, D 1.05, C 1.25
  CHECK(pareto_front(set) == std::vector<int>{1, 0, 8, 3, 2});
  CHECK(pareto_front({}).empty());
  CHECK(pareto_front({trial(1, 1, TrialStatus::failed)}).empty());
  CHECK(pareto_front({trial(2, 3)}) == std::vector<int>{0});
}

TEST_CASE("scheduler: Pareto front agrees with the O(n^2) definition on random sets", "[scheduler][pareto]") {
  SplitMix rng{2024};
  for (int round = 0; round < 300; ++round) {
    std::vector<TrialRecord> set;
    int const n = rng.below(40);
    for (int i = 0; i < n; ++i) {
      // a coarse grid, so that equal times, equal energies and duplicates happen
      auto t = trial(0.1 * (1 + rng.below(12)), 10.0 * (1 + rng.below(12)));
      if (rng.below(10) == 0) t.status = TrialStatus::failed;
      if (rng.below(20) == 0) t.energy_per_step_j = kNaN;
      set.push_back(t);
    }
    auto usable = [&](int i) {
      return set[i].ok() && std::isfinite(set[i].time_per_step_s) && std::isfinite(set[i].energy_per_step_j);
    };
    std::vector<int> naive;
    for (int i = 0; i < n; ++i) {
      if (!usable(i)) continue;
      bool dominated = false;
      for (int j = 0; j < n && !dominated; ++j) {
        if (!usable(j)) continue;
        double const ti = set[i].time_per_step_s, ei = set[i].energy_per_step_j;
        double const tj = set[j].time_per_step_s, ej = set[j].energy_per_step_j;
        dominated = tj <= ti && ej <= ei && (tj < ti || ej < ei);
      }
      if (!dominated) naive.push_back(i);
    }
    auto const front = pareto_front(set);
    INFO("round " << round << ", " << n << " trials");
    CHECK(std::multiset<int>(front.begin(), front.end()) == std::multiset<int>(naive.begin(), naive.end()));
    for (std::size_t k = 1; k < front.size(); ++k) {
      CHECK(set[front[k - 1]].time_per_step_s <= set[front[k]].time_per_step_s);
      // along the front, energy never rises as time does
      CHECK(set[front[k - 1]].energy_per_step_j >= set[front[k]].energy_per_step_j);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Statistics

TEST_CASE("scheduler: median, mean and 95% confidence interval against hand-computed values",
          "[scheduler][statistics]") {
  std::vector<double> const v{4, 2, 9, 4, 5, 7, 4, 5};  // sorted: 2 4 4 4 5 5 7 9
  CHECK(median(v) == 4.5);
  CHECK(median({3, 1, 2}) == 2);
  CHECK(median({7}) == 7);
  CHECK(mean(v) == 5);
  // squared deviations 9+1+1+1+0+0+4+16 = 32, s² = 32/7
  CHECK(sample_stddev(v) == Approx(std::sqrt(32.0 / 7)));
  auto const ci = mean_ci95(v);
  double const half = 2.3646 * std::sqrt(32.0 / 7) / std::sqrt(8.0);  // t(0.975, 7 df) = 2.3646
  CHECK(ci.centre == 5);
  CHECK(ci.half_width == Approx(half).epsilon(1e-4));
  CHECK(ci.low() == Approx(5 - half).epsilon(1e-4));
  CHECK(ci.high() == Approx(5 + half).epsilon(1e-4));
  CHECK(relative_ci_half_width(v) == Approx(half / 5).epsilon(1e-4));
  // two samples: t(1 df) = 12.706, s = |a−b|/√2, so the half-width is 12.706·|a−b|/2
  CHECK(mean_ci95({10, 12}).half_width == Approx(12.706).epsilon(1e-4));
  // negative mean: relative to |mean|
  CHECK(relative_ci_half_width({-10, -12}) == Approx(12.706 / 11).epsilon(1e-4));

  CHECK(t_quantile_975(1) == Approx(12.706).epsilon(1e-4));
  CHECK(t_quantile_975(10) == Approx(2.228).epsilon(1e-3));
  CHECK(t_quantile_975(30) == Approx(2.042).epsilon(1e-3));
  CHECK(t_quantile_975(31) == 1.96);
  CHECK(t_quantile_975(1000) == 1.96);
  CHECK_THROWS_AS(t_quantile_975(0), std::invalid_argument);
  for (int df = 2; df <= 31; ++df) CHECK(t_quantile_975(df) < t_quantile_975(df - 1));

  // Degenerate inputs
  CHECK(std::isnan(median({})));
  CHECK(std::isnan(mean({})));
  CHECK(std::isnan(mean_ci95({3}).half_width));
  CHECK(mean_ci95({3}).centre == 3);
  CHECK(mean_ci95({2, 2, 2}).half_width == 0);
  CHECK(std::isnan(relative_ci_half_width({1, -1})));
  CHECK(std::isnan(median({1, kNaN, 3})));
  CHECK(std::isnan(mean({1, kInf})));
  CHECK(std::isnan(mean_ci95({1, kNaN, 3}).half_width));
}

TEST_CASE("scheduler: racing stops a candidate only when its interval is entirely above the best's",
          "[scheduler][statistics]") {
  // 1.0 +- 10% = [0.9, 1.1] against 0.8 +- 5% = [0.76, 0.84]: clearly worse.
  CHECK(clearly_worse(1.0, 0.10, 0.8, 0.05));
  // [0.8, 1.2] overlaps [0.76, 0.84]: not yet.
  CHECK_FALSE(clearly_worse(1.0, 0.20, 0.8, 0.05));
  // The edges touching (0.9 vs 0.9) is not "entirely above".
  CHECK_FALSE(clearly_worse(1.0, 0.10, 0.9, 0.0));
  // Better than the best, an interval of 100% or more, or nothing known: never.
  CHECK_FALSE(clearly_worse(0.5, 0.01, 0.8, 0.05));
  CHECK_FALSE(clearly_worse(1.0, 1.0, 0.001, 0.0));
  CHECK_FALSE(clearly_worse(1.0, std::nan(""), 0.8, 0.05));
  CHECK_FALSE(clearly_worse(1.0, 0.1, std::nan(""), 0.05));
}
