#pragma once
// Measuring trials: a candidate configuration (Knobs) is trained in this process, on a trainer of
// its own (offline, `joule tune`) or on the running training run (in flight, `joule train --tune`),
// for warm-up steps (not counted), then for rounds of measured steps, each step timed and its
// energy taken from the energy sampler's total (measured or model, as the sampler's sources say),
// until the objective's relative 95% confidence interval is below the target or the repeat limit
// is reached. NaN/Inf, out-of-memory and other errors make a `failed` trial with the reason; a
// configuration the memory model says cannot fit is `infeasible` and never run.
//
// Under mpirun every rank runs every trial together (the collectives need them all); step times
// are rank 0's, step energies the sum over the ranks, so every rank holds the same record and the
// search takes the same path everywhere. A trial that cannot start on some ranks (out of memory,
// unreadable data) fails on all of them, with the first failing rank's reason. Once steps run,
// only failures every rank sees alike (a non-finite loss or gradient norm, computed from reduced
// values) make a `failed` trial; any other error mid-step stops the job, since the other ranks
// may be inside that step's collectives (see TrialAbort).
#include "core/train/trainer.hpp"
#include "energy/monitor.hpp"
#include "energy/regions.hpp"
#include "runlog/trial.hpp"
#include "scheduler/tune_settings.hpp"

#include <functional>
#include <iosfwd>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace joule::scheduler {

// How the job's processes are laid out for a trial (apps/ provides it; single process: empty).
struct Parallelism {
  int world = 1, rank = 0;
  // The collectives for a layout with this many sequence shards.
  std::function<std::pair<DataParallel, SequenceShards>(int seq_shards)> groups;
  std::function<void(double* data, std::size_t count)> sum;                // over every process
  std::function<void(double* data, std::size_t count)> broadcast_from_root;
  // Collective: "" when every process passed "", else the first failing rank's text
  // (parallel::first_error). Used where a failure may hit some processes only.
  std::function<std::string(std::string const& mine)> first_error;
  // Device memory each process may use, the same on every rank (0: this process's own
  // available_memory(), as for a single process); tune.device_memory_budget_mib overrides it.
  double device_memory_bytes = 0;
  std::string device_memory_source;
};

// Thrown when the stop function says so (SIGINT): between steps, never inside a log write.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown instead of recording a `failed` trial when, under several processes, a trial fails mid-step
// with an error that may be this rank's alone: the job must stop rather than hang.
class TrialAbort : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where the search starts, the memory model's fastest configuration among the feasible: no
// recomputation, least offload, largest micro-batch, fewest shards.
Knobs memory_model_fastest(std::vector<Knobs> const& feasible);

class TrialRunner {
 public:
  TrialRunner(Config const& base, TuneSettings const& settings, energy::Monitor& monitor,
              energy::RegionRecorder& regions, Parallelism parallel, std::function<bool()> stop_requested);
  ~TrialRunner();  // closes the in-flight run's energy window if the run stopped before train_on
  TrialRunner(TrialRunner const&) = delete;
  TrialRunner& operator=(TrialRunner const&) = delete;

  // Every combination of the knobs' values, offload ratio varying fastest.
  std::vector<Knobs> space() const;
  // The values the search takes for one knob: the tune section's list, or its default.
  std::vector<double> candidate_values(KnobInfo const& knob) const;
  // Bytes on the device by the memory model (core/train/memory_check.hpp: on a CPU build also
  // the host optimizer state, which then shares the same memory).
  std::size_t predicted_device_bytes(Knobs const& k) const;
  double budget_bytes() const { return budget_bytes_; }
  std::string budget_source() const { return budget_source_; }
  std::string infeasible_reason(Knobs const& k) const;  // "" when it fits

