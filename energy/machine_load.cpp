#include "energy/machine_load.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace joule::energy {

LoadReading read_load() {
  LoadReading r;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) == 0)
    r.process_cpu_s = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                      1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice", in clock ticks (guest
  // time is inside user's already).
  if (std::FILE* f = std::fopen("/proc/stat", "re")) {
    unsigned long long v[8] = {};
    int const n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                              &v[5], &v[6], &v[7]);
    std::fclose(f);
    long const hz = ::sysconf(_SC_CLK_TCK);
    if (n >= 7 && hz > 0) {
      double const tick = 1.0 / double(hz);
      r.machine = true;
      r.busy_s = tick * double(v[0] + v[1] + v[2] + v[5] + v[6]);
      r.steal_s = n >= 8 ? tick * double(v[7]) : 0;
      r.total_s = r.busy_s + tick * double(v[3] + v[4]) + r.steal_s;
    }
  }
  return r;
}

Load load_between(LoadReading const& a, LoadReading const& b) {
  Load load;
  double const wall = b.wall_s - a.wall_s;
  if (!(wall > 0)) return load;
  load.process_cpus = std::max(0.0, b.process_cpu_s - a.process_cpu_s) / wall;
  if (!a.machine || !b.machine) return load;
  // Ticks are coarse (10 ms): over a short interval the difference can dip below zero.
  load.other_cpus = std::max(0.0, (b.busy_s - a.busy_s) - (b.process_cpu_s - a.process_cpu_s)) / wall;
  double const total = b.total_s - a.total_s;
  if (total > 0) load.steal_share = std::max(0.0, b.steal_s - a.steal_s) / total;
  return load;
}

}  // namespace joule::energy
