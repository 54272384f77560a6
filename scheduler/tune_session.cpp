#include "scheduler/tune_session.hpp"
#include "common/plural.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ostream>
#include <stdexcept>

namespace joule::scheduler {

std::string trial_line(TrialRecord const& r, std::string const& note) {
  if (!r.ok())
    return fmt::format("  trial {:>3}  {:<40} {:<10} {}{}\n", r.index, r.knobs.describe(), to_string(r.status), r.reason,
                       note);
  std::string const link = std::isfinite(r.link_bytes_per_step) && r.link_bytes_per_step > 0
                               ? fmt::format(", link {:.3g} MB/step", r.link_bytes_per_step / 1e6)
                               : "";
  // Other work on the machine while it measured: a slow trial may be a busy machine's.
  std::string const others = r.other_cpus >= 0.1 ? fmt::format(", others busy {:.1f} CPUs", r.other_cpus) : "";
  // Steps shorter than the energy sensor's update: over how many updates the energy was taken.
  std::string resolution;
  if (r.energy_below_resolution()) {
    double const window = r.measured_window_s();
    resolution = fmt::format(", steps below the energy sensor's {:g} ms: J/step is the mean over {:.2f} s, {:.2g} "
                             "sensor updates{}",
                             1e3 * r.energy_resolution_s, window, window / r.energy_resolution_s,
                             r.enough_sensor_updates() ? "" : " (too few: energy cannot rank it)");
  }
  // Speculative host updates that ran again because their step was clipped: part of its cost.
  std::string const rolled = r.host_jobs_rolled_back > 0
                                 ? fmt::format(", host updates run again after clipping: {} of {} speculated",
                                               r.host_jobs_rolled_back, r.host_jobs_speculated)
                                 : "";
  return fmt::format("  trial {:>3}  {:<40} {:7.1f} ms/step {:9.3f} J/step  objective {:.4g}  (+-{:.1f}%, {}{}{}{}{}){}\n",
                     r.index, r.knobs.describe(), 1e3 * r.time_per_step_s, r.energy_per_step_j, r.objective,
                     100 * r.ci_relative, counted(r.measured_steps, "step", "steps"), link, others, resolution, rolled, note);
}

TuneSession::TuneSession(TrialRunner& runner, TuneSettings const& settings, std::ostream* progress)
    : runner_(runner), settings_(settings), progress_(progress), space_(runner.space()) {
  for (auto const& k : space_)
    if (runner_.infeasible_reason(k).empty()) feasible_.push_back(k);
  strategy_ = settings_.strategy_for(feasible_.size());
  if (!feasible_.empty()) start_ = memory_model_fastest(feasible_);
}

void TuneSession::use_log(RunLogWriter* writer, std::vector<TrialRecord> finished) {
  writer_ = writer;
  finished_ = std::move(finished);
}

void TuneSession::say(std::string const& text) const {
  if (progress_) *progress_ << text << std::flush;
}

TrialRecord const* TuneSession::finished(Knobs const& k) const {
  for (auto const& r : finished_)
    if (r.knobs == k) return &r;
  return nullptr;
}

TrialRecord const& TuneSession::record(TrialRecord r, std::string const& note) {
  r.index = int(finished_.size());
  if (writer_) writer_->append_trial(r);
  say(trial_line(r, note));
  finished_.push_back(std::move(r));
  return finished_.back();
}

void TuneSession::record_infeasible(Knobs const& k, std::string const& reason) {
  TrialRecord r;
  r.knobs = k;
  r.status = TrialStatus::infeasible;
  r.reason = reason;
  r.predicted_device_bytes = runner_.predicted_device_bytes(k);
  record(r);
}

void TuneSession::record_infeasible() {
  for (auto const& k : space_) {
    auto const reason = runner_.infeasible_reason(k);
    if (!reason.empty() && !finished(k)) record_infeasible(k, reason);
  }
  if (feasible_.empty()) throw std::runtime_error("no candidate configuration fits the memory budget (see the trials above)");
}

TrialRecord TuneSession::evaluate(Knobs const& k, Trainer* live) {
  auto const lead = [&](TrialRecord const& r) {  // the best so far sets the bar for repeating
    if (r.ok() && !(r.objective >= leader_)) {
      leader_ = r.objective;
      runner_.set_leader(r.objective, r.ci_relative);
    }
  };
  if (auto const* done = finished(k)) {
    say(trial_line(*done, "  (from the log)"));
    lead(*done);
    return *done;
  }
  if (!reference_)
    if (auto const* first = finished(start_)) reference_ = *first;
  // Every reference_every trials the start configuration is timed again: the machine's drift.
  if (reference_ && reference_->ok() && settings_.reference_every > 0 &&
      measured_since_reference_ >= settings_.reference_every) {
    double const now = live ? runner_.quick_time_per_step_on(*live, start_) : runner_.quick_time_per_step(start_);
    drift_ = now / reference_->time_per_step_s;
    measured_since_reference_ = 0;
    if (std::abs(drift_ - 1) > 0.1)
      say(fmt::format("  note: the reference config now takes {:.0f}% of its first time per step: the machine drifts\n",
                      100 * drift_));
  }
  auto r = live ? runner_.measure_on(*live, k) : runner_.measure(k);
  r.drift = drift_;
  ++measured_since_reference_;
  lead(r);
  return record(r);
}

void TuneSession::search(Trainer* live) {
  // In flight, only what a running trainer can switch to; the rest is recorded as infeasible.
  std::vector<Knobs> candidates;
  for (auto const& k : feasible_) {
    std::string const why = live ? runner_.unreachable_in_flight(k) : "";
    if (why.empty()) {
      candidates.push_back(k);
    } else if (!finished(k)) {
      record_infeasible(k, why);
    }
  }
  if (candidates.empty()) throw std::runtime_error("no feasible candidate can be switched to during the run");
  if (std::find(candidates.begin(), candidates.end(), start_) == candidates.end()) start_ = candidates.front();
  auto const begin = std::chrono::steady_clock::now();
  if (live) runner_.begin_in_flight(*live);
  int const step_before = live ? live->step() : 0;
  result_ = run_search(strategy_, candidates, start_, settings_.objective,
                       [&](Knobs const& k) { return evaluate(k, live); });
  if (result_.best < 0) throw std::runtime_error("every measured trial failed (see the reasons above); nothing to choose");
  // The choice is measured against the configuration's own settings: measured here if the search
  // passed them by (one more trial), else the search's start stands in.
  auto const baseline_of = [&](auto const& accept) {
    for (std::size_t i = 0; i < result_.trials.size(); ++i)
      if (accept(result_.trials[i].knobs)) return int(i);
    return -1;
  };
  auto const configured = [&](Knobs const& k) { return runner_.runs_configuration(k); };
  std::string baseline_is = "the configuration's own settings";
  if (baseline_of(configured) < 0)
    if (auto const it = std::find_if(candidates.begin(), candidates.end(), configured); it != candidates.end()) {
      say("  measuring the configuration's own settings, to compare the choice with:\n");
      result_.trials.push_back(evaluate(*it, live));
      result_.trials.back().index = int(result_.trials.size()) - 1;
      result_.best = select_best(result_.trials, settings_.objective);
      result_.pareto = pareto_front(result_.trials);
    }
  int baseline = baseline_of(configured);
  if (baseline < 0) {
    baseline = baseline_of([&](Knobs const& k) { return k == start_; });
    baseline_is = "the search's start (the configuration's own settings are not a candidate)";
  }
  std::vector<TrialRecord> logged = result_.trials;  // named by their index in the log
  for (auto& t : logged) t.index = finished(t.knobs)->index;
  auto const ratios = baseline >= 0 && baseline != result_.best && comparable(logged[std::size_t(baseline)])
                          ? confirm(logged[std::size_t(result_.best)], logged[std::size_t(baseline)], logged, live)
                          : std::vector<double>{};
  decision_ = decide_choice(logged, result_.best, baseline, baseline_is, settings_.objective, ratios);
  for (std::size_t i = 0; i < logged.size(); ++i)
    if (logged[i].index == decision_.chosen) result_.best = int(i);
  say("  " + decision_.verdict + "\n");
  search_steps_ = live ? live->step() - step_before : 0;
  search_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::vector<TrialRecord> front;
  for (int i : result_.pareto) front.push_back(*finished(result_.trials[i].knobs));
  if (writer_) {
    writer_->write_best(chosen(), &decision_);
    writer_->write_pareto(front);
  }
}

std::vector<double> TuneSession::confirm(TrialRecord const& best, TrialRecord const& baseline,
                                         std::vector<TrialRecord> const& trials, Trainer* live) {
  std::vector<double> ratios;
  if (settings_.confirm_rounds < 2) return ratios;
  if (live) {  // in flight the rounds are the run's own steps: only where the run has them
    int const needed = settings_.confirm_rounds * 2 * (settings_.warmup_steps + settings_.measured_steps);
    int const left = live->config().train.steps - live->step();
    if (left < needed) {
      say(fmt::format("  not confirming trial {} against trial {}: the run has {} steps left, {} alternating rounds "
                      "take {}; their trials decide\n", best.index, baseline.index, left, settings_.confirm_rounds,
                      needed));
      return ratios;
    }
  }
  say(fmt::format("  confirming: trial {} against trial {} in {} alternating rounds (a slow drift of the machine "
                  "cancels)\n", best.index, baseline.index, settings_.confirm_rounds));
  double const p_max = objective_context(trials, settings_.objective).p_max_w;
  auto const objective_of = [&](Knobs const& k) {
    auto const r = runner_.measure_round(k, live);
    return r.ok() ? objective_value(settings_.objective, r.energy_per_step_j, r.time_per_step_s, p_max) : kNaN;
  };
  for (int round = 0; round < settings_.confirm_rounds; ++round) {
    // A B, then B A: a drift that is linear over a pair of rounds cancels over two pairs.
    double a = kNaN, b = kNaN;
    if (round % 2 == 0) {
      a = objective_of(best.knobs);
      b = objective_of(baseline.knobs);
    } else {
      b = objective_of(baseline.knobs);
      a = objective_of(best.knobs);
    }
    if (!std::isfinite(a) || !std::isfinite(b) || b <= 0) {
      say("  confirming stopped: a round did not measure (the run's end, or a failure); the trials decide\n");
      return {};
    }
    ratios.push_back(a / b);
    say(fmt::format("    round {}: {:.4g} / {:.4g} = {:.3f}\n", round + 1, a, b, a / b));
  }
  return ratios;
}

TrialRecord const& TuneSession::chosen() const {
  if (result_.best < 0) throw std::logic_error("TuneSession::chosen() before a search that chose");
  // The log's record (its index in the log), not the search's copy.
  return *finished(result_.trials[result_.best].knobs);
}

TrainRecord TuneSession::train(Trainer* live, std::ostream* log) {
  int const chosen_index = chosen().index;
  TrainRecord rec;
  if (live) {
    rec = runner_.train_on(*live, chosen().knobs, [&](Knobs const& k) {
      auto const* r = finished(k);
      return r ? r->index : -1;
    });
    rec.search_steps = search_steps_;
  } else {
    rec = runner_.train(chosen().knobs, log);
    for (auto& s : rec.steps) s.trial = chosen_index;
  }
  if (writer_) writer_->write_train(rec);
  return rec;
}

}  // namespace joule::scheduler
