#include "scheduler/report.hpp"
#include "common/plural.hpp"

#include "runlog/profile.hpp"
#include "scheduler/significance.hpp"
#include "runlog/statistics.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <cstring>
#include <cmath>
#include <set>
#include <vector>

namespace joule::scheduler {

namespace {

// Reasons are free text (compiler messages, exceptions): one line in a table or a CSV row.
std::string one_line(std::string const& text) {
  std::string out = text;
  for (char& c : out)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return out;
}

std::string number(double value, char const* format = "{:.4g}") {
  return std::isnan(value) ? "-" : fmt::format(fmt::runtime(format), value);
}

std::string duration(double s) {
  if (std::isnan(s)) return "-";
  if (s < 60) return fmt::format("{:.1f}s", s);
  return fmt::format("{}m{:02d}s", int(s) / 60, int(s) % 60);
}

// The knobs' columns (knobs.hpp): heading, and each trial's values as text, as wide as the heading.
std::string knob_headings() {
  std::string out;
  for (auto const& k : knob_table()) out += fmt::format(" {:>{}}", k.column, std::strlen(k.column));
  return out;
}
// "; micro-batch, threads \"config\": the configuration's value; power W \"-\": not touched"
std::string unset_legend() {
  std::string out;
  std::vector<std::string> texts;
  for (auto const& k : knob_table())
    if (k.has_unset && std::find(texts.begin(), texts.end(), k.unset_text) == texts.end()) texts.push_back(k.unset_text);
  for (auto const& text : texts) {
    std::vector<std::string> columns;
    bool config = false;
    for (auto const& k : knob_table())
      if (k.has_unset && text == k.unset_text) columns.push_back(k.column), config = *k.config_field != 0;
    out += fmt::format("; {} \"{}\": {}", fmt::join(columns, ", "), text,
                       config ? "the configuration's value" : "not touched");
  }
  return out;
}
std::string knob_cells(Knobs const& knobs) {
  std::string out;
  for (auto const& k : knob_table()) out += fmt::format(" {:>{}}", knob_value_text(k, k.get(knobs)), std::strlen(k.column));
  return out;
}

// An ok trial must have a finite, positive time and a finite energy per step; a log holding one
// without them is inconsistent (edited, or written by a faulty run) and the report says so.
bool figures_finite(TrialRecord const& t) {
  return std::isfinite(t.time_per_step_s) && t.time_per_step_s > 0 && std::isfinite(t.energy_per_step_j);
}

std::string figures_text(TrialRecord const& t) {
  return fmt::format("T = {} s/step, E = {} J/step", t.time_per_step_s, t.energy_per_step_j);
}

// The ok trial with the shortest time per step among those with finite figures, or nullptr.
TrialRecord const* fastest_ok(RunLogContents const& log) {
  TrialRecord const* fastest = nullptr;
  for (auto const& t : log.trials)
    if (t.ok() && figures_finite(t) && (!fastest || t.time_per_step_s < fastest->time_per_step_s)) fastest = &t;
  return fastest;
}

// "12.3%", or "" when the ratio has no finite value (a zero or non-finite reference).
std::string percent(double part, double whole) {
  double const p = 100 * part / whole;
  return std::isfinite(p) ? fmt::format("{:.1f}%", p) : "";
}

void header_section(std::string& out, RunLogContents const& log) {
  auto const& h = log.header;
  int ok = 0, infeasible = 0, failed = 0;
  for (auto const& t : log.trials)
    (t.status == TrialStatus::ok ? ok : t.status == TrialStatus::infeasible ? infeasible : failed) += 1;
  out += fmt::format("joule run log {}\n", log.path);
  out += fmt::format("  created {} by joule {} ({}), Kokkos {} on {}, host {}, {} process{}\n", h.created,
                     h.joule_version, h.git_commit, h.kokkos_version, h.execution_space, h.host, h.world_size,
                     h.world_size == 1 ? "" : "es");
  if (!h.precision.empty()) out += fmt::format("  precision {}, GEMMs: {}\n", h.precision, h.gemm_path);
  if (!h.attention_path.empty()) out += fmt::format("  attention: {}\n", h.attention_path);
  if (!h.host_cores.empty()) out += fmt::format("  {}\n", h.host_cores);
  if (!h.host_threads.empty()) out += fmt::format("  host threads: {}\n", h.host_threads);
  if (!h.gpu.empty()) {  // absent in logs before issue 65; one line per rank under MPI
    std::string gpu = h.gpu;
    for (auto at = gpu.find('\n'); at != std::string::npos; at = gpu.find('\n', at + 1)) gpu.replace(at, 1, "\n       ");
    out += fmt::format("  GPU: {}\n", gpu);
  }
  for (auto const& when : h.resumed) out += fmt::format("  resumed {}\n", when);
  out += fmt::format("  strategy {}, objective {}; {}: {} ok, {} infeasible, {} failed\n", h.strategy, h.objective,
                     counted(static_cast<long long>(log.trials.size()), "trial", "trials"), ok, infeasible, failed);
  if (h.device_memory_budget_bytes > 0) {  // on a host execution space the budget is host memory
    bool const on_device = h.execution_space == "Cuda" || h.execution_space == "HIP" || h.execution_space == "SYCL" ||
                           h.execution_space == "OpenMPTarget" || h.execution_space == "OpenACC";
    out += fmt::format("  {} budget {:.3g} GiB{}\n", on_device ? "device memory" : "memory",
                       h.device_memory_budget_bytes / double(1ull << 30),
                       on_device ? "" : fmt::format(" (host memory: {} runs on the CPU)", h.execution_space));
  }
  if (h.energy_is_model())
    out += fmt::format("Energy: MODEL ESTIMATE. The energy figures come from a model, not a measurement ({}).\n",
                       h.energy_source);
  else
    out += fmt::format("Energy: measured ({}).\n", h.energy_source);
  if (!log.incomplete.empty())
    out += fmt::format("  {} group{} left half-written when the run stopped, ignored: {}\n", log.incomplete.size(),
                       log.incomplete.size() == 1 ? " was" : "s were", fmt::join(log.incomplete, ", "));
}

// "+12.3% s" against the chosen trial: the difference of the objective column beside it (both
// medians: t.objective / chosen.objective - 1), so the two columns never disagree; "s" where the
// trials' per-step objectives differ beyond the noise (Welch, 95%; significance.hpp) in the same
// direction; "-" where there is nothing to compare. Where the choice was confirmed in alternating
// rounds, the trial compared there is marked "r" and the rounds' own figure (a paired ratio, another
// statistic) is given under the table (rounds_note): it is what decided, and it may differ.
std::string versus_chosen(TrialRecord const& t, RunLogContents const& log, Objective const* objective) {
  TrialRecord const* chosen = log.trial(log.best);
  if (!chosen || t.index == log.best || !t.ok() || !chosen->ok()) return "-";
  double const d = t.objective / chosen->objective - 1;
  if (!std::isfinite(d) || !(chosen->objective > 0)) return "-";
  std::string mark = "  ";
  if (auto const& c = log.choice; c && !c->confirm_ratios.empty()) {
    bool const compared = (t.index == c->best && log.best == c->baseline) ||
                          (t.index == c->baseline && log.best == c->best);
    if (compared && std::isfinite(c->best_vs_baseline.difference))
      return fmt::format("{:+.1f}% r", 100 * d);
  }
  if (objective) {
    auto const c = compare_trials(t, *chosen, log.trials, *objective);
    // The test is on the means: "s" only where they differ beyond the noise the same way as the
    // medians (a skewed trial's mean and median may lie on either side of the chosen one's).
    if (c.significant && std::isfinite(c.difference) && (c.difference > 0) == (d > 0)) mark = " s";
  }
  return fmt::format("{:+.1f}%{}", 100 * d, mark);
}

// The "r" row's figure: what the alternating rounds found, named as the statistic it is.
std::string rounds_note(RunLogContents const& log) {
  auto const& c = log.choice;
  if (!c || c->confirm_ratios.empty() || !std::isfinite(c->best_vs_baseline.difference)) return "";
  if (log.best != c->baseline && log.best != c->best) return "";
  auto const& r = c->best_vs_baseline;
  TrialRecord const* best = log.trial(c->best);
  TrialRecord const* base = log.trial(c->baseline);
  std::string text = fmt::format(
      "  r: trials {} and {} were also measured in {} alternating rounds: trial {}'s objective against trial {}'s, "
      "the geometric mean of the rounds' ratios, is {:+.1f}% (noise ±{:.1f}%: {}); this, not the medians in the "
      "table, decided the choice",
      c->best, c->baseline, c->confirm_ratios.size(), c->best, c->baseline, 100 * r.difference, 100 * r.noise,
      r.significant ? "significant" : "not distinguishable");
  if (best && base && best->ok() && base->ok()) {
    double const medians = best->objective / base->objective - 1;
    if (std::isfinite(medians) && (medians > 0) != (r.difference > 0) && r.difference != 0)
      text += fmt::format(" (the medians above differ the other way, {:+.1f}%: the trials were measured at other "
                          "times, and the machine's drift shows in them)", 100 * medians);
  }
  return text + "\n";
}

void trial_table(std::string& out, RunLogContents const& log) {
  std::string const energy_heading = log.header.energy_is_model() ? "E J (model)" : "E J";
  std::optional<Objective> objective;
  try {
    objective = Objective::parse(log.header.objective);
  } catch (std::invalid_argument const&) {  // a log from another version: no comparison column
  }
  out += "\nTrials (T, E: median time and energy per optimizer step; CI: 95% half-width of the objective; "
         "vs chosen: the objective column's difference from the chosen trial's (both medians), s: the "
         "trials' per-step objectives differ the same way beyond the noise of both (Welch on their means, 95%; "
         "trials measured at different times also differ by the machine's drift), r: also compared in the "
         "alternating rounds that confirmed the choice (their figure below the table); others: CPUs busy with other work while it measured; ~ after E: "
         "steps shorter than the energy sensor's update interval, E the mean over the measured window)\n";
  out += fmt::format("{:>4} {}  {:<10} {:>10} {:>12} {:>10} {:>7} {:>10} {:>6}  {}\n", "#", knob_headings(), "status",
                     "T s", energy_heading, "objective", "CI", "vs chosen", "others", "reason");
  for (auto const& t : log.trials) {
    std::string const ci = !std::isfinite(t.ci_relative) ? "-" : fmt::format("±{:.1f}%", 100 * t.ci_relative);
    std::string const mark = t.index == log.best ? "*" : " ";
    out += fmt::format("{:>4}{}{}  {:<10} {:>10} {:>12} {:>10} {:>7} {:>10} {:>6}  {}\n", t.index, mark,
                       knob_cells(t.knobs), to_string(t.status), number(t.time_per_step_s),
                       number(t.energy_per_step_j, "{:.5g}") + (t.energy_below_resolution() ? "~" : ""),
                       number(t.objective, "{:.5g}"), ci,
                       versus_chosen(t, log, objective ? &*objective : nullptr), number(t.other_cpus, "{:.2f}"),
                       one_line(t.reason));
  }
  out += "  (* chosen" + unset_legend() + ")\n";
  out += rounds_note(log);
  // Speculation then validation: the trials whose offloaded host updates ran again after clipping.
  std::vector<std::string> rolled;
  for (auto const& t : log.trials)
    if (t.host_jobs_rolled_back > 0)
      rolled.push_back(fmt::format("trial {}: {} of {}", t.index, t.host_jobs_rolled_back, t.host_jobs_speculated));
  if (!rolled.empty())
    out += fmt::format("  host updates started before the gradient norm and run again because the step was clipped "
                       "(speculation then validation; their cost is in T and E): {}\n",
                       fmt::join(rolled, ", "));
}

void pareto_section(std::string& out, RunLogContents const& log) {
  if (log.pareto.empty()) {
    out += "\nPareto front: not recorded (the search did not finish)\n";
    return;
  }
  out += fmt::format("\nPareto front (time against energy per step): {} configuration{}\n", log.pareto.size(),
                     log.pareto.size() == 1 ? "" : "s");
  out += fmt::format("{:>4}  {:>10} {:>12}  {}\n", "#", "T s", log.header.energy_is_model() ? "E J (model)" : "E J",
                     "knobs");
  for (int index : log.pareto) {
    TrialRecord const* t = log.trial(index);
    if (!t) continue;  // read_run_log checks this; a hand-made RunLogContents may not
    out += fmt::format("{:>4}  {:>10} {:>12}  {}\n", index, number(t->time_per_step_s),
                       number(t->energy_per_step_j, "{:.5g}"), t->knobs.describe());
  }
}

void chosen_section(std::string& out, RunLogContents const& log) {
  TrialRecord const* best = log.trial(log.best);
  if (!best) {
    out += "\nChosen configuration: none recorded (the search did not finish)\n";
    return;
  }
  char const* const model = log.header.energy_is_model() ? " (model estimate)" : "";
  out += fmt::format("\nChosen configuration: trial {}: {}\n", best->index, best->knobs.describe());
  out += fmt::format("  {} s/step, {} J/step{}, objective {}\n", number(best->time_per_step_s),
                     number(best->energy_per_step_j, "{:.5g}"), model, number(best->objective, "{:.5g}"));
  if (log.choice) out += fmt::format("  {}\n", log.choice->verdict);
  // Ok trials without finite figures cannot be compared: named, and left out of the comparison.
  std::vector<int> broken;
  for (auto const& t : log.trials)
    if (t.ok() && !figures_finite(t) && t.index != best->index) broken.push_back(t.index);
  if (!broken.empty())
    out += fmt::format("  WARNING: inconsistent log: ok trial{} {} {} no finite time and energy per step; left out "
                       "of the comparison\n", broken.size() == 1 ? "" : "s", fmt::join(broken, ", "),
                       broken.size() == 1 ? "has" : "have");
  if (!best->ok() || !figures_finite(*best)) {
    out += fmt::format("  WARNING: inconsistent log: the chosen trial {} {} ({}); no comparison with the fastest "
                       "configuration can be made\n", best->index,
                       best->ok() ? "has no finite time and energy per step"
                                  : fmt::format("has status {}, not ok", to_string(best->status)),
                       figures_text(*best));
    return;
  }
  TrialRecord const* fastest = fastest_ok(log);
  if (!fastest) return;
  if (fastest->index == best->index) {
    out += "  it is also the fastest configuration measured, so no time is traded for energy\n";
    return;
  }
  out += fmt::format("  fastest ok configuration: trial {}: {}: {} s/step, {} J/step\n", fastest->index,
                     fastest->knobs.describe(), number(fastest->time_per_step_s),
                     number(fastest->energy_per_step_j, "{:.5g}"));
  // Both trials' figures are finite and the fastest's time positive (figures_finite).
  double const saved_j = fastest->energy_per_step_j - best->energy_per_step_j;
  std::string const saved_pct = percent(std::abs(saved_j), fastest->energy_per_step_j);
  std::string const lost_pct = percent(best->time_per_step_s - fastest->time_per_step_s, fastest->time_per_step_s);
  char const* const estimate = log.header.energy_is_model() ? ", model estimate" : "";
  std::string const energy =
      saved_j >= 0 ? fmt::format("energy saved {}({:.2f} J/step{})", saved_pct.empty() ? "" : saved_pct + " ", saved_j, estimate)
                   : fmt::format("energy spent {}more ({:.2f} J/step{})", saved_pct.empty() ? "" : saved_pct + " ", -saved_j,
                                 estimate);
  auto const time = compare_samples(best->step_time_s, fastest->step_time_s);
  std::string const noise =
      !std::isfinite(time.noise) ? ""
      : time.significant         ? fmt::format(" (beyond the two trials' noise of ±{:.1f}%)", 100 * time.noise)
                                 : fmt::format(" (within the two trials' noise of ±{:.1f}%: not distinguishable)",
                                               100 * time.noise);
  out += fmt::format("  against the fastest: {}, time lost {}{}\n", energy, lost_pct, noise);
}

// In flight: where the run switched, how many of its steps were the search's, and what the search
// cost, estimated from the run's own steps: the search's steps against as many steps with the
// choice (their median), plus the switches.
void in_flight_section(std::string& out, RunLogContents const& log) {
  auto const& t = *log.train;
  std::size_t const search = std::min<std::size_t>(std::max(t.search_steps, 0), t.steps.size());
  if (search == 0) return;
  int measured = 0;
  std::set<int> configs;
  std::vector<std::string> switches;
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    measured += t.steps[i].measured;
    if (i < search) configs.insert(t.steps[i].trial);
    if (i == 0 || t.steps[i].trial != t.steps[i - 1].trial)
      switches.push_back(fmt::format("{}:{}", t.steps[i].step, t.steps[i].trial));
  }
  out += fmt::format("  search: steps {}-{} in {} ({} measured; the others warm-up, drift checks "
                     "or followed by an evaluation or checkpoint), {} taking {:.2f} s; steps {}-{} with the "
                     "choice\n", t.steps.front().step, t.steps[search - 1].step,
                     counted(static_cast<long long>(configs.size()), "configuration", "configurations"),
                     counted(measured, "step", "steps"), counted(t.switches, "switch", "switches"),
                     t.switch_seconds, search < t.steps.size() ? t.steps[search].step : t.steps.back().step,
                     t.steps.back().step);
  std::size_t const shown = 24;
  out += fmt::format("  configuration from step (step:trial): {}{}\n",
                     fmt::join(switches.begin(), switches.begin() + std::min(shown, switches.size()), " "),
                     switches.size() > shown ? fmt::format(" ... ({} in all)", switches.size()) : "");
  std::vector<double> chosen_s, chosen_in_search_s;
  double search_s = 0;
  int const chosen_trial = t.steps.back().trial;
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    if (i < search) {
      search_s += t.steps[i].seconds;
      if (t.steps[i].trial == chosen_trial) chosen_in_search_s.push_back(t.steps[i].seconds);
    } else {
      chosen_s.push_back(t.steps[i].seconds);
    }
  }
  if (chosen_s.empty()) return;
  // Like with like: the choice's own steps during the search (its trial, its confirming rounds)
  // ran on the machine as it was then; the steps after it may run on a quieter or busier one.
  auto const drift = compare_samples(chosen_s, chosen_in_search_s);
  bool const during = chosen_in_search_s.size() >= 3;
  double const per_step = during ? median(chosen_in_search_s) : median(chosen_s);
  double const extra = search_s - double(search) * per_step + t.switch_seconds;
  out += fmt::format("  tuning overhead, estimated from this run's steps: {:+.1f}% of {} steps with the choice "
                     "({:+.2f} s: the search's {} steps against the choice's median {:.2f} ms/step {}, and the "
                     "switches)\n", 100 * extra / (double(t.steps.size()) * per_step), t.steps.size(), extra, search,
                     1e3 * per_step,
                     during ? fmt::format("over its {} steps during the search", chosen_in_search_s.size())
                            : std::string("after the search"));
  if (during && drift.significant)
    out += fmt::format("  the machine's speed changed: the choice ran at {:.2f} ms/step during the search and {:.2f} "
                       "after it ({:+.1f}%, beyond the noise of ±{:.1f}%), so the estimate above holds for the machine "
                       "as it was during the search\n", 1e3 * median(chosen_in_search_s), 1e3 * median(chosen_s),
                       100 * drift.difference, 100 * drift.noise);
}

