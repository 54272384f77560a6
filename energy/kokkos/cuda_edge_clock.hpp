#pragma once
// The device clock of CUDA builds (see edge_clock.hpp); nullptr on other builds.
#include "energy/edge_clock.hpp"

namespace joule::energy::detail {

std::unique_ptr<EdgeClock> make_cuda_edge_clock(Sampler const& sampler, StreamProvider stream);

}  // namespace joule::energy::detail
