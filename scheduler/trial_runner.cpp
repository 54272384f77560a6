#include "scheduler/trial_runner.hpp"
#include "common/plural.hpp"

#include "energy/machine_load.hpp"

#include "core/train/memory_check.hpp"
#include "runlog/statistics.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <tuple>
#include <chrono>
#include <cmath>
#include <new>
#include <numeric>
#include <ostream>

namespace joule::scheduler {

namespace {

double mib(double bytes) { return bytes / 1048576.0; }

double sum(std::vector<double> const& values) { return std::accumulate(values.begin(), values.end(), 0.0); }

// A failed trial's reason: never empty (an empty text would read as "no failure" to first_error).
std::string failure_reason(std::exception const& e) {
  if (dynamic_cast<std::bad_alloc const*>(&e)) return "out of memory";
  std::string const what = e.what();
  return what.empty() ? "unknown error" : what;
}

}  // namespace

TrialRunner::TrialRunner(Config const& base, TuneSettings const& settings, energy::Monitor& monitor,
                         energy::RegionRecorder& regions, Parallelism parallel, std::function<bool()> stop_requested)
    : base_(base),
      settings_(settings),
      monitor_(monitor),
      regions_(regions),
      parallel_(std::move(parallel)),
      stop_(std::move(stop_requested)) {
  if (settings_.device_memory_budget_mib > 0) {
    budget_bytes_ = settings_.device_memory_budget_mib * 1048576.0;
    budget_source_ = "tune.device_memory_budget_mib";
  } else if (parallel_.device_memory_bytes > 0) {
    budget_bytes_ = parallel_.device_memory_bytes;
    budget_source_ = parallel_.device_memory_source;
  } else {
    auto const available = available_memory();
    budget_bytes_ = available.device_bytes;
    budget_source_ = available.device_source;
  }
}

TrialRunner::~TrialRunner() {
  if (!live_.started) return;
  try {
    monitor_.close("in-flight run");
  } catch (...) {  // nothing to report from a destructor; the window is dropped either way
  }
}

std::vector<double> TrialRunner::candidate_values(KnobInfo const& knob) const {
  // The tune section's values, else the row's defaults; a knob this run cannot search (an fp32
  // run's cast) and one searched nowhere keep the configuration's value.
  if (knob.not_searchable && !knob.not_searchable(base_).empty()) return {knob.unset};
  std::vector<double> values = settings_.values_of(knob.name);
  if (values.empty() && knob.searched_by_default) values = knob.searched_by_default(base_, parallel_.world);
  if (values.empty() && knob.has_unset) values.push_back(knob.unset);
  return values;
}

std::vector<Knobs> TrialRunner::space() const {
  // Every combination, the first knob of the table varying fastest.
  std::vector<Knobs> out{Knobs{}};
  for (auto const& knob : knob_table()) {
    std::vector<Knobs> next;
    auto const values = candidate_values(knob);
    for (double v : values)
      for (Knobs k : out) {
        knob.set(k, v);
        // Nothing is offloaded, so nothing is cast: one candidate, not one per placement.
        if (std::string(knob.name) == "offload_cast" && k.offload_ratio == 0 && v != values.front()) continue;
        next.push_back(k);
      }
    out = std::move(next);
  }
  return out;
}

Reconfigurable TrialRunner::settings_for(Knobs const& k) const {
  Reconfigurable r = reconfigurable_of(base_.train);
  for (auto const& knob : knob_table()) {
    double const v = knob.get(k);
    // A knob the search left unset keeps the configuration's value; the power limit is no field.
    if (knob.field() && knob_is_set(knob, v)) knob.field()->set(r, v);
  }
  return r;
}

Config TrialRunner::config_for(Knobs const& k, int steps) const {
  Config cfg = with_reconfigured(base_, settings_for(k));
  if (steps > 0) {  // a trial on a trainer of its own: its steps, no evaluation, no checkpoint
    cfg.train.steps = steps;
    cfg.train.eval_every = 0;
    cfg.train.checkpoint.clear();
    auto j = nlohmann::json::parse(cfg.json);
    j["train"]["steps"] = steps;
    j["train"]["eval_every"] = 0;
    j["train"].erase("checkpoint");
    cfg.json = j.dump(2);
  }
  return cfg;
}

std::size_t TrialRunner::predicted_device_bytes(Knobs const& k) const {
  Reconfigurable const r = settings_for(k);  // unset knobs: the configuration's values
  return memory_need(base_.model, r.micro_batch, r.recompute_depth, r.seq_shards, r.offload_ratio,
                     base_.train.precision, r.offload_cast == TrainConfig::OffloadCast::host,
                     offload_speculates(base_.train.grad_clip, base_.train.offload_speculation))
      .device_bytes();
}

void TrialRunner::set_leader(double objective, double ci_relative) {
  leader_objective_ = objective;
  leader_ci_ = std::isfinite(ci_relative) ? ci_relative : 0.0;
}

void TrialRunner::set_power_control(std::function<void(double)> apply, double min_w, double max_w) {
  apply_power_limit_ = std::move(apply);
  power_min_w_ = min_w;
  power_max_w_ = max_w;
}

void TrialRunner::apply_power_limit(Knobs const& k) {
  if (!apply_power_limit_) {
    if (k.power_limit_w > 0) throw std::runtime_error("power limits requested but no power control was given");
    return;
  }
  apply_power_limit_(k.power_limit_w);  // 0: the original limit
}

std::string TrialRunner::infeasible_reason(Knobs const& k) const {
  if (parallel_.world % k.seq_shards != 0)
    return fmt::format("seq_shards {} does not divide the {}", k.seq_shards,
                       counted(parallel_.world, "process", "processes"));
  int const micro = k.micro_batch > 0 ? k.micro_batch : base_.train.micro_batch, dp = parallel_.world / k.seq_shards;
  if ((base_.train.batch / micro) % dp != 0)
    return fmt::format("{} micro-batch(es) per step cannot be dealt evenly to {} data-parallel replicas "
                       "({} processes / {} sequence shards)", base_.train.batch / micro, dp, parallel_.world, k.seq_shards);
  if (k.power_limit_w > 0 && apply_power_limit_ && (k.power_limit_w < power_min_w_ || k.power_limit_w > power_max_w_))
    return fmt::format("power limit {} W is outside what the GPU allows [{:.0f}, {:.0f}] W", k.power_limit_w,
                       power_min_w_, power_max_w_);
  double const need = double(predicted_device_bytes(k));
  if (need > budget_bytes_)
    return fmt::format("the memory model predicts {:.1f} MiB, over the budget of {:.1f} MiB ({})", mib(need),
                       mib(budget_bytes_), budget_source_);
  return "";
}

Knobs memory_model_fastest(std::vector<Knobs> const& feasible) {
  auto key = [](Knobs const& k) {
    return std::make_tuple(k.recompute_depth, k.offload_ratio, -k.micro_batch, k.seq_shards, -k.host_threads);
  };
  return *std::min_element(feasible.begin(), feasible.end(), [&](Knobs const& a, Knobs const& b) { return key(a) < key(b); });
}

std::string TrialRunner::energy_description() const { return monitor_.total().description; }
bool TrialRunner::energy_measured() const { return monitor_.total().measured; }

void TrialRunner::check_stop() const {
  double stop = stop_ && stop_() ? 1.0 : 0.0;
  if (parallel_.sum) parallel_.sum(&stop, 1);  // every rank stops at the same step
  if (stop > 0) throw Interrupted("interrupted");
}

std::unique_ptr<Trainer> TrialRunner::make_trainer(Knobs const& k, int steps, std::ostream* log) {
  apply_power_limit(k);
  auto const cfg = config_for(k, steps);
  auto groups = parallel_.groups ? parallel_.groups(k.seq_shards) : std::pair<DataParallel, SequenceShards>{};
  if (!parallel_.first_error) return std::make_unique<Trainer>(cfg, log, groups.first, groups.second);
  // Building the trainer is local (no collectives): agree on its outcome before any step.
  std::unique_ptr<Trainer> trainer;
  std::string mine;
  try {
    trainer = std::make_unique<Trainer>(cfg, log, groups.first, groups.second);
  } catch (std::exception const& e) {
    mine = failure_reason(e);
  }
  auto const error = parallel_.first_error(mine);
  if (!error.empty()) throw TrainingError(error);
  return trainer;
}

TrialRunner::Steps TrialRunner::run_steps(Trainer& trainer, int n, bool live, bool measured) {
  // Each step is a window on the energy clock; the energy is integrated from the power trace
  // after the round, so that no step waits for a sensor.
  struct StepWindows : TrainObserver {
    TrialRunner& runner;
    bool live, measured;
    std::vector<energy::Window> windows;
    std::vector<int> steps;
    StepWindows(TrialRunner& r, bool l, bool m) : runner(r), live(l), measured(m) {}
    void before_step(Trainer&, int) override {
      runner.check_stop();
      runner.monitor_.begin("trial step");
    }
    void on_step(Trainer& t, StepRecord const& s) override {
      auto const window = runner.monitor_.close("trial step");
      bool const counts = !t.pauses_after(s.step);
      if (counts) {
        windows.push_back(window);
        steps.push_back(s.step);
      }
      if (live) runner.record_live_step(s, counts && measured);
    }
    void on_eval(Trainer&, int step, EvalResult const& e) override {
      if (live) runner.record_live_eval(step, e);
    }
  } observer(*this, live, measured);
  try {
    while (int(observer.windows.size()) < n && trainer.step() < trainer.config().train.steps) trainer.run(1, &observer);
  } catch (...) {
    // The step threw inside its window: the trial fails, and the next one opens the window anew
    // (left open, every later trial failed with "window 'trial step' is already open").
    monitor_.discard("trial step");
    throw;
  }
  Steps s;
  s.steps = observer.steps;
  for (auto const& w : observer.windows) {
    auto const m = monitor_.measure(w);
    s.seconds.push_back(m.seconds);
    s.joules.push_back(m.total_j);
  }
  // The same figures on every rank: rank 0's times, energy summed over the ranks (every rank
  // counted the same steps: pauses_after depends on the step alone).
  if (parallel_.sum && !s.seconds.empty()) {
    parallel_.broadcast_from_root(s.seconds.data(), s.seconds.size());
    parallel_.sum(s.joules.data(), s.joules.size());
  }
  return s;
}

std::pair<std::vector<RegionMeasure>, std::vector<RegionMeasure>> TrialRunner::region_delta(
    std::vector<energy::RegionPath> const& before) {
  auto const paths = energy::path_difference(regions_.paths(/*settle=*/true), before, regions_.resolution_s());
  std::pair<std::vector<RegionMeasure>, std::vector<RegionMeasure>> out;
  for (auto const& [name, d] : energy::regions_by_name(paths, regions_.resolution_s()))
    out.first.push_back({name, d.calls, d.seconds, d.total_j, d.below_resolution, d.parent});
  for (auto const& p : paths)
    out.second.push_back({p.name, p.stats.calls, p.stats.seconds, p.stats.total_j, p.stats.below_resolution,
                          p.stats.parent, p.parent});
  return out;
}

PowerTrace TrialRunner::power_between(double t0, double t1) {
  auto const m = monitor_.measure({"power trace", t0, t1}, /*with_trace=*/true);
  return {m.trace_columns, m.trace_time_s, m.trace_watts};
}

TrialRecord TrialRunner::measure(Knobs const& k) { return measure_with(k, nullptr); }

TrialRecord TrialRunner::measure_on(Trainer& live, Knobs const& k) { return measure_with(k, &live); }

std::string TrialRunner::unreachable_in_flight(Knobs const& k) const {
  for (auto const& knob : knob_table()) {
    if (!knob.field() || !knob_is_set(knob, knob.get(k))) continue;  // the power limit, or unset
    if (knob.get(k) == knob.configured(base_)) continue;
    if (std::string(knob.config_field) == "train.seq_shards" && !parallel_.groups)
      return fmt::format("{} {} needs the processes regrouped, and this run has no process groups to re-form",
                         knob.name, knob_value_text(knob, knob.get(k)));
  }
  return "";
}

TrialRecord TrialRunner::measure_with(Knobs const& k, Trainer* live, bool for_trial, int max_repeats) {
  if (max_repeats <= 0) max_repeats = settings_.max_repeats;
  TrialRecord r;
  r.knobs = k;
  r.warmup_steps = settings_.warmup_steps;
  r.predicted_device_bytes = predicted_device_bytes(k);
  r.energy_resolution_s = monitor_.resolution_s();
  double const t_start = monitor_.sampler().now();
  bool stepping = false;
  try {
    std::unique_ptr<Trainer> own;
    if (live) {  // in flight: the run itself switches to k; its steps are training steps
      stepping = true;
      switch_in_flight(*live, k);
    } else {
      own = make_trainer(k, 1 << 30);
      stepping = true;
    }
    Trainer* const trainer = live ? live : own.get();
    run_steps(*trainer, settings_.warmup_steps, live != nullptr, false);
    auto const ended = [&] {
      if (trainer->step() >= trainer->config().train.steps)
        throw TrainingError("the training run ended before this configuration was measured");
    };
    ended();
    auto const before = regions_.paths(/*settle=*/true);
    double const t_measure = monitor_.sampler().now();
    auto const load_before = energy::read_load();
    auto const link_before = trainer->optimizer().offload_times();
    std::vector<double> per_step_objective;
    for (r.repeats = 1;; ++r.repeats) {
      auto s = run_steps(*trainer, settings_.measured_steps, live != nullptr, for_trial);
      if (filter_) filter_(k, s.seconds, s.joules);
      if (int(s.seconds.size()) < settings_.measured_steps) ended();
      r.step_time_s.insert(r.step_time_s.end(), s.seconds.begin(), s.seconds.end());
      r.measured_on.insert(r.measured_on.end(), s.steps.begin(), s.steps.end());
      r.step_energy_j.insert(r.step_energy_j.end(), s.joules.begin(), s.joules.end());
      for (std::size_t i = 0; i < s.seconds.size(); ++i)
        per_step_objective.push_back(objective_value(settings_.objective, s.joules[i], s.seconds[i], settings_.objective.p_max_w));
      r.ci_relative = relative_ci_half_width(per_step_objective);
      // Energy integrates enough of its sensor's updates before the trial may stop early.
      bool const enough_updates = r.enough_sensor_updates();
      if (r.repeats >= max_repeats || (r.ci_relative <= settings_.ci_target && enough_updates)) break;
      double const now = objective_value(settings_.objective, median(r.step_energy_j), median(r.step_time_s),
                                         settings_.objective.p_max_w);
      if (enough_updates && clearly_worse(now, r.ci_relative, leader_objective_, leader_ci_)) break;  // racing
    }
    r.measured_steps = int(r.step_time_s.size());
    {
      auto const load = energy::load_between(load_before, energy::read_load());
      r.process_cpus = load.process_cpus;
      r.other_cpus = load.other_cpus;
      r.steal_share = load.steal_share;
    }
    {
      auto const link = trainer->optimizer().offload_times();
      r.link_bytes_per_step = (link.bytes_to_host + link.bytes_to_device - link_before.bytes_to_host -
                               link_before.bytes_to_device) / std::max(1, r.measured_steps);
      r.host_jobs_speculated = link.speculated - link_before.speculated;
      r.host_jobs_rolled_back = link.rolled_back - link_before.rolled_back;
    }
    r.time_per_step_s = median(r.step_time_s);
    // A step shorter than the sensor's update has no energy of its own: each is an interpolation
    // of readings around it, and only their sum over the window is measured.
    r.energy_per_step_j = r.energy_below_resolution() ? sum(r.step_energy_j) / double(r.step_energy_j.size())
                                                      : median(r.step_energy_j);
    r.objective = objective_value(settings_.objective, r.energy_per_step_j, r.time_per_step_s, settings_.objective.p_max_w);
    std::tie(r.regions, r.region_paths) = region_delta(before);
    r.power = power_between(t_measure, monitor_.sampler().now());
    if (!std::isfinite(r.time_per_step_s) || !std::isfinite(r.energy_per_step_j))
      throw TrainingError("time or energy per step is not finite");
  } catch (Interrupted const&) {
    throw;
  } catch (TrainingError const& e) {  // the trainer's checks on reduced values, or make_trainer's agreement
    r.status = TrialStatus::failed;
    r.reason = e.what();
  } catch (std::exception const& e) {
    std::string const what = failure_reason(e);
    if (stepping && parallel_.world > 1)
      throw TrialAbort(fmt::format("trial {} failed on rank {} in the middle of a step ({}); the other processes "
                                   "may be waiting in its collectives, so the job stops here",
                                   k.describe(), parallel_.rank, what));
    r.status = TrialStatus::failed;
    r.reason = what;
  }
  if (!r.ok()) {
    r.time_per_step_s = r.energy_per_step_j = r.objective = kNaN;
    if (r.power.time_s.empty()) r.power = power_between(t_start, monitor_.sampler().now());
  }
  return r;
}

double TrialRunner::quick_time_per_step(Knobs const& k) {
  auto const trainer = make_trainer(k, 1 << 30);
  run_steps(*trainer, settings_.warmup_steps, false, false);
  return median(run_steps(*trainer, settings_.measured_steps, false, false).seconds);
}

TrialRecord TrialRunner::measure_round(Knobs const& k, Trainer* live) {
  return measure_with(k, live, /*for_trial=*/false, /*max_repeats=*/1);  // the rounds' spread is the test
}

double TrialRunner::quick_time_per_step_on(Trainer& live, Knobs const& k) {
  return measure_with(k, &live, /*for_trial=*/false).time_per_step_s;
}

TrainRecord TrialRunner::train(Knobs const& k, std::ostream* log) { return train_with(k, nullptr, log); }

TrainRecord TrialRunner::train_on(Trainer& live, Knobs const& k, std::function<int(Knobs const&)> const& trial_of) {
  return train_with(k, &live, nullptr, trial_of);
}

void TrialRunner::record_live_step(StepRecord const& s, bool measured) {
  live_.record.steps.push_back({s.step, s.loss, s.lr, s.grad_norm, s.seconds, -1, measured,
                                monitor_.sampler().now() - live_.t0, s.host_jobs_rolled_back});
  live_.knobs.push_back(live_.now);
}

void TrialRunner::record_live_eval(int step, EvalResult const& e) {
  live_.record.evals.push_back({step, e.loss, e.accuracy, e.samples});
}

bool TrialRunner::runs_configuration(Knobs const& k) const {
  for (auto const& knob : knob_table()) {
    double const v = knob.get(k);
    bool const unset = knob.has_unset && v == knob.unset;
    if (!unset && (!knob.field() || v != knob.configured(base_))) return false;
  }
  return true;
}

void TrialRunner::begin_in_flight(Trainer&) {
  if (live_.started) return;
  live_.started = true;
  for (auto const& knob : knob_table())  // the configuration the run was started with
    knob.set(live_.now, knob.has_unset || !knob.field() ? knob.unset : knob.configured(base_));
  live_.record.in_flight = true;
  live_.regions_before = regions_.paths(/*settle=*/true);
  live_.t0 = monitor_.sampler().now();
  monitor_.begin("in-flight run");
}

void TrialRunner::switch_in_flight(Trainer& live, Knobs const& k) {
  begin_in_flight(live);
  if (auto const why = unreachable_in_flight(k); !why.empty()) throw TrainingError(why);
  if (k == live_.now) return;
  auto const begin = std::chrono::steady_clock::now();
  apply_power_limit(k);
  auto const next = settings_for(k);
  if (next.seq_shards != live.config().train.seq_shards) {  // every rank re-forms its groups
    auto groups = parallel_.groups(next.seq_shards);
    live.reconfigure(next, std::move(groups.first), std::move(groups.second));
  } else {
    live.reconfigure(next);
  }
  live_.now = k;
  live_.record.switches += 1;
  live_.record.switch_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

TrainRecord TrialRunner::train_with(Knobs const& k, Trainer* live, std::ostream* log,
                                    std::function<int(Knobs const&)> const& trial_of) {
  if (live) {  // the rest of the run, recorded with the steps the search took
    switch_in_flight(*live, k);
    struct Rest : TrainObserver {
      TrialRunner& runner;
      explicit Rest(TrialRunner& r) : runner(r) {}
      void before_step(Trainer&, int) override { runner.check_stop(); }
      void on_step(Trainer&, StepRecord const& s) override { runner.record_live_step(s, false); }
      void on_eval(Trainer&, int step, EvalResult const& e) override { runner.record_live_eval(step, e); }
    } rest(*this);
    live->run(-1, &rest);
    auto rec = std::move(live_.record);
    rec.knobs = k;
    for (std::size_t i = 0; i < rec.steps.size(); ++i) rec.steps[i].trial = trial_of(live_.knobs[i]);
    auto const m = monitor_.end("in-flight run", /*with_trace=*/true);
    rec.seconds = m.seconds;
    rec.energy_j = m.total_j;
    if (parallel_.sum) parallel_.sum(&rec.energy_j, 1);
    std::tie(rec.regions, rec.region_paths) = region_delta(live_.regions_before);
    rec.power = {m.trace_columns, m.trace_time_s, m.trace_watts};
    live_ = LiveRun{};
    return rec;
  }
  // The trainer prints its own progress; this records every step and evaluation for the log.
  struct Recorder : TrainObserver {
    TrialRunner& runner;
    TrainRecord& rec;
    double t0;
    Recorder(TrialRunner& r, TrainRecord& t) : runner(r), rec(t), t0(r.monitor_.sampler().now()) {}
    void before_step(Trainer&, int) override { runner.check_stop(); }
    void on_step(Trainer&, StepRecord const& s) override {
      rec.steps.push_back({s.step, s.loss, s.lr, s.grad_norm, s.seconds, -1, false, runner.monitor_.sampler().now() - t0,
                           s.host_jobs_rolled_back});
    }
    void on_eval(Trainer&, int step, EvalResult const& e) override {
      rec.evals.push_back({step, e.loss, e.accuracy, e.samples});
    }
  };
  TrainRecord rec;
  rec.knobs = k;
  auto const trainer = make_trainer(k, 0, log);
  auto const before = regions_.paths(/*settle=*/true);
  Recorder recorder(*this, rec);
  monitor_.begin("train");
  rec.seconds = trainer->run(-1, &recorder).seconds;
  auto const m = monitor_.end("train", /*with_trace=*/true);
  double joules = m.total_j;
  if (parallel_.sum) parallel_.sum(&joules, 1);
  rec.energy_j = joules;
  std::tie(rec.regions, rec.region_paths) = region_delta(before);
  rec.power = {m.trace_columns, m.trace_time_s, m.trace_watts};
  return rec;
}

}  // namespace joule::scheduler
