// `joule train`: train the captioning model from a configuration file (or the embedded default).
#include "commands.hpp"
#include "energy_setup.hpp"
#include "output_paths.hpp"

#include "core/config/reconfigurable.hpp"
#include "core/io/h5file.hpp"
#include "core/train/trainer.hpp"
#include "energy/report.hpp"
#include "processes.hpp"
#include "run_config.hpp"
#include "stop_signals.hpp"
#include "runlog/run_log.hpp"
#include "runlog/statistics.hpp"
#include "scheduler/tune_settings.hpp"
#include "tune_job.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <new>
#include <optional>

namespace joule::apps {

namespace {

struct TrainOptions {
  std::string config_path, resume, comm;
  // Overrides of configuration fields: std::nullopt when not given (see run_config.hpp).
  std::optional<std::string> data, checkpoint, seed;  // seed: any 64-bit integer text (integer_json)
  std::optional<std::string> objective, strategy;     // with --tune
  std::vector<std::string> power_limits;               // with --tune: watts, or all
  std::optional<std::string> precision;
  std::optional<long long> steps, checkpoint_every;
  // The running trainer's settings (--offload-ratio, --micro-batch, ...), one flag per row of
  // reconfigurable_fields(), by field name: the text given (its field's check judges it).
  std::map<std::string, std::optional<std::string>> settings;
  bool make_data = false;
  bool tune = false;     // in-flight tuning (tune_job.hpp)
  std::string tune_log;  // its run log ("": runs/tune-<time>.h5, or on --resume the one the checkpoint names)
  bool energy = true;
  bool memory_check = true;
  double energy_rate_hz = energy::Sampler::kDefaultRateHz;
  std::string energy_regions = "timeline";
  // --resume opened once (run_train): the run-log check, the tuning log's name and the resume read
  // this one file; emptied once the trainer has read it.
  std::shared_ptr<std::optional<io::InputFile>> resume_file;
};

Overrides overrides(TrainOptions const& o) {
  Overrides ov;
  ov.set("--data", "data.path", o.data);
  ov.set("--steps", "train.steps", o.steps);
  for (auto const& f : reconfigurable_fields())
    if (auto const it = o.settings.find(f.name); it != o.settings.end() && it->second) {
      std::string const& text = *it->second;
      ov.add(reconfigurable_flag(f), f.name,
             f.value_names ? nlohmann::json(text) : f.integer ? integer_json(text) : real_json(text));
    }
  ov.set("--precision", "train.precision", o.precision);
  if (o.seed) ov.add("--seed", "train.seed", integer_json(*o.seed));
  ov.set("--checkpoint", "train.checkpoint", o.checkpoint);
  ov.set("--checkpoint-every", "train.checkpoint_every", o.checkpoint_every);
  if (!o.comm.empty()) ov.add("--comm", "parallel.backend", o.comm);
  ov.set("--objective", "tune.objective", o.objective);
  ov.set("--strategy", "tune.strategy", o.strategy);
  if (!o.power_limits.empty()) ov.add("--power-limits", "tune.power_limits_w", power_limits_json(o.power_limits));
  return ov;
}

// What the run reads and writes, named as the user gave them (flag, or field of the configuration).
FilePlan files(TrainOptions const& o, Config const& cfg) {
  std::string const source = config_source(o.config_path);
  auto role = [&](char const* flag, char const* field, bool given) {
    return given ? std::string(flag) : fmt::format("{} (from {})", field, source);
  };
  FilePlan plan;
  plan.input("--config", o.config_path);
  std::string const data = role("--data", "data.path", o.data.has_value());
  if (o.make_data && !std::filesystem::exists(cfg.data.path)) {
    OutputOptions made;
    made.creates_folder = true;
    plan.output(data + " (written by --make-data)", cfg.data.path, made);
  } else {
    plan.input(data, cfg.data.path);
  }
  plan.input("--resume", o.resume);
  std::string const checkpoint = role("--checkpoint", "train.checkpoint", o.checkpoint.has_value());
  plan.output(checkpoint, cfg.train.checkpoint);
  // Resuming from the checkpoint the run goes on writing: read whole before the first write.
  plan.allow_same(checkpoint, "--resume");
  return plan;
}

int train_on(Processes const& procs, Config const& cfg, TrainOptions const& o);

// SIGINT, SIGTERM, SIGHUP (stop_signals.hpp): the run stops before its next step, every process at
// the same one (they agree through an all-reduce of the flag).
struct StopRequested {};
class StopBetweenSteps final : public TrainObserver {
 public:
  explicit StopBetweenSteps(parallel::Communicator* world) : world_(world) {}
  void before_step(Trainer&, int) override {
    double stop = stop_requested() ? 1.0 : 0.0;
    if (world_) world_->allreduce_sum(&stop, 1);
    if (stop > 0) throw StopRequested{};
  }

