#include "core/perf/roofline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace joule::perf {

std::vector<Target> const& targets() {
  // Figures for Hopper with HBM3e (H200 SXM; the GH200's GPU is taken as the same): none of them
  // was measured by joule. "issue 40" is the project's tracker entry that set these figures out.
  static std::vector<Target> const all = [] {
    Target h200;
    h200.name = "h200";
    h200.what = "NVIDIA H200 SXM (132 SMs, HBM3e) in an x86 server, PCIe Gen5 x16 to the host";
    h200.sms = 132, h200.threads_per_sm = 2048;
    h200.bf16_tensor_peak = {989e12, "H200 datasheet: 989 TFLOP/s dense bf16 tensor cores"};
    h200.bf16_gemm = {790e12, "an 8192^3 bf16 cuBLASLt GEMM, ~790 TFLOP/s (published H200 runs, issue 40)"};
    h200.tf32_gemm = {395e12, "assumed: 80% of the 495 TFLOP/s dense TF32 peak (datasheet)"};
    h200.fp32_gemm = {51e12, "assumed: cuBLAS SGEMM at ~76% of the fp32 peak"};
    h200.fp32_simt = {67e12, "H200 datasheet: 67 TFLOP/s fp32"};
    h200.hbm_bandwidth = {4.3e12, "a device-to-device copy, ~4.3 TB/s of the 4.8 TB/s datasheet figure (issue 40)"};
    h200.memory_latency = {600e-9, "assumed: loaded HBM latency ~0.6 us (Hopper microbenchmarks report 0.5-0.7 us)"};
    h200.launch_gap = {3e-6, "assumed: 2-4 us between dependent kernel launches on one stream, no CUDA graph"};
    h200.link_to_host = {55e9, "assumed: PCIe Gen5 x16, pinned copies"};
    h200.link_to_device = {55e9, "assumed: PCIe Gen5 x16, pinned copies"};
    h200.host_bandwidth = {200e9, "assumed: a two-socket DDR5 server's streaming bandwidth"};
    // The energy MODEL's coefficients. No joule run has measured them; each says where it comes from.
    h200.bf16_tensor_energy = {0.35e-12, "assumed: half of the 0.71 pJ/FLOP that 700 W at the 989 TFLOP/s bf16 peak "
                                         "allows (the rest: static power, SRAM and HBM traffic)"};
    h200.tf32_tensor_energy = {0.7e-12, "assumed: half of the 1.41 pJ/FLOP that 700 W at the 495 TFLOP/s TF32 peak allows"};
    h200.fp32_simt_energy = {1.5e-12, "assumed: Horowitz (ISSCC 2014, 45 nm): an fp32 multiply-add 4.6 pJ, 2.3 pJ per "
                                      "FLOP; about a third of that at 4 nm, twice it with the register file's operands"};
    h200.hbm_energy = {28e-12, "assumed: 3.5 pJ/bit; HBM2 is 3.9 pJ/bit (O'Connor et al., MICRO 2017), HBM3e somewhat less"};
    h200.link_energy = {260e-12, "NVIDIA: NVLink-C2C (1.3 pJ/bit) is up to 25x as energy-efficient as PCIe Gen5: "
                                 "32.5 pJ/bit for PCIe"};
    h200.host_memory_energy = {128e-12, "assumed: 8x Grace's LPDDR5X figure (NVIDIA: LPDDR5X at one-eighth the power "
                                        "per GB/s of an eight-channel DDR5 design)"};
    h200.host_flop_energy = {10e-12, "assumed: 10 pJ per fp32 FLOP on an x86 server core's AVX-512 units with their "
                                     "caches and instruction overhead"};
    h200.device_static_power = {100, "assumed: Hopper SXM GPUs idle at 60-90 W with clocks up (published nvidia-smi "
                                     "readings); leakage grows with load"};
    h200.host_static_power = {50, "assumed: an eight-GPU x86 server's CPUs and DRAM near idle, ~400 W, shared over "
                                  "its GPUs"};
    h200.device_power_limit = {700, "H200 datasheet: up to 700 W (SXM)"};
    Target gh200 = h200;
    gh200.name = "gh200";
    gh200.what = "NVIDIA GH200 (the H200's GPU taken as its Hopper) with Grace over NVLink-C2C";
    gh200.link_to_host = {297e9, "NVLink-C2C copies measured on GH200, 297 GB/s (issue 40; direction assumed)"};
    gh200.link_to_device = {375e9, "NVLink-C2C copies measured on GH200, 375 GB/s (issue 40; direction assumed)"};
    gh200.host_bandwidth = {450e9, "Grace LPDDR5X streaming, ~450 GB/s (issue 40)"};
    gh200.link_energy = {10.4e-12, "NVIDIA: NVLink-C2C 1.3 pJ/bit"};
    gh200.host_memory_energy = {16e-12, "assumed: 2 pJ/bit for LPDDR5X's array and I/O (published LPDDR5X "
                                        "figures 1.5-3 pJ/bit)"};
    gh200.host_flop_energy = {5e-12, "assumed: 5 pJ per fp32 FLOP on a Neoverse V2 core's SVE2 units with their "
                                     "caches and instruction overhead"};
    gh200.host_static_power = {100, "assumed: Grace's 72 cores and LPDDR5X at low load (its share of a GH200 "
                                    "module's 450-1000 W)"};
    gh200.device_power_limit = {700, "assumed: the H200's 700 W for the GH200's GPU (the module's limit is set for "
                                     "CPU, GPU and memory together, 450-1000 W)"};
    return std::vector<Target>{h200, gh200};
  }();
  return all;
}

