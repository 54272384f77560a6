#include "run_config.hpp"

#include "commands.hpp"
#include "default_config.hpp"

#include "core/data/synth.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace joule::apps {

char const* default_config_json() { return kDefaultConfigJson; }

Config load_config_with(std::string const& path, std::function<void(nlohmann::json&)> const& overrides) {
  std::string text = default_config_json(), source = "the embedded default configuration";
  if (!path.empty()) {
    std::ifstream f(path);
    if (!f) throw ConfigError(path + ": cannot open the configuration file");
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
    source = path;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (nlohmann::json::parse_error const& e) {
    throw ConfigError(source + ": not valid JSON: " + e.what());
  }
  if (j.is_object() && overrides) overrides(j);  // a non-object is reported by parse_config
  return parse_config(j.dump(), source);
}

void make_data_if_missing(Config const& cfg) {
  if (std::filesystem::exists(cfg.data.path)) return;
  auto const parent = std::filesystem::path(cfg.data.path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  auto const s = SynthOptions::for_model(cfg.model, 4096, cfg.train.seed);
  write_synthetic(cfg.data.path, s);
  fmt::print("wrote {} synthetic samples to {}\n", s.count, cfg.data.path);
}

}  // namespace joule::apps
