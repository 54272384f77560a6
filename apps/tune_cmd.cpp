// `joule tune`: search offload ratio, recompute depth and sequence shards (and the optional knobs
// of the config's "tune" section) for the least energy-delay objective, by measurement; train with
// the choice; leave every trial in an HDF5 run log (scheduler/run_log.hpp) and print the report.
#include "commands.hpp"
#include "energy_setup.hpp"
#include "output_paths.hpp"
#include "processes.hpp"
#include "run_config.hpp"
#include "tune_job.hpp"

#include "energy/monitor.hpp"
#include "energy/power_limit.hpp"
#include "energy/report.hpp"
#include "core/train/trainer.hpp"
#include "energy/source.hpp"
#include "parallel/agreement.hpp"
#include "scheduler/report.hpp"
#include "scheduler/run_log.hpp"
#include "scheduler/strategy.hpp"
#include "scheduler/trial_runner.hpp"
#include "scheduler/tune_session.hpp"

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
  std::string config_path, out = "runs.h5", resume, comm, energy_regions = "timeline";
  // Overrides of configuration fields: std::nullopt when not given (see run_config.hpp).
  std::optional<std::string> data, objective, strategy;
  std::optional<long long> steps, measured_steps, warmup_steps, max_repeats;
  std::optional<double> budget_mib;
  bool make_data = false, no_train = false;
};

Overrides overrides(TuneOptions const& o) {
  Overrides ov;
  ov.set("--data", "data.path", o.data);
  ov.set("--steps", "train.steps", o.steps);
  ov.set("--objective", "tune.objective", o.objective);
  ov.set("--strategy", "tune.strategy", o.strategy);
  ov.set("--measured-steps", "tune.measured_steps", o.measured_steps);
  ov.set("--warmup-steps", "tune.warmup_steps", o.warmup_steps);
  ov.set("--max-repeats", "tune.max_repeats", o.max_repeats);
  ov.set("--budget-mib", "tune.device_memory_budget_mib", o.budget_mib);
  ov.set_flag("--no-train", "tune.train_after", o.no_train, false);
  if (!o.comm.empty()) ov.add("--comm", "parallel.backend", o.comm);
  return ov;
}

// What the job reads and writes. A continued log is read and written by design (the finished
// trials are read first; every change is a copy renamed over it).
FilePlan files(TuneJob const& job, Config const& cfg, scheduler::TuneSettings const& settings) {
  FilePlan plan;
  plan.input("--config", job.config_path);
  if (job.make_data && !std::filesystem::exists(cfg.data.path)) {
    OutputOptions made;
    made.creates_folder = true;
    plan.output(job.data_role + " (written by --make-data)", cfg.data.path, made);
  } else {
    plan.input(job.data_role, cfg.data.path);
  }
  OutputOptions log;
  log.through_tmp = true;
  if (job.continue_log) {
    plan.input(job.log_role, job.log_path);
    plan.output(job.log_role, job.log_path, log);
    plan.allow_same(job.log_role, job.log_role);
  } else {
    log.creates_folder = true;  // the job makes the log's folder
    plan.output(job.log_role, job.log_path, log);
  }
  if (settings.train_after || job.in_flight) {  // the training run writes the configuration's checkpoint
    OutputOptions renamed;
    renamed.through_tmp = true;
    plan.output(job.checkpoint_role, cfg.train.checkpoint, renamed);
  }
  if (job.in_flight) {  // resuming from the checkpoint the run goes on writing: read whole first
    plan.input("--resume", job.resume_checkpoint);
    plan.allow_same(job.checkpoint_role, "--resume");
  }
  return plan;
}

std::string hostname() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

