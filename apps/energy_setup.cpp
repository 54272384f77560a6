#include "energy_setup.hpp"

#include "core/compat.hpp"

namespace joule::apps {

std::unique_ptr<energy::RegionRecorder> make_region_recorder(energy::Sampler& sampler, energy::EdgeMode mode) {
  auto lane = [] {
    auto const l = compat::region_lane();
    return energy::Lane{l.host, l.stream};
  };
  return std::make_unique<energy::RegionRecorder>(sampler, mode, energy::make_edge_clock(sampler, mode, lane));
}

}  // namespace joule::apps
