// One libFuzzer executable per target (JOULE_FUZZ_TARGET names it; see targets.hpp).
#include "targets.hpp"

#include <cstdio>
#include <cstdlib>

namespace {
joule::fuzz::Target target = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("OMP_NUM_THREADS", "1", 0);
  setenv("OMP_PROC_BIND", "false", 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  target = joule::fuzz::target_named(JOULE_FUZZ_TARGET);
  if (!target) {
    std::fprintf(stderr, "no fuzz target named %s\n", JOULE_FUZZ_TARGET);
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  target(data, size);  // anything but the reader's own error escapes and is reported
  return 0;
}
