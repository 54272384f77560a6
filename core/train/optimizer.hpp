#pragma once
// AdamW over the model's parameter groups, with a tunable share of them offloaded: for an
// offloaded group the fp32 master weights and the moments m, v live in host memory (pinned
// where the backend has it) and are updated by the same AdamW code on the host execution space
// (OpenMP threads: the Grace cores on a GH200); the other groups stay on the device.
//
// Data path per step (offload_ratio > 0):
//   - as soon as the backward pass has finished a group's gradients (Model::backward's
//     group_ready hook, last micro-batch), its gradients are copied device -> host on a separate
//     execution space instance (its own CUDA stream), region "d2h", while the backward pass goes
//     on with earlier layers;
//   - with gradient clipping off, the host updates the group as soon as its copy has landed
//     ("optimizer_host"), and copies the new weights back ("h2d"), still during the backward
//     pass; with clipping on, the global norm needs every gradient first, so the host updates
//     wait for the end of the backward pass (the copies still overlap);
//   - device groups are updated on the device ("optimizer_device"); before the next forward pass
//     every host -> device copy is complete.
// On a CPU-only build device and host memory coincide, but the copies still happen, so their
// cost is measured rather than assumed away. The arithmetic is the same for every ratio.
#include "core/model/model.hpp"
#include "core/ops/adamw.hpp"

#include <string>
#include <vector>

namespace joule {

namespace io {
class H5File;
}

#if defined(KOKKOS_ENABLE_CUDA)
using HostStateMemory = Kokkos::CudaHostPinnedSpace;
#else
using HostStateMemory = Kokkos::HostSpace;
#endif
using HostExecSpace = Kokkos::DefaultHostExecutionSpace;

struct OptimizerSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.01;
  double grad_clip = 1.0;
  double offload_ratio = 0.0;  // target share of parameter bytes on the host, in [0, 1]
  int host_threads = 0;        // threads for the host update; 0: all of the host space
};

// Which groups go to the host for a target ratio: groups are taken in the order the backward
// pass finishes them (head, last block, ..., first block, embed: the earliest ready overlap
// best) and each is added if that brings the offloaded share closer to the target.
std::vector<bool> choose_offloaded_groups(std::vector<std::size_t> const& group_sizes, double ratio);

// Bytes of optimizer state for a configuration and offload ratio, from the configuration alone:
// the device keeps m and v of its groups; the host keeps master weights, a gradient landing
// buffer, m and v of the offloaded ones. (Weights and gradients on the device are in
// estimate_memory(): the forward and backward passes need them wherever the state lives.)
struct OptimizerMemory {
  std::size_t device = 0, host = 0;
  double achieved_ratio = 0;
};
std::vector<std::size_t> parameter_group_sizes(ModelConfig const& m);
OptimizerMemory estimate_optimizer_memory(ModelConfig const& m, double offload_ratio);

class Optimizer {
 public:
  Optimizer(Model& model, OptimizerSettings const& settings);

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
  // Finishes the update with the gradients scaled by grad_scale (clipping); returns when every
  // group's new weights are on the device.
  void finish_step(double grad_scale);
  // Returns once every offloaded group's update is complete and its weights are on the device.
  void wait_all() {}

  // Checkpoints: /adam_m/<group>, /adam_v/<group> (and the weights, from the model).
  void save(io::H5File& f) const;
  void load(io::H5File const& f);

 private:
  struct Group {
    std::string name;
    Tensor1<float, DeviceMemory> param, grad;     // the model's buffers
    Tensor1<float, DeviceMemory> m, v;            // device groups
    Tensor1<float, HostStateMemory> host_param, host_grad, host_m, host_v;  // offloaded groups
    std::vector<std::pair<std::size_t, std::size_t>> decayed;  // [begin, end) slices with weight decay
    bool copied = false, updated = false;
  };
  AdamWConfig adamw_config() const;       // this step's settings, weight decay aside
  void start_norm_part(int group);       // its sum of squares, into norm_parts_ (asynchronous)
  void copy_gradient_to_host(Group& g);  // once per step, after the gradient is final
  void update_host(Group& g, double grad_scale);

  Model& model_;
  OptimizerSettings settings_;
  ExecSpace compute_, copies_;
  std::vector<Group> groups_;
  std::vector<std::string> names_, decayed_names_;
  std::vector<bool> offloaded_;
  Kokkos::View<double*, DeviceMemory> norm_parts_;                    // per group, this step
  compat::host_mirror_t<Kokkos::View<double*, DeviceMemory>> norm_parts_host_;
  std::vector<char> norm_started_;
  double achieved_ratio_ = 0;
  double lr_ = 0;
  long step_ = 0;
};

}  // namespace joule
