#pragma once
// Human-readable energy reports: per domain, every figure labelled measured or model, the total
// chosen by total_rule(), and what the measuring itself cost.
#include "energy/regions.hpp"
#include "energy/sampler.hpp"

#include <string>

namespace joule::energy {

// The sources, their channels, what each reads now, and the total the scheduler would use.
std::string format_probe(Sampler& sampler);

// Per-region time and energy table, plus the whole run (its span: run_seconds, run_energy from
// Sampler::snapshot at the start and end) and the overhead of sampling and region hooks.
std::string format_energy_report(Sampler const& sampler, RegionRecorder const& regions,
                                 double run_seconds, std::vector<double> const& run_energy);

}  // namespace joule::energy
