#pragma once
// The processes of one job, as `joule train` and `joule tune` set them up: under an MPI launcher
// (mpirun), the world is split into sequence groups of train.seq_shards consecutive ranks and
// data-parallel replicas over them (parallel/layout.hpp); the trainer gets the collectives as
// functions (core knows no communicator). On a GPU build with NCCL, the float collectives
// (gradient buckets, Ulysses all-to-alls) run on NCCL over device memory and MPI carries the rest.
#include "core/config/config.hpp"
#include "core/train/memory_check.hpp"
#include "core/train/trainer.hpp"
#include "parallel/backend_choice.hpp"
#include "parallel/layout.hpp"
#include "parallel/mpi_communicator.hpp"

#include <functional>
#include <map>
#include <memory>
#include <string>

namespace joule::apps {

// Started by mpirun (or another MPI launcher)?
bool launched_by_mpi();

class Processes {
 public:
  // Single process unless launched by MPI. Checks that every rank has the same configuration.
  explicit Processes(Config const& cfg);
  int rank() const { return layout_.rank; }
  int size() const { return layout_.world; }
  bool root() const { return layout_.rank == 0; }
  parallel::ProcessLayout const& layout() const { return layout_; }
  parallel::Communicator* world() const { return world_.get(); }  // nullptr: single process
  std::string backend() const;                                    // "single process", "mpi", "nccl + mpi"
  // "collectives: nccl (every rank has a GPU of its own)", "collectives: mpi (this build has no
  // NCCL)", ...: the float collectives' backend and why (parallel/backend_choice.hpp).
  std::string collectives() const;

  // The trainer's view, for a configuration whose seq_shards the layout was made for (a tuning
  // trial may use another: layout_for() makes the matching groups).
  DataParallel data_parallel() const;
  SequenceShards sequence_shards() const;
  // Re-lays out the same processes for another seq_shards (a tuning trial, offline or in flight);
  // collective; each layout's groups are split once and kept. Throws LayoutError.
  void relayout(int seq_shards, Config const& cfg);

  // Collective: how many processes of the job (this one included) share this process's device
  // memory and host memory, by the identities in `mine` (host name, GPU bus id).
  MemorySharing memory_sharing(MemoryAvailable const& mine) const;
  // Collective: "" when `cfg` fits in the memory free on every process's device and host (the
  // memory model against available_memory(), divided among the processes sharing it); else the
  // first short process's memory_shortfall(), the same text on every rank. `summary`: this
  // process's memory_summary().
  std::string memory_shortfall(Config const& cfg, std::string* summary = nullptr) const;
  // Collective: the device memory each process may use now (its device's free memory divided
  // among the processes sharing it), the least over the processes so that every rank judges
  // tuning candidates alike; `source` says where it comes from.
  double device_memory_per_process(std::string* source) const;

  // Runs a command's body. With several processes, an error escaping it is printed with this
  // rank's number and ends the whole job (MPI_Abort, exit code 1): the error may be this rank's
  // alone while the others wait in a collective, and returning would finalise MPI, which waits
  // for them, so nobody would ever exit. A single process just lets the error propagate.
  int run_or_abort(std::function<int()> const& body) const;

 private:
  void choose_collectives(Config const& cfg);
  // Ranks on one node that set aside the same CPUs for their host optimizer (a launcher that did
  // not bind them apart) take disjoint shares of them (share_optimizer_cpus, core/train/host_cores.hpp),
  // before any trainer is built; rank 0 says so.
  void share_host_cores();
  std::unique_ptr<parallel::MpiSession> mpi_;
  parallel::CommChoice comm_;  // chosen once per job, the same on every rank
  std::unique_ptr<parallel::Communicator> world_, sums_;
  // The sequence groups of each layout used so far, kept for the job: a running trainer switched
  // to another layout may go back (a failed switch, the next trial) and still hold their functions.
  std::map<int, std::unique_ptr<parallel::Communicator>> sequence_groups_;
  parallel::Communicator* sequence_ = nullptr;  // this layout's
  parallel::ProcessLayout layout_;
};

}  // namespace joule::apps
