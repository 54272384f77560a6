// `joule bench`: the benchmark suites (apps/bench/), their options, and which suite runs.
#include "commands.hpp"

#include "bench/bench_energy.hpp"
#include "bench/bench_launches.hpp"
#include "bench/bench_offload.hpp"
#include "bench/bench_ops.hpp"
#include "bench/bench_roofline.hpp"
#include "bench/bench_step.hpp"
#include "core/perf/roofline.hpp"
#include "output_paths.hpp"

#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::apps {

std::function<int()> add_bench_command(CLI::App& app) {
  struct Options {
    BenchOptions bench;
    std::string suite = "ops";
    LaunchBenchOptions launches;
    RooflineBenchOptions roofline;
    std::string energy_tool;
    int steps = 0;  // --steps; 0: each suite's own default
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "bench",
      "benchmarks: operators (GFLOP/s), whole training steps against their GEMM-bound limit, host AdamW "
      "bandwidth, offload overlap, energy measurement overhead");
  cmd->add_option("--suite", o->suite,
                  "ops: operator GFLOP/s; step: whole training steps (forward, backward, AdamW) and their "
                  "GEMM-bound limit; all: ops then step (one JSON); adamw: host AdamW vs STREAM triad; "
                  "offload: overlap; energy: the cost of measuring energy; launches: the kernel launches "
                  "of one training step of --config as CUDA would run them (for make gpu-audit); roofline: a MODEL of "
                  "one training step of --config on --target (predicted time, MFU, where the time goes)")
      ->check(CLI::IsMember({"ops", "step", "all", "adamw", "offload", "energy", "launches", "roofline"}));
  cmd->add_option("--config", o->launches.config_path,
                  "--suite launches, roofline: the training configuration (default: the embedded one, tiny.json)")
      ->check(CLI::ExistingFile);
  std::string target_help = "--suite roofline: the GPU modelled:";
  std::vector<std::string> target_names;
  for (auto const& t : perf::targets()) {
    target_help += "\n  " + t.name + ": " + t.what;
    target_names.push_back(t.name);
  }
  cmd->add_option("--target", o->roofline.target, target_help)->check(CLI::IsMember(target_names));
  cmd->add_option("--power-limit", o->roofline.power_limits,
                  "--suite roofline: also the energy MODEL under these GPU power limits, in W (repeat, or "
                  "comma-separated: 300,250); each above the target's static power")
      ->delimiter(',')
      ->check(CLI::Range(1.0, 100000.0));
  std::string preset_help = "operator shapes:";
  std::vector<std::string> preset_names;
  for (auto const& p : bench_presets()) {
    preset_help += "\n  " + p;
    preset_names.push_back(p.substr(0, p.find(':')));
  }
  cmd->add_option("--preset", o->bench.preset, preset_help)->check(CLI::IsMember(preset_names));
  std::string step_help = "whole-step shapes for --suite step/all, comma-separated (default: small,medium,wide):";
  std::vector<std::string> step_names;
  for (auto const& s : step_shapes()) {
    step_help += fmt::format("\n  {}: {}", s.name, describe(s));
    step_names.emplace_back(s.name);
  }
  cmd->add_option("--step-shapes", o->bench.step_shapes, step_help)->delimiter(',')->check(CLI::IsMember(step_names));
  auto* precision = cmd->add_option("--precision", o->bench.precision,
                                    "--suite step: train.precision of the steps, fp32 or bf16; --suite roofline: in "
                                    "place of the configuration's")
                        ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--repeats", o->bench.repeats, "timed runs per operator or step (median reported)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--steps", o->steps,
                  fmt::format("--suite offload, energy: training steps per ratio or mode and round (default: offload "
                              "{}, energy {}; fewer for a quick look)",
                              OffloadBenchOptions{}.steps, EnergyBenchOptions{}.steps))
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--json", o->bench.json_path, "also write the results as JSON (for bench_torch.py)");
  cmd->add_option("--energy-tool", o->energy_tool,
                  "--suite energy: the energy tool's library (default: libjoule_energy_tool.so beside joule)")
      ->check(CLI::ExistingFile);
  return [o, cmd, precision]() -> int {
    if (!*cmd) return -1;
    auto& bench = o->bench;
    // --json is checked before any work (not a folder, a device or a FIFO, nor the --config read;
    // its folder writable) and held by this job alone (io::OutputLock) until it is written.
    std::vector<io::OutputLock> locks;
    bool const writes_json = o->suite == "ops" || o->suite == "step" || o->suite == "all" || o->suite == "launches" ||
                             o->suite == "roofline";
    if (writes_json && !bench.json_path.empty()) {
      FilePlan plan;
      plan.input("--config", o->launches.config_path);
      plan.output("--json", bench.json_path);
      if (auto const problem = plan.check(); !problem.empty()) throw std::invalid_argument(problem);
      if (auto const problem = plan.lock(locks); !problem.empty()) throw std::invalid_argument(problem);
    }
    OffloadBenchOptions offload;
    offload.repeats = bench.repeats;
    if (o->steps > 0) offload.steps = o->steps;
    if (o->suite == "launches") {
      o->launches.json_path = bench.json_path;
      return run_launch_bench(o->launches);
    }
    if (o->suite == "roofline") {
      o->roofline.config_path = o->launches.config_path;
      o->roofline.json_path = bench.json_path;
      if (precision->count() > 0) o->roofline.precision = bench.precision;
      return run_roofline_bench(o->roofline);
    }
    if (o->suite == "adamw") return run_adamw_bandwidth_bench(offload);
    if (o->suite == "offload") return run_offload_overlap_bench(offload);
    if (o->suite == "energy") {
      EnergyBenchOptions energy;
      energy.repeats = bench.repeats;
      if (o->steps > 0) energy.steps = o->steps;
      energy.energy_tool = o->energy_tool;
      return run_energy_overhead_bench(energy);
    }
    bench.ops = o->suite == "ops" || o->suite == "all";
    bench.steps = o->suite == "step" || o->suite == "all";
    return run_bench(bench);
  };
}

}  // namespace joule::apps
