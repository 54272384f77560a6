// One training step of a configuration's model at its micro-batch, run with the step benchmark's
// machinery (bench_step.hpp) while a launch log records every launch with its work and the part of
// the step it belongs to; at most two layers are recorded (blocks are alike: the model weighs
// them, core/perf/roofline.hpp), then the roofline model predicts the whole step.
#include "bench/bench_roofline.hpp"

#include "bench/bench_ops.hpp"
#include "bench/bench_step.hpp"
#include "core/detail/launch_log.hpp"
#include "core/ops/detail/packs.hpp"
#include "core/perf/roofline.hpp"
#include "core/train/memory_check.hpp"
#include "core/train/optimizer.hpp"
#include "run_config.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::apps {

namespace {

double sum_of(std::vector<std::size_t> const& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

// The target's figures as printed (scaled to `unit`) and as stored in the JSON (as they are).
struct FigureRow {
  char const* what;
  char const* key;
  perf::Figure perf::Target::*figure;
  double scale;
  char const* unit;
};
constexpr FigureRow kFigureRows[] = {
    {"bf16 tensor-core peak", "bf16_tensor_peak_flops", &perf::Target::bf16_tensor_peak, 1e-12, "TFLOP/s"},
    {"bf16 GEMM", "bf16_gemm_flops", &perf::Target::bf16_gemm, 1e-12, "TFLOP/s"},
    {"TF32 GEMM", "tf32_gemm_flops", &perf::Target::tf32_gemm, 1e-12, "TFLOP/s"},
    {"fp32 GEMM", "fp32_gemm_flops", &perf::Target::fp32_gemm, 1e-12, "TFLOP/s"},
    {"fp32 SIMT peak", "fp32_simt_flops", &perf::Target::fp32_simt, 1e-12, "TFLOP/s"},
    {"HBM", "hbm_bytes_per_s", &perf::Target::hbm_bandwidth, 1e-12, "TB/s"},
    {"memory latency", "memory_latency_s", &perf::Target::memory_latency, 1e6, "us"},
    {"launch gap", "launch_gap_s", &perf::Target::launch_gap, 1e6, "us"},
    {"link to host", "link_to_host_bytes_per_s", &perf::Target::link_to_host, 1e-9, "GB/s"},
    {"link to device", "link_to_device_bytes_per_s", &perf::Target::link_to_device, 1e-9, "GB/s"},
    {"host memory", "host_bytes_per_s", &perf::Target::host_bandwidth, 1e-9, "GB/s"},
    {"bf16 tensor-core FLOP", "bf16_tensor_joules_per_flop", &perf::Target::bf16_tensor_energy, 1e12, "pJ"},
    {"TF32 tensor-core FLOP", "tf32_tensor_joules_per_flop", &perf::Target::tf32_tensor_energy, 1e12, "pJ"},
    {"fp32 SIMT FLOP", "fp32_simt_joules_per_flop", &perf::Target::fp32_simt_energy, 1e12, "pJ"},
    {"HBM byte", "hbm_joules_per_byte", &perf::Target::hbm_energy, 1e12, "pJ"},
    {"link byte", "link_joules_per_byte", &perf::Target::link_energy, 1e12, "pJ"},
    {"host memory byte", "host_memory_joules_per_byte", &perf::Target::host_memory_energy, 1e12, "pJ"},
    {"host FLOP", "host_joules_per_flop", &perf::Target::host_flop_energy, 1e12, "pJ"},
    {"GPU static power", "device_static_watts", &perf::Target::device_static_power, 1, "W"},
    {"host static power", "host_static_watts", &perf::Target::host_static_power, 1, "W"},
    {"GPU power limit", "device_power_limit_watts", &perf::Target::device_power_limit, 1, "W"},
};

struct OffloadRow {
  double ratio = 0, achieved = 0;
  perf::StepEstimate step;
  perf::OffloadEstimate offload, waiting;  // as configured; with the jobs waiting for the norm
  std::vector<perf::StepEnergy> energy;    // of the step as configured: unlimited, then under each power limit
  double seconds() const { return step.seconds + offload.exposed_s; }
};

}  // namespace

int run_roofline_bench(RooflineBenchOptions const& options) {
  Config const cfg = load_config_with(options.config_path, [&](nlohmann::json& j) {
    if (!options.precision.empty()) j["train"]["precision"] = options.precision;
  });
  perf::Target const& target = perf::target_named(options.target);
  for (double limit : options.power_limits) perf::estimate_energy(target, {}, {}, limit);  // a bad one refused before the recording
  ModelConfig const& m = cfg.model;
  int const micro = cfg.train.micro_batch, per_step = cfg.train.batch / std::max(1, micro);
  Precision const precision = cfg.train.precision;
  std::string const source = options.config_path.empty() ? std::string("the embedded default") : options.config_path;

  // The recording: at most two layers, one micro-batch, offload ratio 0 (the model moves the
  // offloaded groups' updates to the host itself).
  ModelConfig recorded = m;
  recorded.layers = perf::layers_to_record(m.layers);
  int const recorded_depth = perf::recompute_depth_to_record(m.layers, cfg.train.recompute_depth);
  fmt::print("joule bench --suite roofline: a MODEL of one training step of {} on {} ({}): predicted, not "
             "measured\n",
             source, target.name, target.what);
  fmt::print("step: {}, micro-batch {} x {} per step, {} layers, C={}, {} heads, S={}, recompute depth {}; "
             "recorded: {} layer(s), one micro-batch, on {}\n",
             precision_name(precision), micro, per_step, m.layers, m.d_model, m.heads, m.seq_len(),
             cfg.train.recompute_depth, recorded.layers, Kokkos::DefaultExecutionSpace::name());
  detail::LaunchLog log(/*recording=*/false);  // the step's launches, not the set-up's
  Kokkos::Timer timer;
  detail::PacksOnHost const as_on_cuda;  // the kernels CUDA runs (core/ops/detail/packs.hpp)
  run_training_steps(recorded, micro, recorded_depth, 1, [&](int) { log.set_recording(true); }, precision,
                     attention_path_on_cuda(precision == Precision::bf16));
  double const recording_s = timer.seconds();
  auto const launches = log.launches();
  if (launches.empty()) throw std::runtime_error("no kernel launch was recorded");

  auto const groups = parameter_group_sizes(m);
  perf::StepLayout base;
  base.layers = m.layers, base.layers_recorded = recorded.layers, base.recompute_depth = cfg.train.recompute_depth;
  base.micro_batches = per_step;
  base.parameters = sum_of(groups), base.parameters_recorded = sum_of(parameter_group_sizes(recorded));
  bool const cast_on_host = cfg.train.offload_cast == TrainConfig::OffloadCast::host;
  LinkBytesPerParameter const link = link_bytes_per_parameter(precision, cast_on_host);
  // The host's AdamW per parameter: detail::adamw_work's bytes, plus the bf16 copy cast there.
  double const host_bytes = detail::adamw_work(1).bytes + (cast_on_host && precision == Precision::bf16 ? 2 : 0);
  // Speculation then validation (a GPU build's host jobs are on a worker): the second set of
  // master weights and moments is written, and read for ownership first (12 bytes more).
  bool const speculative = cfg.train.grad_clip > 0 && cfg.train.offload_speculation;

  std::vector<double> ratios = {0.0, cfg.train.offload_ratio, 1.0};
  std::sort(ratios.begin(), ratios.end());
  ratios.erase(std::unique(ratios.begin(), ratios.end()), ratios.end());
  std::vector<OffloadRow> rows;
  for (double ratio : ratios) {
    OffloadRow row;
    row.ratio = ratio;
    perf::StepLayout layout = base;
    layout.offloaded = choose_offloaded_groups(groups, ratio);
    perf::OffloadPlan plan;
    plan.offloaded = layout.offloaded;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      plan.group_parameters.push_back(double(groups[g]));
      if (layout.offloaded[g]) layout.offloaded_parameters += double(groups[g]);
    }
    row.achieved = layout.offloaded_parameters / base.parameters;
    plan.to_host_bytes = double(link.to_host), plan.to_device_bytes = double(link.to_device);
    plan.host_bytes = host_bytes;
    plan.host_flops = detail::adamw_work(1).flops;
    plan.clipping = cfg.train.grad_clip > 0;
    row.step = perf::estimate_step(target, launches, layout, cfg.train.tf32);
    row.waiting = perf::estimate_offload(target, plan, row.step);  // the jobs wait for the norm
    plan.speculative = speculative;
    plan.speculative_host_bytes = 3 * sizeof(float);
    plan.last_ready_group = kLastReadyGroup;
    row.offload = perf::estimate_offload(target, plan, row.step);
    row.energy.push_back(perf::estimate_energy(target, row.step, row.offload));
    for (double limit : options.power_limits) row.energy.push_back(perf::estimate_energy(target, row.step, row.offload, limit));
    rows.push_back(row);
  }
  OffloadRow const& none = rows.front();
  perf::StepEstimate const& step = none.step;

