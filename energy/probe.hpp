#pragma once
// `joule energy probe`: what this machine offers for measuring energy.
#include "energy/sampler.hpp"

#include <string>

namespace joule::energy {

// The sources, their channels, what each reads now, and the total the scheduler would use.
std::string format_probe(Sampler& sampler);

}  // namespace joule::energy
