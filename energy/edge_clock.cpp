#include "energy/edge_clock.hpp"

#include "energy/sampler.hpp"

#include <stdexcept>

namespace joule::energy {

char const* to_string(EdgeMode mode) { return mode == EdgeMode::fenced ? "fenced" : "timeline"; }

EdgeMode edge_mode_from_string(std::string const& text) {
  if (text == "timeline") return EdgeMode::timeline;
  if (text == "fenced") return EdgeMode::fenced;
  throw std::invalid_argument("energy regions '" + text + "': allowed are 'timeline' (the default: edges stamped "
                              "where their work runs, never fenced) and 'fenced' (a fence at every edge: exact, slower)");
}

namespace {

class HostClock final : public EdgeClock {
 public:
  HostClock(Sampler const& s, std::function<void()> fence) : sampler_(s), fence_(std::move(fence)) {}
  char const* name() const override { return fence_ ? "fenced" : "host"; }
  Stamp stamp() override {
    if (fence_) fence_();
    return {sampler_.now(), -1};
  }
  double resolve(Stamp const& s) override { return s.t; }

 private:
  Sampler const& sampler_;
  std::function<void()> fence_;
};

}  // namespace

std::unique_ptr<EdgeClock> make_host_edge_clock(Sampler const& sampler, std::function<void()> fence) {
  return std::make_unique<HostClock>(sampler, std::move(fence));
}

}  // namespace joule::energy
