#include "scheduler/significance.hpp"

#include "runlog/statistics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace joule::scheduler {

std::vector<double> per_step_objective(TrialRecord const& trial, std::vector<TrialRecord> const& trials,
                                       Objective const& objective) {
  double const p_max = objective_context(trials, objective).p_max_w;
  std::vector<double> values;
  std::size_t const n = std::min(trial.step_time_s.size(), trial.step_energy_j.size());
  for (std::size_t i = 0; i < n; ++i)
    values.push_back(objective_value(objective, trial.step_energy_j[i], trial.step_time_s[i], p_max));
  return values;
}

TrialComparison compare_trials(TrialRecord const& a, TrialRecord const& b, std::vector<TrialRecord> const& trials,
                               Objective const& objective) {
  return compare_samples(per_step_objective(a, trials, objective), per_step_objective(b, trials, objective));
}

TrialComparison compare_samples(std::vector<double> const& va, std::vector<double> const& vb) {
  TrialComparison c;
  if (va.size() < 2 || vb.size() < 2) return c;
  double const ma = mean(va), mb = mean(vb);
  if (!std::isfinite(ma) || !std::isfinite(mb) || mb == 0) return c;
  double const qa = std::pow(sample_stddev(va), 2) / double(va.size());
  double const qb = std::pow(sample_stddev(vb), 2) / double(vb.size());
  double const se = std::sqrt(qa + qb);
  c.difference = (ma - mb) / std::abs(mb);
  if (se == 0) {  // no spread at all: any difference is one
    c.noise = 0;
    c.significant = ma != mb;
    return c;
  }
  double const df = (qa + qb) * (qa + qb) /
                    (qa * qa / double(va.size() - 1) + qb * qb / double(vb.size() - 1));
  c.noise = t_quantile_975(std::max(1, int(std::floor(df)))) * se / std::abs(mb);
  c.significant = std::abs(ma - mb) > c.noise * std::abs(mb);
  return c;
}

TrialComparison compare_ratios(std::vector<double> const& ratios) {
  TrialComparison c;
  std::vector<double> logs;
  for (double r : ratios) logs.push_back(r > 0 ? std::log(r) : kNaN);
  if (logs.size() < 2) return c;
  double const m = mean(logs);
  if (!std::isfinite(m)) return c;
  double const h = t_quantile_975(int(logs.size()) - 1) * sample_stddev(logs) / std::sqrt(double(logs.size()));
  c.difference = std::exp(m) - 1;
  c.noise = std::exp(h) - 1;
  c.significant = std::abs(m) > h;
  return c;
}

namespace {
std::string signed_percent(double fraction) { return fmt::format("{:+.1f}%", 100 * fraction); }
std::string plus_minus(double fraction) { return fmt::format("±{:.1f}%", 100 * fraction); }
}  // namespace

ChoiceRecord decide_choice(std::vector<TrialRecord> const& trials, int best, int baseline,
                           std::string const& baseline_is, Objective const& objective,
                           std::vector<double> const& confirm_ratios) {
  ChoiceRecord d;
  if (best < 0) return d;
  auto const id = [&](int position) { return position < 0 ? -1 : trials[std::size_t(position)].index; };
  d.best = d.chosen = id(best);
  d.baseline_is = baseline_is;
  std::vector<int> others;
  for (int i = 0; i < int(trials.size()); ++i)
    if (i != best) others.push_back(i);
  int const runner_up = others.empty() ? -1 : select_best(trials, others, objective);
  d.runner_up = id(runner_up);
  if (runner_up >= 0) d.best_vs_runner_up = compare_trials(trials[best], trials[runner_up], trials, objective);
  auto const runner_up_text = [&] {
    if (runner_up < 0) return std::string();
    auto const& c = d.best_vs_runner_up;
    return fmt::format("; against the runner-up (trial {}) {} (noise {}): {}", d.runner_up,
                       signed_percent(c.difference), plus_minus(c.noise),
                       c.significant ? "significant" : "not distinguishable");
  };
  if (baseline < 0 || !comparable(trials[std::size_t(baseline)])) {
    d.verdict = fmt::format("chose trial {}, the best objective measured; {} was not measured, so nothing was "
                            "compared with it{}", d.best, baseline_is, runner_up_text());
    return d;
  }
  d.baseline = id(baseline);
  if (baseline == best) {
    d.verdict = fmt::format("kept {} (trial {}): it has the best objective measured{}", baseline_is, d.baseline,
                            runner_up_text());
    return d;
  }
  bool const paired = confirm_ratios.size() >= 2;
  d.confirm_ratios = confirm_ratios;
  auto const& c = d.best_vs_baseline = paired ? compare_ratios(confirm_ratios)
                                              : compare_trials(trials[best], trials[baseline], trials, objective);
  std::string const test = paired ? fmt::format("{} alternating rounds of the two, paired t, 95%", confirm_ratios.size())
                                  : std::string("their trials, Welch, 95%");
  if (c.significant && c.difference < 0) {
    d.verdict = fmt::format("chose trial {}: its objective is {} against {} (trial {}), beyond this machine's "
                            "noise of {} ({}){}", d.best, signed_percent(c.difference), baseline_is, d.baseline,
                            plus_minus(c.noise), test, runner_up_text());
    return d;
  }
  d.chosen = d.baseline;
  d.verdict = fmt::format("kept {} (trial {}): no candidate was distinguishable from it under this machine's noise: "
                          "the best, trial {}, differs by {} against a noise of {} ({})",
                          baseline_is, d.baseline, d.best, signed_percent(c.difference), plus_minus(c.noise), test);
  return d;
}

}  // namespace joule::scheduler
