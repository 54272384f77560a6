// Catch2's session, compiled once for every test executable (each has its own main: Kokkos, or MPI
// and Kokkos, come up first). Catch2 v2 is header-only, so the translation unit that runs the
// session compiles its whole implementation (about 20 s of g++); here, once. v3 is a library.
#if JOULE_CATCH2_MAJOR < 3
#define CATCH_CONFIG_RUNNER
#endif
#include "support/catch_runner.hpp"

#include "support/catch.hpp"

namespace joule::test {

int run_catch_session(int argc, char* argv[]) {
  Catch::Session session;
  int const rc = session.applyCommandLine(argc, argv);
  return rc != 0 ? rc : session.run();
}

}  // namespace joule::test
