#include "energy/busy_cpus.hpp"

#include <algorithm>
#include <cmath>

namespace joule::energy {

long level_rising(double busy, BusyCpusRule const& rule) {
  return std::isfinite(busy) ? std::max(0L, long(std::floor(busy + 1 - rule.enter_share))) : 0;
}

long level_falling(double busy, BusyCpusRule const& rule) {
  return std::isfinite(busy) ? std::max(0L, long(std::floor(busy + 1 - rule.leave_share))) : 0;
}

bool BusyCpusFollower::observe(double seconds, double busy) {
  if (!(seconds > 0) || !std::isfinite(busy)) return false;
  window_.push_back({seconds, busy});
  double covered = 0;
  for (auto const& s : window_) covered += s.seconds;
  // The latest samples that still cover the window; older ones no longer count.
  while (window_.size() > 1 && covered - window_.front().seconds >= rule_.window_s) {
    covered -= window_.front().seconds;
    window_.pop_front();
  }
  if (covered < rule_.window_s * (1 - 1e-9)) return false;  // not yet a window's worth of evidence
  double least = window_.front().busy, most = least;
  for (auto const& s : window_) least = std::min(least, s.busy), most = std::max(most, s.busy);
  long const up = level_rising(least, rule_), down = level_falling(most, rule_);
  // Exclusive: up > level means every sample is above the rise threshold, hence above the fall one.
  long const next = up > level_ ? up : down < level_ ? down : level_;
  if (next == level_) return false;
  evidence_ = next > level_ ? least : most;
  level_ = next;
  window_.clear();
  return true;
}

StartMeasurement measure_before_start(std::function<double(double)> const& busy_over, BusyCpusRule const& rule,
                                      double sample_s) {
  StartMeasurement m;
  BusyCpusFollower follower(rule);
  for (;;) {
    double const busy = busy_over(sample_s);
    m.seconds += sample_s;
    // Unreadable, or quiet now: no window from here on could hold a sustained load.
    if (level_rising(busy, rule) == 0) {
      m.busy = busy;
      return m;
    }
    if (follower.observe(sample_s, busy)) {
      m.level = follower.level();
      m.busy = follower.evidence();
      return m;
    }
  }
}

}  // namespace joule::energy
