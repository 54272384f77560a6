#include "core/train/host_cores.hpp"

#include "core/environment.hpp"
#include "core/model/model.hpp"

#include <cstdlib>
#include <optional>
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

long default_host_cores(long cpus, bool device_is_host) {
  if (device_is_host) return 0;  // CPU builds: the host jobs run inline unless cores are asked for
  return cpus >= 8 ? cpus - 4 : cpus / 2;
}

HostCores const& reserve_host_cores_from_environment() {
  bool const asked = environment::text_of(core_environment::kHostCoresName).has_value();
  if (!asked && kDeviceIsHost) return g_cores;
#if defined(__linux__)
  std::vector<int> const cpus = core_environment::process_cpus();
  if (cpus.empty()) throw std::runtime_error("JOULE_HOST_CORES: cannot read this process's CPU affinity");
  // Unset on a GPU build: the default share of this process's own CPUs (its affinity mask, which
  // mpirun's binding sets; not the node's core count), pinned like an asked-for one.
  auto const wanted = asked ? core_environment::host_cores_wanted(long(cpus.size()))  // the one parse of it
                            : std::optional<long>(default_host_cores(long(cpus.size()), kDeviceIsHost));
  if (!wanted || *wanted <= 0) return g_cores;
  long const k = *wanted;
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
  if (asked) core_environment::host_cores_wanted(1);  // refuses any value: no CPU affinity here
  return g_cores;
#endif
}

}  // namespace joule
