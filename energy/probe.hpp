#pragma once
// `joule energy probe`: what this machine offers for measuring energy.
#include "energy/sampler.hpp"

#include <string>
#include <vector>

namespace joule::energy {

// The sources, their channels, what each reads now, and the total the scheduler would use; then
// what discovery looked for and what became of it, one line per source (attempts, from
// discover_sources), so that a machine with nothing readable says why.
std::string format_probe(Sampler& sampler, std::vector<SourceAttempt> const& attempts = {});

}  // namespace joule::energy
