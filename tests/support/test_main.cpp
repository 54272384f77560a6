// Catch2 runner that brings Kokkos up once for the whole test executable.
#define CATCH_CONFIG_RUNNER
#include <Kokkos_Core.hpp>
#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  int result = 0;
  {
    Catch::Session session;
    result = session.applyCommandLine(argc, argv);
    if (result == 0) result = session.run();
  }
  Kokkos::finalize();
  return result;
}
