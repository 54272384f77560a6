#pragma once
// Whether two trials' objectives can be told apart, and the choice a search may announce.
//
// A trial's objective is a median over its measured steps; the steps themselves say how noisy the
// machine was. Two trials are compared by Welch's two-sided test at 95% on their per-step
// objective values (objective_value with the set's P_max; for energy_under_slowdown the energy):
//   d = mean_a − mean_b,  se = √(s_a²/n_a + s_b²/n_b),  significant when |d| > t(0.975, ν)·se,
//   ν by Welch–Satterthwaite (at least 1). Fewer than 2 steps on either side: never significant.
// The choice: the search's best is announced only when it is significantly better than the
// configuration's own settings (the baseline), judged on alternating rounds of the two where they
// were measured (compare_ratios: the machine's slow drift cancels), else on their trials; otherwise the baseline is kept and the report
// says that no candidate was distinguishable under this machine's noise. The runner-up is
// compared with the best too, for the report.
#include "scheduler/objective.hpp"
#include "runlog/trial.hpp"

#include <string>
#include <vector>

namespace joule::scheduler {

// The per-step objective values of `trial` in the context of `trials` (its P_max).
std::vector<double> per_step_objective(TrialRecord const& trial, std::vector<TrialRecord> const& trials,
                                       Objective const& objective);
// Welch's test on two samples (e.g. two trials' step times): the same rule as compare_trials.
TrialComparison compare_samples(std::vector<double> const& a, std::vector<double> const& b);
TrialComparison compare_trials(TrialRecord const& a, TrialRecord const& b, std::vector<TrialRecord> const& trials,
                               Objective const& objective);

// Paired: ratios[r] = objective of the best / the baseline in round r. The difference is the
// geometric mean ratio − 1, the noise exp(t(0.975, n−1)·s/√n) − 1 of the log-ratios (n ≥ 2).
TrialComparison compare_ratios(std::vector<double> const& ratios);

// trials: the search's trials; best, baseline: positions in it (best: select_best's; baseline: -1
// when the configuration's settings were not measured ok: then the best is chosen and the verdict
// says why nothing was compared). The record names trials by their TrialRecord::index.
ChoiceRecord decide_choice(std::vector<TrialRecord> const& trials, int best, int baseline,
                             std::string const& baseline_is, Objective const& objective,
                           std::vector<double> const& confirm_ratios = {});

}  // namespace joule::scheduler
