#pragma once
// What a person reads from a run log (`joule inspect`, the end of `joule tune`): the trials, the
// Pareto front, the chosen configuration against the fastest one, the training run, and where
// the energy figures come from; and the same trials as CSV for spreadsheets and plots.
#include "runlog/run_log.hpp"

#include <string>

namespace joule::scheduler {

// The text report. When the energy comes from a model, it says so in a line of its own and in
// the energy column's heading. A profile log (the energy tool's) gets the tool's table instead
// (format_profile_report, every row).
std::string format_run_report(RunLogContents const& log);

// One header line, then one line per trial: index, status, the knobs, every trial attribute,
// energy_kind, whether the trial is the chosen one and on the Pareto front, and the reason last.
// Numbers are written exactly (shortest text that reads back to the same double); NaN is an empty
// field. Fields holding a comma or a double quote are quoted (RFC 4180, quotes doubled); line
// breaks inside a reason become spaces so that every trial stays on one line.
// A profile log: format_profile_csv instead.
std::string format_run_csv(RunLogContents const& log);

}  // namespace joule::scheduler
