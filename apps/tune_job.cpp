// The wiring of one tuning job (tune_job.hpp): output checks, energy sensors and regions, GPU
// power limits, the run log's header and writer, the TuneSession, and in flight the training run
// itself with its checkpoints and SIGINT; both `joule tune` and `joule train --tune` run it.
#include "tune_job.hpp"
#include "common/plural.hpp"

#include "energy_setup.hpp"
#include "environment.hpp"
#include "output_paths.hpp"
#include "run_config.hpp"
#include "stop_signals.hpp"

#include "core/train/host_cores.hpp"
#include "device_choice.hpp"
#include "core/train/trainer.hpp"
#include "energy/monitor.hpp"
#include "energy/power_limit.hpp"
#include "energy/report.hpp"
#include "energy/source.hpp"
#include "parallel/agreement.hpp"
#include "scheduler/report.hpp"
#include "runlog/run_log.hpp"
#include "scheduler/strategy.hpp"
#include "scheduler/trial_runner.hpp"
#include "scheduler/tune_session.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

namespace joule::apps {

namespace {


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
  if (job.continue_log) {
    plan.input(job.log_role, job.log_path);
    plan.output(job.log_role, job.log_path, log);
    plan.allow_same(job.log_role, job.log_role);
  } else {
    log.creates_folder = true;  // the job makes the log's folder
    plan.output(job.log_role, job.log_path, log);
  }
  if (settings.train_after || job.in_flight) {  // the training run writes the configuration's checkpoint
    plan.output(job.checkpoint_role, cfg.train.checkpoint);
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

// Before any work (rank 0 writes every output): no output overwrites an input, an existing log is
// never overwritten, and every output can be written where it is meant to go; "" when all hold,
// with `locks` taken on the outputs.
std::string outputs_problem(TuneJob const& job, Config const& cfg, scheduler::TuneSettings const& settings,
                            std::vector<io::OutputLock>& locks) {
  std::string const& out = job.log_path;
  auto const plan = files(job, cfg, settings);
  if (auto const clash = plan.clash(); !clash.empty()) return clash;
  if (!job.continue_log && std::filesystem::exists(out) && !std::filesystem::is_directory(out))
    return job.in_flight ? out + " exists: write the log elsewhere with --tune-log (a run continued with --resume "
                                 "continues the log its checkpoint names)"
                         : out + " exists: continue it with --resume " + out + ", or write elsewhere with --out "
                                 "(joule tune never overwrites a log)";
  if (auto const p = plan.probe(); !p.empty()) return p;
  // Room for a checkpoint where it goes (a full disk at the end would lose the run).
  if (!cfg.train.checkpoint.empty())
    io::require_free_space(job.checkpoint_role, cfg.train.checkpoint, checkpoint_bytes(cfg), "checkpoint of this model");
  return plan.lock(locks);
}

// What the trial runner needs of the process set: its size and rank, the collectives, how to
// re-form the groups for other sequence shards, and the device memory each process may use.
scheduler::Parallelism parallelism_of(Processes& procs, Config const& cfg, scheduler::TuneSettings const& settings) {
  scheduler::Parallelism par;
  par.world = procs.size();
  par.rank = procs.rank();
  if (auto* world = procs.world()) {
    par.groups = [&procs, &cfg](int shards) {
      procs.relayout(shards, cfg);
      return std::make_pair(procs.data_parallel(), procs.sequence_shards());
    };
    par.sum = [world](double* p, std::size_t n) { world->allreduce_sum(p, n); };
    par.broadcast_from_root = [world](double* p, std::size_t n) { world->broadcast(p, n * sizeof(double), 0); };
    par.first_error = [world](std::string const& mine) { return parallel::first_error(*world, mine); };
  }
  if (settings.device_memory_budget_mib <= 0) par.device_memory_bytes = procs.device_memory_per_process(&par.device_memory_source);
  return par;
}

// The run log's header: versions, machine, energy source, the search and the configuration.
scheduler::RunHeader run_header(scheduler::TrialRunner const& runner, Config const& cfg,
                                scheduler::TuneSettings const& settings, TuneJob const& job,
                                std::string const& energy_regions, int world_size) {
  scheduler::RunHeader header;
  header.joule_version = JOULE_VERSION;
  header.git_commit = JOULE_GIT_COMMIT;
  header.kokkos_version = fmt::format("{}.{}.{}", KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100);
  header.execution_space = ExecSpace::name();
  header.host = hostname();
  header.energy_source = runner.energy_description();
  header.energy_kind = runner.energy_measured() ? "measured" : "model";
  header.energy_regions = energy_regions;
  header.objective = settings.objective.name();
  header.tuning = job.in_flight ? "in_flight" : "offline";
  header.config_json = cfg.json;
  header.precision = precision_name(cfg.train.precision);
  header.gemm_path = gemm_path(cfg.train.precision);
  header.attention_path = attention_path(cfg.train.precision);
  header.host_cores = host_cores_text();
  header.host_threads = start_thread_record();
  header.world_size = world_size;
  header.device_memory_budget_bytes = runner.budget_bytes();
  return header;
}

}  // namespace

int run_tune_job(Processes& procs, Config const& cfg, scheduler::TuneSettings const& settings, TuneJob const& job) {
  std::string const& out = job.log_path;
  bool const root = procs.root();
  auto* world = procs.world();
  std::vector<io::OutputLock> locks;  // held to the end of the job: one job at a time writes an output
  if (auto const problem = check_on_root(world, [&] { return outputs_problem(job, cfg, settings, locks); });
      !problem.empty())
    return refuse(world, problem);
  if (root && !job.continue_log)
    if (auto const parent = std::filesystem::path(out).parent_path(); !parent.empty())
      std::filesystem::create_directories(parent);
  if (job.make_data && root) make_data_if_missing(cfg);
  if (world) world->barrier();
  if (!std::filesystem::exists(cfg.data.path))
    throw DatasetError(cfg.data.path + ": no such dataset (pass --make-data to generate the synthetic shapes data there)");
  Dataset::check_shape(cfg.data.path, cfg.model);  // a wrong image size ends the job before its log exists

  energy::Sampler sampler(energy::discover_sources(energy::SourceOptions::from_environment()));
  auto const regions = make_region_recorder(sampler, energy::edge_mode_from_string(job.energy_regions));
  energy::Monitor monitor(sampler);
  sampler.start();

  auto const par = parallelism_of(procs, cfg, settings);
  catch_stop_signals();  // SIGINT, SIGTERM, SIGHUP: stop between steps, keep what is due
  scheduler::TrialRunner runner(cfg, settings, monitor, *regions, par, [] { return stop_requested(); });
  // GPU power limits only when the configuration asks; restored when `limiter` dies (any exit
  // but SIGKILL) and explicitly at the end.
  std::unique_ptr<energy::PowerLimiter> limiter;
  if (!settings.values_of("power_limit_w").empty()) {
    limiter = energy::PowerLimiter::open(energy::SourceOptions::from_environment());
    runner.set_power_control([&limiter](double w) { limiter->set(w); }, limiter->min_watts(), limiter->max_watts());
  }

  auto header = run_header(runner, cfg, settings, job, energy::edges_description(*regions), procs.size());
  // The GPU each rank took (every rank's line, gathered on rank 0, which writes the log).
  if (auto* ranks = procs.world()) {
    auto const lines = ranks->gather(device_text(), 0);
    for (std::size_t r = 0; r < lines.size(); ++r)
      header.gpu += fmt::format("{}rank {}: {}", r ? "\n" : "", r, lines[r]);
  } else {
    header.gpu = device_text();
  }

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
                    "restored at exit)\n", fmt::join(settings.values_of("power_limit_w"), ", "), limiter->gpus(),
                    limiter->min_watts(), limiter->max_watts(), limiter->original_watts()));
  if (procs.size() > 1) say(procs.collectives() + "\n");
  say(fmt::format("tuning {} ({}, {}): objective {}, strategy {}, {} candidates of which {} fit {:.0f} MiB ({})\n"
                  "energy: {}{}\nlog: {}{}\n",
                  job.config_path.empty() ? "the embedded default configuration" : job.config_path,
                  counted(procs.size(), "process", "processes"),
                  procs.backend(), settings.objective.name(), header.strategy, session.space().size(),
                  session.feasible().size(), runner.budget_bytes() / 1048576.0, runner.budget_source(),
                  header.energy_source, runner.energy_measured() ? " (measured)" : " -- a MODEL, not a measurement", out,
                  finished.empty() ? "" : fmt::format(" (resumed: {} finished trials kept)", finished.size())));

