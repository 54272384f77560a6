#include "scheduler/replay.hpp"

#include "scheduler/objective.hpp"
#include "scheduler/trial_runner.hpp"

#include <fmt/format.h>

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
  if (best >= 0) r.optimum = measured[best].index;
  return r;
}

std::string format_replay(RunLogContents const& log, StrategyKind strategy, ReplayResult const& r,
                          std::string const& objective) {
  return fmt::format("replaying {} over {} ({} measured candidates, objective {}):\n"
                     "  found trial {}, the log's optimum is trial {}: regret {:.4f}; trials used {} of {} ({:.0f}%)\n",
                     to_string(strategy), log.path, r.candidates, objective.empty() ? log.header.objective : objective, r.found, r.optimum, r.regret,
                     r.trials_used, r.candidates, 100.0 * r.trials_used / r.candidates);
}

}  // namespace joule::scheduler
