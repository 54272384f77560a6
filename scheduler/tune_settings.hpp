#pragma once
// What `joule tune` searches and how it measures: the configuration's optional "tune" section,
// checked here (core ignores it), with command-line overrides applied by the caller.
#include "core/config/config.hpp"
#include "scheduler/objective.hpp"
#include "scheduler/strategy.hpp"

#include <map>
#include <string>
#include <vector>

namespace joule::scheduler {

struct TuneSettings {
  Objective objective;                      // "objective": "edp" | "ed2p" | "weighted[:eta]" | ...
  std::string strategy = "auto";            // "auto" | "exhaustive" | "coordinate_descent"
  int auto_exhaustive_limit = 24;           // auto: exhaustive up to this many feasible candidates
  // Each knob's values from its tune field (runlog/knobs.hpp: "offload_ratios", ...; named values
  // by index), by knob name; a knob not here is searched over its table row's default values.
  std::map<std::string, std::vector<double>> knob_values;
  std::vector<double> const& values_of(std::string const& knob) const;  // empty: the default
  int warmup_steps = 2, measured_steps = 4, max_repeats = 3;
  double ci_target = 0.05;                  // stop repeating when the objective's relative 95% CI is below
  int reference_every = 6;                  // re-measure the reference config after this many trials
  int confirm_rounds = 4;                   // alternating rounds of the best and the baseline before a choice (0: none)
  double device_memory_budget_mib = 0;      // 0: the memory free now (core/train/memory_check.hpp)
  bool train_after = true;                  // train with the chosen configuration

  StrategyKind strategy_for(std::size_t feasible_candidates) const;
};

// Reads config.json's "tune" object (absent: the defaults). Throws ConfigError naming the field
// and what is allowed.
TuneSettings parse_tune_settings(Config const& config);

}  // namespace joule::scheduler
