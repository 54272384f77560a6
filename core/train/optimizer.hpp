#pragma once
// AdamW over the model's parameter groups, with a tunable share of them offloaded: for an
// offloaded group the fp32 master weights and the moments m, v live in host memory (pinned
// where the backend has it) and are updated on the host (the Grace cores on a GH200) by the same
// element arithmetic, rounded the same way (core/ops/adamw.hpp): every ratio gives the same bits.
//
// Data path of an offloaded group, per step (core/detail/stream_event.hpp orders the instances):
//   - when the backward pass has queued the group's last gradient kernel (Model::backward's
//     group_ready hook, last micro-batch), the launching thread records an event on the compute
//     instance, makes the copy instance wait for it, queues the device -> host copy of the
//     gradient there ("d2h") and records "landed"; it does not wait;
//   - the host update is a job for the host worker (host_worker.hpp: its own thread and helpers,
//     on the cores JOULE_HOST_CORES sets aside). The job waits for "landed", runs AdamW
//     ("optimizer_host"), queues the host -> device copy of the new weights on an instance of its
//     own after the compute instance's last read of them, and records "params ready" ("h2d").
//     Without gradient clipping the job is handed over at once, while the backward pass goes on
//     with earlier layers; with clipping the global norm needs every gradient, so the jobs are
//     handed over after the norm (end of the backward pass), in forward order, and overlap with
//     the device groups' AdamW and with the next forward pass's layers that stay on the device;
//   - the next forward pass calls wait_for_group() just before it queues the first kernel that
//     reads a group: the launching thread waits there for that group's job (the layers before are
//     queued and running meanwhile), then makes the compute instance wait for "params ready".
//   - the next step's first write of the gradient buffers (zero_gradients, begin_step()) is queued
//     after the compute instance was made to wait for "landed": the copy has read them.
// Every one of these orderings is stated to core/detail/ordering_trace.hpp as well, which replays
// them with a GPU's semantics on any backend (the "[ordering]" tests).
// Where the device is the host (a CPU-only build) and no cores are set aside, there is nothing to
// overlap with: the jobs run on the launching thread, as they are handed over.
// The gradient norm is summed from per-group sums of squares the device computes as the groups
// become ready; reading it is the one device synchronisation of the launching thread per step.
//
// Speculation then validation (STV, as DeepSpeed's SuperOffload does on GH200): with clipping on
// and the jobs on a worker, waiting for the norm would hold every host job until the end of the
// backward pass. Instead each group's job is handed over as soon as its gradient has landed, as
// if no clipping applied, and writes its new master weights and moments into a second set of
// host buffers (the step's input stays as it was). When the norm is known: unclipped (the scale
// is exactly 1), the second set becomes the live one (a swap of handles, nothing copied); clipped,
// the job is run again from the untouched input with the clipped gradient, into the same second
// set, and the launching thread waits for the speculative job first (counted as a roll-back); the
// step after a clipped one waits for the norm (clipping comes in runs, early in training), so a
// run where every step clips costs one roll-back, not one a step; the group whose gradient lands
// last (the embeddings) never speculates, its gradient arriving with the norm; a
// non-finite norm or loss stops the run, and abandon_step() puts the device's weights back. The
// result is bitwise that of waiting for the norm. It costs 12 bytes of host memory per speculating
// parameter (estimate_optimizer_memory counts them).
#include "core/model/model.hpp"
#include "core/ops/adamw.hpp"
#include "core/detail/stream_event.hpp"
#include "core/train/host_worker.hpp"

#include <memory>
#include <string>
#include <vector>

namespace joule {

namespace io {
class H5File;
}

using HostExecSpace = Kokkos::DefaultHostExecutionSpace;

struct OptimizerSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.01;
  double grad_clip = 1.0;
  double offload_ratio = 0.0;  // target share of parameter bytes on the host, in [0, 1]
  int host_threads = 0;        // threads for the host update; 0: all of the host space, or of
                               // the cores set aside (JOULE_HOST_CORES)
  // bf16 models (train.offload_cast): offloaded groups' new fp32 weights become the kernels' bf16
  // copy on the host (2 bytes per parameter cross the link) instead of on the device (4 bytes
  // cross, the device rounds). The same function rounds on both sides: the same bits.
  bool cast_on_host = false;
  // With clipping, host jobs start before the norm is known (STV, above), where they run on a
  // worker; false waits for the norm (the measurement of what STV hides).
  bool speculate = true;
};

