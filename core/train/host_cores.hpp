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
  std::vector<int> rank_share;  // this process's share of its node's CPUs (empty: none taken)
  int local_rank = 0, local_size = 1;
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
// Processes a launcher started on one node without binding them apart each may use every CPU the
// node gives the job: each would start a Kokkos thread per CPU, and they would share every core.
// Split `node` (core_environment::node_cpus()) among `local_size` processes: contiguous shares in
// local-rank order, sizes differing by at most one; with fewer CPUs than processes, one each,
// shared round robin (`shared`).
struct NodeShares {
  std::vector<std::vector<int>> cpus;  // per local rank
  bool shared = false;
};
NodeShares node_shares(std::vector<int> const& node, int local_size);
// Whether a process with CPUs `process` is one of `local_size` > 1 started unbound on a node with
// CPUs `node`: its mask is the whole node's. A bound process (any other mask) keeps what the
// launcher chose.
bool started_unbound(std::vector<int> const& process, std::vector<int> const& node, int local_size);
// Before Kokkos starts, and before reserve_host_cores_from_environment (which then sets aside the
// optimizer's CPUs from the share): where this process was started unbound, restricts this thread,
// and so the threads Kokkos starts from it, to its share of the node's CPUs (the OpenMP runtime
// counted the whole mask as it loaded: the caller sets Kokkos' thread count). Returns the start-up
// note that the node's local rank 0 prints (empty text when nothing was done); `shared`: a warning,
// as the node has fewer CPUs than processes.
struct ShareNote {
  std::string text;
  bool shared = false;
};
ShareNote take_local_rank_share(int local_rank, int local_size);

// "0-3,8,10-11".
std::string cpu_list_text(std::vector<int> const& cpus);
// Where the host threads run, for start-up lines and the run log: "" when nothing is set aside.
std::string host_cores_text();

}  // namespace joule
