#include "run_config.hpp"

#include "commands.hpp"
#include "default_config.hpp"

#include "core/data/synth.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace joule::apps {

char const* default_config_json() { return kDefaultConfigJson; }

void Overrides::add(std::string flag, std::string field, nlohmann::json value) {
  entries_.push_back({std::move(flag), std::move(field), std::move(value), false});
}

void Overrides::set_flag(std::string flag, std::string field, bool given, nlohmann::json value) {
  if (given) entries_.push_back({std::move(flag), std::move(field), std::move(value), true});
}

Overrides::Entry const* Overrides::find(std::string const& field) const {
  for (auto const& e : entries_)
    if (e.field == field) return &e;
  return nullptr;
}

std::string Overrides::flag_for(std::string const& field) const {
  auto const* e = find(field);
  return e ? e->flag : "";
}

void Overrides::apply(nlohmann::json& j) const {
  for (auto const& e : entries_) {
    nlohmann::json* node = &j;
    std::string const& f = e.field;
    for (std::size_t start = 0;;) {
      auto const dot = f.find('.', start);
      std::string const key = f.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      // A section that is not an object is the configuration's own error: left for its checks.
      if (!node->is_object() && !node->is_null()) break;
      node = &(*node)[key];
      if (dot == std::string::npos) {
        *node = e.value;
        break;
      }
      start = dot + 1;
    }
  }
}

namespace {
// An error in the file's own text, found before any flag was applied: it names the file, never a
// flag, even where a flag overrides the same field.
class FileTextError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};
}  // namespace

void Overrides::rethrow_with_flag(ConfigError const& error) const {
  if (dynamic_cast<FileTextError const*>(&error)) return;
  std::string const msg = error.what();
  auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
  Entry const* hit = nullptr;
  std::size_t at = std::string::npos;
  for (auto const& e : entries_) {
    for (std::size_t pos = msg.find(e.field); pos != std::string::npos; pos = msg.find(e.field, pos + 1)) {
      bool const starts = pos == 0 || !is_name_char(msg[pos - 1]);
      std::size_t const end = pos + e.field.size();
      bool const ends = end == msg.size() || !is_name_char(msg[end]);
      if (starts && ends) {
        if (pos < at) at = pos, hit = &e;
        break;
      }
    }
  }
  if (!hit) return;
  // The file's name in front of the field would blame the file; the flag's value replaced it.
  std::string value;
  if (!hit->valueless)
    value = " " + (hit->value.is_number_float()  ? fmt::format("{}", hit->value.get<double>())
                   : !hit->value.is_string()      ? hit->value.dump()
                   : hit->value.get<std::string>().empty() ? std::string("\"\"")
                                                           : hit->value.get<std::string>());
  throw ConfigError(hit->flag + value + ": " + msg.substr(at));
}

std::string config_source(std::string const& path) {
  return path.empty() ? "the embedded default configuration" : path;
}

ConfigFile read_config(std::string const& path) {
  ConfigFile file;
  file.path = path;
  if (!path.empty()) file.text = read_config_file(path);  // one bounded read of one descriptor
  return file;
}

Config load_config_with(std::string const& path, Overrides const& overrides) {
  return load_config_with(read_config(path), overrides);
}

Config load_config_with(ConfigFile const& file, Overrides const& overrides) {
  return overrides.attribute([&] { return load_config_with(file, [&](nlohmann::json& j) { overrides.apply(j); }); });
}

Config load_config_with(std::string const& path, std::function<void(nlohmann::json&)> const& edit) {
  return load_config_with(read_config(path), edit);
}

