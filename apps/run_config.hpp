#pragma once
// Shared by `joule train` and `joule tune`: the configuration (a file, or the embedded default)
// with command-line overrides applied to its JSON before parsing, so they are validated (and
// recorded in checkpoints and logs) exactly like the file's own values; and the synthetic dataset
// made on demand.
#include "core/config/config.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace joule::apps {

// Command-line flags that replace configuration fields. A flag that is not given is std::nullopt
// (no magic "unset" number): whatever the user types is passed on, and the configuration's own
// checks judge it. An error they raise about an overridden field names the flag in front,
// "--steps -1: train.steps is -1; allowed: [1, 1073741824]", so a bad flag is never mistaken for
// a bad file, and the allowed range is the field's, by construction.
class Overrides {
 public:
  template <class T>
  void set(std::string flag, std::string field, std::optional<T> const& value) {
    if (value) add(std::move(flag), std::move(field), nlohmann::json(*value));
  }
  // A flag without a value (--no-train sets tune.train_after = false).
  void set_flag(std::string flag, std::string field, bool given, nlohmann::json value);
  void add(std::string flag, std::string field, nlohmann::json value);

  bool has(std::string const& field) const { return find(field) != nullptr; }
  // "--steps" for an overridden field, "" otherwise.
  std::string flag_for(std::string const& field) const;

  // Writes each value at its field's dotted path ("train.steps" -> j["train"]["steps"]).
  void apply(nlohmann::json& j) const;
  // Runs `check`; a ConfigError that names an overridden field is thrown again with that flag and
  // its value in front (the earliest field named in the message decides).
  template <class F>
  auto attribute(F&& check) const -> decltype(check()) {
    try {
      return check();
    } catch (ConfigError const& e) {
      rethrow_with_flag(e);
      throw;
    }
  }

 private:
  struct Entry {
    std::string flag, field;
    nlohmann::json value;
    bool valueless = false;
  };
  Entry const* find(std::string const& field) const;
  void rethrow_with_flag(ConfigError const& e) const;
  std::vector<Entry> entries_;
};

// A configuration file's text, read once (read_config_file: a FIFO, a device or a folder refused
// before any read, at most 16 MiB); a command that loads the configuration more than once (train:
// again with the micro-batch dealt to its replicas) loads this one text each time.
struct ConfigFile {
  std::string path;  // "": the embedded default configuration
  std::string text;  // its text ("" for the embedded default)
};
ConfigFile read_config(std::string const& path);

// Loads the configuration (`path`, or the embedded default when empty) with `overrides` applied;
// errors about overridden fields name their flag (see Overrides).
Config load_config_with(std::string const& path, Overrides const& overrides);
Config load_config_with(ConfigFile const& file, Overrides const& overrides);
// The same with any edit of the JSON (programs' own settings, e.g. the benchmarks').
Config load_config_with(std::string const& path, std::function<void(nlohmann::json&)> const& edit);
Config load_config_with(ConfigFile const& file, std::function<void(nlohmann::json&)> const& edit);
// Whether the configuration file sets section.field itself (the embedded default, path "", sets
// every field and counts as setting none: defaults may be adapted).
bool config_file_sets(ConfigFile const& file, char const* section, char const* field);
// The micro-batch that deals `batch` evenly to `replicas`: the largest divisor m of batch with
// m <= micro_batch and (batch / m) a multiple of replicas; 0 if batch is no multiple of replicas.
int replica_micro_batch(int batch, int micro_batch, int replicas);
// Where the configuration came from, for messages: the path or "the embedded default configuration".
std::string config_source(std::string const& path);
void make_data_if_missing(Config const& cfg);

// A CLI11 check for integer flags: the whole text must be an integer that fits 64 bits, signed or
// unsigned (CLI11 2.1 would otherwise saturate 99999999999999999999 to 2^63-1 and pass it on as if
// typed, and wrap -5 into an unsigned 18446744073709551611).
CLI::Validator whole_number();
// The JSON integer of a text whole_number() accepted (a signed one if it fits, else unsigned), so
// that an unsigned field such as train.seed takes all its values and a negative one is judged by
// the field's own check.
nlohmann::json integer_json(std::string const& text);
// A number (what strtod reads, the whole text), and not beyond the range of a double: "1e999"
// is refused here, naming it, rather than turned into infinity.
CLI::Validator real_number();
nlohmann::json real_json(std::string const& text);  // the number of a text real_number() accepted

// `--power-limits W,W,...` or `--power-limits all` (joule tune, joule train --tune): the JSON of
// tune.power_limits_w, whose own check judges the values. One text, for both commands' help.
inline constexpr char const* kPowerLimitsHelp =
    "GPU power limits to try, in watts, comma-separated, or all (overrides tune.power_limits_w; NVML sets them "
    "before each trial and restores the limit at the end: needs root or nvidia-smi's privilege on the GPU)";
nlohmann::json power_limits_json(std::vector<std::string> const& values);

}  // namespace joule::apps
