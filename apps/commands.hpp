#pragma once
// Subcommands of `joule`, each registering its options on the CLI and running itself.
#include <CLI/CLI.hpp>

#include <functional>

namespace joule::apps {

// Adds the subcommand to `app` and returns the function that runs it once parsed.
std::function<int()> add_train_command(CLI::App& app);
std::function<int()> add_data_command(CLI::App& app);
std::function<int()> add_energy_command(CLI::App& app);
std::function<int()> add_tune_command(CLI::App& app);
std::function<int()> add_inspect_command(CLI::App& app);
std::function<int()> add_caption_command(CLI::App& app);
std::function<int()> add_bench_command(CLI::App& app);
// no_device: set by `info --no-device`, which joule.cpp reads before it starts Kokkos.
std::function<int()> add_info_command(CLI::App& app, bool& no_device);

// The embedded default configuration (apps/configs/tiny.json at build time).
char const* default_config_json();

}  // namespace joule::apps
