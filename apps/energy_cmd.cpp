// `joule energy probe`: which energy sources this machine has and what they read now.
#include "commands.hpp"

#include "energy/probe.hpp"

#include <fmt/format.h>

namespace joule::apps {

std::function<int()> add_energy_command(CLI::App& app) {
  auto* energy = app.add_subcommand("energy", "energy measurement");
  energy->require_subcommand(1);
  auto* probe = energy->add_subcommand("probe", "list the energy sources found, their readings now, and the total used");
  return [probe]() -> int {
    if (!*probe) return -1;
    std::vector<energy::SourceAttempt> attempts;  // what was looked for, and why it is (not) used
    auto const options = energy::SourceOptions::from_environment();
    energy::Sampler sampler(energy::discover_sources(options, nullptr, &attempts));
    fmt::print("{}", energy::format_probe(sampler, attempts));
    return 0;
  };
}

}  // namespace joule::apps
