// The scheduler's search half: objectives, the Pareto front, the statistics of a trial and
// racing's rule, regret, and the search strategies on synthetic landscapes whose optimum is known
// by measuring all of them. Expected values are worked out here from E and T by the definitions,
// not taken from the code. (Racing as the trial runner applies it: test_tune.)
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

// ---------------------------------------------------------------------------------------------
// Search strategies on synthetic landscapes

namespace {

// A made-up but plausible training step at a fixed global batch of 32 samples, over
// 5 offload ratios × 9 recompute depths (of 8 blocks) × 3 sequence shards × 4 micro-batches.
//   time   = forward/backward (less efficient at small micro-batches) + recomputation
//            + all-to-all for sequence shards + the GPU optimizer on the part not offloaded
//            + the stall when the host optimizer outlasts the backward it overlaps with
//              (deeper recomputation and larger micro-batches hide more of it)
//   energy = GPU power (higher when busy and efficient) over those phases + host optimizer
//            power + host baseline power over the step
// Configurations whose activations and optimizer state overflow the GPU are not candidates;
// a few (chosen by a hash) fail when measured; every measurement carries ±noise relative.
struct Landscape {
  double compute_s = 0.9;        // forward+backward of the global batch at full efficiency
  double micro_overhead = 0.6;   // efficiency m / (m + this)
  double recompute_share = 0.33; // recomputing all blocks adds this share of forward+backward
  double optimizer_gpu_s = 0.25;
  double optimizer_host_s = 0.9; // with everything offloaded
  double overlap_share = 0.35;   // share of forward+backward the host optimizer can hide behind
  double shard_comm_s = 0.05;    // per extra shard and (scaled) per micro-step
  double gpu_busy_w = 360, gpu_idle_w = 90, gpu_optimizer_w = 300;
  double host_optimizer_w = 140, host_base_w = 60;
  double memory_gb = 40, state_gb = 16, weights_gb = 4, activation_gb = 3.5;
  double noise = 0.005;
  double fail_rate = 0.04;
  std::uint64_t seed = 1;

  static std::vector<double> offloads() { return {0, 0.25, 0.5, 0.75, 1}; }
  static std::vector<int> depths() { return {0, 1, 2, 3, 4, 5, 6, 7, 8}; }
  static std::vector<int> shards() { return {1, 2, 4}; }
  static std::vector<int> micro_batches() { return {1, 2, 4, 8}; }

  bool fits(Knobs const& k) const {
    double const activations = activation_gb * k.micro_batch * (1 - 0.1 * k.recompute_depth) / k.seq_shards;
    return weights_gb + state_gb * (1 - k.offload_ratio) + activations <= memory_gb;
  }

  std::vector<Knobs> candidates() const {
    std::vector<Knobs> out;
    for (double r : offloads())
      for (int d : depths())
        for (int s : shards())
          for (int m : micro_batches()) {
            Knobs k;
            k.offload_ratio = r, k.recompute_depth = d, k.seq_shards = s, k.micro_batch = m;
            if (fits(k)) out.push_back(k);
          }
    return out;
  }

  // The memory model's fastest feasible configuration: the least memory saving that fits
  // (no offload, shallowest recomputation, fewest shards), at the largest micro-batch.
  Knobs start() const {
    auto const all = candidates();
    return *std::min_element(all.begin(), all.end(), [](Knobs const& a, Knobs const& b) {
      return std::make_tuple(a.offload_ratio, a.recompute_depth, a.seq_shards, -a.micro_batch) <
             std::make_tuple(b.offload_ratio, b.recompute_depth, b.seq_shards, -b.micro_batch);
    });
  }

  std::uint64_t hash(Knobs const& k, std::uint64_t salt) const {
    SplitMix h{seed * 1000003 + salt};
    h.state ^= std::uint64_t(k.offload_ratio * 4) * 131 + std::uint64_t(k.recompute_depth) * 17 +
               std::uint64_t(k.seq_shards) * 7 + std::uint64_t(k.micro_batch) * 100003;
    return h.next();
  }
  double noise_factor(Knobs const& k, std::uint64_t salt) const {
    return 1 + noise * (2 * double(hash(k, salt) >> 11) * 0x1.0p-53 - 1);
  }

