// Helper for tests/scripts/rank_dies.sh: rank 1 says it dies and dies (status 3, no MPI_Finalize),
// the others enter a collective. The test expects that line and the launcher's status 3.
#include "parallel/mpi_communicator.hpp"

#include <cstdio>
#include <cstdlib>

int main(int argc, char* argv[]) {
  joule::parallel::MpiSession mpi(&argc, &argv);
  auto world = mpi.world();
  if (world->rank() == 1) {
    std::fprintf(stderr, "rank_dies: rank 1 of %d exits with status 3\n", world->size());
    std::fflush(stderr);
    std::_Exit(3);
  }
  world->barrier();
  double x = 1;
  world->allreduce_sum(&x, 1);
  return 0;
}
