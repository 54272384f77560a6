#pragma once
// One tuning job wired to its processes, energy sensors, run log and GPU power limits around a
// scheduler::TuneSession, in either mode: offline (`joule tune`: separate trials, then a training
// run with the choice) or in flight (`joule train --tune`: the search runs on the training run's
// own steps and the run goes on with the choice).
#include "processes.hpp"

#include "core/config/config.hpp"
#include "core/io/input_file.hpp"
#include "scheduler/tune_settings.hpp"

#include <memory>
#include <optional>
#include <string>

namespace joule::apps {

struct TuneJob {
  bool in_flight = false;
  std::string config_path;      // --config ("" : the embedded default)
  std::string data_role;        // how the dataset was named: "--data", "data.path (from ...)"
  std::string log_path;         // the run log written or continued
  std::string log_role;         // the flag that named it: "--out", "--resume", "--tune-log"
  bool continue_log = false;    // log_path exists: its finished trials are kept, not measured again
  std::string checkpoint_role;  // how train.checkpoint was named
  std::string resume_checkpoint;  // in flight: the training run continues from this checkpoint
  // ... opened once by the command (the file it checked, whatever is renamed over the path since);
  // emptied once read, so that a checkpoint replaced later is not held on the disk.
  std::shared_ptr<std::optional<io::InputFile>> resume_file;
  bool make_data = false;
  std::string energy_regions = "timeline";
};

// Runs the job on every process (rank 0 prints and writes the log); the exit code.
int run_tune_job(Processes& procs, Config const& cfg, scheduler::TuneSettings const& settings, TuneJob const& job);

}  // namespace joule::apps