  TrialRecord measure(Knobs const& k) const {
    TrialRecord t;
    t.knobs = k;
    if (double(hash(k, 99) >> 11) * 0x1.0p-53 < fail_rate) {
      t.status = TrialStatus::failed;
      t.reason = "synthetic failure";
      return t;
    }
    double const m = k.micro_batch, r = k.offload_ratio, s = k.seq_shards;
    double const efficiency = m / (m + micro_overhead);
    double const forward_backward = compute_s / efficiency;
    double const recompute = forward_backward * recompute_share * k.recompute_depth / 8;
    double const comm = shard_comm_s * (s - 1) * (1 + 8 / m);
    double const gpu_optimizer = optimizer_gpu_s * (1 - r);
    double const host_optimizer = optimizer_host_s * r;
    double const hidden = overlap_share * (forward_backward + recompute) * (0.5 + m / 16);
    double const excess = host_optimizer - hidden;
    double const stall = 0.5 * (excess + std::sqrt(excess * excess + 0.01));  // smooth max(0, ·)
    double const time = forward_backward + recompute + comm + gpu_optimizer + stall;
    double const busy_w = gpu_idle_w + (gpu_busy_w - gpu_idle_w) * efficiency;
    double const energy = busy_w * (forward_backward + recompute) + gpu_optimizer_w * gpu_optimizer +
                          gpu_idle_w * (comm + stall) + host_optimizer_w * host_optimizer +
                          host_base_w * time;
    t.time_per_step_s = time * noise_factor(k, 1);
    t.energy_per_step_j = energy * noise_factor(k, 2);
    return t;
  }

  // A landscape with every coefficient scaled by a random factor in [0.5, 2].
  static Landscape random(std::uint64_t seed) {
    SplitMix rng{seed};
    Landscape l;
    l.seed = seed;
    for (double* c : {&l.compute_s, &l.micro_overhead, &l.recompute_share, &l.optimizer_gpu_s,
                      &l.optimizer_host_s, &l.overlap_share, &l.shard_comm_s, &l.gpu_busy_w,
                      &l.gpu_optimizer_w, &l.host_optimizer_w, &l.host_base_w, &l.activation_gb})
      *c *= std::exp2(rng.uniform(-1, 1));
    return l;
  }
};

std::string describe_tally(int optimal, int of, double worst_regret, double mean_fraction, double worst_fraction) {
  std::ostringstream out;
  out.precision(4);
  out << "optimal in " << optimal << "/" << of << ", worst regret " << worst_regret << ", measured "
      << 100 * mean_fraction << "% of the candidates on average, " << 100 * worst_fraction << "% at most";
  return out.str();
}

struct NamedObjective {
  std::string label;
  Objective objective;
};
std::vector<NamedObjective> objectives_to_test() {
  std::vector<NamedObjective> out;
  for (std::string spec : {"edp", "ed2p", "weighted:0.5", "weighted:0.2", "energy_under_slowdown:0.10",
                           "energy_under_slowdown:0.05"})
    out.push_back({spec, Objective::parse(spec)});
  Objective given_p_max = Objective::parse("weighted:0.5");
  given_p_max.p_max_w = 400;
  out.push_back({"weighted:0.5, P_max 400 W", given_p_max});
  return out;
}

// A search on a landscape, with how often `evaluate` saw each knob set.
struct Run {
  SearchResult result;
  std::map<std::string, int> evaluations;
  std::size_t candidates = 0;
  double regret = kInf;
  double fraction() const { return double(result.trials.size()) / double(candidates); }
  int most_evaluations_of_one() const {
    int most = 0;
    for (auto const& [knobs, count] : evaluations) most = std::max(most, count);
    return most;
  }
};

template <class Measure>
Run run(StrategyKind kind, std::vector<Knobs> const& candidates, Knobs const& start, Measure const& measure,
        Objective const& objective, std::vector<TrialRecord> const& reference,
        CoordinateDescentOptions const& options = {}) {
  Run r;
  r.candidates = candidates.size();
  r.result = run_search(kind, candidates, start, objective, [&](Knobs const& k) {
    ++r.evaluations[k.describe()];
    return measure(k);
  }, options);
  if (r.result.best >= 0) r.regret = regret(reference, r.result.trials[r.result.best].knobs, objective);
  return r;
}

Run run(StrategyKind kind, Landscape const& landscape, Objective const& objective,
        std::vector<TrialRecord> const& reference, CoordinateDescentOptions const& options = {}) {
  return run(kind, landscape.candidates(), landscape.start(), [&](Knobs const& k) { return landscape.measure(k); },
             objective, reference, options);
}

template <class Measure>
std::vector<TrialRecord> measure_all(std::vector<Knobs> const& candidates, Measure const& measure) {
  std::vector<TrialRecord> all;
  for (auto const& k : candidates) all.push_back(measure(k));
  return all;
}
std::vector<TrialRecord> measure_all(Landscape const& landscape) {
  return measure_all(landscape.candidates(), [&](Knobs const& k) { return landscape.measure(k); });
}

// The objectives straight from their definitions, independently of objective.cpp.
std::vector<TrialRecord> ok_and_finite(std::vector<TrialRecord> const& trials) {
  std::vector<TrialRecord> ok;
  for (auto const& t : trials)
    if (t.ok() && std::isfinite(t.time_per_step_s) && std::isfinite(t.energy_per_step_j)) ok.push_back(t);
  return ok;
}

// One trial's value; P_max, when the objective has none, from `all`.
double value_by_definition(TrialRecord const& t, std::vector<TrialRecord> const& all, Objective const& objective) {
  double const e = t.energy_per_step_j, s = t.time_per_step_s;
  double p_max = objective.p_max_w;
  if (p_max <= 0)
    for (auto const& u : ok_and_finite(all)) p_max = std::max(p_max, u.energy_per_step_j / u.time_per_step_s);
  switch (objective.kind) {
    case Objective::Kind::edp: return e * s;
    case Objective::Kind::ed2p: return e * s * s;
    case Objective::Kind::weighted: return objective.eta * e + (1 - objective.eta) * p_max * s;
    case Objective::Kind::energy_under_slowdown: return e;
  }
  return kNaN;
}

// The least value among the ok, finite trials; for energy_under_slowdown among those at most
// X slower than the fastest of them.
double optimum_by_definition(std::vector<TrialRecord> const& trials, Objective const& objective) {
  auto const ok = ok_and_finite(trials);
  double fastest = kInf, best = kInf;
  for (auto const& t : ok) fastest = std::min(fastest, t.time_per_step_s);
  for (auto const& t : ok) {
    bool const allowed = objective.kind != Objective::Kind::energy_under_slowdown ||
                         t.time_per_step_s <= fastest * (1 + objective.max_slowdown);
    if (allowed) best = std::min(best, value_by_definition(t, ok, objective));
  }
  return best;
}

}  // namespace

