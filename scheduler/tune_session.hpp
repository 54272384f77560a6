#pragma once
// One tuning session: the search over a TrialRunner's space, every trial recorded in the run log
// as it ends, the drift reference re-measured as the search goes, the choice, and the training
// run with it, in either mode:
//   offline (`joule tune`): each candidate on a trainer of its own, its steps thrown away; then
//     a training run with the choice;
//   in flight: each candidate on the running trainer's own steps (TrialRunner::measure_on: the
//     trainer switches configuration between optimizer steps, warm-up steps train unmeasured),
//     and the run goes on with the choice to its last step. Over knobs neutral to the arithmetic
//     (offload ratio, recompute depth, host threads, power limit) it ends with bitwise the
//     parameters of an untuned run (tested).
// The command only wires processes, energy and the log to it. Trials are indexed in the order
// they end; on --resume the finished ones are replayed from the log, not measured again, so the
// search takes the same path.
#include "runlog/run_log.hpp"
#include "scheduler/significance.hpp"
#include "scheduler/strategy.hpp"
#include "scheduler/trial_runner.hpp"
#include "scheduler/tune_settings.hpp"

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace joule::scheduler {

class TuneSession {
 public:
  // progress: the trial lines (nullptr: silent).
  TuneSession(TrialRunner& runner, TuneSettings const& settings, std::ostream* progress);
  // The log (its header names strategy()): writer on the rank that writes it (nullptr elsewhere);
  // finished: the trials already in it (--resume; every rank reads them).
  void use_log(RunLogWriter* writer, std::vector<TrialRecord> finished);

  std::vector<Knobs> const& space() const { return space_; }
  std::vector<Knobs> const& feasible() const { return feasible_; }
  StrategyKind strategy() const { return strategy_; }
  std::size_t finished_trials() const { return finished_.size(); }

  // Records each infeasible candidate not yet in the log, with the memory model's reason.
  // Throws when nothing is feasible.
  void record_infeasible();
  // Runs the search, offline (live == nullptr) or in flight on `live`, which runs the runner's
  // base configuration: there the candidates a running trainer cannot switch to (other
  // micro-batches, sequence shards) are recorded as infeasible with the reason, and a search
  // longer than the run fails its last trials saying so. Writes /best and /pareto. Throws
  // Interrupted (SIGINT, between steps), or when every measured trial failed.
  void search(Trainer* live = nullptr);
  SearchResult const& result() const { return result_; }
  double search_seconds() const { return search_seconds_; }
  int search_steps() const { return search_steps_; }  // in flight: training steps the search ran
  TrialRecord const& chosen() const;  // after search()
  // After search(): the best against the configuration's own settings (significance.hpp); the
  // choice is the best only where the difference is beyond the machine's noise.
  ChoiceRecord const& decision() const { return decision_; }

  // Trains with the choice and writes /train: offline a new trainer (its progress to `log`),
  // in flight the live run to its last step.
  TrainRecord train(Trainer* live, std::ostream* log);

 private:
  TrialRecord const* finished(Knobs const& k) const;
  TrialRecord const& record(TrialRecord r, std::string const& note = "");
  void record_infeasible(Knobs const& k, std::string const& reason);
  TrialRecord evaluate(Knobs const& k, Trainer* live);
  void say(std::string const& text) const;
  // The objective of `best` over `baseline`'s, one ratio per alternating round (tune.confirm_rounds);
  // empty when confirmation is off or a round failed.
  std::vector<double> confirm(TrialRecord const& best, TrialRecord const& baseline,
                              std::vector<TrialRecord> const& trials, Trainer* live);

  TrialRunner& runner_;
  TuneSettings settings_;
  std::ostream* progress_;
  RunLogWriter* writer_ = nullptr;
  std::vector<TrialRecord> finished_;
  std::vector<Knobs> space_, feasible_;
  StrategyKind strategy_;
  Knobs start_;
  std::optional<TrialRecord> reference_;  // the start configuration's first trial: drift is measured against it
  int measured_since_reference_ = 0;
  double drift_ = kNaN;
  double leader_ = kNaN;  // the best objective measured so far (TrialRunner::set_leader)
  SearchResult result_;
  ChoiceRecord decision_;
  double search_seconds_ = 0;
  int search_steps_ = 0;
};

// One line per trial: "  trial   3  offload 0.50, recompute 1, shards 1   61.2 ms/step ...".
std::string trial_line(TrialRecord const& r, std::string const& note = "");

}  // namespace joule::scheduler
