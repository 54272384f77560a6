#pragma once
// Shared by `joule train` and `joule tune`: the configuration (a file, or the embedded default)
// with command-line overrides applied to its JSON before parsing, so they are validated (and
// recorded in checkpoints and logs) exactly like the file's own values; and the synthetic dataset
// made on demand.
#include "core/model/config.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace joule::apps {

Config load_config_with(std::string const& path, std::function<void(nlohmann::json&)> const& overrides);
void make_data_if_missing(Config const& cfg);

}  // namespace joule::apps