TEST_CASE("scheduler: strategy names parse, and unknown ones name the allowed", "[scheduler][strategy]") {
  CHECK(parse_strategy("exhaustive") == StrategyKind::exhaustive);
  CHECK(parse_strategy("coordinate_descent") == StrategyKind::coordinate_descent);
  for (auto k : {StrategyKind::exhaustive, StrategyKind::coordinate_descent}) CHECK(parse_strategy(to_string(k)) == k);
  CHECK_THROWS_WITH(parse_strategy("random"), Contains("allowed: exhaustive, coordinate_descent"));
  CHECK_THROWS_AS(parse_strategy("coordinate-descent"), std::invalid_argument);
}

TEST_CASE("scheduler: exhaustive search measures every candidate once and finds the optimum",
          "[scheduler][strategy]") {
  Landscape const landscape;
  auto candidates = landscape.candidates();
  auto const reference = measure_all(landscape);
  REQUIRE(candidates.size() > 500);  // a handful of the 540 do not fit in memory
  candidates.push_back(candidates[10]);  // a duplicate is measured once
  for (auto const& [label, objective] : objectives_to_test()) {
    INFO(label);
    auto const r = run(StrategyKind::exhaustive, candidates, landscape.start(),
                       [&](Knobs const& k) { return landscape.measure(k); }, objective, reference);
    CHECK(r.result.trials.size() == candidates.size() - 1);
    CHECK(r.most_evaluations_of_one() == 1);
    REQUIRE(r.result.best >= 0);
    auto const& best = r.result.trials[r.result.best];
    CHECK(value_by_definition(best, r.result.trials, objective) == Approx(optimum_by_definition(reference, objective)));
    CHECK(r.regret == 1);
    CHECK(r.result.pareto == pareto_front(r.result.trials));
    for (std::size_t i = 0; i < r.result.trials.size(); ++i) CHECK(r.result.trials[i].index == int(i));
  }
}

