// `joule tune`: search offload ratio, recompute depth and sequence shards (and the optional knobs
// of the config's "tune" section) for the least energy-delay objective, by measurement; train with
// the choice; leave every trial in an HDF5 run log (scheduler/run_log.hpp) and print the report.
#include "commands.hpp"
#include "energy_setup.hpp"
#include "processes.hpp"
#include "run_config.hpp"

#include "energy/monitor.hpp"
#include "energy/power_limit.hpp"
#include "energy/report.hpp"
#include "energy/source.hpp"
#include "parallel/agreement.hpp"
#include "scheduler/report.hpp"
#include "scheduler/run_log.hpp"
#include "scheduler/strategy.hpp"
#include "scheduler/trial_runner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

namespace joule::apps {

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) { g_stop = true; }

struct TuneOptions {
  std::string config_path, data, out = "runs.h5", resume, objective, strategy, comm, energy_regions = "timeline";
  int steps = -1, measured_steps = -1, warmup_steps = -1, max_repeats = -1;
  double budget_mib = -1;
  bool make_data = false, no_train = false;
};

std::string hostname() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

std::string row(scheduler::TrialRecord const& r, std::string const& note = "") {
  if (!r.ok())
    return fmt::format("  trial {:>3}  {:<40} {:<10} {}{}\n", r.index, r.knobs.describe(), scheduler::to_string(r.status),
                       r.reason, note);
  return fmt::format("  trial {:>3}  {:<40} {:7.1f} ms/step {:9.3f} J/step  objective {:.4g}  (+-{:.1f}%, {} steps){}\n",
                     r.index, r.knobs.describe(), 1e3 * r.time_per_step_s, r.energy_per_step_j, r.objective,
                     100 * r.ci_relative, r.measured_steps, note);
}

int tune_on(Processes& procs, Config const& cfg, scheduler::TuneSettings const& settings, std::string const& out,
            TuneOptions const& o);

int run_tune(TuneOptions const& o) {
  Config const cfg = load_config_with(o.config_path, [&](nlohmann::json& j) {
    if (!o.data.empty()) j["data"]["path"] = o.data;
    if (o.steps >= 0) j["train"]["steps"] = o.steps;
    auto t = [&j](char const* key) -> nlohmann::json& { return j["tune"][key]; };
    if (!o.objective.empty()) t("objective") = o.objective;
    if (!o.strategy.empty()) t("strategy") = o.strategy;
    if (o.measured_steps >= 0) t("measured_steps") = o.measured_steps;
    if (o.warmup_steps >= 0) t("warmup_steps") = o.warmup_steps;
    if (o.max_repeats >= 0) t("max_repeats") = o.max_repeats;
    if (o.budget_mib >= 0) t("device_memory_budget_mib") = o.budget_mib;
    if (o.no_train) t("train_after") = false;
    if (!o.comm.empty()) j["parallel"]["backend"] = o.comm;
  });
  auto const settings = scheduler::parse_tune_settings(cfg);
  std::string const out = o.resume.empty() ? o.out : o.resume;
  if (o.resume.empty() && std::filesystem::exists(out))
    throw std::runtime_error(out + " exists: continue it with --resume " + out + ", or write elsewhere with --out "
                             "(joule tune never overwrites a log)");

  if (auto const parent = std::filesystem::path(out).parent_path(); !parent.empty())
    std::filesystem::create_directories(parent);
  Processes procs(cfg);
  return procs.run_or_abort([&] { return tune_on(procs, cfg, settings, out, o); });
}

