// `joule tune`: search offload ratio, recompute depth and sequence shards (and the optional knobs
// of the config's "tune" section) for the least energy-delay objective, by measurement offline
// (each candidate on a trainer of its own); train with the choice; leave every trial in an HDF5
// run log (runlog/run_log.hpp) and print the report. The job itself is tune_job.cpp's.
#include "commands.hpp"
#include "energy_setup.hpp"
#include "output_paths.hpp"
#include "processes.hpp"
#include "run_config.hpp"
#include "tune_job.hpp"

#include "scheduler/tune_settings.hpp"

#include <fmt/format.h>

#include <memory>
#include <optional>

namespace joule::apps {

namespace {

struct TuneOptions {
  std::string config_path, out = "runs.h5", resume, comm, energy_regions = "timeline";
  // Overrides of configuration fields: std::nullopt when not given (see run_config.hpp).
  std::optional<std::string> data, objective, strategy;
  std::optional<long long> steps, measured_steps, warmup_steps, max_repeats;
  std::optional<double> budget_mib;
  std::vector<std::string> power_limits;  // --power-limits: watts, or all
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
  if (!o.power_limits.empty()) ov.add("--power-limits", "tune.power_limits_w", power_limits_json(o.power_limits));
  if (!o.comm.empty()) ov.add("--comm", "parallel.backend", o.comm);
  return ov;
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
  cmd->add_option("--power-limits", o->power_limits, kPowerLimitsHelp)->delimiter(',');
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