TEST_CASE("scheduler: coordinate descent reaches the optimum of the 540-configuration landscape "
          "with a small fraction of the trials, for every objective",
          "[scheduler][strategy]") {
  Landscape const landscape;
  auto const reference = measure_all(landscape);
  int failed_in_reference = 0;
  for (auto const& t : reference) failed_in_reference += !t.ok();
  REQUIRE(failed_in_reference > 0);
  for (auto const& [label, objective] : objectives_to_test()) {
    auto const r = run(StrategyKind::coordinate_descent, landscape, objective, reference);
    int const best = select_best(reference, objective);
    WARN(label << ": regret " << r.regret << " with " << r.result.trials.size() << " of " << r.candidates
               << " candidates measured (" << 100 * r.fraction() << "%); found "
               << r.result.trials[r.result.best].knobs.describe() << ", optimum " << reference[best].knobs.describe());
    CHECK(r.regret == 1);
    CHECK(r.fraction() <= 0.15);
    CHECK(r.most_evaluations_of_one() == 1);
    CHECK(r.result.pareto == pareto_front(r.result.trials));
  }
}

TEST_CASE("scheduler: coordinate descent takes every knob of the table in turn, one line at a time",
          "[scheduler][strategy]") {
  // A space over every knob of knob_table(), two or three values each (288 configurations). The
  // time is a sum of one bowl per knob, each bottom at a value other than the start's (the first
  // value of each knob): every knob has to move, and none helps another. Plain coordinate descent
  // measures the start, then the other values of each knob in the table's order, moving to the
  // best each time: 1 + 2 + 2 + 1·5 = 10 trials, the last of them the optimum. A second cycle
  // makes no move: it measures the line of each knob through the optimum, all but the last
  // knob's (measured already) new: 2 + 2 + 1·4 = 8. 18 trials in all.
  std::map<std::string, std::vector<double>> const values{
      {"offload_ratio", {0, 0.5, 1}}, {"recompute_depth", {0, 1, 2}}, {"seq_shards", {1, 2}},
      {"micro_batch", {2, 4}},        {"host_threads", {0, 4}},       {"power_limit_w", {300, 400}},
      {"offload_cast", {0, 1}}};
  std::vector<Knobs> candidates{Knobs{}};
  for (auto const& row : knob_table()) {
    INFO("knob " << row.name << " (a knob new to the table needs its values here)");
    REQUIRE(values.count(row.name) == 1);
    std::vector<Knobs> more;
    for (auto const& k : candidates)
      for (double v : values.at(row.name)) {
        Knobs next = k;
        row.set(next, v);
        more.push_back(next);
      }
    candidates = more;
  }
  REQUIRE(candidates.size() == 3 * 3 * 2 * 2 * 2 * 2 * 2);

  // Configurations by their typed fields, not through the table.
  auto point = [](double offload, int recompute, int shards, int micro_batch, int threads, int watts, bool host_cast) {
    Knobs k;
    k.offload_ratio = offload, k.recompute_depth = recompute, k.seq_shards = shards, k.micro_batch = micro_batch;
    k.host_threads = threads, k.power_limit_w = watts;
    k.offload_cast = host_cast ? joule::TrainConfig::OffloadCast::host : joule::TrainConfig::OffloadCast::device;
    return k;
  };
  auto knobs_apart = [](Knobs const& a, Knobs const& b) {
    return int(a.offload_ratio != b.offload_ratio) + int(a.recompute_depth != b.recompute_depth) +
           int(a.seq_shards != b.seq_shards) + int(a.micro_batch != b.micro_batch) +
           int(a.host_threads != b.host_threads) + int(a.power_limit_w != b.power_limit_w) +
           int(a.offload_cast != b.offload_cast);
  };
  Knobs const start = point(0, 0, 1, 2, 0, 300, false);
  Knobs const optimum = point(1, 1, 2, 4, 4, 400, true);
  REQUIRE(candidates.front() == start);
  REQUIRE(std::count(candidates.begin(), candidates.end(), optimum) == 1);
  auto measure = [](Knobs const& k) {
    auto sq = [](double x) { return x * x; };
    double const time = 1 + 0.30 * sq(k.offload_ratio - 1) + 0.20 * sq(k.recompute_depth - 1) +
                        0.10 * sq(k.seq_shards - 2) + 0.08 * sq(k.micro_batch - 4) + 0.01 * sq(k.host_threads - 4) +
                        0.0001 * sq(k.power_limit_w - 400) +
                        0.05 * (k.offload_cast == joule::TrainConfig::OffloadCast::host ? 0 : 1);
    auto t = trial(time, 100);
    t.knobs = k;
    return t;
  };
  std::vector<Knobs> const first_cycle{start,
                                       point(0.5, 0, 1, 2, 0, 300, false),  // offload
                                       point(1, 0, 1, 2, 0, 300, false),
                                       point(1, 1, 1, 2, 0, 300, false),    // recompute depth
                                       point(1, 2, 1, 2, 0, 300, false),
                                       point(1, 1, 2, 2, 0, 300, false),    // sequence shards
                                       point(1, 1, 2, 4, 0, 300, false),    // micro-batch
                                       point(1, 1, 2, 4, 4, 300, false),    // host threads
                                       point(1, 1, 2, 4, 4, 400, false),    // power limit
                                       optimum};                            // the cast on the host
  auto const reference = measure_all(candidates, measure);
  auto const objective = Objective::parse("edp");
  CoordinateDescentOptions plain;
  plain.diagonal_check = plain.wall_restarts = plain.fastest_first = false;
  auto const r = run(StrategyKind::coordinate_descent, candidates, start, measure, objective, reference, plain);
  REQUIRE(r.result.trials.size() == 18);
  for (std::size_t i = 0; i < first_cycle.size(); ++i) {
    INFO("trial " << i << ": " << r.result.trials[i].knobs.describe());
    CHECK(r.result.trials[i].knobs == first_cycle[i]);
  }
  for (std::size_t i = first_cycle.size(); i < r.result.trials.size(); ++i) {
    auto const& k = r.result.trials[i].knobs;
    INFO("trial " << i << ": " << k.describe());
    CHECK(knobs_apart(k, optimum) == 1);
    CHECK(k.offload_cast == optimum.offload_cast);
  }
  CHECK(r.most_evaluations_of_one() == 1);
  REQUIRE(r.result.best >= 0);
  CHECK(r.result.trials[r.result.best].knobs == optimum);
  CHECK(r.regret == 1);

  // With its remedies the descent ends at the same point, having measured the diagonal
  // neighbours too (no candidate is missing: no wall to restart beyond).
  auto const full = run(StrategyKind::coordinate_descent, candidates, start, measure, objective, reference);
  REQUIRE(full.result.best >= 0);
  CHECK(full.result.trials[full.result.best].knobs == optimum);
  CHECK(full.result.trials.size() > r.result.trials.size());
  CHECK(full.most_evaluations_of_one() == 1);
}