 private:
  parallel::Communicator* world_;
};
int tune_in_flight(Processes& procs, Config const& cfg, scheduler::TuneSettings const& settings,
                   TrainOptions const& o);

int run_train(TrainOptions const& given) {
  TrainOptions o = given;
  if (!o.resume.empty()) o.resume_file = std::make_shared<std::optional<io::InputFile>>(io::open_input(o.resume));
  if (!o.tune && (o.objective || o.strategy || !o.tune_log.empty() || !o.power_limits.empty()))
    throw ConfigError(std::string(o.objective       ? "--objective"
                                  : o.strategy      ? "--strategy"
                                  : o.tune_log.empty() ? "--power-limits"
                                                       : "--tune-log") +
                      " applies to a tuned run: add --tune");
  // A tuning log is the file people reach for to continue a tuned run: say what to do with it.
  if (!o.resume.empty() && scheduler::is_run_log(**o.resume_file))
    throw ConfigError("--resume " + o.resume + " is a tuning run log, not a checkpoint: " +
                      (o.tune ? "joule train --tune --resume takes the checkpoint the tuned run wrote (its "
                                "train.checkpoint), which names this log; "
                              : "joule train --resume takes a checkpoint (train.checkpoint); ") +
                      "to continue the search alone, joule tune --resume " + o.resume);
  auto const ov = overrides(o);
  ConfigFile const config_file = read_config(o.config_path);  // read once, loaded below as often as needed
  Config cfg = load_config_with(config_file, ov);
  ov.attribute([&] {
    if (cfg.train.seq_shards > 1 && !launched_by_mpi())
      throw ConfigError("train.seq_shards = " + std::to_string(cfg.train.seq_shards) + " splits each sequence over " +
                        std::to_string(cfg.train.seq_shards) + " processes: start joule with mpirun -np N, N a multiple of " +
                        std::to_string(cfg.train.seq_shards));
  });
  // A problem with the tune section (or --objective, --strategy) is named before anything starts.
  scheduler::TuneSettings settings;
  if (o.tune) settings = ov.attribute([&] { return scheduler::parse_tune_settings(cfg); });
  Processes procs(cfg);
  // Several data-parallel replicas and no micro-batch of the user's: deal the batch to them.
  if (int const replicas = procs.layout().dp;
      replicas > 1 && !o.settings.at("train.micro_batch") && !config_file_sets(config_file, "train", "micro_batch")) {
    int const was = cfg.train.micro_batch, micro = replica_micro_batch(cfg.train.batch, was, replicas);
    if (micro == 0)
      return refuse(procs.world(), fmt::format("train.batch = {} cannot be dealt evenly to {} data-parallel replicas: make it a "
                                    "multiple of {}", cfg.train.batch, replicas, replicas));
    if (micro != was) {
      cfg = load_config_with(config_file, [&](nlohmann::json& j) {
        ov.apply(j);
        j["train"]["micro_batch"] = micro;
      });
      if (procs.root())
        fmt::print("train.micro_batch = {} (not set; was {}): the batch of {} dealt to {} data-parallel replicas, {} "
                   "micro-batch(es) each\n", micro, was, cfg.train.batch, replicas, cfg.train.batch / micro / replicas);
    }
  }
  return procs.run_or_abort([&] { return o.tune ? tune_in_flight(procs, cfg, settings, o) : train_on(procs, cfg, o); });
}

// The log of a tuned run: --tune-log; else on --resume the one its checkpoint names; else a new
// file under runs/ named by the time.
std::string tune_log_path(TrainOptions const& o) {
  if (!o.tune_log.empty()) return o.tune_log;
  if (!o.resume.empty()) {
    auto const notes = Trainer::checkpoint_notes(**o.resume_file);
    if (auto const it = notes.find("tune_log"); it != notes.end()) return it->second;
    throw ConfigError(o.resume + " was not written by a tuned run (it names no tuning log): continue it without "
                      "--tune, or give the log with --tune-log");
  }
  std::time_t const now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
  return std::string("runs/tune-") + stamp + ".h5";
}

int tune_in_flight(Processes& procs, Config const& cfg, scheduler::TuneSettings const& settings,
                   TrainOptions const& o) {
  auto* world = procs.world();
  if (!o.energy) return refuse(world, "--tune chooses by measured time and energy: it cannot run with --no-energy");
  if (o.memory_check) {  // the configuration the run starts in; the search keeps to the memory free
    std::string summary;
    if (auto const problem = procs.memory_shortfall(cfg, &summary); !problem.empty())
      return refuse(world, problem + " (--no-memory-check trains anyway)");
    if (procs.root()) fmt::print("{}\n", summary);
  }
  std::string const source = config_source(o.config_path);
  TuneJob job;
  job.in_flight = true;
  job.config_path = o.config_path;
  job.data_role = o.data ? std::string("--data") : fmt::format("data.path (from {})", source);
  job.log_path = tune_log_path(o);
  if (world) {  // the time in the default name is rank 0's
    char path[4096] = {};
    job.log_path.copy(path, sizeof path - 1);
    world->broadcast(path, sizeof path, 0);
    job.log_path = path;
  }
  job.log_role = o.tune_log.empty() ? (o.resume.empty() ? "the tuning log" : "the tuning log named by --resume") : "--tune-log";
  job.continue_log = !o.resume.empty() && std::filesystem::exists(job.log_path);
  job.checkpoint_role = o.checkpoint ? std::string("--checkpoint") : fmt::format("train.checkpoint (from {})", source);
  job.resume_checkpoint = o.resume;
  job.resume_file = o.resume_file;
  job.make_data = o.make_data;
  job.energy_regions = o.energy_regions;
  return run_tune_job(procs, cfg, settings, job);
}

int train_on(Processes const& procs, Config const& cfg, TrainOptions const& o) {
  auto* world = procs.world();
  bool const root = procs.root();
  // Before any work: no output overwrites an input, every output can be written (rank 0 writes),
  // and no other job writes one of them (their locks are held to the end of the run).
  std::vector<io::OutputLock> locks;
  if (auto const problem = check_on_root(world, [&] {
        auto const plan = files(o, cfg);
        auto const p = plan.check();
        return p.empty() ? plan.lock(locks) : p;
      });
      !problem.empty())
    return refuse(world, problem);
  // Before the work: room for a checkpoint where it goes (a full disk at the end would lose the run).
  if (!cfg.train.checkpoint.empty())
    if (auto const problem = check_on_root(world, [&] {
          io::require_free_space(o.checkpoint ? "--checkpoint" : "train.checkpoint", cfg.train.checkpoint,
                                 checkpoint_bytes(cfg), "checkpoint of this model");
          return std::string();
        });
        !problem.empty())
      return refuse(world, problem);
  // Before anything is allocated: the memory model against the memory free on every process.
  if (o.memory_check) {
    std::string summary;
    if (auto const problem = procs.memory_shortfall(cfg, &summary); !problem.empty())
      return refuse(world, problem + " (--no-memory-check trains anyway)");
    if (root) fmt::print("{}\n", summary);
  }
  if (o.make_data && root) make_data_if_missing(cfg);
  if (world) world->barrier();
  if (!std::filesystem::exists(cfg.data.path))
    throw DatasetError(cfg.data.path + ": no such dataset (make one with `joule data synth`, or "
                       "pass --make-data to generate the synthetic shapes data there)");
  auto const& layout = procs.layout();
  if (root && layout.world > 1)
    fmt::print("{} processes ({}): {} sequence shard(s) x {} data-parallel replica(s); micro-batches dealt "
               "round-robin to the replicas\n{}\n", layout.world, procs.backend(), layout.seq_shards, layout.dp,
               procs.collectives());
  // An allocation that fails although the memory check passed (memory taken meanwhile, or the
  // check skipped) is reported with the memory model's figures, not as Kokkos' raw failure.
  std::optional<Trainer> built;
  try {
    built.emplace(cfg, root ? &std::cout : nullptr, procs.data_parallel(), procs.sequence_shards());
  } catch (std::bad_alloc const&) {
    throw std::runtime_error("cannot allocate the model, its activations and its optimizer state: " +
                             memory_summary(cfg.model, cfg.train, available_memory(), MemorySharing{}));
  }
  Trainer& trainer = *built;
  if (!o.resume.empty()) {
    trainer.resume(**o.resume_file);
    o.resume_file->reset();  // not held open: the run may replace that checkpoint
  }

  // Energy: sensors sampled on their own thread, every Kokkos region of the run stamped on the
  // timeline and given energy from the power trace afterwards.
  std::unique_ptr<energy::Sampler> sampler;
  std::unique_ptr<energy::RegionRecorder> regions;
  std::unique_ptr<energy::Monitor> monitor;
  if (o.energy) {
    sampler = std::make_unique<energy::Sampler>(
        energy::discover_sources(energy::SourceOptions::from_environment()), o.energy_rate_hz);
    regions = make_region_recorder(*sampler, energy::edge_mode_from_string(o.energy_regions));
    monitor = std::make_unique<energy::Monitor>(*sampler);
    sampler->start();
    monitor->begin("run");
  }
  catch_stop_signals();
  StopBetweenSteps stopper(world);
  TrainSummary summary;
  try {
    summary = trainer.run(-1, &stopper);
  } catch (StopRequested const&) {
    if (sampler) sampler->stop();
    // Between steps on every process: the state is whole, so it is kept where a checkpoint is configured.
    if (!cfg.train.checkpoint.empty()) trainer.save_checkpoint_once(cfg.train.checkpoint);
    // Through std::cout, which does not throw: after SIGHUP the terminal may be gone (main says
    // the output is incomplete, and the status stays 128 + the signal).
    if (root)
      std::cout << fmt::format("\ninterrupted by {} after step {}: {}\n", stop_signal_text(), trainer.step(),
                               cfg.train.checkpoint.empty()
                                   ? std::string("without train.checkpoint the training state is not kept")
                                   : fmt::format("the training state is in {}; continue with joule train --resume {} "
                                                 "(and this run's other options)",
                                                 cfg.train.checkpoint, cfg.train.checkpoint))
                << std::flush;
    return interrupted_status();
  }
  std::string energy_report;
  if (sampler) {
    auto const run = monitor->end("run");
    sampler->stop();  // its final sample covers the run; the report needs no more readings
    if (world) {  // every rank measured its own regions and sensors; rank 0 reports them all
      auto const texts = world->gather(energy::summarize_rank(*sampler, *regions, procs.rank(), run).to_json(), 0);
      std::vector<energy::RankEnergy> ranks;
      for (auto const& t : texts) ranks.push_back(energy::RankEnergy::from_json(t));
      if (root) energy_report = energy::format_energy_report_across_ranks(ranks);
    } else {
      energy_report = energy::format_energy_report(*sampler, *regions, run);
    }
    regions.reset();
  }

  if (!root) return 0;  // rank 0 reports
  fmt::print("\n== summary ==\n");
  if (!summary.steps.empty()) {
    fmt::print("steps {} -> {} in {:.1f} s ({:.0f} tokens/s overall); train loss {:.4f} -> {:.4f}\n",
               summary.steps.front().step - 1, summary.steps.back().step, summary.seconds,
               summary.tokens_per_second, summary.steps.front().loss, summary.steps.back().loss);
    // The steps alone (a whole optimizer step: forward, backward, AdamW), apart from evaluation
    // and checkpoints, which the overall figure includes.
    std::vector<double> step_s;
    double steps_total = 0;
    for (auto const& r : summary.steps) step_s.push_back(r.seconds), steps_total += r.seconds;
    double const step_median = scheduler::median(step_s);
    double const tokens_per_step = double(cfg.train.batch) * cfg.model.seq_len();
    fmt::print("step time: median {:.2f} ms ({:.0f} tokens/s); evaluation and checkpoints {:.1f} s\n",
               step_median * 1e3, tokens_per_step / step_median, std::max(0.0, summary.seconds - steps_total));
  }
  if (!summary.evals.empty()) {
    auto const& e = summary.evals.back().second;
    fmt::print("final {}\n", format_eval(e));
    for (auto const& [ref, out] : e.examples)
      fmt::print("  {:<34} -> {}{}\n", "\"" + ref + "\"", "\"" + out + "\"", ref == out ? "" : "   (wrong)");
  }
  if (!cfg.train.checkpoint.empty()) fmt::print("checkpoint: {}\n", cfg.train.checkpoint);
  if (!energy_report.empty()) fmt::print("\n{}", energy_report);
  return 0;
}

}  // namespace

std::function<int()> add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "train the captioning model");
  cmd->add_option("--config", o->config_path, "JSON configuration (default: the embedded tiny config)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--data", o->data, "dataset path (overrides data.path)");
  cmd->add_option("--steps", o->steps, "optimizer steps (overrides train.steps: 1 to 2^30)")->check(whole_number());
  cmd->add_option("--seed", o->seed, "seed (overrides train.seed: >= 0)")->check(whole_number())->type_name("INT");
  cmd->add_option("--precision", o->precision,
                  "fp32, or bf16: bf16 activations and kernel weights, fp32 master state (overrides train.precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--comm", o->comm, "float collectives: auto (NCCL where every rank has its own GPU), mpi, nccl "
                  "(overrides parallel.backend)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}));
  // The running trainer's settings, from their table (core/config/reconfigurable.hpp).
  for (auto const& f : reconfigurable_fields()) {
    std::string const note = *f.note ? std::string(", ") + f.note : std::string();
    auto* option = cmd->add_option(reconfigurable_flag(f), o->settings[f.name],
                                   fmt::format("{} (overrides {}: {}{})", f.meaning, f.name, reconfigurable_allowed_text(f), note));
    if (f.value_names)
      option->check(CLI::IsMember(std::vector<std::string>(f.value_names, f.value_names + f.value_count)));
    else if (f.integer)
      option->check(whole_number())->type_name("INT");
    else
      option->check(real_number())->type_name("NUMBER");
  }
  cmd->add_option("--checkpoint", o->checkpoint,
                  "write checkpoints here (overrides train.checkpoint; its folder must exist and be writable)");
  cmd->add_option("--checkpoint-every", o->checkpoint_every,
                  "steps between checkpoints, 0 = at the end only (overrides train.checkpoint_every: >= 0)")
      ->check(whole_number());
  cmd->add_option("--resume", o->resume, "continue from this checkpoint")->check(CLI::ExistingFile);
  cmd->add_flag("--make-data", o->make_data, "generate the synthetic shapes dataset at data.path if missing");
  cmd->add_flag("--tune", o->tune,
                "tune in flight: the scheduler measures the configuration's \"tune\" space on this run's own steps, "
                "switching between optimizer steps, and the run goes on with the choice (logged to --tune-log)");
  cmd->add_option("--objective", o->objective,
                  "with --tune: edp (default), ed2p, weighted[:eta], energy_under_slowdown[:x] (overrides tune.objective)");
  cmd->add_option("--strategy", o->strategy,
                  "with --tune: auto (default), exhaustive, coordinate_descent (overrides tune.strategy)");
  cmd->add_option("--power-limits", o->power_limits, std::string("with --tune: ") + kPowerLimitsHelp)->delimiter(',');
  cmd->add_option("--tune-log", o->tune_log,
                  "the HDF5 run log of --tune (default: runs/tune-<time>.h5; with --resume, the one the checkpoint "
                  "names, continued)");
  cmd->add_flag("!--no-energy", o->energy, "do not measure energy");
  cmd->add_flag("!--no-memory-check", o->memory_check,
                "train even when the memory model predicts that the model does not fit in the memory free now");
  cmd->add_option("--energy-rate", o->energy_rate_hz, "energy sampling rate in Hz")->check(CLI::Range(0.1, 10000.0));
  cmd->add_option("--energy-regions", o->energy_regions,
                  "region edges: timeline (stamped where the work runs, never fenced) or fenced (a fence at "
                  "every edge: exact, slower; for studies)")
      ->check(CLI::IsMember({"timeline", "fenced"}));
  return [o, cmd]() -> int { return *cmd ? run_train(*o) : -1; };
}

}  // namespace joule::apps
