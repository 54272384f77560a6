#pragma once
// The sampler: reads every channel of every source at a fixed rate on its own thread (default
// 20 Hz) and keeps, per channel, the cumulative energy since start (counters: unwrapped
// differences; power: trapezoidal integration) and a power trace. snapshot() reads the sensors
// right now (used at region boundaries), so a region's energy is exact at its edges instead of
// interpolated between periodic samples.
#include "energy/source.hpp"

#include <atomic>
#include <mutex>
#include <thread>

namespace joule::energy {

struct TracePoint {
  double t = 0;                // seconds since the sampler started
  std::vector<double> values;  // per channel: watts (power and counters), gauge values
};

class Sampler {
 public:
  Sampler(std::vector<std::unique_ptr<Source>> sources, double rate_hz = 20.0);
  ~Sampler();
  Sampler(Sampler const&) = delete;
  Sampler& operator=(Sampler const&) = delete;

  void start();  // the periodic thread; without it, call snapshot() yourself (tests do)
  void stop();   // takes a final sample and joins the thread

  struct ChannelInfo {
    std::string source;
    Channel channel;
  };
  std::vector<ChannelInfo> const& channels() const { return channels_; }
  std::vector<Source const*> sources() const;

  // Reads all sensors now, integrates up to now, returns cumulative joules per channel (NaN for
  // gauges). `at` overrides the clock (seconds since start; tests drive synthetic time with it).
  std::vector<double> snapshot(double at = -1);
  double now() const;  // seconds since start
  std::vector<TracePoint> trace() const;
  std::vector<std::string> notes() const;  // the sources' notes, current
  double rate_hz() const { return rate_hz_; }
  double thread_cpu_seconds() const { return thread_cpu_seconds_; }

 private:
  void sample_locked(double t, bool record);
  void run();

  std::vector<std::unique_ptr<Source>> sources_;
  std::vector<ChannelInfo> channels_;
  double rate_hz_;
  double t0_;
  mutable std::mutex mutex_;
  bool have_last_ = false;
  double last_t_ = 0;
  std::vector<double> last_value_, energy_, counter_start_;
  std::vector<bool> counter_started_;
  std::vector<TracePoint> trace_;
  std::vector<double> scratch_;
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
