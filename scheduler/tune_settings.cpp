#include "scheduler/tune_settings.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace joule::scheduler {

std::vector<double> const& TuneSettings::values_of(std::string const& knob) const {
  static std::vector<double> const none;
  auto const it = knob_values.find(knob);
  return it == knob_values.end() ? none : it->second;
}

StrategyKind TuneSettings::strategy_for(std::size_t feasible_candidates) const {
  if (strategy == "auto")
    return int(feasible_candidates) <= auto_exhaustive_limit ? StrategyKind::exhaustive
                                                              : StrategyKind::coordinate_descent;
  return parse_strategy(strategy);
}

namespace {

[[noreturn]] void fail_field(std::string const& field, std::string const& what) {
  throw ConfigError("config: tune." + field + " " + what);
}

// Whether the JSON number v lies in [lo, hi], judged before any conversion to T (a 64-bit value
// converted to int first would wrap: 4294967297 became 1).
template <class T>
bool within(nlohmann::json const& v, T lo, T hi) {
  if constexpr (std::is_integral_v<T>) {
    if (v.is_number_float()) return v.get<double>() >= double(lo) && v.get<double>() <= double(hi);
    if (v.is_number_unsigned()) {
      auto const u = v.get<std::uint64_t>();
      return hi >= 0 && u <= std::uint64_t(hi) && (lo <= 0 || u >= std::uint64_t(lo));
    }
    auto const x = v.get<std::int64_t>();
    return x >= std::int64_t(lo) && x <= std::int64_t(hi);
  } else {
    double const x = v.get<double>();
    return x >= lo && x <= hi;
  }
}

// An integer field: a JSON integer, or a number with no fraction (2e0 and 2.0 are the number 2:
// JSON has one kind of number).
bool whole(nlohmann::json const& v) {
  return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
}

// A knob's list from its tune field: numbers (whole ones for an integer knob), or its value names;
// each value checked as the configuration checks the field it sets. Absent or "all": none given.
std::vector<double> knob_list(nlohmann::json const& j, KnobInfo const& knob, Config const& config) {
  char const* field = knob.tune_field;
  if (!j.contains(field)) return {};
  auto const& v = j.at(field);
  if (!knob.value_names && v.is_string() && v.get<std::string>() == "all") return {};
  if (auto const why = knob.not_searchable ? knob.not_searchable(config) : std::string(); !why.empty()) fail_field(field, why);
  std::string allowed_names;
  for (int i = 0; i < knob.value_count; ++i) allowed_names += (i ? ", \"" : "\"") + std::string(knob.value_names[i]) + "\"";
  if (!v.is_array() || v.empty())
    fail_field(field, knob.value_names ? "must be a non-empty list of " + allowed_names
                                       : std::string("must be a non-empty list of numbers (or \"all\")"));
  std::vector<double> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::string const entry = std::string(field) + "[" + std::to_string(i) + "]";
    double value = 0;
    if (knob.value_names) {  // names, each once
      std::string const name = v[i].is_string() ? v[i].get<std::string>() : v[i].dump();
      int index = -1;
      for (int n = 0; n < knob.value_count; ++n)
        if (v[i].is_string() && name == knob.value_names[n]) index = n;
      if (index < 0)
        fail_field(field, "contains " + (v[i].is_string() ? "\"" + name + "\"" : name) + "; allowed: " + allowed_names);
      if (std::find(out.begin(), out.end(), double(index)) == out.end()) out.push_back(index);
      continue;
    }
    if (!(knob.integer ? whole(v[i]) : v[i].is_number()))
      fail_field(entry, knob.integer ? "must be a whole number" : "must be a number");
    if (knob.integer && !within<long long>(v[i], -(1LL << 31), (1LL << 31) - 1))
      fail_field(entry, "= " + v[i].dump() + " is outside the integers joule takes");
    value = v[i].get<double>();
    if (auto const problem = knob_value_problem(knob, config, value); !problem.empty())
      fail_field(entry, "= " + v[i].dump() + ": " + problem);
    out.push_back(value);
  }
  return out;
}

