#pragma once
// The measurement API: name a window of time with begin(name) / end(name) (windows may overlap;
// each name has at most one open window) and get back what it cost, computed from the sampler's
// trace: seconds, joules per domain, the total by the no-double-counting rule (total_rule), whether
// that total was measured or modelled, and, if asked, the power trace of that window only.
// Callers never index the sampler's channels: everything a client needs is in the Measurement.
#include "energy/sampler.hpp"

#include <limits>
#include <map>
#include <string>
#include <vector>

namespace joule::energy {

struct DomainEnergy {
  std::string domain;  // kDomain* name
  std::string source;  // "nvml", "hwmon", "rapl", "model"
  bool measured = true;
  double joules = 0;   // summed over the source's channels of this domain (e.g. several GPUs)
};

struct Measurement {
  std::string name;
  double t0 = 0, t1 = 0;  // on the sampler's clock
  double seconds = 0;
  std::vector<DomainEnergy> domains;  // one per (domain, source), counted in the total or not
  double total_j = std::numeric_limits<double>::quiet_NaN();
  std::string total_description;      // which domains the total is (total_rule)
  bool measured = false;              // false: the total is a model's estimate
  bool below_resolution = false;      // shorter than the total's sensors resolve
  // The window's power trace (with_trace only): columns are the non-gauge channels, named
  // "domain (source)" or "domain (source, model)"; time from t0; watts row-major [time, column].
  std::vector<std::string> trace_columns;
  std::vector<double> trace_time_s, trace_watts;
};

struct Window {
  std::string name;
  double t0 = 0, t1 = 0;
};

class Monitor {
 public:
  explicit Monitor(Sampler& sampler);

  void begin(std::string const& name);   // throws std::logic_error if `name` is already open
  Window close(std::string const& name);  // stamps the end without waiting; throws if not open
  // Forgets an open window without measuring it (its work threw): false if `name` was not open.
  bool discard(std::string const& name) { return open_.erase(name) > 0; }
  // Waits until the sampler has covered the window's end (about one sampling period at most,
  // or a sample taken now without the sampler thread), then integrates.
  Measurement measure(Window const& w, bool with_trace = false);
  Measurement end(std::string const& name, bool with_trace = false) { return measure(close(name), with_trace); }

  Sampler& sampler() { return sampler_; }
  TotalRule const& total() const { return total_; }
  double resolution_s() const { return resolution_s_; }

 private:
  Sampler& sampler_;
  TotalRule total_;
  double resolution_s_ = 0;
  std::map<std::string, double> open_;
};

}  // namespace joule::energy