Target const& target_named(std::string_view name) {
  std::string names;
  for (auto const& t : targets()) {
    if (t.name == name) return t;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  throw std::invalid_argument("no roofline target \"" + std::string(name) + "\"; there are: " + names);
}

LaunchEstimate estimate_launch(Target const& t, detail::KernelWork const& w, long threads, bool tf32) {
  LaunchEstimate e;
  e.gap_s = t.launch_gap.value;
  double const hbm = t.hbm_bandwidth.value;
  if (w.gemm_batch > 0) {  // a library GEMM: whole tiles, one per SM at a time
    double const rate = w.tensor_cores ? t.bf16_gemm.value : tf32 ? t.tf32_gemm.value : t.fp32_gemm.value;
    double const tiles = double(w.gemm_batch) * std::ceil(double(w.gemm_m) / kGemmTile) * std::ceil(double(w.gemm_n) / kGemmTile);
    double const waves = std::ceil(tiles / t.sms);
    e.wave_efficiency = tiles > 0 ? tiles / (waves * t.sms) : 1;
    e.compute_s = w.flops / (rate * e.wave_efficiency);
    e.memory_s = w.bytes / hbm;
    e.compute_j = w.flops * (w.tensor_cores ? t.bf16_tensor_energy.value : tf32 ? t.tf32_tensor_energy.value
                                                                                : t.fp32_simt_energy.value);
    e.memory_j = w.bytes * t.hbm_energy.value;
    return e;
  }
  e.compute_j = w.flops * (w.tensor_cores ? t.bf16_tensor_energy.value : t.fp32_simt_energy.value);
  e.memory_j = w.bytes * t.hbm_energy.value;
  double const rate = w.tensor_cores ? t.bf16_tensor_peak.value : t.fp32_simt.value;
  e.compute_s = w.flops / rate;
  // Little's law: the bytes in flight the resident threads keep, against what the bandwidth needs.
  double const resident = double(threads > 0 ? std::min(threads, t.wave_threads()) : t.wave_threads());
  double const needed = hbm * t.memory_latency.value;
  e.memory_parallelism = std::clamp(resident * std::max(1, w.bytes_in_flight) / needed, 1e-6, 1.0);
  e.memory_s = w.bytes / (hbm * e.memory_parallelism);
  return e;
}

int layers_to_record(int layers) { return std::min(layers, 2); }

int recompute_depth_to_record(int layers, int recompute_depth) {
  int const recorded = layers_to_record(layers);
  if (recorded == layers) return std::min(recompute_depth, layers);
  if (recompute_depth <= 0) return 0;
  return recompute_depth >= layers ? recorded : 1;  // block 0 recomputed, block 1 not
}

int recorded_group_of(StepLayout const& layout, int group) {
  int const L = layout.layers, R = layout.layers_recorded;
  if (group < 0 || group > L + 1) return -1;
  if (group == 0) return 0;
  if (group == L + 1) return R + 1;
  if (R == L) return group;
  int const block = group - 1, d = layout.recompute_depth;
  bool const mixed = d > 0 && d < L;  // block 0 recorded recomputed, block 1 not
  return 1 + (mixed ? (block < d ? 0 : 1) : (block == 0 ? 0 : 1));
}

double segment_weight(StepLayout const& layout, detail::StepSegment const& segment) {
  using detail::StepPart;
  if (segment.group < 0) return 1;
  double count = 0;
  for (int g = 0; g < layout.layers + 2; ++g) {
    if (recorded_group_of(layout, g) != segment.group) continue;
    bool const on_host = g < int(layout.offloaded.size()) && layout.offloaded[g];
    if (segment.part == StepPart::update && on_host) continue;
    ++count;
  }
  bool const per_micro_batch = segment.part == StepPart::forward || segment.part == StepPart::backward;
  return count * (per_micro_batch ? layout.micro_batches : 1);
}

double segment_work_scale(StepLayout const& layout, detail::StepSegment const& segment) {
  if (segment.group >= 0 || layout.parameters_recorded <= 0) return 1;
  return std::max(0.0, layout.parameters - layout.offloaded_parameters) / layout.parameters_recorded;
}

StepEstimate estimate_step(Target const& t, std::vector<detail::RecordedLaunch> const& launches,
                           StepLayout const& layout, bool tf32) {
  using detail::StepPart;
  StepEstimate s;
  int const R = layout.layers_recorded;
  std::vector<double> forward(R + 2, 0.0), backward(R + 2, 0.0), update(R + 2, 0.0);
  std::map<std::string, KernelRow> rows;
  for (auto const& l : launches) {
    double const weight = segment_weight(layout, l.segment), scale = segment_work_scale(layout, l.segment);
    detail::KernelWork work = l.note.work;
    work.flops *= scale, work.model_flops *= scale, work.bytes *= scale;
    long const threads = l.note.kokkos ? std::max(1L, long(std::llround(double(l.note.shape.threads) * scale))) : 0;
    if (scale == 0) continue;  // every parameter on the host: no device update
    LaunchEstimate const e = estimate_launch(t, work, threads, tf32);
    double const one = e.seconds();
    int const g = l.segment.group;
    if (g >= 0 && g < R + 2) {  // one pass of the recorded group, whatever its weight
      if (l.segment.part == StepPart::forward) forward[g] += one;
      if (l.segment.part == StepPart::backward) backward[g] += one;
      if (l.segment.part == StepPart::update) update[g] += one;
    } else if (l.segment.part == StepPart::update) {
      s.update_all_s += one * weight;
    }
    if (weight <= 0) continue;
    if (!l.note.recompute) s.model_flops += work.model_flops * weight;
    s.seconds += one * weight;
    s.launches += weight;
    s.gap_seconds += e.gap_s * weight;
    s.kind_seconds[int(l.note.work.kind)] += (one - e.gap_s) * weight;
    s.kind_compute_j[int(l.note.work.kind)] += e.compute_j * weight;
    s.kind_memory_j[int(l.note.work.kind)] += e.memory_j * weight;
    KernelRow& row = rows[l.label];
    row.label = l.label;
    row.kind = l.note.work.kind;
    row.launches += weight;
    row.flops += work.flops * weight;
    row.bytes += work.bytes * weight;
    row.seconds += one * weight;
    if (e.memory_bound()) row.memory_bound_seconds += one * weight;
  }
  for (auto& [label, row] : rows) s.kernels.push_back(row);
  std::sort(s.kernels.begin(), s.kernels.end(), [](auto const& a, auto const& b) { return a.seconds > b.seconds; });
  for (int g = 0; g < layout.layers + 2; ++g) {
    int const r = recorded_group_of(layout, g);
    s.forward_s.push_back(forward[r]);
    s.backward_s.push_back(backward[r]);
    s.update_s.push_back(update[r]);
  }
  return s;
}

OffloadEstimate estimate_offload(Target const& t, OffloadPlan const& plan, StepEstimate const& step) {
  OffloadEstimate o;
  int const groups = int(plan.group_parameters.size());
  if (int(plan.offloaded.size()) != groups || int(step.forward_s.size()) != groups)
    throw std::invalid_argument("estimate_offload: groups of the plan and of the step differ");
  auto const on_host = [&](int g) { return bool(plan.offloaded[g]); };
  // The last micro-batch's backward pass from t = 0: groups finish from the head (L + 1) down.
  std::vector<double> ready(groups, 0.0), landed(groups, 0.0), weights_back(groups, 0.0);
  double now = 0, to_host_free = 0;
  for (int g = groups - 1; g >= 0; --g) {
    now += step.backward_s[g];
    ready[g] = now;
    if (!on_host(g)) continue;
    double const bytes = plan.group_parameters[g] * plan.to_host_bytes, seconds = bytes / t.link_to_host.value;
    landed[g] = std::max(to_host_free, ready[g]) + seconds;
    to_host_free = landed[g];
    o.link_bytes += bytes, o.link_s += seconds;
  }
  double const backward_end = now;
  // The device's update of its own groups, then the next step's forward pass.
  double device_update = step.update_all_s;
  for (int g = 0; g < groups; ++g)
    if (!on_host(g)) device_update += step.update_s[g];
  // Host jobs: with clipping and no speculation handed over after the norm in the order the forward
  // pass needs them, otherwise as each group's gradient is ready (the backward pass's order; a
  // speculating run's group 0 last, at the norm, as it is the last ready anyway).
  bool const waits = plan.clipping && !plan.speculative;
  double host_free = 0, to_device_free = 0;
  for (int i = 0; i < groups; ++i) {
    int const g = waits ? i : groups - 1 - i;
    if (!on_host(g)) continue;
    bool const speculates = plan.clipping && plan.speculative && g != plan.last_ready_group;
    double const start =
        std::max({host_free, landed[g], waits || (plan.clipping && g == plan.last_ready_group) ? backward_end : ready[g]});
    double const host_bytes = plan.group_parameters[g] * (plan.host_bytes + (speculates ? plan.speculative_host_bytes : 0)),
                 host_seconds = host_bytes / t.host_bandwidth.value;
    host_free = start + host_seconds;
    double const bytes = plan.group_parameters[g] * plan.to_device_bytes, seconds = bytes / t.link_to_device.value;
    weights_back[g] = std::max(to_device_free, host_free) + seconds;
    to_device_free = weights_back[g];
    o.host_bytes += host_bytes, o.host_s += host_seconds;
    o.host_flops += plan.group_parameters[g] * plan.host_flops;
    o.link_bytes += bytes, o.link_s += seconds;
  }
  double device = backward_end + device_update, device_alone = device;
  for (int g = 0; g < groups; ++g) {
    if (on_host(g)) device = std::max(device, weights_back[g]);
    device += step.forward_s[g];
    device_alone += step.forward_s[g];
  }
  o.exposed_s = device - device_alone;
  return o;
}

StepEnergy estimate_energy(Target const& t, StepEstimate const& step, OffloadEstimate const& offload) {
  StepEnergy e;
  e.seconds = step.seconds + offload.exposed_s;
  for (int k = 0; k < detail::kWorkKinds; ++k) {
    e.device_compute_j += step.kind_compute_j[k];
    e.device_memory_j += step.kind_memory_j[k];
  }
  e.device_memory_j += offload.link_bytes * t.hbm_energy.value;  // read or written there by the copies
  e.device_static_j = t.device_static_power.value * e.seconds;
  e.link_j = offload.link_bytes * t.link_energy.value;
  e.host_memory_j = (offload.host_bytes + offload.link_bytes) * t.host_memory_energy.value;
  e.host_compute_j = offload.host_flops * t.host_flop_energy.value;
  e.host_static_j = t.host_static_power.value * e.seconds;
  return e;
}

StepEnergy estimate_energy(Target const& t, StepEstimate const& step, OffloadEstimate const& offload,
                           double power_limit_w) {
  StepEnergy e = estimate_energy(t, step, offload);
  e.power_limit_w = power_limit_w;
  if (power_limit_w <= 0) return e;
  double const static_w = t.device_static_power.value;
  if (power_limit_w <= static_w) {
    char text[200];
    std::snprintf(text, sizeof text, "a GPU power limit of %.0f W is not above the %s's static power, %.0f W: no clock fits it",
                  power_limit_w, t.name.c_str(), static_w);
    throw std::invalid_argument(text);
  }
  double dynamic_j = 0;
  for (int k = 0; k < detail::kWorkKinds; ++k) dynamic_j += step.kind_compute_j[k] + step.kind_memory_j[k];
  if (step.seconds <= 0 || dynamic_j <= 0) return e;
  double const dynamic_w = dynamic_j / step.seconds;
  if (dynamic_w + static_w <= power_limit_w) return e;
  double const s = std::cbrt((power_limit_w - static_w) / dynamic_w);
  StepEstimate slower = step;
  slower.seconds = step.seconds / s;
  for (int k = 0; k < detail::kWorkKinds; ++k) slower.kind_compute_j[k] *= s * s, slower.kind_memory_j[k] *= s * s;
  e = estimate_energy(t, slower, offload);
  e.power_limit_w = power_limit_w;
  e.clock_scale = s;
  return e;
}

std::string power_limit_warning(Target const& t, StepEnergy const& e) {
  double const watts = e.device_watts(), limit = t.device_power_limit.value;
  if (!(watts > limit)) return "";
  char text[256];
  std::snprintf(text, sizeof text,
                "the MODEL's GPU power, %.0f W on average, exceeds the %s's %.0f W limit: a real GPU would slow "
                "down instead, so the energy coefficients or the time model are wrong for this step",
                watts, t.name.c_str(), limit);
  return text;
}

}  // namespace joule::perf