void train_section(std::string& out, RunLogContents const& log) {
  if (!log.train) return;
  auto const& t = *log.train;
  out += t.in_flight ? fmt::format("\nThe training run, tuned in flight (then with {}): {} steps in {}", t.knobs.describe(),
                                   t.steps.size(), duration(t.seconds))
                     : fmt::format("\nTraining with the chosen configuration ({}): {} steps in {}", t.knobs.describe(),
                                   t.steps.size(), duration(t.seconds));
  if (!std::isnan(t.energy_j))
    out += fmt::format(", {:.5g} J{}", t.energy_j, log.header.energy_is_model() ? " (model estimate)" : "");
  out += "\n";
  if (t.in_flight) in_flight_section(out, log);
  if (!t.steps.empty())
    out += fmt::format("  final loss {:.4f} (step {})\n", t.steps.back().loss, t.steps.back().step);
  {
    int clipped = 0, jobs = 0;
    for (auto const& s : t.steps) {
      clipped += s.host_jobs_rolled_back > 0;
      jobs += s.host_jobs_rolled_back;
    }
    if (clipped > 0)
      out += fmt::format("  {} of {} steps clipped after their offloaded host updates had started: {} host updates run "
                         "again (speculation then validation)\n", clipped, t.steps.size(), jobs);
  }
  if (!t.evals.empty()) {
    auto const& e = t.evals.back();
    out += fmt::format("  last evaluation (step {}): held-out loss {:.4f}, exact caption accuracy {:.1f}% ({})\n",
                       e.step, e.loss, 100 * e.accuracy, counted(e.samples, "sample", "samples"));
  }
}

