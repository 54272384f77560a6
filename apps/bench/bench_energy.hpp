#pragma once
// `joule bench --suite energy`: what measuring energy costs a training step. The tiny default
// model trains with energy off, with the default measurement (sampler thread at 100 Hz, every
// region stamped on the timeline) and with fenced region edges, in interleaved rounds on one
// trainer; medians and ratios side by side. Then the same steps with the energy tool
// (libjoule_energy_tool.so) attributing regions and kernels, its Kokkos Tools callbacks installed
// in this process for those rounds only, interleaved with rounds without it.
#include <string>

namespace joule::apps {

struct EnergyBenchOptions {
  int repeats = 5;   // rounds; each round runs every mode
  int steps = 20;    // training steps per mode and round
  double rate_hz = 100.0;
  // The energy tool; "" looks beside this executable (build: energy_tool/, installed: ../lib/).
  std::string energy_tool;
};

int run_energy_overhead_bench(EnergyBenchOptions const& options);

}  // namespace joule::apps
