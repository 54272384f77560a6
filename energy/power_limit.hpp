#pragma once
// GPU power limits through NVML (loaded with dlopen, like the NVML source), for the scheduler's
// optional power-limit knob. Nothing here runs unless asked: a PowerLimiter is opened only when
// a configuration lists power limits. It changes the GPU this process runs on, found as the
// energy source finds it (energy/detail/nvml_select.hpp: from the CUDA device's PCI bus id, or its
// ordinal through CUDA_VISIBLE_DEVICES; never another job's GPU), and restores the limit it found
// when restore() is called or the object dies — on a normal exit, an error or SIGINT;
// nothing can restore after SIGKILL, and docs/scheduler.md says so. Setting a limit needs privileges:
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
  // Throws PowerLimitError naming why (no NVML, no GPU of this process, limits not readable).
  static std::unique_ptr<PowerLimiter> open(SourceOptions const& options);
  ~PowerLimiter();
  PowerLimiter(PowerLimiter const&) = delete;
  PowerLimiter& operator=(PowerLimiter const&) = delete;

  int gpus() const { return int(devices_.size()); }
  std::vector<unsigned> nvml_indices() const;  // the GPUs it acts on, as NVML numbers them
  double original_watts() const;  // the first GPU's limit when opened
  double min_watts() const;       // the range every GPU it acts on allows
  double max_watts() const;
  // Sets every GPU of this rank to `watts` (0: back to the original limits). Throws
  // PowerLimitError with NVML's message (e.g. insufficient permissions).
  void set(double watts);
  void restore();

  struct Impl;  // the NVML entry points (power_limit.cpp)

 private:
  struct Device {
    void* handle;
    unsigned index;  // NVML's
    unsigned original_mw, min_mw, max_mw;
    bool changed = false;
  };
  explicit PowerLimiter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::vector<Device> devices_;
};

}  // namespace joule::energy