TEST_CASE("scheduler: coordinate descent over 200 random landscapes, with and without its remedies",
          "[scheduler][strategy]") {
  int const landscapes = 200;
  CoordinateDescentOptions plain;
  plain.diagonal_check = plain.wall_restarts = plain.fastest_first = false;
  CoordinateDescentOptions diagonal_only = plain;
  diagonal_only.diagonal_check = true;
  CoordinateDescentOptions not_fastest_first;
  not_fastest_first.fastest_first = false;
  struct Tally {
    int optimal = 0;
    double worst_regret = 1, fraction_sum = 0, worst_fraction = 0;
    void add(Run const& r) {
      optimal += r.regret == 1;
      worst_regret = std::max(worst_regret, r.regret);
      fraction_sum += r.fraction();
      worst_fraction = std::max(worst_fraction, r.fraction());
    }
  };
  auto const objectives = objectives_to_test();
  std::vector<Tally> full(objectives.size()), without(objectives.size()), diagonal(objectives.size()),
      slowest_first(objectives.size());
  for (int seed = 1; seed <= landscapes; ++seed) {
    auto const landscape = Landscape::random(seed);
    auto const reference = measure_all(landscape);
    for (std::size_t o = 0; o < objectives.size(); ++o) {
      auto const& objective = objectives[o].objective;
      auto const r = run(StrategyKind::coordinate_descent, landscape, objective, reference);
      full[o].add(r);
      CHECK(r.most_evaluations_of_one() == 1);
      without[o].add(run(StrategyKind::coordinate_descent, landscape, objective, reference, plain));
      diagonal[o].add(run(StrategyKind::coordinate_descent, landscape, objective, reference, diagonal_only));
      if (objective.kind == Objective::Kind::energy_under_slowdown)
        slowest_first[o].add(run(StrategyKind::coordinate_descent, landscape, objective, reference, not_fastest_first));
    }
  }
  for (std::size_t o = 0; o < objectives.size(); ++o) {
    auto describe = [&](Tally const& t) {
      return describe_tally(t.optimal, landscapes, t.worst_regret, t.fraction_sum / landscapes, t.worst_fraction);
    };
    bool const slowdown = objectives[o].objective.kind == Objective::Kind::energy_under_slowdown;
    WARN(objectives[o].label << ":\n  coordinate descent   " << describe(full[o]) << "\n  plain                "
                             << describe(without[o]) << "\n  diagonal check only  " << describe(diagonal[o])
                             << (slowdown ? "\n  not fastest first    " + describe(slowest_first[o]) : ""));
    CHECK(full[o].optimal >= 0.95 * landscapes);
    CHECK(full[o].optimal > without[o].optimal);
    if (slowdown) CHECK(full[o].optimal > slowest_first[o].optimal);
    if (!slowdown) CHECK(full[o].worst_regret <= 1.05);  // a miss there may break the bound: +inf
    CHECK(full[o].fraction_sum / landscapes <= 0.15);
    CHECK(full[o].worst_fraction <= 0.30);
  }
}