  Config config_for(Knobs const& k, int steps) const;
  // What the running trainer is set to for `k` (the configuration's values where k leaves a knob unset).
  Reconfigurable settings_for(Knobs const& k) const;
  // True when k runs the configuration as given: each knob unset or at the configuration's value,
  // the power limit not touched. The choice is measured against this one (significance.hpp).
  bool runs_configuration(Knobs const& k) const;
  // A trial on a trainer of its own (offline: its steps are thrown away).
  TrialRecord measure(Knobs const& k);
  // In flight: the running trainer `live` switches to k (Trainer::reconfigure) and its warm-up
  // and measured steps are training steps of the run; a trial the run's remaining steps cannot
  // hold fails with that reason. `live` must run this runner's base configuration.
  TrialRecord measure_on(Trainer& live, Knobs const& k);
  // "" when a running trainer can switch to k; else why not (k changes a field only a new
  // trainer can, or sequence shards where no process groups can be re-formed).
  std::string unreachable_in_flight(Knobs const& k) const;
  // Time per step of k, one round of measured steps (drift checks of the reference config): on a
  // trainer of its own, or in flight on the running one (those steps are not marked measured:
  // no trial holds them).
  double quick_time_per_step(Knobs const& k);
  // Tests only: rewrites each round's measured step times and energies before they are used (a
  // synthetic landscape, injected noise); the steps themselves train as usual.
  using MeasurementFilter = std::function<void(Knobs const&, std::vector<double>& seconds, std::vector<double>& joules)>;
  void filter_measurements(MeasurementFilter filter) { filter_ = std::move(filter); }
  // One round of k (warm-up, then tune.measured_steps, not recorded as a trial): for the
  // alternating rounds that confirm a choice. In flight on `live`, else on a trainer of its own.
  TrialRecord measure_round(Knobs const& k, Trainer* live);
  double quick_time_per_step_on(Trainer& live, Knobs const& k);
  // Trains base.train.steps with k; the trainer's progress lines go to `log`.
  TrainRecord train(Knobs const& k, std::ostream* log);
  // In flight: the running trainer switches to k and trains to the end of its run (its own log).
  // The record holds the whole run since begin_in_flight: every step with the trial whose
  // configuration it ran in (trial_of: the caller numbers the trials) and whether it was a
  // measurement, every evaluation, the energy and power of the whole run.
  TrainRecord train_on(Trainer& live, Knobs const& k, std::function<int(Knobs const&)> const& trial_of);
  // In flight: starts recording the running trainer's steps, energy and regions (measure_on and
  // train_on call it if nobody did).
  void begin_in_flight(Trainer& live);

  // The best trial so far (its objective and relative CI): a trial whose objective is clearly
  // worse after a round (its interval entirely above the leader's) repeats no more rounds, so a
  // losing candidate costs one round, not max_repeats (in flight: fewer steps off the choice).
  void set_leader(double objective, double ci_relative);

  // GPU power limits (the power_limit_w knob): `apply(watts)` sets them, apply(0) restores the
  // original; [min_w, max_w] is what the GPUs allow (outside: infeasible). Without this, a
  // space with power limits is refused.
  void set_power_control(std::function<void(double watts)> apply, double min_w, double max_w);

  std::string energy_description() const;
  bool energy_measured() const;

 private:
  struct Steps {
    std::vector<double> seconds, joules;
    std::vector<int> steps;  // the training step of each
  };
  // n steps that count, each an energy window: a step followed by an evaluation or a checkpoint
  // does not count (its window would hold none of them, but the caches and the clocks do) and
  // one more is run; fewer when the run ends. live: the running trainer, whose steps are recorded
  // (`measured`: these are a trial's measurements, not its warm-up).
  Steps run_steps(Trainer& trainer, int n, bool live, bool measured);
  // live: nullptr for a trainer of its own; for_trial: in flight, its measured steps are marked as
  // a trial's measurements (false: a drift check's)
  // max_repeats: rounds of measured steps at most (0: the settings').
  TrialRecord measure_with(Knobs const& k, Trainer* live, bool for_trial = true, int max_repeats = 0);
  TrainRecord train_with(Knobs const& k, Trainer* live, std::ostream* log,
                         std::function<int(Knobs const&)> const& trial_of = {});
  void switch_in_flight(Trainer& live, Knobs const& k);  // its power limit, then reconfigure
  void record_live_step(StepRecord const& s, bool measured);
  void record_live_eval(int step, EvalResult const& e);
  // A trainer for k (its power limit applied first), on the processes laid out for its shards.
  std::unique_ptr<Trainer> make_trainer(Knobs const& k, int steps, std::ostream* log = nullptr);
  void check_stop() const;
  // The regions since `before` (an earlier regions_.paths()): by name, and by call path.
  std::pair<std::vector<RegionMeasure>, std::vector<RegionMeasure>> region_delta(std::vector<energy::RegionPath> const& before);
  PowerTrace power_between(double t0, double t1);

  Config base_;
  TuneSettings settings_;
  energy::Monitor& monitor_;
  energy::RegionRecorder& regions_;
  Parallelism parallel_;
  std::function<bool()> stop_;
  std::function<void(double)> apply_power_limit_;
  double power_min_w_ = 0, power_max_w_ = 0;
  void apply_power_limit(Knobs const& k);
  double budget_bytes_ = 0;
  std::string budget_source_;
  double leader_objective_ = kNaN, leader_ci_ = kNaN;
  MeasurementFilter filter_;
  // In flight: the running trainer's record since begin_in_flight.
  struct LiveRun {
    bool started = false;
    Knobs now;  // the configuration it runs in
    TrainRecord record;
    std::vector<Knobs> knobs;  // per recorded step
    std::vector<energy::RegionPath> regions_before;
    double t0 = 0;  // its start on the sampler's clock
  } live_;
};

}  // namespace joule::scheduler