// ---- CSV ----

std::string csv_number(double value) { return std::isnan(value) ? "" : fmt::format("{}", value); }

}  // namespace

std::string format_run_report(RunLogContents const& log) {
  if (log.profile) {  // the energy tool's profile of a Kokkos program: no search to report
    auto const& h = log.header;
    std::string out = fmt::format("joule energy profile {}\n  created {} by joule {} ({}) on host {}: {}\n", log.path,
                                  h.created, h.joule_version, h.git_commit, h.host, log.profile->program);
    return out + format_profile_report(h, *log.profile, /*top=*/0);
  }
  std::string out;
  header_section(out, log);
  trial_table(out, log);
  pareto_section(out, log);
  chosen_section(out, log);
  train_section(out, log);
  return out;
}

std::string format_run_csv(RunLogContents const& log) {
  if (log.profile) return format_profile_csv(log.header, *log.profile);
  std::string out = "index,status";
  for (auto const& k : knob_table()) out += fmt::format(",{}", k.name);
  out += ",time_per_step_s,energy_per_step_j,energy_kind,objective,ci_relative,repeats,warmup_steps,measured_steps,"
         "drift,process_cpus,other_cpus,steal_share,predicted_device_bytes,chosen,pareto,reason\n";
  for (auto const& t : log.trials) {
    bool const on_front = std::find(log.pareto.begin(), log.pareto.end(), t.index) != log.pareto.end();
    std::string knobs;
    for (auto const& k : knob_table())
      knobs += "," + (k.integer ? fmt::format("{}", (long long)k.get(t.knobs)) : csv_number(k.get(t.knobs)));
    out += fmt::format("{},{}{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", t.index, to_string(t.status),
                       knobs, csv_number(t.time_per_step_s),
                       csv_number(t.energy_per_step_j), csv_field(log.header.energy_kind), csv_number(t.objective),
                       csv_number(t.ci_relative), t.repeats, t.warmup_steps, t.measured_steps, csv_number(t.drift),
                       csv_number(t.process_cpus), csv_number(t.other_cpus), csv_number(t.steal_share),
                       t.predicted_device_bytes, t.index == log.best ? 1 : 0, on_front ? 1 : 0, csv_field(t.reason));
  }
  return out;
}

}  // namespace joule::scheduler