TEST_CASE("scheduler: failed trials do not stop coordinate descent, and nothing is measured twice",
          "[scheduler][strategy]") {
  Landscape landscape;
  landscape.fail_rate = 0.25;
  auto const reference = measure_all(landscape);
  auto const objective = Objective::parse("edp");

  SECTION("a quarter of the configurations fail") {
    auto const r = run(StrategyKind::coordinate_descent, landscape, objective, reference);
    int failed = 0, last_failed = -1;
    for (auto const& t : r.result.trials)
      if (!t.ok()) ++failed, last_failed = t.index;
    WARN("with 25% failing: regret " << r.regret << ", " << failed << " of " << r.result.trials.size()
                                     << " trials failed, " << 100 * r.fraction() << "% of the candidates measured");
    CHECK(failed > 0);
    CHECK(last_failed < int(r.result.trials.size()) - 1);  // it went on measuring after a failure
    CHECK(r.most_evaluations_of_one() == 1);
    CHECK(r.regret <= 1.05);
    REQUIRE(r.result.best >= 0);
    CHECK(r.result.trials[r.result.best].ok());
  }

  SECTION("the start itself fails") {
    Knobs const start = landscape.start();
    auto measure = [&](Knobs const& k) {
      if (k == start) {
        TrialRecord t;
        t.knobs = k;
        t.status = TrialStatus::failed;
        t.reason = "out of memory after all";
        return t;
      }
      return landscape.measure(k);
    };
    auto const with_failed_start = measure_all(landscape.candidates(), measure);
    auto const r = run(StrategyKind::coordinate_descent, landscape.candidates(), start, measure, objective,
                       with_failed_start);
    REQUIRE(!r.result.trials.empty());
    CHECK(r.result.trials[0].knobs == start);
    CHECK(!r.result.trials[0].ok());
    CHECK(r.most_evaluations_of_one() == 1);
    CHECK(r.regret <= 1.05);
    WARN("with a failing start: regret " << r.regret << ", " << 100 * r.fraction() << "% of the candidates measured");
  }

  SECTION("everything fails: every candidate is tried once, nothing is chosen") {
    auto const candidates = landscape.candidates();
    auto fail = [](Knobs const& k) {
      TrialRecord t;
      t.knobs = k;
      t.status = TrialStatus::failed;
      return t;
    };
    auto const r = run(StrategyKind::coordinate_descent, candidates, landscape.start(), fail, objective, {});
    CHECK(r.result.trials.size() == candidates.size());
    CHECK(r.most_evaluations_of_one() == 1);
    CHECK(r.result.best == -1);
    CHECK(r.result.pareto.empty());
  }

  SECTION("ok trials without a finite energy count as failed, the optimum among them") {
    Landscape const clean;
    auto const clean_reference = measure_all(clean);
    Knobs const optimum = clean_reference[select_best(clean_reference, objective)].knobs;
    auto nan_energy = [&](Knobs const& k) {
      auto t = clean.measure(k);
      if (k == optimum || k.recompute_depth == 3) t.energy_per_step_j = kNaN;
      return t;
    };
    auto const r = run(StrategyKind::coordinate_descent, clean.candidates(), clean.start(), nan_energy, objective,
                       measure_all(clean.candidates(), nan_energy));
    REQUIRE(r.result.best >= 0);
    auto const& chosen = r.result.trials[r.result.best];
    CHECK(chosen.knobs != optimum);
    CHECK(std::isfinite(chosen.energy_per_step_j));
    CHECK(r.regret <= 1.05);
    WARN("with the optimum's energy unmeasured: regret " << r.regret << " against the rest");
  }
}

