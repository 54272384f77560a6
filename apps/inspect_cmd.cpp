// `joule inspect`: the report of a `joule tune` run log, from the file alone (or CSV).
#include "commands.hpp"

#include "scheduler/report.hpp"
#include "scheduler/run_log.hpp"

#include <fmt/format.h>

#include <memory>

namespace joule::apps {

std::function<int()> add_inspect_command(CLI::App& app) {
  struct Options {
    std::string path;
    bool csv = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("inspect", "report of a joule tune run log (HDF5)");
  cmd->add_option("log", o->path, "the run log written by joule tune")->required();
  cmd->add_flag("--csv", o->csv, "one CSV line per trial instead of the report");
  return [o, cmd]() -> int {
    if (!*cmd) return -1;
    try {
      auto const log = scheduler::read_run_log(o->path);
      fmt::print("{}", o->csv ? scheduler::format_run_csv(log) : scheduler::format_run_report(log));
    } catch (scheduler::RunLogError const& e) {
      fmt::print(stderr, "joule inspect: {}\n", e.what());
      return 2;
    }
    return 0;
  };
}

}  // namespace joule::apps