Config load_config_with(ConfigFile const& file, std::function<void(nlohmann::json&)> const& edit) {
  std::string const text = file.path.empty() ? std::string(default_config_json()) : file.text;
  std::string const source = config_source(file.path);
  // Depth and size first: nlohmann's parser, dump() and destructor recurse (a few hundred KB of
  // '[' overflowed the stack before any check ran).
  try {  // a problem of the file's text (its size, nesting, a key given twice), never of a flag
    check_json_limits(text, source);
  } catch (ConfigError const& e) {
    throw FileTextError(e.what());
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (nlohmann::json::exception const&) {
    try {
      parse_config(text, source);  // throws the ConfigError that names the field or the position
    } catch (ConfigError const& e) {
      throw FileTextError(e.what());
    }
    throw;
  }
  if (j.is_object() && edit) edit(j);  // a non-object is reported by parse_config
  return parse_config(j.dump(), source);
}

bool config_file_sets(ConfigFile const& file, char const* section, char const* field) {
  if (file.path.empty()) return false;
  try {
    check_json_limits(file.text, file.path);  // as load_config_with read it: no deeper than a parser may walk
  } catch (ConfigError const&) {
    return false;
  }
  auto const j = nlohmann::json::parse(file.text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains(section) && j[section].is_object() && j[section].contains(field);
}

int replica_micro_batch(int batch, int micro_batch, int replicas) {
  for (int m = std::min(micro_batch, batch); m >= 1; --m)
    if (batch % m == 0 && (batch / m) % replicas == 0) return m;
  return 0;
}

void make_data_if_missing(Config const& cfg) {
  if (std::filesystem::exists(cfg.data.path)) return;
  auto const parent = std::filesystem::path(cfg.data.path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  auto const s = SynthOptions::for_model(cfg.model, 4096, cfg.train.seed);
  write_synthetic(cfg.data.path, s);
  fmt::print("wrote {} synthetic samples to {}\n", s.count, cfg.data.path);
}

namespace {

template <class T>
std::errc parse_whole(std::string const& text, T& value) {
  char const* const end = text.data() + text.size();
  char const* const begin = text.data() + (!text.empty() && text[0] == '+');
  auto const [ptr, ec] = std::from_chars(begin, end, value);
  return ec == std::errc() && ptr != end ? std::errc::invalid_argument : ec;
}

}  // namespace

CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        long long s = 0;
        unsigned long long u = 0;
        auto const signed_ec = parse_whole(text, s);
        if (signed_ec == std::errc()) return "";
        auto const unsigned_ec = parse_whole(text, u);
        if (unsigned_ec == std::errc()) return "";
        if (signed_ec == std::errc::result_out_of_range) return text + " is too large for a 64-bit integer";
        return text + " is not a whole number";
      },
      "");
}

nlohmann::json integer_json(std::string const& text) {
  long long s = 0;
  if (parse_whole(text, s) == std::errc()) return s;
  unsigned long long u = 0;
  if (parse_whole(text, u) == std::errc()) return u;
  throw std::invalid_argument(text + " is not a 64-bit integer");
}

namespace {
// 0: a number; 1: not one; 2: beyond any double.
int read_real(std::string const& text, double& value) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return 1;
  char* end = nullptr;
  errno = 0;
  value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return 1;
  if (errno == ERANGE && std::isinf(value)) return 2;
  return 0;
}
}  // namespace

CLI::Validator real_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        int const status = read_real(text, value);
        return status == 0 ? "" : status == 2 ? text + " is beyond the range of any double" : text + " is not a number";
      },
      "");
}

nlohmann::json real_json(std::string const& text) {
  double value = 0;
  if (read_real(text, value) != 0) throw std::invalid_argument(text + " is not a number");
  return value;
}

nlohmann::json power_limits_json(std::vector<std::string> const& values) {
  if (values.size() == 1 && values[0] == "all") return "all";
  nlohmann::json list = nlohmann::json::array();
  for (auto const& v : values) {
    if (!whole_number()(std::string(v)).empty())
      throw ConfigError("--power-limits: '" + v + "' is not a whole number of watts (give W,W,... or all)");
    list.push_back(integer_json(v));
  }
  return list;
}

}  // namespace joule::apps
