// `joule train`: train the captioning model from a configuration file (or the embedded default).
#include "commands.hpp"
#include "energy_setup.hpp"

#include "core/train/trainer.hpp"
#include "energy/report.hpp"
#include "processes.hpp"
#include "run_config.hpp"
#include "scheduler/statistics.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace joule::apps {

namespace {

struct TrainOptions {
  std::string config_path, data, checkpoint, resume, comm;
  int steps = -1, recompute_depth = -1, micro_batch = -1, host_threads = -1, seq_shards = -1, checkpoint_every = -1;
  double offload_ratio = -1;
  long long seed = -1;
  bool make_data = false;
  bool energy = true;
  double energy_rate_hz = energy::Sampler::kDefaultRateHz;
  std::string energy_regions = "timeline";
};

Config configure(TrainOptions const& o) {
  return load_config_with(o.config_path, [&](nlohmann::json& j) {
    if (!o.data.empty()) j["data"]["path"] = o.data;
    if (o.steps >= 0) j["train"]["steps"] = o.steps;
    if (o.recompute_depth >= 0) j["train"]["recompute_depth"] = o.recompute_depth;
    if (o.micro_batch >= 0) j["train"]["micro_batch"] = o.micro_batch;
    if (o.offload_ratio >= 0) j["train"]["offload_ratio"] = o.offload_ratio;
    if (o.host_threads >= 0) j["train"]["host_threads"] = o.host_threads;
    if (o.seq_shards >= 0) j["train"]["seq_shards"] = o.seq_shards;
    if (o.seed >= 0) j["train"]["seed"] = o.seed;
    if (!o.checkpoint.empty()) j["train"]["checkpoint"] = o.checkpoint;
    if (o.checkpoint_every >= 0) j["train"]["checkpoint_every"] = o.checkpoint_every;
    if (!o.comm.empty()) j["parallel"]["backend"] = o.comm;
  });
}

int train_on(Processes const& procs, Config const& cfg, TrainOptions const& o);

int run_train(TrainOptions const& o) {
  Config const cfg = configure(o);
  if (cfg.train.seq_shards > 1 && !launched_by_mpi())
    throw ConfigError("train.seq_shards = " + std::to_string(cfg.train.seq_shards) + " splits each sequence over " +
                      std::to_string(cfg.train.seq_shards) + " processes: start joule with mpirun -np N, N a multiple of " +
                      std::to_string(cfg.train.seq_shards));
  Processes const procs(cfg);
  return procs.run_or_abort([&] { return train_on(procs, cfg, o); });
}

int train_on(Processes const& procs, Config const& cfg, TrainOptions const& o) {
  auto* world = procs.world();
  bool const root = procs.root();
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
  Trainer trainer(cfg, root ? &std::cout : nullptr, procs.data_parallel(), procs.sequence_shards());
  if (!o.resume.empty()) trainer.resume(o.resume);

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
  auto const summary = trainer.run();
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
  cmd->add_option("--steps", o->steps, "optimizer steps (overrides train.steps)");
  cmd->add_option("--recompute-depth", o->recompute_depth, "blocks to recompute (overrides train.recompute_depth)");
  cmd->add_option("--micro-batch", o->micro_batch, "samples per forward/backward (overrides train.micro_batch)");
  cmd->add_option("--seed", o->seed, "seed (overrides train.seed)");
  cmd->add_option("--offload-ratio", o->offload_ratio,
                  "share of parameter bytes whose AdamW state lives on the host (overrides train.offload_ratio)");
  cmd->add_option("--host-threads", o->host_threads, "threads for the host optimizer, 0 = all (overrides train.host_threads)");
  cmd->add_option("--comm", o->comm, "float collectives: auto (NCCL where every rank has its own GPU), mpi, nccl "
                  "(overrides parallel.backend)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}));
  cmd->add_option("--seq-shards", o->seq_shards,
                  "processes sharing each sequence, Ulysses style (overrides train.seq_shards; needs mpirun)");
  cmd->add_option("--checkpoint", o->checkpoint, "write checkpoints here (overrides train.checkpoint)");
  cmd->add_option("--checkpoint-every", o->checkpoint_every,
                  "steps between checkpoints, 0 = at the end only (overrides train.checkpoint_every)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--resume", o->resume, "continue from this checkpoint")->check(CLI::ExistingFile);
  cmd->add_flag("--make-data", o->make_data, "generate the synthetic shapes dataset at data.path if missing");
  cmd->add_flag("!--no-energy", o->energy, "do not measure energy");
  cmd->add_option("--energy-rate", o->energy_rate_hz, "energy sampling rate in Hz")->check(CLI::Range(0.1, 10000.0));
  cmd->add_option("--energy-regions", o->energy_regions,
                  "region edges: timeline (stamped where the work runs, never fenced) or fenced (a fence at "
                  "every edge: exact, slower; for studies)")
      ->check(CLI::IsMember({"timeline", "fenced"}));
  return [o, cmd]() -> int { return *cmd ? run_train(*o) : -1; };
}

}  // namespace joule::apps