  // In flight: the training run itself, from step 1 or from its checkpoint; its checkpoints
  // name this log, so that --resume continues both.
  std::unique_ptr<Trainer> live;
  if (job.in_flight) {
    live = std::make_unique<Trainer>(cfg, root ? &std::cout : nullptr, procs.data_parallel(), procs.sequence_shards());
    if (job.resume_file && *job.resume_file) {
      live->resume(**job.resume_file);
      job.resume_file->reset();
    } else if (!job.resume_checkpoint.empty()) {
      live->resume(job.resume_checkpoint);
    }
    live->set_checkpoint_note("tune_log", out);
  }
  auto interrupted = [&](char const* during) {
    if (!live) {
      say(fmt::format("\ninterrupted by {}: {} in {}; continue with joule tune --resume {}\n", stop_signal_text(),
                      counted(session.finished_trials(), "trial is", "trials are"), out, out));
    } else if (cfg.train.checkpoint.empty()) {
      say(fmt::format("\ninterrupted by {} {} at step {}: {} in {}; without train.checkpoint the "
                      "training state is not kept\n", stop_signal_text(), during, live->step(),
                      counted(session.finished_trials(), "trial is", "trials are"), out));
    } else {  // between steps on every rank: the state is whole, so it is kept
      live->save_checkpoint_once(cfg.train.checkpoint);
      say(fmt::format("\ninterrupted by {} {} at step {}: {} in {}, the training state in {}; continue "
                      "with joule train --tune --resume {}\n", stop_signal_text(), during, live->step(),
                      counted(session.finished_trials(), "trial is", "trials are"), out, cfg.train.checkpoint, cfg.train.checkpoint));
    }
    return interrupted_status();
  };

  session.record_infeasible();
  try {
    session.search(live.get());
  } catch (scheduler::Interrupted const&) {
    return interrupted("during the search");
  }
  auto const& best = session.chosen();
  if (live)
    say(fmt::format("\nsearch: {} measured on {} in {:.1f} s; chosen: trial {} ({}); the run "
                    "goes on with it to step {}\n", counted(session.result().trials.size(), "trial", "trials"),
                    counted(session.search_steps(), "training step", "training steps"),
                    session.search_seconds(), best.index, best.knobs.describe(), cfg.train.steps));
  else
    say(fmt::format("\nsearch: {} measured in {:.1f} s; chosen: trial {} ({})\n",
                    counted(session.result().trials.size(), "trial", "trials"),
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
      say(fmt::format("\ninterrupted by {} during training: the search is complete in {}; the training run is "
                      "not (run joule train with the chosen configuration)\n", stop_signal_text(), out));
      return interrupted_status();
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

}  // namespace joule::apps
