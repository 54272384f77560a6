#pragma once
// Cores set aside for the host optimizer. JOULE_HOST_CORES=k gives the last k CPUs of the
// process's affinity mask to the offloaded optimizer's worker threads (core/train/host_worker.hpp)
// and the others to Kokkos: on a GH200 it keeps Grace cores for AdamW; on a CPU-only machine it
// separates the "device" kernels from the host optimizer, so that their overlap can be seen and
// measured (`joule bench --suite offload`, the tests' worker mode). Without it a CPU build sets
// nothing aside, and a GPU build sets aside default_host_cores() of the process's CPUs, pinned.
//
// reserve_host_cores_from_environment() must run before Kokkos::initialize: it restricts the
// calling thread, and so the OpenMP threads Kokkos starts from it, to the remaining CPUs, and
// sets KOKKOS_NUM_THREADS to their number unless it is set.
#include <string>
#include <vector>

namespace joule {

struct HostCores {
  std::vector<int> kokkos;     // the CPUs left to Kokkos (empty: nothing reserved)
  std::vector<int> optimizer;  // the CPUs of the host optimizer's threads (empty: none reserved)
};

// Throws environment::Error naming JOULE_HOST_CORES when its value is not an integer in
// [1, CPUs - 1] (core/environment.hpp).
HostCores const& reserve_host_cores_from_environment();
HostCores const& host_cores();  // what was reserved (both empty if nothing)
// The CPUs set aside when JOULE_HOST_CORES is unset, for a process that may use `cpus` CPUs: none
// on a CPU build; on a GPU build all but 4 (the launching thread, the energy sampler, the data
// reader and Kokkos' host threads keep those), or half of them on a process with fewer than 8.
long default_host_cores(long cpus, bool device_is_host);

// Processes on one node whose host optimizer CPUs overlap (a launcher that did not bind them
// apart: each process's mask is the whole node, and each sets aside the same CPUs) must not share
// them. Given every process's node name and optimizer CPUs (in rank order), the CPUs each should
// use: processes whose sets overlap pool them and take contiguous shares, in rank order, sizes
// differing by at most one; where the pool has fewer CPUs than processes, each gets one, shared
// round robin (CoreShares::shared names them). Others keep theirs.
struct CoreShares {
  std::vector<std::vector<int>> cpus;  // per rank
  std::vector<std::vector<int>> groups;  // the ranks that pooled their CPUs, one list per pool
  bool shared = false;                   // some pool was smaller than its ranks
};
CoreShares share_optimizer_cpus(std::vector<std::string> const& nodes, std::vector<std::vector<int>> const& cpus);
// The optimizer's CPUs from now on (after share_optimizer_cpus; before the trainer is built).
void use_optimizer_cpus(std::vector<int> cpus);
// "0-3,8,10-11".
std::string cpu_list_text(std::vector<int> const& cpus);
// Where the host threads run, for start-up lines and the run log: "" when nothing is set aside.
std::string host_cores_text();

}  // namespace joule