int run_tune(TuneOptions const& o) {
  auto const ov = overrides(o);
  Config const cfg = load_config_with(o.config_path, ov);
  auto const settings = ov.attribute([&] { return scheduler::parse_tune_settings(cfg); });
  TuneJob job;
  job.config_path = o.config_path;
  job.data_role = o.data ? std::string("--data") : fmt::format("data.path (from {})", config_source(o.config_path));
  job.continue_log = !o.resume.empty();
  job.log_path = job.continue_log ? o.resume : o.out;
  job.log_role = job.continue_log ? "--resume" : "--out";
  job.checkpoint_role = fmt::format("train.checkpoint (from {})", config_source(o.config_path));
  job.make_data = o.make_data;
  job.energy_regions = o.energy_regions;
  Processes procs(cfg);
  return procs.run_or_abort([&] { return run_tune_job(procs, cfg, settings, job); });
}

}  // namespace

int run_tune_job(Processes& procs, Config const& cfg, scheduler::TuneSettings const& settings, TuneJob const& job) {
  std::string const& out = job.log_path;
  bool const root = procs.root();
  auto* world = procs.world();
  // Before any work (rank 0 writes every output): no output overwrites an input, an existing log
  // is never overwritten, and every output can be written where it is meant to go.
  auto const problem = check_on_root(world, [&] {
    auto const plan = files(job, cfg, settings);
    if (auto const clash = plan.clash(); !clash.empty()) return clash;
    if (!job.continue_log && std::filesystem::exists(out) && !std::filesystem::is_directory(out))
      return job.in_flight ? out + " exists: write the log elsewhere with --tune-log (a run continued with --resume "
                                   "continues the log its checkpoint names)"
                           : out + " exists: continue it with --resume " + out + ", or write elsewhere with --out "
                                   "(joule tune never overwrites a log)";
    return plan.probe();
  });
  if (!problem.empty()) return refuse(world, problem);
  if (root && !job.continue_log)
    if (auto const parent = std::filesystem::path(out).parent_path(); !parent.empty())
      std::filesystem::create_directories(parent);
  if (job.make_data && root) make_data_if_missing(cfg);
  if (world) world->barrier();
  if (!std::filesystem::exists(cfg.data.path))
    throw DatasetError(cfg.data.path + ": no such dataset (pass --make-data to generate the synthetic shapes data there)");

  energy::Sampler sampler(energy::discover_sources(energy::SourceOptions::from_environment()));
  auto const regions = make_region_recorder(sampler, energy::edge_mode_from_string(job.energy_regions));
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
  if (settings.device_memory_budget_mib <= 0) par.device_memory_bytes = procs.device_memory_per_process(&par.device_memory_source);
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
  header.tuning = job.in_flight ? "in_flight" : "offline";
  header.config_json = cfg.json;
  header.world_size = procs.size();
  header.device_memory_budget_bytes = runner.budget_bytes();

  // The log: only rank 0 writes; on --resume every rank reads the finished trials (same search path).
  scheduler::TuneSession session(runner, settings, root ? &std::cout : nullptr);
  header.strategy = scheduler::to_string(session.strategy());
  std::vector<scheduler::TrialRecord> finished;
  std::optional<scheduler::RunLogWriter> writer;
  if (job.continue_log) {
    if (root) writer = scheduler::RunLogWriter::resume(out, header, &finished);
    else finished = scheduler::read_run_log(out).trials;
  } else if (root) {
    writer = scheduler::RunLogWriter::create(out, header);
  }
  session.use_log(writer ? &*writer : nullptr, finished);
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
                  job.config_path.empty() ? "the embedded default configuration" : job.config_path, procs.size(),
                  procs.backend(), settings.objective.name(), header.strategy, session.space().size(),
                  session.feasible().size(), runner.budget_bytes() / 1048576.0, runner.budget_source(),
                  header.energy_source, runner.energy_measured() ? " (measured)" : " -- a MODEL, not a measurement", out,
                  finished.empty() ? "" : fmt::format(" (resumed: {} finished trials kept)", finished.size())));

  // In flight: the training run itself, from step 1 or from its checkpoint; its checkpoints
  // name this log, so that --resume continues both.
  std::unique_ptr<Trainer> live;
  if (job.in_flight) {
    live = std::make_unique<Trainer>(cfg, root ? &std::cout : nullptr, procs.data_parallel(), procs.sequence_shards());
    if (!job.resume_checkpoint.empty()) live->resume(job.resume_checkpoint);
    live->set_checkpoint_note("tune_log", out);
  }
  auto interrupted = [&](char const* during) {
    if (!live) {
      say(fmt::format("\ninterrupted: {} trials are in {}; continue with joule tune --resume {}\n",
                      session.finished_trials(), out, out));
    } else if (cfg.train.checkpoint.empty()) {
      say(fmt::format("\ninterrupted {} at step {}: {} trials are in {}; without train.checkpoint the training "
                      "state is not kept\n", during, live->step(), session.finished_trials(), out));
    } else {  // between steps on every rank: the state is whole, so it is kept
      live->save_checkpoint_once(cfg.train.checkpoint);
      say(fmt::format("\ninterrupted {} at step {}: {} trials are in {}, the training state in {}; continue with "
                      "joule train --tune --resume {}\n", during, live->step(), session.finished_trials(), out,
                      cfg.train.checkpoint, cfg.train.checkpoint));
    }
    return 130;
  };

  session.record_infeasible();
  try {
    session.search(live.get());
  } catch (scheduler::Interrupted const&) {
    return interrupted("during the search");
  }
  auto const& best = session.chosen();
  if (live)
    say(fmt::format("\nsearch: {} trials measured on {} training steps in {:.1f} s; chosen: trial {} ({}); the run "
                    "goes on with it to step {}\n", session.result().trials.size(), session.search_steps(),
                    session.search_seconds(), best.index, best.knobs.describe(), cfg.train.steps));
  else
    say(fmt::format("\nsearch: {} trials measured in {:.1f} s; chosen: trial {} ({})\n", session.result().trials.size(),
                    session.search_seconds(), best.index, best.knobs.describe()));

  if (live) {
    try {
      session.train(live.get(), nullptr);
    } catch (scheduler::Interrupted const&) {
      return interrupted("after the search");
    }
  } else if (settings.train_after) {
    say(fmt::format("training {} steps with the chosen configuration\n", cfg.train.steps));
    try {
      session.train(nullptr, root ? &std::cout : nullptr);
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


std::function<int()> add_tune_command(CLI::App& app) {
  auto o = std::make_shared<TuneOptions>();
  auto* cmd = app.add_subcommand("tune", "find the configuration with the least energy-delay objective, by measurement, and train with it");
  cmd->add_option("--config", o->config_path, "JSON configuration, with an optional \"tune\" section (default: the embedded tiny config)")
      ->check(CLI::ExistingFile);
  auto* out = cmd->add_option("--out", o->out, "the HDF5 run log to write (never overwritten; its folder is made)")
                  ->check(CLI::Validator([](std::string& s) { return s.empty() ? std::string("give a file path") : ""; }, ""));
  cmd->add_option("--resume", o->resume, "continue this run log: finished trials are not measured again")
      ->check(CLI::ExistingFile)
      ->excludes(out);
  cmd->add_option("--objective", o->objective,
                  "edp (default), ed2p, weighted[:eta], energy_under_slowdown[:x] (overrides tune.objective)");
  cmd->add_option("--strategy", o->strategy, "auto (default), exhaustive, coordinate_descent (overrides tune.strategy)");
  cmd->add_option("--data", o->data, "dataset path (overrides data.path)");
  cmd->add_option("--steps", o->steps, "training steps with the chosen configuration (overrides train.steps: 1 to 2^30)")
      ->check(whole_number());
  cmd->add_option("--measured-steps", o->measured_steps, "measured steps per round of a trial (tune.measured_steps: 2 to 10000)")
      ->check(whole_number());
  cmd->add_option("--warmup-steps", o->warmup_steps, "unmeasured steps before a trial's measurement (tune.warmup_steps: 0 to 1000)")
      ->check(whole_number());
  cmd->add_option("--max-repeats", o->max_repeats, "rounds of measured steps at most (tune.max_repeats: 1 to 100)")
      ->check(whole_number());
  cmd->add_option("--budget-mib", o->budget_mib,
                  "device memory budget in MiB (tune.device_memory_budget_mib: 0 to 1e9; 0: automatic)");
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