template <class T>
T number(nlohmann::json const& j, char const* field, T fallback, T lo, T hi) {
  if (!j.contains(field)) return fallback;
  auto const& v = j.at(field);
  if (!(std::is_integral_v<T> ? whole(v) : v.is_number())) fail_field(field, std::is_integral_v<T> ? "must be a whole number" : "must be a number");
  if (!within(v, lo, hi)) fail_field(field, "= " + v.dump() + " is outside [" + nlohmann::json(lo).dump() + ", " + nlohmann::json(hi).dump() + "]");
  return v.get<T>();
}

}  // namespace

TuneSettings parse_tune_settings(Config const& config) {
  TuneSettings s;
  auto const root = nlohmann::json::parse(config.json);
  if (!root.contains("tune")) return s;
  auto const& t = root.at("tune");
  if (!t.is_object()) throw ConfigError("config: tune must be an object");
  // The knobs' lists (knobs.hpp), then how the search runs.
  std::vector<std::string> known;
  for (auto const& k : knob_table()) known.push_back(k.tune_field);
  for (char const* field : {"objective", "strategy", "warmup_steps", "measured_steps", "max_repeats", "ci_target",
                            "reference_every", "confirm_rounds", "device_memory_budget_mib", "train_after", "auto_exhaustive_limit"})
    known.push_back(field);
  for (auto const& item : t.items()) {
    bool found = false;
    for (auto const& k : known) found = found || item.key() == k;
    if (!found) {
      std::string allowed;
      for (auto const& k : known) allowed += (allowed.empty() ? "" : ", ") + k;
      throw ConfigError("config: unknown field tune." + item.key() + " (allowed: " + allowed + ")");
    }
  }
  if (t.contains("objective")) {
    if (!t.at("objective").is_string()) fail_field("objective", "must be a string");
    try {
      s.objective = Objective::parse(t.at("objective").get<std::string>());
    } catch (std::invalid_argument const& e) {
      fail_field("objective", std::string(": ") + e.what());
    }
  }
  if (t.contains("strategy")) {
    if (!t.at("strategy").is_string()) fail_field("strategy", "must be a string");
    s.strategy = t.at("strategy").get<std::string>();
    if (s.strategy != "auto") try {
        parse_strategy(s.strategy);
      } catch (std::invalid_argument const& e) {
        fail_field("strategy", std::string(": ") + e.what() + " (or \"auto\")");
      }
  }
  for (auto const& knob : knob_table())
    if (auto values = knob_list(t, knob, config); !values.empty()) s.knob_values[knob.name] = std::move(values);
  s.warmup_steps = number<int>(t, "warmup_steps", s.warmup_steps, 0, 1000);
  s.measured_steps = number<int>(t, "measured_steps", s.measured_steps, 2, 10000);
  s.max_repeats = number<int>(t, "max_repeats", s.max_repeats, 1, 100);
  s.ci_target = number<double>(t, "ci_target", s.ci_target, 0.0, 1.0);
  s.reference_every = number<int>(t, "reference_every", s.reference_every, 0, 1 << 20);
  s.confirm_rounds = number<int>(t, "confirm_rounds", s.confirm_rounds, 0, 100);
  if (s.confirm_rounds == 1) fail_field("confirm_rounds", "is 0 (no confirmation) or at least 2: one round gives no spread to test with");
  s.device_memory_budget_mib = number<double>(t, "device_memory_budget_mib", 0.0, 0.0, 1e9);
  s.auto_exhaustive_limit = number<int>(t, "auto_exhaustive_limit", s.auto_exhaustive_limit, 0, 1 << 20);
  if (t.contains("train_after")) {
    if (!t.at("train_after").is_boolean()) fail_field("train_after", "must be true or false");
    s.train_after = t.at("train_after").get<bool>();
  }
  return s;
}

}  // namespace joule::scheduler
