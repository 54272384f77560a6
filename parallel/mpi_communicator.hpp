#pragma once
// The MPI backend. MpiSession initialises MPI once per process (MPI_THREAD_FUNNELED: only the
// main thread communicates) and finalises it at exit; in a build without MPI it refuses to start
// (no_mpi_session.cpp). Errors return codes instead of aborting
// (MPI_ERRORS_RETURN) and become CommError with MPI's message; a rank that dies makes mpirun end
// the others (OpenMPI's default), so nobody waits forever.
#include "parallel/communicator.hpp"

namespace joule::parallel {

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(MpiSession const&) = delete;
  MpiSession& operator=(MpiSession const&) = delete;
  std::unique_ptr<Communicator> world() const;
  // Ends every process of the job (MPI_Abort): for an error on some ranks while others may be
  // inside a collective, where returning (and finalising) would leave them waiting forever.
  [[noreturn]] void abort_job(int code) const;
};

}  // namespace joule::parallel
