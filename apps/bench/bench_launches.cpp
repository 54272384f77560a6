// One training step of a configuration's model at its micro-batch, run with the step benchmark's
// machinery (bench_step.hpp: the trainer's step, everything on the device) while a launch
// recorder collects each kernel's stated CUDA shape.
#include "bench/bench_launches.hpp"

#include "bench/bench_ops.hpp"
#include "bench/bench_step.hpp"
#include "core/detail/launch_log.hpp"
#include "core/ops/detail/packs.hpp"
#include "run_config.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::apps {

namespace {

// A full wave of an H200: 132 SMs x 2048 resident threads (the same figure gpu_audit.py gates on).
constexpr long kH200Sms = 132, kThreadsPerSm = 2048, kWaveThreads = kH200Sms * kThreadsPerSm;

// One label's launches in the step: the extremes of their threads, the most scratch any asked for.
struct Launches {
  long count = 0, threads_min = 0, threads_max = 0;
  int block = 0, team_size = 0;
  std::size_t shared = 0;          // the most level-0 team scratch (shared memory) per block of its launches
  std::size_t global_scratch = 0;  // the most level-1 team scratch (global memory) per team
  bool fits_cuda = true;           // every launch within what Kokkos grants a team on CUDA
};

Launches summarise(std::vector<detail::LaunchShape> const& shapes) {
  Launches l;
  for (auto const& shape : shapes) {
    l.threads_min = l.count ? std::min(l.threads_min, shape.threads) : shape.threads;
    l.threads_max = l.count ? std::max(l.threads_max, shape.threads) : shape.threads;
    l.block = std::max(l.block, shape.block);
    l.team_size = std::max(l.team_size, shape.team_size);
    l.shared = std::max(l.shared, shape.shared);
    l.global_scratch = std::max(l.global_scratch, shape.global_scratch);
    l.fits_cuda = l.fits_cuda && shape.fits_cuda();
    ++l.count;
  }
  return l;
}

}  // namespace

int run_launch_bench(LaunchBenchOptions const& options) {
  Config const cfg = load_config_with(options.config_path, [](nlohmann::json&) {});
  int const micro = cfg.train.micro_batch, per_step = cfg.train.batch / std::max(1, micro);
  std::string const source = options.config_path.empty() ? std::string("the embedded default") : options.config_path;
  std::string const shape = fmt::format("micro-batch {} of batch {}, {} layers, C={}, {} heads, S={}", micro,
                                        cfg.train.batch, cfg.model.layers, cfg.model.d_model, cfg.model.heads,
                                        cfg.model.seq_len());
  fmt::print("joule bench --suite launches: the kernel launches of one training step of {} ({}), as CUDA would "
             "run them (recorded on {})\n",
             source, shape, Kokkos::DefaultExecutionSpace::name());
  detail::LaunchLog log(/*recording=*/false);  // the step's launches, not the set-up's
  Kokkos::Timer timer;
  detail::PacksOnHost const as_on_cuda;  // the kernels CUDA runs (core/ops/detail/packs.hpp)
  StepRuns const runs =
      run_training_steps(cfg.model, micro, cfg.train.recompute_depth, 1, [&](int) { log.set_recording(true); },
                         cfg.train.precision, attention_path_on_cuda(cfg.train.precision == Precision::bf16));
  double const seconds = timer.seconds();
  std::vector<std::pair<std::string, Launches>> rows;
  for (auto const& [label, shapes] : log.by_label()) rows.emplace_back(label, summarise(shapes));
  if (rows.empty()) throw std::runtime_error("no kernel launch was recorded");
  std::sort(rows.begin(), rows.end(), [](auto const& a, auto const& b) { return a.second.threads_min < b.second.threads_min; });
  fmt::print("{:<32} {:>8} {:>12} {:>12} {:>6} {:>9}\n", "kernel label", "launches", "threads min", "threads max",
             "block", "wave min");
  nlohmann::json kernels = nlohmann::json::array();
  for (auto const& [label, l] : rows) {
    fmt::print("{:<32} {:>8} {:>12} {:>12} {:>6} {:>8.1f}%\n", label, l.count, l.threads_min, l.threads_max,
               l.block ? fmt::format("{}", l.block) : std::string("kokkos"), 100.0 * l.threads_min / kWaveThreads);
    kernels.push_back({{"label", label}, {"launches", l.count}, {"threads_min", l.threads_min},
                       {"threads_max", l.threads_max}, {"block", l.block}, {"team_size", l.team_size},
                       {"shared", l.shared}, {"global_scratch", l.global_scratch}, {"fits_cuda", l.fits_cuda}});
  }
  fmt::print("one step: {:.1f} s here (loss {:.4f}); a full H200 wave: {} SMs x {} threads = {}; GEMMs (cuBLAS on "
             "CUDA) and Kokkos' own deep_copy kernels are not listed{}\n",
             seconds, runs.losses.at(0), kH200Sms, kThreadsPerSm, kWaveThreads,
             per_step > 1 ? fmt::format("; a step of this configuration runs {} micro-batches: forward and backward "
                                        "kernels launch {} times as often",
                                        per_step, per_step)
                          : "");
  if (!options.json_path.empty()) {
    nlohmann::json j = {{"config", source},          {"shape", shape},
                        {"micro_batch", micro},      {"batch", cfg.train.batch},
                        {"micro_batches_per_step", per_step}, {"wave_threads", kWaveThreads},
                        // the launch contract's figures (core/detail/launch_shape.hpp), which gpu_audit.py gates on
                        {"cuda_shared_per_block", detail::kCudaSharedMemPerBlock},
                        {"cuda_team_buffer_per_thread", detail::cuda_team_reserved_shared(1) - detail::cuda_team_reserved_shared(0)},
                        {"cuda_team_buffer_fixed", detail::cuda_team_reserved_shared(0)},
                        {"seconds", seconds},        {"kernels", kernels}};
    write_bench_json(options.json_path, j.dump(1) + "\n");
  }
  return 0;
}

}  // namespace joule::apps