// Do offloaded groups' host jobs run on a worker (threads of their own) in this process: always
// on a GPU build; on a CPU-only build only with cores set aside (JOULE_HOST_CORES).
bool offload_on_worker();
// Does an offloading run speculate (STV): clipping on and the jobs on a worker.
bool offload_speculates(double grad_clip, bool speculate = true);

// Which groups go to the host for a target ratio: the whole groups whose share is closest to it
// (of two as close, the smaller), and of groups of one size those the backward pass finishes
// first (head, last block, ..., first block, embed: the earliest ready overlap best).
std::vector<bool> choose_offloaded_groups(std::vector<std::size_t> const& group_sizes, double ratio);
// The group the backward pass finishes last (the embeddings, Model::backward): its gradient lands
// when the norm is all but known, so even a speculating run (STV, above) waits for the norm there
// and updates it in place (no second set, nothing to run again).
inline constexpr int kLastReadyGroup = 0;

// Bytes of optimizer state for a configuration and offload ratio, from the configuration alone:
// the device keeps m and v of its groups; the host keeps master weights, a gradient landing
// buffer, m and v of the offloaded ones (and, for a bf16 model casting on the host, the 2-byte
// staging of their new kernel weights). (Weights and gradients on the device are in
// estimate_memory(): the forward and backward passes need them wherever the state lives.)
struct OptimizerMemory {
  std::size_t device = 0, host = 0;
  double achieved_ratio = 0;
};
// speculative: offload_speculates(...): the second set of master weights and moments (12 bytes
// per offloaded parameter, but those of kLastReadyGroup, which does not speculate).
OptimizerMemory estimate_optimizer_memory(ModelConfig const& m, double offload_ratio,
                                          Precision precision = Precision::fp32, bool cast_on_host = false,
                                          bool speculative = false);
// Bytes that cross the host link per step for each offloaded parameter: its fp32 gradient to the
// host, and its new weights back (fp32, or the bf16 copy when cast on the host).
struct LinkBytesPerParameter {
  std::size_t to_host = 0, to_device = 0;
};
LinkBytesPerParameter link_bytes_per_parameter(Precision precision, bool cast_on_host);

class Optimizer {
 public:
  Optimizer(Model& model, OptimizerSettings const& settings);
  ~Optimizer();
  Optimizer(Optimizer const&) = delete;
  Optimizer& operator=(Optimizer const&) = delete;

  double achieved_ratio() const { return achieved_ratio_; }
  std::vector<std::string> const& group_names() const { return names_; }
  std::vector<bool> const& offloaded() const { return offloaded_; }
  // The tensors AdamW decays (qualified names, storage order): those whose role is weight_decayed.
  std::vector<std::string> const& decayed_tensors() const { return decayed_names_; }
  Tensor1<float, DeviceMemory> const& gradient_buffer(int group) const { return groups_[group].grad; }
  std::size_t device_state_bytes() const;  // moments kept on the device
  std::size_t host_state_bytes() const;    // master weights, gradients, moments on the host

  // Copies the model's weights of offloaded groups into their host master copies (after the
  // model was initialised or loaded).
  void sync_master_weights();
  // Before the step's backward passes: its learning rate and number (1-based).
  void begin_step(double lr, long step);
  // Hook for Model::backward on the step's last micro-batch.
  void gradients_ready(int group);
  // After the backward pass: the global gradient norm, summed group by group in a fixed order
  // from per-group sums of squares computed on the device as the groups became ready.
  double gradient_norm();
  // Finishes the update with the gradients scaled by grad_scale (clipping): queues the device
  // groups' AdamW and hands the remaining host jobs over; returns without waiting for them.
  // Speculative jobs stand when grad_scale is 1, and are run again with it otherwise.
  void finish_step(double grad_scale);
  // The step will not be finished (a non-finite loss or norm stops the run): speculative host
  // jobs are waited for and dropped, and the device gets the weights of before the step back.
  void abandon_step();
  // Before the first kernel that reads group g's weights: waits for its host job (if any) and
  // orders the compute instance after its host -> device copy.
  void wait_for_group(int group);
  // Every group's new weights are on the device and the host state is final (checkpoints,
  // evaluation, the end of a run).
  void wait_all();

