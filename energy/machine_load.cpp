#include "energy/machine_load.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace joule::energy {

LoadReading read_load(std::vector<int> const& cpus) {
  LoadReading r;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) == 0)
    r.process_cpu_s = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                      1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  long const hz = ::sysconf(_SC_CLK_TCK);
  if (std::FILE* f = std::fopen("/proc/stat", "re"); f && hz > 0) {
    std::string text;
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) text.append(buffer, n);
    std::fclose(f);
    machine_time_from_proc_stat(text, cpus, 1.0 / double(hz), r);
  } else if (f) {
    std::fclose(f);
  }
  return r;
}

bool machine_time_from_proc_stat(std::string const& text, std::vector<int> const& cpus, double tick, LoadReading& r) {
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice" for the machine, then
  // one "cpuN ..." per CPU, in clock ticks (guest time is inside user's already).
  double busy = 0, steal = 0, total = 0;
  std::size_t found = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, 3, "cpu") != 0) continue;
    std::istringstream in(line);
    std::string name;
    in >> name;
    bool wanted = false;
    if (cpus.empty()) {
      wanted = name == "cpu";
    } else if (name.size() > 3) {
      char* end = nullptr;
      long const cpu = std::strtol(name.c_str() + 3, &end, 10);
      wanted = *end == '\0' && std::find(cpus.begin(), cpus.end(), int(cpu)) != cpus.end();
    }
    if (!wanted) continue;
    unsigned long long v[8] = {};
    int n = 0;
    while (n < 8 && in >> v[n]) ++n;
    if (n < 7) return false;
    busy += tick * double(v[0] + v[1] + v[2] + v[5] + v[6]);
    steal += n >= 8 ? tick * double(v[7]) : 0;
    total += tick * double(v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6]) + (n >= 8 ? tick * double(v[7]) : 0);
    ++found;
  }
  if (found != (cpus.empty() ? 1 : cpus.size())) return false;
  r.machine = true;
  r.busy_s = busy;
  r.steal_s = steal;
  r.total_s = total;
  return true;
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
