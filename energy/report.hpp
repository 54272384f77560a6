#pragma once
// Human-readable energy reports: per domain, every figure labelled measured or model, the total
// chosen by total_rule(), and what the measuring itself cost.
#include "energy/monitor.hpp"
#include "energy/regions.hpp"
#include "energy/sampler.hpp"

#include <map>
#include <string>
#include <vector>

namespace joule::energy {

// Per-region time and energy table (regions settled first), the whole run's measurement, how the
// edges were taken (timeline or fenced), which regions are below the sensors' resolution, and
// the overhead of sampling and region hooks.
std::string format_energy_report(Sampler const& sampler, RegionTimeline& regions, Measurement const& run);
// "region edges on the timeline ..." or "region edges fenced ...": which mode produced the figures.
std::string edges_description(RegionTimeline const& regions);

// One process's figures for a run, reduced to its total rule (joules summed over the counted
// channels), as plain data that can travel between processes as JSON text.
struct RankEnergy {
  struct Region {
    long long calls = 0;
    double seconds = 0, energy_j = 0;
    bool below_resolution = false;
  };
  int rank = 0;
  std::string total_description;
  bool measured = false;  // the total comes from measured channels only
  double run_seconds = 0, run_energy_j = 0;
  std::map<std::string, Region> regions;
  double hook_seconds = 0, sampler_cpu_seconds = 0;
  std::vector<std::string> notes;
  std::string edges;  // edges_description()

  std::string to_json() const;
  static RankEnergy from_json(std::string const& text);  // throws std::runtime_error
};
RankEnergy summarize_rank(Sampler const& sampler, RegionTimeline& regions, int rank, Measurement const& run);

// The job's report from every rank's figures: per region the longest time over the ranks and the
// energy summed over them; the job's total is the sum of the ranks' totals (each rank counts only
// the sensors it owns: its GPU, and node sensors on a node's local rank 0, so nothing is counted
// twice). Labelled measured, model, or partly model when ranks differ.
std::string format_energy_report_across_ranks(std::vector<RankEnergy> const& ranks);

}  // namespace joule::energy
