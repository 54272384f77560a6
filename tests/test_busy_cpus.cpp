// The CPUs left to other work, followed over time (energy/busy_cpus.hpp), driven by a fake load
// instead of /proc/stat: a transient at start, a sustained load, a load that comes and goes in
// mid-run, and noise around the thresholds. A load is in CPUs (1.0: one CPU busy all the time).
#include "energy/busy_cpus.hpp"

#include "support/catch.hpp"

#include <cmath>
#include <functional>
#include <random>
#include <vector>

using joule::energy::BusyCpusFollower;
using joule::energy::BusyCpusRule;
using joule::energy::level_falling;
using joule::energy::level_rising;
using joule::energy::measure_before_start;
using joule::test::Approx;

namespace {

// A load of at(t) CPUs at time t (seconds); each call measures the next `seconds` of it, as a
// reading of /proc/stat before and after would: the mean over the interval.
struct FakeLoad {
  std::function<double(double)> at;
  double now = 0;
  int samples = 0;
  double operator()(double seconds) {
    int const steps = 1000;
    double sum = 0;
    for (int i = 0; i < steps; ++i) sum += at(now + (i + 0.5) * seconds / steps);
    now += seconds;
    ++samples;
    return sum / steps;
  }
};

// Feeds a follower samples of `sample_s` from `load` until `end_s`; the times its level changed.
struct Change {
  double at_s;
  long level;
};
std::vector<Change> follow(BusyCpusFollower& follower, FakeLoad& load, double sample_s, double end_s) {
  std::vector<Change> changes;
  while (load.now < end_s - 1e-9)
    if (follower.observe(sample_s, load(sample_s))) changes.push_back({load.now, follower.level()});
  return changes;
}

}  // namespace

TEST_CASE("busy CPUs: levels rise at the enter share and fall below the leave share", "[energy][load]") {
  BusyCpusRule const rule;  // 0.6 to enter, 0.4 to leave
  CHECK(level_rising(0.0, rule) == 0);
  CHECK(level_rising(0.59, rule) == 0);
  CHECK(level_rising(0.61, rule) == 1);
  CHECK(level_rising(1.55, rule) == 1);
  CHECK(level_rising(1.61, rule) == 2);
  CHECK(level_falling(0.41, rule) == 1);  // the band between the shares keeps level 1
  CHECK(level_falling(0.39, rule) == 0);
  CHECK(level_falling(1.39, rule) == 1);
  CHECK(level_rising(std::nan(""), rule) == 0);
  CHECK(level_falling(-0.2, rule) == 0);
}

TEST_CASE("busy CPUs at start: a transient leaves every thread, a sustained load takes one", "[energy][load]") {
  SECTION("quiet: one sample, nothing left") {
    FakeLoad load{[](double) { return 0.1; }};
    auto const m = measure_before_start(std::ref(load));
    CHECK(m.level == 0);
    CHECK(load.samples == 1);
    CHECK(m.seconds == Approx(0.25));
    CHECK(m.busy == Approx(0.1));
  }
  SECTION("a busy loop of 1 s that began 0.2 s before: over before the window, nothing left") {
    FakeLoad load{[](double t) { return t < 0.8 ? 1.0 : 0.0; }};
    auto const m = measure_before_start(std::ref(load));
    CHECK(m.level == 0);
    CHECK(m.seconds <= 1.0 + 1e-9);  // ends at the first quiet quarter second
    CHECK(m.busy < 0.6);
  }
  SECTION("a transient just shorter than the window: nothing left") {
    FakeLoad load{[](double t) { return t < 1.3 ? 1.0 : 0.0; }};
    auto const m = measure_before_start(std::ref(load));
    CHECK(m.level == 0);
    CHECK(m.seconds <= 1.5 + 1e-9);
  }
  SECTION("sustained from the start: one CPU left after the window, and the evidence is the least busy sample") {
    FakeLoad load{[](double t) { return t < 0.5 ? 1.0 : 0.93; }};
    auto const m = measure_before_start(std::ref(load));
    CHECK(m.level == 1);
    CHECK(m.seconds == Approx(1.5));
    CHECK(load.samples == 6);
    CHECK(m.busy == Approx(0.93));
  }
  SECTION("two busy CPUs, one of them briefly less: the level all samples hold") {
    FakeLoad load{[](double t) { return t > 0.5 && t < 0.75 ? 1.2 : 2.0; }};
    auto const m = measure_before_start(std::ref(load));
    CHECK(m.level == 1);
    CHECK(m.busy == Approx(1.2));
  }
  SECTION("unreadable: one try, nothing left") {
    FakeLoad load{[](double) { return std::nan(""); }};
    auto const m = measure_before_start(std::ref(load));
    CHECK(m.level == 0);
    CHECK(load.samples == 1);
    CHECK(std::isnan(m.busy));
  }
}

TEST_CASE("busy CPUs in a run: a load that comes and goes is followed both ways, within a window", "[energy][load]") {
  // Samples of 0.5 s: quiet until 10 s, one CPU busy until 30 s, quiet again until 50 s.
  FakeLoad load{[](double t) { return t >= 10 && t < 30 ? 1.0 : 0.05; }};
  BusyCpusFollower follower;
  auto const changes = follow(follower, load, 0.5, 50);
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].level == 1);
  CHECK(changes[0].at_s == Approx(11.5));  // the first window wholly inside the load
  CHECK(changes[1].level == 0);
  CHECK(changes[1].at_s == Approx(31.5));
  CHECK(follower.evidence() == Approx(0.05));  // the busiest sample of the window that fell
}

TEST_CASE("busy CPUs in a run: short bursts and noise around a threshold change nothing", "[energy][load]") {
  SECTION("a 1 s burst every 5 s, for 60 s") {
    FakeLoad load{[](double t) { return std::fmod(t, 5.0) < 1.0 ? 1.0 : 0.0; }};
    BusyCpusFollower follower;
    CHECK(follow(follower, load, 0.25, 60).empty());
  }
  std::mt19937 random(20261207);
  // A load drawn anew for each half second (the samples' length), uniform in [low, high].
  auto const noise = [&](double low, double high) {
    std::uniform_real_distribution<double> d(low, high);
    std::vector<double> slots(1300);
    for (auto& s : slots) s = d(random);
    return [slots](double t) { return slots.at(std::size_t(t / 0.5)); };
  };
  SECTION("around the enter share: at most one change, never back") {
    FakeLoad load{noise(0.45, 0.75)};
    BusyCpusFollower follower;
    CHECK(follow(follower, load, 0.5, 600).size() <= 1);
  }
  SECTION("around the leave share, from one CPU left: at most one change, never back") {
    FakeLoad load{noise(0.25, 0.55)};
    BusyCpusFollower follower({}, 1);
    CHECK(follow(follower, load, 0.5, 600).size() <= 1);
  }
  SECTION("without the hysteresis the same noise flaps: the band is what holds it") {
    FakeLoad load{noise(0.45, 0.75)};
    BusyCpusRule no_band;
    no_band.leave_share = no_band.enter_share;
    BusyCpusFollower follower(no_band);
    CHECK(follow(follower, load, 0.5, 600).size() > 10);
  }
}

TEST_CASE("busy CPUs in a run: a load that drops from two CPUs to one falls one level", "[energy][load]") {
  FakeLoad load{[](double t) { return t < 5 ? 2.0 : 1.0; }};
  BusyCpusFollower follower;
  auto const changes = follow(follower, load, 0.5, 20);
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].level == 2);
  CHECK(changes[1].level == 1);
  CHECK(changes[1].at_s == Approx(6.5));
}
