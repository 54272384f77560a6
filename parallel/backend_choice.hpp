#pragma once
// Which library carries a job's float collectives (gradient buckets, Ulysses all-to-alls): NCCL
// over device memory, or MPI with the buffers staged through host memory. NCCL needs every rank of
// a group on a GPU of its own ("Duplicate GPU detected" otherwise: several ranks sharing the one
// GPU of a GH200 node), so the choice is made per job from where the ranks are, and stated with
// its reason. The configuration may ask for one (section "parallel", field "backend"; `--comm`).
#include <string>
#include <vector>

namespace joule::parallel {

struct CommChoice {
  bool nccl = false;   // false: MPI
  std::string reason;  // one clause, printed after the backend's name
};

// requested: "auto", "mpi" or "nccl". gpu_of_rank: every rank's GPU by world rank, as a name that
// is the same for ranks on the same GPU (host name and PCI bus id); "" where a rank has none.
// Asking for NCCL where it cannot work throws CommError saying why.
CommChoice choose_comm_backend(std::string const& requested, bool nccl_built,
                               std::vector<std::string> const& gpu_of_rank);

// The "parallel" section of a configuration (JSON text): the requested backend, "auto" when the
// section or field is absent. Throws std::invalid_argument naming the field and what is allowed.
std::string requested_comm_backend(std::string const& config_json, std::string const& source = "config");

}  // namespace joule::parallel