  // Where the offloaded work ran, cumulated since the last reset: the host jobs' time on the
  // worker, and the time the launching thread waited for them in wait_for_group().
  struct OffloadTimes {
    double host_seconds = 0, wait_seconds = 0;
    long long jobs = 0;
    bool on_worker = false;  // false: the jobs ran on the launching thread
    // Bytes copied over the host link (gradients down, new weights up), counted on the launching
    // thread as the copies are queued or handed over.
    double bytes_to_host = 0, bytes_to_device = 0;
    // Jobs started before the norm was known (STV), and those of them run again because the
    // step was clipped.
    long long speculated = 0, rolled_back = 0;
  };
  OffloadTimes offload_times() const { return times_; }
  void reset_offload_times();
  HostWorker const* host_worker() const { return worker_.get(); }
  bool speculative() const { return speculative_; }
  // Every group's AdamW moments in host memory, wherever they live (checkpoints, and moving the
  // state to another placement: Trainer::reconfigure), and back.
  struct Moments {
    std::vector<std::vector<float>> m, v;  // per group
  };
  Moments moments();
  void set_moments(Moments const& moments);
  // Checkpoints: /adam_m/<group>, /adam_v/<group> (and the weights, from the model).
  void save(io::H5File& f);
  void load(io::H5File const& f);

 private:
  struct Group {
    std::string name;
    Tensor1<float, DeviceMemory> param, grad;     // the model's buffers
    Tensor1<float, DeviceMemory> m, v;            // device groups
    Tensor1<float, PinnedHostMemory> host_param, host_grad, host_m, host_v;  // offloaded groups
    Tensor1<float, PinnedHostMemory> next_param, next_m, next_v;  // STV: a speculative job's output
    Tensor1<bf16, DeviceMemory> kernel_weights;        // the model's bf16 copy (bf16 models)
    Tensor1<bf16, PinnedHostMemory> host_kernel_weights;  // its host-side rounding (cast on the host)
    bool device_master_stale = false;  // cast on the host: param lags host_param until wait_all()
    std::vector<std::pair<std::size_t, std::size_t>> decayed;  // [begin, end) slices with weight decay
    detail::StreamEvent grad_final, landed, params_ready;      // see the data path above
    bool copied = false, handed_over = false, ordered = true;
    bool speculating = false;  // this step's job writes next_* (STV), to be kept or run again
    // What the job reads and writes, set when it is handed over (the launching thread swaps the
    // handles above meanwhile): the live state, and the same or next_*.
    detail::AdamWState<float> job_in{}, job_out{};
    AdamWConfig job_config;  // its host job's settings, step and gradient scale
    long job_step = 0;
    double scale = 1.0;
    char trace_submitted = 0, trace_done = 0;  // keys of the job's hand-overs in an ordering trace
  };
  AdamWConfig adamw_config() const;      // this step's settings, weight decay aside
  void start_norm_part(int group);       // its sum of squares, into norm_parts_ (asynchronous)
  void copy_gradient_to_host(int group); // once per step, after the gradient is final
  void hand_over(int group, double grad_scale);
  void host_job(int group);              // the update of an offloaded group (worker or inline)
  void finish_job(int group);            // waits for its job on the worker, counts the time

  Model& model_;
  OptimizerSettings settings_;
  ExecSpace compute_, copies_, host_to_device_;
  std::vector<Group> groups_;
  std::vector<std::string> names_, decayed_names_;
  std::vector<bool> offloaded_;
  bool cast_on_host_ = false;  // bf16 model, train.offload_cast "host"
  // The device groups' runs for one multi-tensor AdamW launch (GPU builds; on CPUs the host loop
  // of adamw_update, compiled without FMA contraction as the host jobs' is, keeps the same bits).
  Kokkos::View<AdamWRun<float>*, DeviceMemory> device_runs_;
  long long device_elements_ = 0;
  Kokkos::View<double*, DeviceMemory> norm_parts_;                    // per group, this step
  compat::host_mirror_t<Kokkos::View<double*, DeviceMemory>> norm_parts_host_;
  std::vector<char> norm_started_;
  double achieved_ratio_ = 0;
  double lr_ = 0;
  long step_ = 0;
  bool speculative_ = false;  // STV (above)
  bool last_step_clipped_ = false;  // then this step waits for the norm: clipping comes in runs
  std::unique_ptr<HostWorker> worker_;  // null: the jobs run on the launching thread
  OffloadTimes times_;
};

}  // namespace joule
