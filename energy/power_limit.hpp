#pragma once
// GPU power limits through NVML (loaded with dlopen, like the NVML source), for the scheduler's
// optional power-limit knob. Nothing here runs unless asked: a PowerLimiter is opened only when
// a configuration lists power limits. It changes the GPUs this process reads (GPU g belongs to
// local rank g % local_size, as for energy) and restores every one it changed to the limit it
// found, when restore() is called or the object dies — on a normal exit, an error or SIGINT;
// nothing can restore after SIGKILL, and the README says so. Setting a limit needs privileges:
// without them NVML answers "Insufficient Permissions" and the error says what to do.
#include "energy/source.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::energy {

class PowerLimitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class PowerLimiter {
 public:
  // Throws PowerLimitError naming why (no NVML, no GPU of this rank, limits not readable).
  static std::unique_ptr<PowerLimiter> open(SourceOptions const& options);
  ~PowerLimiter();
  PowerLimiter(PowerLimiter const&) = delete;
  PowerLimiter& operator=(PowerLimiter const&) = delete;

  int gpus() const { return int(devices_.size()); }
  double original_watts() const;  // the first GPU's limit when opened
  double min_watts() const;       // the range every GPU of this rank allows
  double max_watts() const;
  // Sets every GPU of this rank to `watts` (0: back to the original limits). Throws
  // PowerLimitError with NVML's message (e.g. insufficient permissions).
  void set(double watts);
  void restore();

  struct Impl;  // the NVML entry points (power_limit.cpp)

 private:
  struct Device {
    void* handle;
    unsigned original_mw, min_mw, max_mw;
    bool changed = false;
  };
  explicit PowerLimiter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::vector<Device> devices_;
};

}  // namespace joule::energy