  fmt::print("target figures (the MODEL's inputs, none measured here):\n");
  for (auto const& f : kFigureRows)
    fmt::print("  {:<22} {:>9.4g} {:<8} {}\n", f.what, (target.*f.figure).value * f.scale, f.unit,
               (target.*f.figure).source);

  fmt::print("MODEL step on {}: {:.1f} ms, MFU {:.1f}% ({:.2f} TFLOP of model FLOPs at {:.0f} TFLOP/s peak), "
             "{:.0f} launches\n",
             target.name, step.seconds * 1e3, 100 * step.mfu(target), step.model_flops * 1e-12,
             target.bf16_tensor_peak.value * 1e-12, step.launches);
  // What the micro-batch needs, by the memory model (core/train/memory_check.hpp) as this build counts it.
  MemoryNeed const need = memory_need(m, cfg.train);
  fmt::print("memory model: {:.1f} GiB on the device at micro-batch {} (parameters, gradients, activations, workspace "
             "and the optimizer state kept there; as this build counts it)\n",
             double(need.device_bytes()) / (1 << 30), micro);
  fmt::print("MODEL time by kind:");
  for (int k = 0; k < detail::kWorkKinds; ++k)
    fmt::print(" {} {:.1f} ms ({:.0f}%) |", detail::kWorkKindNames[k], step.kind_seconds[k] * 1e3,
               100 * step.kind_seconds[k] / step.seconds);
  fmt::print(" launch gaps {:.1f} ms ({:.0f}%)\n", step.gap_seconds * 1e3, 100 * step.gap_seconds / step.seconds);
  fmt::print("MODEL kernels by predicted time (a step's launches; memory-bound: share of the time where bytes, not "
             "FLOPs, bound the launch):\n");
  fmt::print("  {:<34} {:<11} {:>8} {:>10} {:>9} {:>9} {:>6} {:>9}\n", "kernel label", "kind", "launches", "GFLOP",
             "GB", "ms", "share", "mem-bound");
  nlohmann::json kernels = nlohmann::json::array();
  for (std::size_t i = 0; i < step.kernels.size(); ++i) {
    auto const& k = step.kernels[i];
    if (int(i) < options.top)
      fmt::print("  {:<34} {:<11} {:>8.0f} {:>10.1f} {:>9.2f} {:>9.2f} {:>5.1f}% {:>8.0f}%\n", k.label,
                 detail::work_kind_name(k.kind), k.launches, k.flops * 1e-9, k.bytes * 1e-9, k.seconds * 1e3,
                 100 * k.seconds / step.seconds, 100 * k.memory_bound_seconds / std::max(k.seconds, 1e-30));
    kernels.push_back({{"label", k.label}, {"kind", detail::work_kind_name(k.kind)}, {"launches", k.launches},
                       {"flops", k.flops}, {"bytes", k.bytes}, {"seconds", k.seconds},
                       {"memory_bound_seconds", k.memory_bound_seconds}});
  }
  if (int(step.kernels.size()) > options.top)
    fmt::print("  ... {} more labels (--json lists every one)\n", step.kernels.size() - options.top);
  fmt::print("MODEL offloaded optimizer (AdamW on the host's cores; clipping {}: host updates start {}):\n",
             cfg.train.grad_clip > 0 ? "on" : "off",
             cfg.train.grad_clip <= 0 ? "as each group's gradient lands"
             : speculative            ? "as each group's gradient lands, speculating (a clipped step's second "
                                        "update not modelled); 'if waiting': started after the norm instead"
                                      : "after the backward pass (train.offload_speculation false)");
  fmt::print("  {:>6} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8} {:>10} {:>9} {:>6} {:>11}\n", "ratio", "achieved", "device ms",
             "link GB", "link ms", "host GB", "host ms", "exposed ms", "step ms", "MFU", "if waiting");
  nlohmann::json offload = nlohmann::json::array();
  for (auto const& r : rows) {
    double const mfu = r.step.model_flops / r.seconds() / target.bf16_tensor_peak.value;
    std::string const waiting = speculative ? fmt::format("{:.1f}", r.waiting.exposed_s * 1e3) : "-";
    fmt::print("  {:>6.2f} {:>8.2f} {:>10.1f} {:>8.2f} {:>8.1f} {:>8.2f} {:>8.1f} {:>10.1f} {:>9.1f} {:>5.1f}% {:>11}\n",
               r.ratio, r.achieved, r.step.seconds * 1e3, r.offload.link_bytes * 1e-9, r.offload.link_s * 1e3,
               r.offload.host_bytes * 1e-9, r.offload.host_s * 1e3, r.offload.exposed_s * 1e3, r.seconds() * 1e3,
               100 * mfu, waiting);
    offload.push_back({{"ratio", r.ratio}, {"achieved_ratio", r.achieved}, {"device_seconds", r.step.seconds},
                       {"link_bytes", r.offload.link_bytes}, {"link_seconds", r.offload.link_s},
                       {"host_bytes", r.offload.host_bytes}, {"host_seconds", r.offload.host_s},
                       {"exposed_seconds", r.offload.exposed_s}, {"step_seconds", r.seconds()}, {"mfu", mfu},
                       {"speculative", speculative}, {"exposed_seconds_waiting", r.waiting.exposed_s}});
  }
  // The energy MODEL of the same steps (core/perf/roofline.hpp; each coefficient's source above).
  fmt::print("MODEL energy per step (J; GPU: FLOPs, HBM bytes, static power over the step; link; host: memory bytes, "
             "FLOPs, static power):\n");
  if (!options.power_limits.empty())
    fmt::print("  (under a GPU power limit the clock drops to the share in 'clock', the launches' time divides by it "
               "and their dynamic energy falls by its square: docs/roofline.md)\n");
  fmt::print("  {:>6} {:>7} {:>5} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}\n", "ratio", "limit W",
             "clock", "GPU FLOP", "GPU HBM", "GPU stat", "link", "host mem", "host FLOP", "host stat", "total J", "step ms",
             "GPU W", "all W");
  nlohmann::json energy = nlohmann::json::array();
  std::string warnings;
  for (auto const& r : rows) for (auto const& e : r.energy) {
    fmt::print("  {:>6.2f} {:>7} {:>5.2f} {:>9.3g} {:>9.3g} {:>9.3g} {:>8.3g} {:>9.3g} {:>9.3g} {:>9.3g} {:>9.3g} {:>9.1f} "
               "{:>8.0f} {:>8.0f}\n",
               r.ratio, e.power_limit_w > 0 ? fmt::format("{:.0f}", e.power_limit_w) : std::string("-"), e.clock_scale,
               e.device_compute_j, e.device_memory_j, e.device_static_j, e.link_j, e.host_memory_j, e.host_compute_j,
               e.host_static_j, e.joules(), e.seconds * 1e3, e.device_watts(), e.watts());
    std::string const over_limit = perf::power_limit_warning(target, e);
    if (!over_limit.empty() && warnings.empty()) warnings = over_limit;
    energy.push_back({{"ratio", r.ratio}, {"power_limit_watts", e.power_limit_w}, {"clock_scale", e.clock_scale},
                      {"seconds", e.seconds}, {"device_compute_joules", e.device_compute_j},
                      {"device_memory_joules", e.device_memory_j}, {"device_static_joules", e.device_static_j},
                      {"link_joules", e.link_j}, {"host_memory_joules", e.host_memory_j},
                      {"host_compute_joules", e.host_compute_j}, {"host_static_joules", e.host_static_j},
                      {"joules", e.joules()}, {"device_watts", e.device_watts()}, {"watts", e.watts()},
                      {"over_power_limit", !over_limit.empty()}});
  }
  fmt::print("MODEL GPU dynamic energy by kind, ratio {:.2f} (FLOPs + HBM bytes, J per step):", none.ratio);
  for (int k = 0; k < detail::kWorkKinds; ++k)
    fmt::print(" {} {:.3g} |", detail::kWorkKindNames[k], step.kind_compute_j[k] + step.kind_memory_j[k]);
  fmt::print("\n");
  if (!warnings.empty()) fmt::print("warning: {}\n", warnings);
  fmt::print("(MODEL: core/perf/roofline.hpp; {:.0f} launches recorded in {:.1f} s here; docs/roofline.md says what it "
             "leaves out)\n",
             double(launches.size()), recording_s);
  if (!options.json_path.empty()) {
    nlohmann::json by_kind = nlohmann::json::object();
    nlohmann::json energy_by_kind = nlohmann::json::object();
    for (int k = 0; k < detail::kWorkKinds; ++k) {
      by_kind[detail::kWorkKindNames[k]] = step.kind_seconds[k];
      energy_by_kind[detail::kWorkKindNames[k]] = {{"compute_joules", step.kind_compute_j[k]},
                                                   {"memory_joules", step.kind_memory_j[k]}};
    }
    nlohmann::json figures = nlohmann::json::object();
    for (auto const& f : kFigureRows)
      figures[f.key] = {{"value", (target.*f.figure).value}, {"source", (target.*f.figure).source}};
    nlohmann::json j = {{"source", "MODEL: roofline prediction (core/perf/roofline.hpp), not a measurement"},
                        {"config", source},
                        {"target", target.name},
                        {"target_figures", figures},
                        {"precision", precision_name(precision)},
                        {"micro_batch", micro},
                        {"micro_batches_per_step", per_step},
                        {"layers", m.layers},
                        {"layers_recorded", recorded.layers},
                        {"memory_model_device_bytes", need.device_bytes()},
                        {"step_seconds", step.seconds},
                        {"model_flops", step.model_flops},
                        {"mfu", step.mfu(target)},
                        {"launches", step.launches},
                        {"gap_seconds", step.gap_seconds},
                        {"kind_seconds", by_kind},
                        {"kernels", kernels},
                        {"offload", offload},
                        {"energy_source", "MODEL: energy from the step's FLOPs, bytes and time (core/perf/roofline.hpp), "
                                          "not a measurement"},
                        {"energy", energy},
                        {"energy_by_kind", energy_by_kind}};
    write_bench_json(options.json_path, j.dump(1) + "\n");
  }
  return 0;
}

}  // namespace joule::apps
