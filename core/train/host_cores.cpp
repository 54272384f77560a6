#include "core/train/host_cores.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <sched.h>
#endif

namespace joule {

namespace {
HostCores g_cores;
}

HostCores const& host_cores() { return g_cores; }

HostCores const& reserve_host_cores_from_environment() {
  char const* value = std::getenv("JOULE_HOST_CORES");
  if (!value || !*value) return g_cores;
#if defined(__linux__)
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0)
    throw std::runtime_error("JOULE_HOST_CORES: cannot read this process's CPU affinity");
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  char* end = nullptr;
  long const k = std::strtol(value, &end, 10);
  if (*end != '\0' || k < 1 || k >= long(cpus.size()))
    throw std::invalid_argument(std::string("JOULE_HOST_CORES is '") + value + "'; allowed: an integer in [1, " +
                                std::to_string(long(cpus.size()) - 1) + "] (this process may use " +
                                std::to_string(cpus.size()) + " CPUs, and Kokkos keeps at least one)");
  HostCores cores;
  cores.kokkos.assign(cpus.begin(), cpus.end() - k);
  cores.optimizer.assign(cpus.end() - k, cpus.end());
  cpu_set_t kokkos_mask;
  CPU_ZERO(&kokkos_mask);
  for (int c : cores.kokkos) CPU_SET(c, &kokkos_mask);
  if (sched_setaffinity(0, sizeof(kokkos_mask), &kokkos_mask) != 0)
    throw std::runtime_error("JOULE_HOST_CORES: cannot restrict this thread to the CPUs left to Kokkos");
  // Kokkos reads KOKKOS_NUM_THREADS when it initialises and sets OpenMP's thread count from it
  // (OMP_NUM_THREADS itself is read by the OpenMP runtime when it is loaded, before main).
  setenv("KOKKOS_NUM_THREADS", std::to_string(cores.kokkos.size()).c_str(), /*overwrite=*/0);
  g_cores = cores;
  return g_cores;
#else
  throw std::invalid_argument("JOULE_HOST_CORES is only supported on Linux");
#endif
}

}  // namespace joule
