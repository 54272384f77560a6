#pragma once
// The energy measurement of a command, wired to the model code: region edges go on the timeline
// of the execution space instance each region was opened with (core's compat::region_lane).
#include "energy/regions.hpp"

#include <memory>

namespace joule::apps {

std::unique_ptr<energy::RegionRecorder> make_region_recorder(energy::Sampler& sampler, energy::EdgeMode mode);

}  // namespace joule::apps
