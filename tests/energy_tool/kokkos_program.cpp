// A Kokkos program that knows nothing of joule, for the energy tool's tests: regions (nested),
// parallel_for / reduce / scan, deep copies and fences, with deterministic output. Modes:
//   regions     (default) the regions "setup", "solve" and "solve/inner" around the kernels
//   no-regions  the same kernels, no region opened before Kokkos::finalize
//   fork        forks a child that opens a region and exits without finalizing; the parent goes on
#include <Kokkos_Core.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {
double solve(int iterations, Kokkos::View<double*> x, Kokkos::View<double*> y, bool regions) {
  int const n = int(x.extent(0));
  double dot = 0;
  for (int it = 0; it < iterations; ++it) {
    Kokkos::parallel_for("axpy", n, KOKKOS_LAMBDA(int i) { y(i) = 0.5 * y(i) + 0.25 * x(i); });
    if (regions) Kokkos::Profiling::pushRegion("inner");
    Kokkos::parallel_reduce("dot", n, KOKKOS_LAMBDA(int i, double& s) { s += x(i) * y(i); }, dot);
    if (regions) Kokkos::Profiling::popRegion();
  }
  return dot;
}
}  // namespace

int main(int argc, char** argv) {
  std::string const mode = argc > 1 && argv[1][0] != '-' ? argv[1] : "regions";
  int const iterations = argc > 2 && argv[2][0] != '-' ? std::atoi(argv[2]) : 40;
  bool const regions = mode == "regions";
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    int const n = 1 << 20;
    Kokkos::View<double*> x("x", n), y("y", n);
    if (regions) Kokkos::Profiling::pushRegion("setup");
    Kokkos::parallel_for("fill", n, KOKKOS_LAMBDA(int i) { x(i) = double(i % 7) * 0.125, y(i) = 1.0; });
    Kokkos::fence();
    if (regions) Kokkos::Profiling::popRegion();
    if (mode == "fork") {
      pid_t const child = fork();
      if (child == 0) {  // a child that opens a region and leaves without Kokkos::finalize
        // (host work only: GNU OpenMP's thread pool does not survive fork, so no kernel here)
        Kokkos::Profiling::pushRegion("child");
        auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
        double sum = 0;
        for (int i = 0; i < n; ++i) sum += host(i);
        Kokkos::Profiling::popRegion();
        std::_Exit(sum > 0 ? 0 : 3);
      }
      int child_status = 0;
      waitpid(child, &child_status, 0);
      if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) status = 4;
    }
    if (regions) Kokkos::Profiling::pushRegion("solve");
    double const dot = solve(iterations, x, y, regions);
    Kokkos::View<long*> prefix("prefix", 1000);
    Kokkos::parallel_scan("prefix", 1000, KOKKOS_LAMBDA(int i, long& acc, bool final) {
      acc += i;
      if (final) prefix(i) = acc;
    });
    auto host = Kokkos::create_mirror_view(prefix);
    Kokkos::deep_copy(host, prefix);
    if (regions) Kokkos::Profiling::popRegion();
    std::printf("dot %.6f prefix %ld\n", dot, host(999));
  }
  Kokkos::finalize();
  return status;
}
