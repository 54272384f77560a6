// Catch2 runner that brings Kokkos up once for the whole test executable.
// The suite runs on 2 OpenMP threads (CI's machine has 2 cores) unless OMP_NUM_THREADS says
// otherwise; OpenBLAS stays single-threaded so the two thread pools don't oversubscribe.
#include <Kokkos_Core.hpp>
#include "core/train/host_cores.hpp"
#include "support/catch_runner.hpp"

#include <cstdlib>
#include <cstdio>
#include <exception>

int main(int argc, char* argv[]) {
  try {
    joule::reserve_host_cores_from_environment();  // JOULE_HOST_CORES: the tests' worker mode
  } catch (std::exception const& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  setenv("OMP_NUM_THREADS", "2", /*overwrite=*/0);
  setenv("OMP_PROC_BIND", "false", 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  Kokkos::initialize(argc, argv);
  int result = 0;
  result = joule::test::run_catch_session(argc, argv);
  Kokkos::finalize();
  return result;
}
