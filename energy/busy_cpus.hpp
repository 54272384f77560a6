#pragma once
// The CPUs joule leaves to other work, followed over time (docs/configuration.md, "Host threads"):
// from samples of how many CPUs other work kept busy (machine_load.hpp), the count to leave changes
// only when a change is sustained, never for a transient. Pure: no clock and no /proc; the caller
// feeds samples (a real reader, or a fake load in the tests).
//
// Levels: leaving n CPUs to other work (n = 0, 1, ...). Rising to level n needs other work to keep
// n - 1 + enter_share CPUs busy in every sample of a window; falling back to level m < n needs it
// below m + leave_share in every sample of a window. leave_share < enter_share is the hysteresis:
// a load that hovers around one threshold never crosses the other, so the count does not flap.
#include <deque>
#include <functional>
#include <limits>

namespace joule::energy {

struct BusyCpusRule {
  double enter_share = 0.6;  // of one more CPU, busy in every sample of the window: leave it that CPU
  double leave_share = 0.4;  // below this share of the last CPU left, in every sample: take it back
  double window_s = 1.5;     // how long a change must last; a shorter one is a transient
};

// The level a steady load of `busy` CPUs rises to, and the lowest it keeps while falling.
long level_rising(double busy, BusyCpusRule const& rule);   // floor(busy + 1 - enter_share), >= 0
long level_falling(double busy, BusyCpusRule const& rule);  // floor(busy + 1 - leave_share), >= 0

// Follows the level over a run. observe() takes one sample: `seconds` long, other work keeping
// `busy` CPUs busy (NaN: not readable, no evidence either way). It returns true when the level
// changed; the samples seen so far are then forgotten, so the next change needs a window of its own.
class BusyCpusFollower {
 public:
  explicit BusyCpusFollower(BusyCpusRule rule = {}, long level = 0) : rule_(rule), level_(level) {}
  bool observe(double seconds, double busy);
  long level() const { return level_; }
  // The samples behind the last change: the least (rising) or most (falling) busy of its window.
  double evidence() const { return evidence_; }
  BusyCpusRule const& rule() const { return rule_; }

 private:
  struct Sample {
    double seconds, busy;
  };
  BusyCpusRule rule_;
  long level_;
  double evidence_ = std::numeric_limits<double>::quiet_NaN();
  std::deque<Sample> window_;  // the latest samples, covering at most window_s and the one before
};

// Before a Kokkos that cannot change its thread count later starts: samples of `sample_s` (busy_over
// measures one and returns the CPUs other work kept busy) until one shows no load that could rise a
// level (no wait on a quiet machine beyond one sample), or a window of them shows a sustained load.
struct StartMeasurement {
  long level = 0;                                              // CPUs to leave to other work
  double busy = std::numeric_limits<double>::quiet_NaN();      // the evidence: least busy over the window, or the quiet sample
  double seconds = 0;                                          // how long it measured
};
StartMeasurement measure_before_start(std::function<double(double seconds)> const& busy_over,
                                      BusyCpusRule const& rule = {}, double sample_s = 0.25);

}  // namespace joule::energy