TEST_CASE("scheduler: search input errors and edge cases", "[scheduler][strategy]") {
  Landscape const landscape;
  auto const candidates = landscape.candidates();
  auto measure = [&](Knobs const& k) { return landscape.measure(k); };
  Knobs elsewhere;
  elsewhere.offload_ratio = 0.3;  // not in the space
  CHECK_THROWS_WITH(run_search(StrategyKind::coordinate_descent, candidates, elsewhere, Objective{}, measure),
                    Contains("not among the candidates") && Contains("offload 0.30"));
  // exhaustive does not need a start
  CHECK(run_search(StrategyKind::exhaustive, candidates, elsewhere, Objective{}, measure).trials.size() ==
        candidates.size());
  for (auto kind : {StrategyKind::exhaustive, StrategyKind::coordinate_descent}) {
    auto const empty = run_search(kind, {}, Knobs{}, Objective{}, measure);
    CHECK(empty.trials.empty());
    CHECK(empty.best == -1);
  }
  // A single candidate: measured once, chosen
  auto const one = run_search(StrategyKind::coordinate_descent, {candidates[3]}, candidates[3], Objective{}, measure);
  CHECK(one.trials.size() == 1);
  CHECK(one.best == (one.trials[0].ok() ? 0 : -1));
  // regret of something the reference never measured ok
  CHECK(regret({trial(1, 1)}, elsewhere, Objective{}) == kInf);
}

TEST_CASE("scheduler: regret against a hand-made reference follows its definition", "[scheduler][strategy]") {
  // The hand-made set, each trial with knobs of its own (offload 0, 0.25, ... by position).
  auto reference = hand_made_set();
  for (std::size_t i = 0; i < reference.size(); ++i) {
    reference[i].knobs.offload_ratio = 0.25 * double(i % 5);
    reference[i].knobs.recompute_depth = int(i / 5);
  }
  auto const& A = reference[0].knobs;
  auto const& B = reference[1].knobs;
  auto const& C = reference[2].knobs;
  auto const& D = reference[3].knobs;
  auto const edp = Objective::parse("edp");
  // edp: D 94.5 is the least; A 100, B 104
  CHECK(regret(reference, D, edp) == 1);
  CHECK(regret(reference, A, edp) == Approx(100 / 94.5));
  CHECK(regret(reference, B, edp) == Approx(104 / 94.5));
  // The failed trial and the one without an energy have nothing to compare; neither has a
  // configuration never measured.
  CHECK(regret(reference, reference[4].knobs, edp) == kInf);
  CHECK(regret(reference, reference[5].knobs, edp) == kInf);
  Knobs never;
  never.offload_ratio = 0.3;
  CHECK(regret(reference, never, edp) == kInf);
  // weighted:0.5 with P_max from the set (B's 162.5 W): A 131.25, B 130, C 139.5625, D 130.3125
  auto const weighted = Objective::parse("weighted:0.5");
  CHECK(regret(reference, B, weighted) == 1);
  CHECK(regret(reference, A, weighted) == Approx(131.25 / 130));
  CHECK(regret(reference, C, weighted) == Approx(139.5625 / 130));
  // energy_under_slowdown:0.35: at most 1.08 s (B's 0.80 s + 35%): A, B and D; D's 90 J the least.
  // C (1.25 s) breaks the bound: +inf, though its 76 J is the least energy of all.
  auto const slowdown = Objective::parse("energy_under_slowdown:0.35");
  CHECK(regret(reference, D, slowdown) == 1);
  CHECK(regret(reference, A, slowdown) == Approx(100.0 / 90));
  CHECK(regret(reference, B, slowdown) == Approx(130.0 / 90));
  CHECK(regret(reference, C, slowdown) == kInf);
  // Nothing comparable in the reference: +inf
  CHECK(regret({}, A, edp) == kInf);
}

