#pragma once
// What the scheduler measures and records: the record of one trial (measured, infeasible or
// failed) of one candidate configuration (knobs.hpp), and of the training run. Plain data, no
// Kokkos: the search, the objectives and the HDF5 run log work on these alone.
#include "runlog/knobs.hpp"
#include "runlog/statistics.hpp"  // kNaN

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace joule::scheduler {

enum class TrialStatus { ok, infeasible, failed };
char const* to_string(TrialStatus s);          // "ok", "infeasible", "failed"
TrialStatus trial_status_from(std::string const& s);  // throws std::invalid_argument

// A named region's figures over a trial's measured steps (inclusive, see energy/regions.hpp).
struct RegionMeasure {
  std::string name;
  long long calls = 0;
  double seconds = 0;
  double energy_j = 0;  // by the energy total rule (sum of the counted domains)
  bool below_resolution = false;  // its calls are shorter on average than the sensors resolve
  std::string parent;  // the region it ran inside, most often ("": top level; empty in older logs)
  // In a table of call paths (region_paths): the row of the path it was opened inside, always an
  // earlier row (-1: the top level), and `parent` that row's name. -1 in a table by name.
  int parent_row = -1;
};

// Power over time, one column per domain (GPU, CPU, module, model...), watts.
struct PowerTrace {
  std::vector<std::string> domains;
  std::vector<double> time_s;  // [n]
  std::vector<double> watts;   // [n, domains.size()], row-major
};

// A trial's energy integrates at least this many updates of its slowest sensor before the trial
// may stop repeating (a 50 ms hwmon meter: 0.5 s of measured steps), unless max_repeats ends it.
inline constexpr double kMinSensorUpdates = 10;

struct TrialRecord {
  int index = -1;  // 0-based, in measuring order; /trials/NNNN in the log
  Knobs knobs;
  TrialStatus status = TrialStatus::ok;
  std::string reason;  // why infeasible / failed; empty when ok
  // Per optimizer step (global batch), medians over the measured steps; NaN unless ok.
  double time_per_step_s = kNaN;
  double energy_per_step_j = kNaN;
  double objective = kNaN;      // value of the run's objective for this trial (lower is better)
  double ci_relative = kNaN;    // half-width of the 95% confidence interval of the objective / objective
  int repeats = 0;              // measurement rounds taken
  int warmup_steps = 0, measured_steps = 0;
  double drift = kNaN;          // reference config's time per step now / at the start of the search
  // How loaded the machine was while the trial measured (energy/machine_load.hpp), in CPUs: this
  // process's CPU time and everything else's over the measured steps' wall time, and the share of
  // CPU time the hypervisor stole. NaN where not readable, and in logs before issue 41.
  double process_cpus = kNaN, other_cpus = kNaN, steal_share = kNaN;
  // The update interval of the energy total's slowest sensor (or the sampling period, if longer):
  // steps shorter than it are below resolution, and their energy is the mean over the measured
  // window, at least kMinSensorUpdates of it where the repeats allow. NaN in logs before issue 53.
  double energy_resolution_s = kNaN;
  bool energy_below_resolution() const {
    return std::isfinite(energy_resolution_s) && time_per_step_s < energy_resolution_s;
  }
  // The measured steps' time in all, seconds: the window a below-resolution energy is taken over.
  double measured_window_s() const {
    double window = 0;
    for (double t : step_time_s) window += t;
    return window;
  }
  // The window covers at least kMinSensorUpdates of the energy sensor's updates (or the
  // resolution is unknown: an older log).
  bool enough_sensor_updates() const {
    return !std::isfinite(energy_resolution_s) || measured_window_s() >= kMinSensorUpdates * energy_resolution_s;
  }
  std::size_t predicted_device_bytes = 0;  // the memory model's prediction
  // Bytes the offloaded optimizer copied over the host link per measured step (gradients down,
  // weights up; Optimizer::OffloadTimes); NaN in logs before issue 29.
  double link_bytes_per_step = kNaN;
  // Offloaded groups' host jobs over the measured steps that started before the norm was known
  // (speculation then validation), and those run again because their step was clipped (0 where
  // nothing speculated, and in logs before issue 42).
  long long host_jobs_speculated = 0, host_jobs_rolled_back = 0;
  std::vector<double> step_time_s, step_energy_j;  // every measured step
  // The training step each measurement was taken on ([measured_steps]): in flight the run's own
  // steps, offline the steps of the trial's own trainer. Empty in logs written before in-flight tuning (issue 16).
  std::vector<int> measured_on;
  // The regions by name (each name's calls summed wherever it was opened, `parent` the one it was
  // opened in most often), and by call path (a region opened in two places is two rows, each with
  // its own figures and parent_row). region_paths is empty in logs written before it was recorded.
  std::vector<RegionMeasure> regions, region_paths;
  PowerTrace power;

  bool ok() const { return status == TrialStatus::ok; }
};

// Two trials' objectives compared (scheduler/significance.hpp).
struct TrialComparison {
  double difference = kNaN;  // (mean_a − mean_b) / mean_b: −0.12 is a 12% lower objective
  double noise = kNaN;       // t·se / mean_b: the smallest difference the test tells apart (±)
  bool significant = false;  // |difference| > noise (false when either is NaN)
};

// How the choice was made: the search's best against the configuration's own settings (the
// baseline) and the runner-up. Indices are TrialRecord::index; -1: none. In the log: /best.
struct ChoiceRecord {
  int best = -1, baseline = -1, runner_up = -1, chosen = -1;
  TrialComparison best_vs_baseline, best_vs_runner_up;
  // The best and the baseline measured again in alternating rounds (A B, B A, A B, ...), so that
  // a slow drift of the machine's speed cancels: each round's objective of the best over the
  // baseline's. best_vs_baseline then comes from these ratios (paired); empty: from the trials.
  std::vector<double> confirm_ratios;
  std::string baseline_is;  // "the configuration's own settings", ...
  std::string verdict;      // one sentence: what was chosen and why
};

// The training run: offline, the run with the chosen configuration; in flight, the whole run,
// its search included, each step with the trial whose configuration it ran in.
struct TrainRecord {
  struct Step {
    int step = 0;
    double loss = 0, lr = 0, grad_norm = 0, seconds = 0;
    int trial = -1;         // /trials index of the configuration this step ran in (-1: unknown)
    bool measured = false;  // one of that trial's measurements (warm-up, drift checks and steps
                            // followed by an evaluation or checkpoint are not)
    double end_s = kNaN;    // when the step ended, on the power trace's clock (seconds from its start)
    int host_jobs_rolled_back = 0;  // speculative host updates run again: the step was clipped
  };
  struct Eval {
    int step = 0;
    double loss = 0, accuracy = 0;
    int samples = 0;
  };
  Knobs knobs;              // the chosen configuration
  bool in_flight = false;   // the search ran on this run's own steps
  int search_steps = 0;     // in flight: the first steps of `steps`, taken by the search
  int switches = 0;         // in flight: configuration changes between steps
  double switch_seconds = 0;  // the time they took (Trainer::reconfigure, power limits)
  std::vector<Step> steps;
  std::vector<Eval> evals;
  std::vector<RegionMeasure> regions, region_paths;  // as in TrialRecord
  double seconds = 0, energy_j = kNaN;
  PowerTrace power;
};

}  // namespace joule::scheduler
