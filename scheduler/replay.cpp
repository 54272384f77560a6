#include "scheduler/replay.hpp"

#include "scheduler/objective.hpp"
#include "scheduler/significance.hpp"
#include "scheduler/trial_runner.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace joule::scheduler {

ReplayResult replay_search(RunLogContents const& log, StrategyKind strategy, std::string const& objective_spec) {
  if (log.header.strategy != to_string(StrategyKind::exhaustive))
    throw RunLogError(log.path + ": its search was " + log.header.strategy +
                      ", not exhaustive: only a log that measured every candidate can be replayed");
  std::vector<Knobs> candidates;
  std::vector<TrialRecord> measured;
  for (auto const& t : log.trials)
    if (t.status != TrialStatus::infeasible) {
      candidates.push_back(t.knobs);
      measured.push_back(t);
    }
  if (candidates.empty()) throw RunLogError(log.path + ": no measured trials to replay");
  auto const objective = Objective::parse(objective_spec.empty() ? log.header.objective : objective_spec);
  auto const lookup = [&](Knobs const& k) {
    for (auto const& t : measured)
      if (t.knobs == k) return t;
    throw RunLogError(log.path + ": the replayed search asked for " + k.describe() + ", which the log does not hold");
  };
  auto const result = run_search(strategy, candidates, memory_model_fastest(candidates), objective, lookup);
  ReplayResult r;
  r.candidates = int(candidates.size());
  r.trials_used = int(result.trials.size());
  if (result.best >= 0) {
    r.found = lookup(result.trials[result.best].knobs).index;
    r.regret = regret(measured, result.trials[result.best].knobs, objective);
  }
  int const best = select_best(measured, objective);
  if (best < 0) return r;
  r.optimum = measured[best].index;
  r.tied = {r.optimum};
  std::vector<std::string> why;
  // The log's own verdict: it kept its baseline because the best (this optimum) was not
  // distinguishable from it. Only under the log's objective: another one ranks differently.
  bool const logs_objective = objective_spec.empty() || objective_spec == log.header.objective;
  if (auto const& c = log.choice; logs_objective && c && c->best == r.optimum && c->chosen == c->baseline &&
                                  c->baseline >= 0 && c->baseline != r.optimum && !c->best_vs_baseline.significant) {
    r.tied.push_back(c->baseline);
    why.push_back(fmt::format("the run kept trial {}: its choice could not tell trial {} from it ({})", c->baseline,
                              r.optimum,
                              c->confirm_ratios.size() >= 2
                                  ? fmt::format("{} alternating rounds, paired t, 95%", c->confirm_ratios.size())
                                  : std::string("their trials, Welch, 95%")));
  }
  if (r.found >= 0 && std::find(r.tied.begin(), r.tied.end(), r.found) == r.tied.end()) {
    TrialRecord const* found = log.trial(r.found);
    auto const c = compare_trials(*found, measured[std::size_t(best)], measured, objective);
    if (std::isfinite(c.difference) && !c.significant) {
      r.tied.push_back(r.found);
      why.push_back(fmt::format("trial {}'s steps cannot be told from trial {}'s (Welch, 95%: {:+.1f}% against a noise "
                                "of ±{:.1f}%)", r.found, r.optimum, 100 * c.difference, 100 * c.noise));
    }
  }
  if (r.tied.size() > 1 && r.found >= 0) {
    ObjectiveContext const context = objective_context(measured, objective);
    double const found_value = objective_in_context(*log.trial(r.found), objective, context);
    for (int index : r.tied) {
      TrialRecord const* t = log.trial(index);
      double const value = t ? objective_in_context(*t, objective, context) : kNaN;
      r.regret_against.push_back(found_value == value ? 1.0 : found_value / value);
    }
  }
  r.tie_why = fmt::format("{}", fmt::join(why, "; "));
  return r;
}

std::string format_replay(RunLogContents const& log, StrategyKind strategy, ReplayResult const& r,
                          std::string const& objective) {
  std::string out = fmt::format("replaying {} over {} ({} measured candidates, objective {}):\n", to_string(strategy),
                                log.path, r.candidates, objective.empty() ? log.header.objective : objective);
  std::string const used = fmt::format("trials used {} of {} ({:.0f}%)", r.trials_used, r.candidates,
                                       100.0 * r.trials_used / r.candidates);
  if (r.tied.size() < 2 || r.regret_against.size() != r.tied.size()) {
    return out + fmt::format("  found trial {}, the log's optimum is trial {}: regret {:.4f}; {}\n", r.found, r.optimum,
                             r.regret, used);
  }
  // A tie: the regret against each tied trial, and why they tie.
  std::vector<std::string> names, regrets;
  for (std::size_t i = 0; i < r.tied.size(); ++i) {
    names.push_back(fmt::format("{}", r.tied[i]));
    regrets.push_back(fmt::format("{:.4f} against trial {}", r.regret_against[i], r.tied[i]));
  }
  bool const found_tied = std::find(r.tied.begin(), r.tied.end(), r.found) != r.tied.end();
  std::string const list = names.size() == 2 ? fmt::format("{} and {}", names[0], names[1])
                                             : fmt::format("{} and {}", fmt::join(names.begin(), names.end() - 1, ", "),
                                                           names.back());
  out += fmt::format("  found trial {}; the log's optimum is a tie: trials {} tie within this machine's noise (trial {} "
                     "has the lowest objective; {})\n",
                     r.found, list, r.optimum, r.tie_why);
  out += fmt::format("  regret {}{}; {}\n", fmt::join(regrets, ", "),
                     found_tied ? ": the found trial is one of the tied optimum, so its regret is 1 within the noise"
                                : "",
                     used);
  return out;
}

}  // namespace joule::scheduler
