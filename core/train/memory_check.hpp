#pragma once
// Will a training configuration fit? The memory model (estimate_memory for the model,
// estimate_optimizer_memory for the AdamW state) against the memory free now, checked before
// anything is allocated: a model that cannot fit is refused with the figures and what to change,
// instead of failing in an allocation or being killed by the kernel's OOM killer once the pages
// are touched. The trial runner judges tuning candidates with the same figures.
#include "core/config/config.hpp"
#include "core/model/model.hpp"
#include "core/train/optimizer.hpp"

#include <cstddef>
#include <string>

namespace joule {

// What one process of a job allocates, by the memory model.
struct MemoryNeed {
  MemoryEstimate model;       // on the device: parameters, gradients, activations, workspace
  OptimizerMemory optimizer;  // device: m, v of the groups kept there; host: the offloaded groups' state
  // In the device's memory; on a host build (one memory) the host optimizer state as well.
  std::size_t device_bytes() const { return model.total() + optimizer.device + (kDeviceIsHost ? optimizer.host : 0); }
  // In host memory beside the device's (pinned optimizer state); 0 on a host build.
  std::size_t host_bytes() const { return kDeviceIsHost ? 0 : optimizer.host; }
};
// speculative: the offload speculates (offload_speculates(), core/train/optimizer.hpp).
MemoryNeed memory_need(ModelConfig const& m, int micro_batch, int recompute_depth, int seq_shards, double offload_ratio,
                       Precision precision = Precision::fp32, bool cast_on_host = false, bool speculative = false);
MemoryNeed memory_need(ModelConfig const& m, TrainConfig const& t);

// Memory free now, with where each figure comes from. On a host build the device's memory is
// the host's, and only `device_*` is used.
struct MemoryAvailable {
  double device_bytes = 0;
  std::string device_source;  // "the GPU's free memory (cudaMemGetInfo)", "MemAvailable in /proc/meminfo", ...
  double host_bytes = 0;
  std::string host_source;
  // Processes whose identities are equal draw on the same memory (host name; host name and the
  // GPU's PCI bus id).
  std::string device_identity, host_identity;
};
MemoryAvailable available_memory();
// Host memory free now: MemAvailable, lowered to what the cgroup's limit leaves (v2 or v1) and to
// what this process's address-space limit leaves (address_space_room). `source` says which. The
// files are parameters for the tests.
double available_host_memory(std::string* source, std::string const& meminfo = "/proc/meminfo",
                             std::string const& cgroup_root = "/sys/fs/cgroup",
                             std::string const& self_cgroup = "/proc/self/cgroup",
                             std::string const& self_status = "/proc/self/status");

// Address space the libraries take on first use, beside joule's own allocations, per host thread:
// OpenBLAS's GEMM buffer (Debian 12's OpenBLAS 0.3.21 mallocs 128 MiB + 4 KiB per thread at its
// first threaded GEMM, measured) and the glibc malloc arena each thread but the first opens for
// it (a 64 MiB reservation). Under `ulimit -v` these count; when OpenBLAS cannot get its buffer it retries
// forever, so a run they do not fit in is refused before it starts instead.
inline constexpr double kBlasBufferBytesPerThread = 128.0 * 1048576 + 4096;
inline constexpr double kMallocArenaBytes = 64.0 * 1048576;
// Bytes left under an address-space limit of `limit_bytes` (RLIMIT_AS) once what the process maps
// now (VmSize in `self_status`) and the libraries' per-thread reservations for `threads` host
// threads are taken; `why` says so in words. A negative limit (none) gives +infinity.
double address_space_room(double limit_bytes, std::string const& self_status, int threads, std::string* why);

// How many processes of the job (this one included) share this process's device / host memory.
struct MemorySharing {
  int device = 1, host = 1;
};

// "" when the configuration fits in what is available, divided among the processes that share
// it. Otherwise one message: which memory, the prediction by category against what is free (and
// its source), and the nearest configuration the memory model says fits (more recomputation,
// then more offload, then smaller micro-batches), or that none does on this many processes.
std::string memory_shortfall(ModelConfig const& m, TrainConfig const& t, MemoryAvailable const& available,
                             MemorySharing sharing);
// One line for the start of a run: the prediction by category and what is free.
std::string memory_summary(ModelConfig const& m, TrainConfig const& t, MemoryAvailable const& available,
                           MemorySharing sharing);

// The same for inference (`joule caption`: forward passes of `micro_batch` samples, every block
// recomputed, no optimizer): "" when it fits, else the figures and the largest micro-batch that does.
std::string inference_memory_shortfall(ModelConfig const& m, int micro_batch, MemoryAvailable const& available,
                                      Precision precision = Precision::fp32);
// "the memory model predicts 3.1 GiB (parameters ..., ...); 2.0 GiB free (source)": for an
// allocation that failed although the check passed (memory taken by others meanwhile).
std::string memory_figures(ModelConfig const& m, int micro_batch, int recompute_depth, MemoryAvailable const& available,
                           Precision precision = Precision::fp32);

}  // namespace joule
