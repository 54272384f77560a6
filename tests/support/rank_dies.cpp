// Helper for tests/scripts/rank_dies.sh: rank 1 dies, the others enter a collective.
#include "parallel/mpi_communicator.hpp"

#include <cstdlib>

int main(int argc, char* argv[]) {
  joule::parallel::MpiSession mpi(&argc, &argv);
  auto world = mpi.world();
  if (world->rank() == 1) std::_Exit(3);
  world->barrier();
  double x = 1;
  world->allreduce_sum(&x, 1);
  return 0;
}