int tune_on(Processes& procs, Config const& cfg, scheduler::TuneSettings const& settings, std::string const& out,
            TuneOptions const& o) {
  bool const root = procs.root();
  auto* world = procs.world();
  if (o.make_data && root) make_data_if_missing(cfg);
  if (world) world->barrier();
  if (!std::filesystem::exists(cfg.data.path))
    throw DatasetError(cfg.data.path + ": no such dataset (pass --make-data to generate the synthetic shapes data there)");

  energy::Sampler sampler(energy::discover_sources(energy::SourceOptions::from_environment()));
  auto const regions = make_region_recorder(sampler, energy::edge_mode_from_string(o.energy_regions));
  energy::Monitor monitor(sampler);
  sampler.start();

  scheduler::Parallelism par;
  par.world = procs.size();
  par.rank = procs.rank();
  if (world) {
    par.groups = [&](int shards) {
      procs.relayout(shards, cfg);
      return std::make_pair(procs.data_parallel(), procs.sequence_shards());
    };
    par.sum = [world](double* p, std::size_t n) { world->allreduce_sum(p, n); };
    par.broadcast_from_root = [world](double* p, std::size_t n) { world->broadcast(p, n * sizeof(double), 0); };
    par.first_error = [world](std::string const& mine) { return parallel::first_error(*world, mine); };
  }
  std::signal(SIGINT, on_sigint);
  scheduler::TrialRunner runner(cfg, settings, monitor, *regions, par, [] { return g_stop.load(); });
  // GPU power limits only when the configuration asks; restored when `limiter` dies (any exit
  // but SIGKILL) and explicitly at the end.
  std::unique_ptr<energy::PowerLimiter> limiter;
  if (!settings.power_limits_w.empty()) {
    limiter = energy::PowerLimiter::open(energy::SourceOptions::from_environment());
    runner.set_power_control([&limiter](double w) { limiter->set(w); }, limiter->min_watts(), limiter->max_watts());
  }

  scheduler::RunHeader header;
  header.joule_version = JOULE_VERSION;
  header.git_commit = JOULE_GIT_COMMIT;
  header.kokkos_version = fmt::format("{}.{}.{}", KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100);
  header.execution_space = ExecSpace::name();
  header.host = hostname();
  header.energy_source = runner.energy_description();
  header.energy_kind = runner.energy_measured() ? "measured" : "model";
  header.energy_regions = energy::edges_description(*regions);
  header.objective = settings.objective.name();
  header.config_json = cfg.json;
  header.world_size = procs.size();
  header.device_memory_budget_bytes = runner.budget_bytes();

  // The log: only rank 0 writes; on --resume every rank reads the finished trials (same search path).
  std::vector<scheduler::TrialRecord> finished;
  std::optional<scheduler::RunLogWriter> writer;
  auto const space = runner.space();
  std::vector<scheduler::Knobs> feasible;
  for (auto const& k : space)
    if (runner.infeasible_reason(k).empty()) feasible.push_back(k);
  auto const strategy = settings.strategy_for(feasible.size());
  header.strategy = scheduler::to_string(strategy);
  if (!o.resume.empty()) {
    if (root) writer = scheduler::RunLogWriter::resume(out, header, &finished);
    else finished = scheduler::read_run_log(out).trials;
  } else if (root) {
    writer = scheduler::RunLogWriter::create(out, header);
  }
  auto say = [&](std::string const& s) {
    if (root) std::cout << s << std::flush;
  };
  if (limiter)
    say(fmt::format("GPU power limits to try: {} W (this process's {} GPU(s) allow [{:.0f}, {:.0f}] W, now {:.0f} W; "
                    "restored at exit)\n", fmt::join(settings.power_limits_w, ", "), limiter->gpus(),
                    limiter->min_watts(), limiter->max_watts(), limiter->original_watts()));
  if (procs.size() > 1) say(procs.collectives() + "\n");
  say(fmt::format("tuning {} ({} processes, {}): objective {}, strategy {}, {} candidates of which {} fit {:.0f} MiB ({})\n"
                  "energy: {}{}\nlog: {}{}\n",
                  o.config_path.empty() ? "the embedded default configuration" : o.config_path, procs.size(),
                  procs.backend(), settings.objective.name(), header.strategy, space.size(), feasible.size(),
                  runner.budget_bytes() / 1048576.0, runner.budget_source(), header.energy_source,
                  runner.energy_measured() ? " (measured)" : " -- a MODEL, not a measurement", out,
                  finished.empty() ? "" : fmt::format(" (resumed: {} finished trials kept)", finished.size())));

  auto find_finished = [&](scheduler::Knobs const& k) -> scheduler::TrialRecord const* {
    for (auto const& r : finished)
      if (r.knobs == k) return &r;
    return nullptr;
  };
  int next_index = int(finished.size());
  auto record = [&](scheduler::TrialRecord r, std::string const& note = "") {
    r.index = next_index++;
    if (writer) writer->append_trial(r);
    say(row(r, note));
    finished.push_back(r);
    return r;
  };
  for (auto const& k : space) {
    auto const reason = runner.infeasible_reason(k);
    if (reason.empty() || find_finished(k)) continue;
    scheduler::TrialRecord r;
    r.knobs = k;
    r.status = scheduler::TrialStatus::infeasible;
    r.reason = reason;
    r.predicted_device_bytes = runner.predicted_device_bytes(k);
    record(r);
  }
  if (feasible.empty()) throw std::runtime_error("no candidate configuration fits the memory budget (see the trials above)");

  auto const start = scheduler::memory_model_fastest(feasible);
  std::optional<scheduler::TrialRecord> reference;  // the start config (a copy): re-measured to see drift
  int measured_since_reference = 0;
  double drift = scheduler::kNaN;
  auto evaluate = [&](scheduler::Knobs const& k) -> scheduler::TrialRecord {
    if (auto const* done = find_finished(k)) {
      say(row(*done, "  (from the log)"));
      return *done;
    }
    if (!reference)
      if (auto const* first = find_finished(start)) reference = *first;
    if (reference && reference->ok() && settings.reference_every > 0 && measured_since_reference >= settings.reference_every) {
      drift = runner.quick_time_per_step(start) / reference->time_per_step_s;
      measured_since_reference = 0;
      if (std::abs(drift - 1) > 0.1)
        say(fmt::format("  note: the reference config now takes {:.0f}% of its first time per step: the machine drifts\n",
                        100 * drift));
    }
    auto r = runner.measure(k);
    r.drift = drift;
    ++measured_since_reference;
    return record(r);
  };

  auto const search_start = std::chrono::steady_clock::now();
  scheduler::SearchResult result;
  try {
    result = scheduler::run_search(strategy, feasible, start, settings.objective, evaluate);
  } catch (scheduler::Interrupted const&) {
    say(fmt::format("\ninterrupted: {} trials are in {}; continue with joule tune --resume {}\n", finished.size(), out, out));
    return 130;
  }
  double const search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - search_start).count();
  if (result.best < 0) throw std::runtime_error("every measured trial failed (see the reasons above); nothing to choose");
  auto const& best_search = result.trials[result.best];
  auto const* best = find_finished(best_search.knobs);
  std::vector<scheduler::TrialRecord> front;
  for (int i : result.pareto) front.push_back(*find_finished(result.trials[i].knobs));
  if (writer) {
    writer->write_best(*best);
    writer->write_pareto(front);
  }
  say(fmt::format("\nsearch: {} trials measured in {:.1f} s; chosen: trial {} ({})\n", result.trials.size(),
                  search_seconds, best->index, best->knobs.describe()));

  if (settings.train_after) {
    say(fmt::format("training {} steps with the chosen configuration\n", cfg.train.steps));
    try {
      auto const train = runner.train(best->knobs, root ? &std::cout : nullptr);
      if (writer) writer->write_train(train);
    } catch (scheduler::Interrupted const&) {
      say(fmt::format("\ninterrupted during training: the search is complete in {}; the training run is not "
                      "(run joule train with the chosen configuration)\n", out));
      return 130;
    }
  }
  if (limiter) {
    limiter->restore();
    say(fmt::format("GPU power limit restored to {:.0f} W\n", limiter->original_watts()));
  }
  sampler.stop();
  if (writer) {
    writer->close();
    say("\n" + scheduler::format_run_report(scheduler::read_run_log(out)));
  }
  return 0;
}

}  // namespace

