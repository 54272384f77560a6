#pragma once
// How busy the machine was over an interval (Linux /proc and getrusage; no Kokkos, no model): this
// process's CPU time, the CPU time everything else on the machine used, and the time the
// hypervisor stole. Not energy, but read beside it: a trial measured while other work ran is
// slower for a reason that is not its configuration, and the run log says so (docs/scheduler.md).
#include <limits>
#include <string>
#include <vector>

namespace joule::energy {

struct LoadReading {
  double wall_s = 0;          // steady clock
  double process_cpu_s = 0;   // user + system time of every thread of this process
  bool machine = false;       // /proc/stat was read
  double busy_s = 0;          // the machine's user, nice, system, irq and softirq time (all CPUs)
  double steal_s = 0;         // stolen by the hypervisor
  double total_s = 0;         // busy + idle + iowait + steal
};
// cpus: the CPUs counted (their "cpuN" lines of /proc/stat); empty: the whole machine ("cpu").
LoadReading read_load(std::vector<int> const& cpus = {});
// The machine's part of a reading from /proc/stat's text, in clock ticks of `tick` seconds:
// busy_s, steal_s and total_s over `cpus` (empty: the "cpu" line); false where a line is missing.
bool machine_time_from_proc_stat(std::string const& text, std::vector<int> const& cpus, double tick, LoadReading& r);

// Over [a, b], in CPUs (1.0: one CPU busy all the time); NaN where not readable.
struct Load {
  double process_cpus = std::numeric_limits<double>::quiet_NaN();
  double other_cpus = std::numeric_limits<double>::quiet_NaN();   // the machine's busy time less this process's
  double steal_share = std::numeric_limits<double>::quiet_NaN();  // stolen / all CPU time
};
Load load_between(LoadReading const& a, LoadReading const& b);

}  // namespace joule::energy
