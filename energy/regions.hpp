#pragma once
// Named regions, measured. joule's code opens regions through Kokkos' profiling API
// (Kokkos::Profiling::pushRegion / popRegion, or compat::ScopedRegion); this recorder installs
// itself as Kokkos' in-process tool callbacks, so every region opened anywhere is timed and
// given energy without that code knowing about energy.
//
// Attribution: at each region edge the sampler takes a snapshot, and a region's energy per
// channel is E(end) - E(start) — inclusive, like its time. Nested regions (block_forward inside
// forward) are each inclusive; regions open at the same time on different threads (a host
// optimizer during the backward pass) each get all the energy of their span, because a power
// sensor cannot tell who used it. Region energies therefore do not add up to the run's total,
// which is measured over the whole run.
#include "energy/sampler.hpp"

#include <map>
#include <string>
#include <vector>

namespace joule::energy {

struct RegionStats {
  long long calls = 0;
  double seconds = 0;
  std::vector<double> energy;  // joules per sampler channel
};

class RegionRecorder {
 public:
  // Installs the Kokkos callbacks; one recorder at a time.
  explicit RegionRecorder(Sampler& sampler, bool snapshot_at_edges = true);
  ~RegionRecorder();  // removes the callbacks
  RegionRecorder(RegionRecorder const&) = delete;
  RegionRecorder& operator=(RegionRecorder const&) = delete;

  std::map<std::string, RegionStats> stats() const;
  // Time spent inside the callbacks themselves (their overhead), and how many there were.
  double hook_seconds() const;
  long long hook_calls() const;

  // Used by the Kokkos callbacks (and by tests, with an explicit time and thread).
  void push(char const* name, double at = -1);
  void pop(double at = -1);

 private:
  Sampler& sampler_;
  bool snapshot_;
  mutable std::mutex mutex_;
  std::map<std::string, RegionStats> stats_;
  double hook_seconds_ = 0;
  long long hook_calls_ = 0;
};

}  // namespace joule::energy