std::function<int()> add_tune_command(CLI::App& app) {
  auto o = std::make_shared<TuneOptions>();
  auto* cmd = app.add_subcommand("tune", "find the configuration with the least energy-delay objective, by measurement, and train with it");
  cmd->add_option("--config", o->config_path, "JSON configuration, with an optional \"tune\" section (default: the embedded tiny config)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", o->out, "the HDF5 run log to write (never overwritten)");
  cmd->add_option("--resume", o->resume, "continue this run log: finished trials are not measured again")
      ->check(CLI::ExistingFile);
  cmd->add_option("--objective", o->objective, "edp (default), ed2p, weighted[:eta], energy_under_slowdown[:x]");
  cmd->add_option("--strategy", o->strategy, "auto (default), exhaustive, coordinate_descent");
  cmd->add_option("--data", o->data, "dataset path (overrides data.path)");
  cmd->add_option("--steps", o->steps, "training steps with the chosen configuration (overrides train.steps)");
  cmd->add_option("--measured-steps", o->measured_steps, "measured steps per round of a trial (tune.measured_steps)");
  cmd->add_option("--warmup-steps", o->warmup_steps, "unmeasured steps before a trial's measurement (tune.warmup_steps)");
  cmd->add_option("--max-repeats", o->max_repeats, "rounds of measured steps at most (tune.max_repeats)");
  cmd->add_option("--budget-mib", o->budget_mib, "device memory budget in MiB (tune.device_memory_budget_mib; 0: automatic)");
  cmd->add_flag("--make-data", o->make_data, "generate the synthetic shapes dataset at data.path if missing");
  cmd->add_flag("--no-train", o->no_train, "only search; do not train with the chosen configuration");
  cmd->add_option("--energy-regions", o->energy_regions,
                  "region edges: timeline (stamped where the work runs, never fenced) or fenced (a fence at "
                  "every edge: exact, slower; for studies)")
      ->check(CLI::IsMember({"timeline", "fenced"}));
  cmd->add_option("--comm", o->comm, "float collectives under mpirun: auto (NCCL where every rank has its own GPU), "
                  "mpi, nccl (overrides parallel.backend)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}));
  return [o, cmd]() -> int { return *cmd ? run_tune(*o) : -1; };
}

}  // namespace joule::apps
