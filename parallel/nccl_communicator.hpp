#pragma once
// The NCCL backend: float collectives on device memory (the GPU build's gradient buckets and
// Ulysses all-to-alls), on a CUDA stream of its own. MPI bootstraps it (rank 0's ncclUniqueId is
// broadcast) and carries what NCCL does not: host doubles, broadcast, gather, barrier. Compiled
// only when CUDA and NCCL are found (JOULE_HAVE_NCCL); CI compiles and links it, but no test runs
// it there: that needs GPUs.
#include "parallel/communicator.hpp"

#include <memory>
#include <string>

namespace joule::parallel {

// Over the ranks of `bootstrap` (an MPI communicator, kept for the host operations), on the
// current CUDA device. Collective over `bootstrap`.
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> bootstrap);
inline std::unique_ptr<Communicator> make_nccl_communicator(Communicator const& bootstrap) {
  return make_nccl_communicator(bootstrap.split(0, bootstrap.rank()));
}

// This process's GPU (the current CUDA device) as "<host name>:<PCI bus id>": the same for every
// rank on that GPU (backend_choice.hpp).
std::string local_gpu_identity();

}  // namespace joule::parallel