TEST_CASE("scheduler: a memory wall stops plain coordinate descent; the restart beyond it gets past",
          "[scheduler][strategy]") {
  // offload × micro-batch. A larger micro-batch is faster and cheaper; offload costs a little.
  // Micro-batch 4 fits only with offload >= 0.5, 8 never. From (0, 2) no single knob step
  // helps: more offload alone costs, micro-batch 4 at offload 0 or 0.25 does not fit. The
  // optimum is (0.5, 4): T = 1 + 1/4 + 0.1 = 1.35, E = 100·(1 + 0.125 + 0.05) = 117.5,
  // E·T = 158.6 against (0, 2)'s 1.5 · 125 = 187.5.
  std::vector<Knobs> candidates;
  for (double r : {0.0, 0.25, 0.5, 0.75, 1.0})
    for (int m : {1, 2, 4, 8}) {
      Knobs k;
      k.offload_ratio = r, k.micro_batch = m;
      if (m <= 2 || (m == 4 && r >= 0.5)) candidates.push_back(k);
    }
  auto measure = [](Knobs const& k) {
    return trial(1 + 1.0 / k.micro_batch + 0.2 * k.offload_ratio,
                 100 * (1 + 0.5 / k.micro_batch + 0.1 * k.offload_ratio));
  };
  Knobs start;
  start.offload_ratio = 0, start.micro_batch = 2;
  auto reference = measure_all(candidates, measure);
  for (std::size_t i = 0; i < reference.size(); ++i) reference[i].knobs = candidates[i];
  auto measure_with_knobs = [&](Knobs const& k) {
    auto t = measure(k);
    t.knobs = k;
    return t;
  };
  auto const objective = Objective::parse("edp");
  CoordinateDescentOptions plain;
  plain.diagonal_check = plain.wall_restarts = false;
  CoordinateDescentOptions diagonal_only = plain;
  diagonal_only.diagonal_check = true;

  auto const stuck = run(StrategyKind::coordinate_descent, candidates, start, measure_with_knobs, objective, reference, plain);
  auto const still = run(StrategyKind::coordinate_descent, candidates, start, measure_with_knobs, objective, reference, diagonal_only);
  auto const full = run(StrategyKind::coordinate_descent, candidates, start, measure_with_knobs, objective, reference);
  WARN("memory wall: plain regret " << stuck.regret << ", with the diagonal check " << still.regret
                                    << ", with the restarts " << full.regret << " (" << full.result.trials.size()
                                    << " of " << candidates.size() << " measured)");
  CHECK(stuck.regret == Approx(187.5 / (1.35 * 117.5)));
  CHECK(still.regret == Approx(187.5 / (1.35 * 117.5)));
  CHECK(full.regret == 1);
  CHECK(full.result.trials[full.result.best].knobs.offload_ratio == 0.5);
  CHECK(full.result.trials[full.result.best].knobs.micro_batch == 4);
}

TEST_CASE("scheduler: limitation: a valley two recompute steps per offload step is not found",
          "[scheduler][strategy]") {
  // All 45 (offload, recompute) configurations fit. Time falls along the valley k = 8·r (two
  // recompute steps per offload step) towards (1, 8) and rises steeply off it; energy is flat.
  // From (0, 0) each single step, and each diagonal step (0.25, 1), is slower: coordinate
  // descent stays at (0, 0), regret 1 / 0.84. The test pins that down so the note in
  // strategy.hpp is revised if the search ever gets past it.
  std::vector<Knobs> candidates;
  for (int i = 0; i <= 4; ++i)
    for (int k = 0; k <= 8; ++k) {
      Knobs knobs;
      knobs.offload_ratio = 0.25 * i, knobs.recompute_depth = k;
      candidates.push_back(knobs);
    }
  auto measure = [](Knobs const& knobs) {
    double const off_valley = knobs.recompute_depth - 8 * knobs.offload_ratio;
    auto t = trial(1 + 0.05 * off_valley * off_valley - 0.16 * knobs.offload_ratio, 100);
    t.knobs = knobs;
    return t;
  };
  auto const reference = measure_all(candidates, measure);
  auto const objective = Objective::parse("edp");
  auto const r = run(StrategyKind::coordinate_descent, candidates, candidates[0], measure, objective, reference);
  auto const exhaustive = run(StrategyKind::exhaustive, candidates, candidates[0], measure, objective, reference);
  WARN("diagonal valley: coordinate descent regret " << r.regret << " after " << r.result.trials.size() << " of "
                                                     << candidates.size() << " trials");
  CHECK(exhaustive.result.trials[exhaustive.result.best].knobs == candidates.back());
  CHECK(r.regret == Approx(1 / 0.84));
}
