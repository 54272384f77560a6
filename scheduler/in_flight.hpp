#pragma once
// Tuning in flight: the search runs inside the training run. Every candidate is measured on the
// run's own steps (TrialRunner::measure_on: the trainer switches configuration between optimizer
// steps, its warm-up steps train but are not measured), and when the search is done the run goes
// on with the choice to its last step. Over knobs that are neutral to the arithmetic (offload
// ratio, recompute depth, host threads, power limit) the run ends with bitwise the parameters of
// an untuned run with the same seed (tested); candidates a running trainer cannot switch to
// (other sequence shards or micro-batches) are left out, and said so.
//
// Not yet (issue 16): drift checks and repeats against a reference during the search, writing
// the run log and checkpoints with the search state, `joule train --tune`.
#include "scheduler/strategy.hpp"
#include "scheduler/trial_runner.hpp"

#include <string>
#include <vector>

namespace joule::scheduler {

struct InFlightResult {
  SearchResult search;
  Knobs chosen;                      // the best measured, or the start if none measured ok
  TrainRecord train;                 // the run's steps after the search, with `chosen`
  int search_steps = 0;              // optimizer steps the search warmed up and measured on
  std::vector<std::string> left_out; // candidates no running trainer can switch to, with why
};

// `live` runs runner's base configuration and has not finished; `candidates` are feasible for
// the runner (infeasible_reason() empty); `start` is used when it is reachable in flight, else the
// first reachable candidate. Throws TrainingError when none is.
InFlightResult tune_in_flight(Trainer& live, TrialRunner& runner, StrategyKind kind, std::vector<Knobs> const& candidates,
                              Knobs const& start, Objective const& objective);

}  // namespace joule::scheduler
