// MpiSession of a joule built without MPI (JOULE_WITH_MPI=OFF): one process per job. Started by
// an MPI launcher, it stops at once with an error that says so, rather than run W copies of the
// same single-process job side by side.
#include "parallel/mpi_communicator.hpp"

#include <cstdlib>

namespace joule::parallel {

MpiSession::MpiSession(int*, char***) {
  throw CommError(
      "this joule was built without MPI (JOULE_WITH_MPI=OFF) and runs one process per job; "
      "to run under mpirun or srun, rebuild it with MPI");
}

MpiSession::~MpiSession() = default;

void MpiSession::abort_job(int code) const { std::_Exit(code); }

std::unique_ptr<Communicator> MpiSession::world() const {
  throw CommError("no MPI in this build (JOULE_WITH_MPI=OFF)");
}

}  // namespace joule::parallel
