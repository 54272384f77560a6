// The CPU-time model: the fallback when no sensor can be read (most VMs and CI machines).
//   power = idle_watts + core_watts * (CPU seconds this process used / wall seconds)
// It is an estimate of this process's share, not a measurement, and is labelled `model`.
#include "energy/source.hpp"

#include <chrono>
#include <functional>
#include <ctime>

namespace joule::energy {

namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class ModelSource final : public Source {
 public:
  ModelSource(double idle, double core, std::function<double()> cpu, std::function<double()> wall)
      : idle_(idle),
        core_(core),
        cpu_(cpu ? std::move(cpu) : std::function<double()>(process_cpu_seconds)),
        wall_(wall ? std::move(wall) : std::function<double()>(wall_seconds)) {
    channels_.push_back({kDomainModel,
                         "CPU-time model, " + fmt(idle) + " W idle + " + fmt(core) + " W per busy core (process CPU time)",
                         Quantity::power, false});
    last_cpu_ = cpu_();
    last_wall_ = wall_();
  }
  std::string name() const override { return "model"; }
  void read(std::vector<double>& values) override {
    double const cpu = cpu_(), wall = wall_();
    double const busy_cores = wall > last_wall_ ? (cpu - last_cpu_) / (wall - last_wall_) : last_busy_;
    last_cpu_ = cpu;
    last_wall_ = wall;
    last_busy_ = busy_cores;
    values.assign(1, idle_ + core_ * busy_cores);
  }

 private:
  static std::string fmt(double w) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", w);
    return buf;
  }
  double idle_, core_;
  std::function<double()> cpu_, wall_;
  double last_cpu_ = 0, last_wall_ = 0, last_busy_ = 0;
};

}  // namespace

std::unique_ptr<Source> open_model(SourceOptions const& options) {
  // Idle power belongs to the node: only its local rank 0 counts it, so totals over the ranks of
  // a node add it once.
  double const idle = options.local_rank > 0 ? 0.0 : options.model_idle_watts;
  return std::make_unique<ModelSource>(idle, options.model_core_watts, options.model_cpu_clock,
                                       options.model_wall_clock);
}

}  // namespace joule::energy
