#pragma once
// Evaluating a search strategy on real measurements: replay it over a log whose search measured
// every feasible candidate (strategy exhaustive), answering each request from the log instead of
// measuring. What it finds, its regret against the log's optimum and the share of trials it needed
// are then figures of the strategy on that machine and model, free of new measurement noise.
#include "runlog/run_log.hpp"
#include "scheduler/strategy.hpp"

#include <string>
#include <vector>

namespace joule::scheduler {

struct ReplayResult {
  int found = -1;        // the log's trial index the strategy chose
  int optimum = -1;      // the log's best by the objective over every trial
  double regret = kNaN;  // objective(found) / objective(optimum)
  int trials_used = 0, candidates = 0;
  // The optimum is a tie when another trial cannot be told from it: the one the run kept because
  // its choice found no candidate distinguishable from it (the log's own verdict, under the log's
  // objective), and the found trial when Welch's test on the two trials' per-step objectives (95%)
  // cannot tell it from the optimum. tied: the optimum first, then those; regret_against: the found
  // trial's objective over each tied trial's; tie_why: how each was judged tied.
  std::vector<int> tied;
  std::vector<double> regret_against;
  std::string tie_why;
};

// Throws RunLogError when the log's search was not exhaustive (its trials do not cover the space).
// objective: the log's when empty (another one re-ranks the same measurements).
ReplayResult replay_search(RunLogContents const& log, StrategyKind strategy, std::string const& objective = "");
std::string format_replay(RunLogContents const& log, StrategyKind strategy, ReplayResult const& r,
                          std::string const& objective = "");

}  // namespace joule::scheduler
