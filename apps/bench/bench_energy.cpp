#include "bench/bench_energy.hpp"

#include "core/data/synth.hpp"
#include "core/train/trainer.hpp"
#include "energy/monitor.hpp"
#include "energy_setup.hpp"
#include "default_config.hpp"
#include "scheduler/statistics.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace joule::apps {

int run_energy_overhead_bench(EnergyBenchOptions const& o) {
  std::string const data = fmt::format("/tmp/joule-bench-energy-{}.h5", getpid());
  auto j = nlohmann::json::parse(kDefaultConfigJson);  // the main job's model
  j["data"]["path"] = data;
  j["train"]["steps"] = 1 << 30;
  j["train"]["eval_every"] = 0;
  j["train"].erase("checkpoint");
  Config const cfg = parse_config(j.dump(), "energy bench");
  write_synthetic(data, SynthOptions::for_model(cfg.model, 512, 1));
  Trainer trainer(cfg, nullptr);
  trainer.run(5);  // warm-up

  struct Mode {
    char const* name;
    bool energy;
    energy::EdgeMode edges;
  };
  std::vector<Mode> const modes{{"energy off (--no-energy)", false, energy::EdgeMode::timeline},
                                {"default: timeline regions", true, energy::EdgeMode::timeline},
                                {"--energy-regions fenced", true, energy::EdgeMode::fenced}};
  std::vector<std::vector<double>> step_ms(modes.size());
  std::vector<double> edges_per_step(modes.size()), hook_ms_per_step(modes.size()), sampler_cpu(modes.size());
  fmt::print("energy measurement overhead: the default tiny model ({} layers, d_model {}, batch {}), {} Hz "
             "sampling;\n{} rounds of {} steps per mode, modes interleaved on one trainer, median step times\n",
             cfg.model.layers, cfg.model.d_model, cfg.train.batch, o.rate_hz, o.repeats, o.steps);
  for (int round = 0; round < o.repeats; ++round)
    for (std::size_t m = 0; m < modes.size(); ++m) {
      std::unique_ptr<energy::Sampler> sampler;
      std::unique_ptr<energy::RegionRecorder> regions;
      if (modes[m].energy) {
        sampler = std::make_unique<energy::Sampler>(
            energy::discover_sources(energy::SourceOptions::from_environment()), o.rate_hz);
        regions = make_region_recorder(*sampler, modes[m].edges);
        sampler->start();
      }
      auto const summary = trainer.run(o.steps);
      for (auto const& s : summary.steps) step_ms[m].push_back(1e3 * s.seconds);
      if (sampler) {
        sampler->stop();
        (void)regions->stats(/*settle=*/true);  // the attribution itself runs after the steps
        edges_per_step[m] = double(regions->hook_calls()) / o.steps;
        hook_ms_per_step[m] = 1e3 * regions->hook_seconds() / o.steps;
        sampler_cpu[m] += sampler->thread_cpu_seconds();
      }
    }
  double const base = scheduler::median(step_ms[0]);
  fmt::print("{:<28} {:>12} {:>10} {:>14} {:>16} {:>14}\n", "mode", "step ms", "vs off", "edges / step",
             "hooks ms / step", "sampler CPU s");
  for (std::size_t m = 0; m < modes.size(); ++m) {
    double const step = scheduler::median(step_ms[m]);
    fmt::print("{:<28} {:>12.3f} {:>10.4f} {:>14.0f} {:>16.4f} {:>14.3f}\n", modes[m].name, step, step / base,
               edges_per_step[m], hook_ms_per_step[m], sampler_cpu[m]);
  }
  fmt::print("(vs off: the median step with that mode over the median step without energy, measured in the same\n"
             " run; edges: region edges passed per step, library regions included; hooks: time inside the\n"
             " region callbacks; sampler CPU: the sampler thread's CPU time over all rounds of that mode)\n");
  std::remove(data.c_str());
  return 0;
}

}  // namespace joule::apps
