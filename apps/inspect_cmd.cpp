// `joule inspect`: the report of a `joule tune` run log, from the file alone (or CSV).
#include "commands.hpp"

#include "scheduler/replay.hpp"
#include "scheduler/report.hpp"
#include "runlog/run_log.hpp"

#include <fmt/format.h>

#include <memory>

namespace joule::apps {

std::function<int()> add_inspect_command(CLI::App& app) {
  struct Options {
    std::string path, replay, objective;
    bool csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("inspect", "report of a joule tune run log (HDF5)");
  cmd->add_option("log", o->path, "the run log written by joule tune")->required();
  auto* csv = cmd->add_flag("--csv", o->csv, "one CSV line per trial instead of the report (not with --replay)");
  auto* replay = cmd->add_option(
      "--replay", o->replay,
      "replay this strategy (e.g. coordinate_descent) over an exhaustive log: its regret and trials used");
  // The objective ranks a replay's measurements; the report and the CSV show the log's own
  // objective, so --objective alone (or --csv with --replay) would be ignored: each is an error
  // naming both flags.
  cmd->add_option("--objective", o->objective,
                  "only with --replay: rank the replayed measurements by this objective (edp, ed2p, weighted[:eta], "
                  "energy_under_slowdown[:x]) instead of the log's own; the report and --csv always use the log's")
      ->needs(replay);
  csv->excludes(replay);
  return [o, cmd, replay]() -> int {
    if (!*cmd) return -1;
    try {
      auto const log = scheduler::read_run_log(o->path);
      if (replay->count() > 0) {  // also --replay "": parse_strategy names the strategies there are
        auto const kind = scheduler::parse_strategy(o->replay);
        try {
          fmt::print("{}", scheduler::format_replay(log, kind, scheduler::replay_search(log, kind, o->objective), o->objective));
        } catch (std::invalid_argument const& e) {
          fmt::print(stderr, "joule inspect: {}\n", e.what());
          return 2;
        }
        return 0;
      }
      fmt::print("{}", o->csv ? scheduler::format_run_csv(log) : scheduler::format_run_report(log));
    } catch (scheduler::RunLogError const& e) {
      fmt::print(stderr, "joule inspect: {}\n", e.what());
      return 2;
    }
    return 0;
  };
}

}  // namespace joule::apps
