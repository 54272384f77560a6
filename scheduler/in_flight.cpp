#include "scheduler/in_flight.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace joule::scheduler {

InFlightResult tune_in_flight(Trainer& live, TrialRunner& runner, StrategyKind kind, std::vector<Knobs> const& candidates,
                              Knobs const& start, Objective const& objective) {
  InFlightResult result;
  std::vector<Knobs> reachable;
  for (auto const& k : candidates) {
    if (auto const why = runner.unreachable_in_flight(k); why.empty())
      reachable.push_back(k);
    else
      result.left_out.push_back(k.describe() + ": " + why);
  }
  if (reachable.empty()) throw TrainingError("no candidate configuration can be switched to during the run");
  Knobs const first = std::find(reachable.begin(), reachable.end(), start) != reachable.end() ? start : reachable.front();
  int const step_before = live.step();
  result.search = run_search(kind, reachable, first, objective, [&](Knobs const& k) { return runner.measure_on(live, k); });
  result.search_steps = live.step() - step_before;
  result.chosen = result.search.best >= 0 ? result.search.trials[result.search.best].knobs : first;
  result.train = runner.train_on(live, result.chosen);
  return result;
}

}  // namespace joule::scheduler
