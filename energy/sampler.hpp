#pragma once
// The sampler: the only reader of sensors. It reads every channel of every source at a fixed rate
// on its own thread (default 100 Hz) and keeps a trace: per sample its time, each channel's power
// (counters differentiated, power read as is) and each channel's cumulative energy since start
// (counters unwrapped, power integrated by the trapezoidal rule). Energy over any interval comes
// from the trace after the fact (energy_between): nothing that marks an interval (a step, a
// region edge) reads a sensor or waits for one.
#include "energy/source.hpp"

#include <atomic>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

namespace joule::energy {

namespace detail {
// Mutexes held around every fork() of the process (pthread_atfork), so that the thread that
// takes one is never inside its critical section when the process forks (energy/sampler.cpp).
struct ForkGuard {
  static void add(std::mutex& m);
  static void remove(std::mutex& m);
};
}  // namespace detail

struct TracePoint {
  double t = 0;                // seconds since the sampler started
  std::vector<double> values;  // per channel: watts (power and counters), gauge values
};

class Sampler {
 public:
  static constexpr double kDefaultRateHz = 100.0;
  Sampler(std::vector<std::unique_ptr<Source>> sources, double rate_hz = kDefaultRateHz);
  ~Sampler();
  Sampler(Sampler const&) = delete;
  Sampler& operator=(Sampler const&) = delete;

  void start();  // the periodic thread; without it, whoever drives the sampler calls snapshot()
  void stop();   // takes a final sample and joins the thread
  bool running() const { return running_; }

  struct ChannelInfo {
    std::string source;
    Channel channel;
  };
  std::vector<ChannelInfo> const& channels() const { return channels_; }
  std::vector<Source const*> sources() const;

  // Reads all sensors now and records the sample; returns cumulative joules per channel (NaN for
  // gauges). Only while the periodic thread is not running (tests, the probe): with the thread,
  // it is the only reader, and this throws std::logic_error. `at` overrides the clock (seconds
  // since start; tests drive synthetic time with it).
  std::vector<double> snapshot(double at = -1);
  double now() const;  // seconds since start, the clock every region edge and window uses

  // Joules of a channel over [t0, t1], from the trace: counters' cumulative energy interpolated
  // linearly between samples (constant power in between), power integrated exactly over its
  // linear interpolation. NaN for gauges, or when the trace does not cover the interval.
  double energy_between(std::size_t channel, double t0, double t1) const;
  // The same for several channels and intervals at once, under one lock (attribution of many
  // regions): out[i] += energy of `channel` over intervals[i].
  void add_energy(std::size_t channel, std::vector<std::pair<double, double>> const& intervals,
                  std::vector<double>& out) const;
  // Time of the newest sample: energy up to here can be computed.
  double covered_until() const;
  // Blocks until a sample at or after t exists (at most about one period with the thread
  // running); without the thread, takes a sample now.
  void wait_until_covered(double t);
  // The samples in [t0, t1] (a copy of that window only).
  std::vector<TracePoint> trace(double t0 = -std::numeric_limits<double>::infinity(),
                                double t1 = std::numeric_limits<double>::infinity()) const;

  std::vector<std::string> notes() const;  // the sources' notes, current
  double rate_hz() const { return rate_hz_; }
  // The finest interval a channel's figure can resolve: the sampling period, or the sensor's own
  // update period or averaging window when that is longer.
  double resolution_s(std::size_t channel) const;
  double thread_cpu_seconds() const { return thread_cpu_seconds_; }

 private:
  void sample_locked(double t);
  void run();
  std::size_t first_at_or_after(double t) const;  // index into times_

  std::vector<std::unique_ptr<Source>> sources_;
  std::vector<ChannelInfo> channels_;
  double rate_hz_;
  double t0_;
  mutable std::mutex mutex_;
  std::condition_variable sampled_;
  std::vector<double> last_value_, energy_, counter_start_;
  std::vector<bool> counter_started_;
  // The trace, flat: sample s of channel c at [s * channels + c].
  std::vector<double> times_, watts_, joules_;
  std::vector<double> scratch_, values_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  double thread_cpu_seconds_ = 0;
};

// The total the scheduler uses, by platform (never a sum of nested domains):
//   module present (GH200)           -> module
//   gpu and package (x86 + NVIDIA)   -> gpu + package
//   package only (x86 CPU)           -> package
//   gpu only                         -> gpu
//   otherwise                        -> model
// Within a domain only the most preferred source counts (NVML before hwmon before RAPL), since
// two sources of one domain read the same hardware.
struct TotalRule {
  std::vector<std::size_t> channels;  // indices into Sampler::channels()
  std::string description;            // e.g. "module (GH200 module power)"
  bool measured = false;
};
TotalRule total_rule(std::vector<Sampler::ChannelInfo> const& channels);

}  // namespace joule::energy
