#pragma once
// A roofline MODEL of a training step on a named GPU: from the launches of one recorded step
// (core/detail/launch_log.hpp: each with its work, kernel_work.hpp, and its CUDA shape), a lower
// bound on each launch's time,
//
//     time = max(FLOPs / compute rate of its kind, bytes / reachable bandwidth) + launch gap
//
//   compute rate   library GEMMs: the large-GEMM rate of their precision (bf16 tensor cores, fp32
//                  SIMT or TF32) times their tile-wave efficiency: tiles of kGemmTile^2 outputs,
//                  one per SM at a time, so a GEMM of 1.1 waves runs 2 (tiles / (waves x SMs));
//                  other kernels: fp32 SIMT peak (bf16 tensor-core peak if they state tensor cores)
//   bandwidth      HBM's, times Little's law: resident threads (at most a full wave) x the bytes
//                  each keeps in flight, over bandwidth x memory latency, at most 1
//
// and the step's predicted time and MFU, by kind of work. Every figure of a target has its source
// in targets(); none of them is measured on this machine, and nothing here is a measurement:
// printed and stored, it says MODEL. Only CUDA-event times on a GPU can correct it
// (docs/roofline.md says what it leaves out).
//
// From the same record, an energy MODEL of the step (issue 69): each launch's FLOPs times the
// energy of a FLOP on its unit and precision, its bytes times the energy of an HBM byte; a byte
// over the link costs the link's energy and a read and a write in the memories at both ends; the
// offloaded optimizer's host bytes and FLOPs theirs; and each side's static power over the step's
// time. So a configuration that moves fewer bytes in the same time costs less energy, as it does
// in hardware, and energy is not time times a constant.
#include "core/detail/launch_log.hpp"

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace joule::perf {

// A figure and where it comes from (a datasheet, a measurement someone published, an assumption).
struct Figure {
  double value = 0;
  std::string source;
};

struct Target {
  std::string name, what;
  int sms = 0, threads_per_sm = 0;
  Figure bf16_tensor_peak;   // FLOP/s, dense
  Figure bf16_gemm;          // FLOP/s a large bf16 GEMM reaches (cuBLASLt)
  Figure tf32_gemm;          // FLOP/s a large fp32 GEMM reaches on TF32 tensor cores (train.tf32)
  Figure fp32_gemm;          // FLOP/s a large fp32 GEMM reaches on the SIMT cores (cuBLAS SGEMM)
  Figure fp32_simt;          // FLOP/s, fp32 FMA peak (Kokkos kernels)
  Figure hbm_bandwidth;      // bytes/s a device copy reaches
  Figure memory_latency;     // s, loaded HBM latency (Little's law)
  Figure launch_gap;         // s between dependent launches on one stream
  Figure link_to_host;       // bytes/s device -> host
  Figure link_to_device;     // bytes/s host -> device
  Figure host_bandwidth;     // bytes/s the host's cores stream (the offloaded AdamW)
  // The energy MODEL's coefficients (dynamic energy per FLOP or byte; static power while a step runs).
  Figure bf16_tensor_energy;  // J per FLOP on bf16 tensor cores
  Figure tf32_tensor_energy;  // J per FLOP on TF32 tensor cores (fp32 GEMMs with train.tf32)
  Figure fp32_simt_energy;    // J per fp32 FLOP on the SIMT cores (Kokkos kernels, SGEMM)
  Figure hbm_energy;          // J per byte read or written in HBM
  Figure link_energy;         // J per byte over the link between device and host
  Figure host_memory_energy;  // J per byte read or written in the host's memory
  Figure host_flop_energy;    // J per FLOP on the host's cores (the offloaded AdamW)
  Figure device_static_power; // W the GPU draws while a step runs, beyond its FLOPs and bytes
  Figure host_static_power;   // W the host's CPU and memory draw meanwhile, beyond the same
  Figure device_power_limit;  // W, the GPU's board power limit (TDP)
  long wave_threads() const { return long(sms) * threads_per_sm; }
};

// The targets, H200 first. target_named throws std::invalid_argument naming the ones there are.
std::vector<Target> const& targets();
Target const& target_named(std::string_view name);

inline constexpr int kGemmTile = 128;  // outputs per tile side of a cuBLAS(Lt) GEMM (assumed)

// One launch on the target.
struct LaunchEstimate {
  double compute_s = 0, memory_s = 0, gap_s = 0;
  double wave_efficiency = 1;  // library GEMMs: tiles / (waves x SMs)
  double memory_parallelism = 1;  // Little's law factor on the bandwidth, in (0, 1]
  double compute_j = 0, memory_j = 0;  // MODEL dynamic energy: its FLOPs on their unit, its HBM bytes
  double seconds() const { return (compute_s > memory_s ? compute_s : memory_s) + gap_s; }
  bool memory_bound() const { return memory_s >= compute_s; }
};
// threads: the launch's CUDA threads (0: a library kernel). tf32: fp32 library GEMMs on TF32.
LaunchEstimate estimate_launch(Target const& t, detail::KernelWork const& work, long threads, bool tf32 = false);

// How the recorded step stands for the real one. The recording may run fewer layers than the
// configuration (blocks are alike: block 0 stands for the recomputed ones, the last recorded block
// for the others) and one micro-batch.
struct StepLayout {
  int layers = 1;           // the configuration's
  int layers_recorded = 1;  // the recording's (1 or 2, or all)
  int recompute_depth = 0;  // the configuration's
  int micro_batches = 1;    // per step: forward and backward run this often, the rest once
  double parameters = 0, parameters_recorded = 0;  // multi-tensor launches (group -1) scale by their ratio
  // Groups whose optimizer state is on the host: their update launches leave the device (and so
  // does their share of the multi-tensor update).
  std::vector<bool> offloaded;  // per group of the configuration (empty: none)
  double offloaded_parameters = 0;
};
// The recording's layers and recompute depth that stand for `layout`'s (2 layers at most).
int layers_to_record(int layers);
int recompute_depth_to_record(int layers, int recompute_depth);
// How often a recorded segment runs in a step of the configuration (group -1: once).
double segment_weight(StepLayout const& layout, detail::StepSegment const& segment);
// What its launches' work is scaled by: group -1 (one launch over every group's parameters) by the
// device's parameters over the recording's, 1 otherwise.
double segment_work_scale(StepLayout const& layout, detail::StepSegment const& segment);
// The configuration's group that recorded group g stands for, for per-group times: -1 for none.
int recorded_group_of(StepLayout const& layout, int configuration_group);

struct KernelRow {  // one label's launches in a step
  std::string label;
  detail::WorkKind kind = detail::WorkKind::elementwise;
  double launches = 0, flops = 0, bytes = 0, seconds = 0, memory_bound_seconds = 0;
};
struct StepEstimate {
  double seconds = 0;      // the device's time for the step (launch gaps included)
  double model_flops = 0;  // the model's FLOPs (recomputation not counted)
  double launches = 0, gap_seconds = 0;
  std::array<double, detail::kWorkKinds> kind_seconds{};  // launch gaps not included
  // MODEL dynamic energy of the device's launches, J per step, by kind: FLOPs and HBM bytes.
  std::array<double, detail::kWorkKinds> kind_compute_j{}, kind_memory_j{};
  std::vector<KernelRow> kernels;                         // by predicted time, largest first
  // Per group of the configuration: one forward and one backward pass of the group (one
  // micro-batch), and its update.
  std::vector<double> forward_s, backward_s, update_s;
  double update_all_s = 0;  // the multi-tensor update of every device group
  double mfu(Target const& t) const { return seconds > 0 ? model_flops / seconds / t.bf16_tensor_peak.value : 0; }
};
StepEstimate estimate_step(Target const& t, std::vector<detail::RecordedLaunch> const& launches,
                           StepLayout const& layout, bool tf32 = false);

// The offloaded optimizer on the target: each offloaded group's gradient to the host as its
// backward pass ends, AdamW on the host's cores (after the backward pass with clipping: it needs
// the global norm), its new weights back; the next forward pass waits for a group's weights
// before its first kernel. What the device does meanwhile (its update, the next forward's earlier
// groups) hides it; the rest is exposed.
struct OffloadPlan {
  std::vector<double> group_parameters;  // per group of the configuration
  std::vector<bool> offloaded;
  double to_host_bytes = 0, to_device_bytes = 0;  // per offloaded parameter over the link
  double host_bytes = 0;                          // per offloaded parameter through host memory
  bool clipping = true;
  // With clipping: the host jobs speculate (core/train/optimizer.hpp), starting as each gradient
  // lands, all but group 0's (the embeddings, ready last), which waits for the norm; a speculating
  // job moves speculative_host_bytes more per parameter (its second set), and a clipped step's
  // second job is not modelled (rare after a run's first steps).
  bool speculative = false;
  double speculative_host_bytes = 0;
  int last_ready_group = 0;  // the group that waits for the norm even then (kLastReadyGroup)
  double host_flops = 0;     // per offloaded parameter, on the host's cores (the energy MODEL's)
};
struct OffloadEstimate {
  double link_bytes = 0, host_bytes = 0, host_flops = 0;
  double link_s = 0, host_s = 0;  // busy time of the link (both ways) and of the host's update
  double exposed_s = 0;           // the step's time added on the device
};
OffloadEstimate estimate_offload(Target const& t, OffloadPlan const& plan, StepEstimate const& step);

// The energy MODEL of a step, J per step, by device. A byte over the link is read in one memory and
// written in the other: it counts in the link, in HBM and in the host's memory. Static power runs
// over the step's time (the device's, plus what the offload exposes), on both sides.
struct StepEnergy {
  double seconds = 0;  // the step's MODEL time
  double power_limit_w = 0;  // the GPU's power limit it was held to (0: none)
  double clock_scale = 1;    // the GPU's clock under that limit, as a share of the unlimited one
  double device_compute_j = 0, device_memory_j = 0, device_static_j = 0;
  double link_j = 0;
  double host_memory_j = 0, host_compute_j = 0, host_static_j = 0;
  double device_j() const { return device_compute_j + device_memory_j + device_static_j; }
  double host_j() const { return host_memory_j + host_compute_j + host_static_j; }
  double joules() const { return device_j() + link_j + host_j(); }
  double device_watts() const { return seconds > 0 ? device_j() / seconds : 0; }
  double watts() const { return seconds > 0 ? joules() / seconds : 0; }
};
StepEnergy estimate_energy(Target const& t, StepEstimate const& step, OffloadEstimate const& offload = {});
// The same under a GPU power limit, a bound on the GPU's average power over its launches. Where the
// unlimited step would draw more, the MODEL's rule (a first one, stated): the GPU's clock drops to a
// share s of its own, every launch's time divides by s (memory-bound ones too), the dynamic energy
// of every operation falls by s^2 (the voltage follows the clock: dynamic power ~ f V^2 ~ f^3),
// static power stays; s = cbrt((limit - static power) / dynamic power), so the launches draw the
// limit on average. The offload's copies and exposed time do not change. A limit at or below the
// GPU's static power is refused (std::invalid_argument naming both); 0 is no limit.
StepEnergy estimate_energy(Target const& t, StepEstimate const& step, OffloadEstimate const& offload,
                           double power_limit_w);
// Where the GPU's MODEL average power exceeds its power limit: a sentence saying so (the
// coefficients or the time model are then wrong, as a real GPU would slow down instead); "" where not.
std::string power_limit_warning(Target const& t, StepEnergy const& e);

}  // namespace joule::perf
