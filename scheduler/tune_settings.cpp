#include "scheduler/tune_settings.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>

namespace joule::scheduler {

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

template <class T>
std::vector<T> list(nlohmann::json const& j, char const* field, T lo, T hi) {
  if (!j.contains(field)) return {};
  auto const& v = j.at(field);
  if (v.is_string() && v.get<std::string>() == "all") return {};
  if (!v.is_array() || v.empty()) fail_field(field, "must be a non-empty list of numbers (or \"all\")");
  std::vector<T> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    bool const ok = std::is_integral_v<T> ? whole(v[i]) : v[i].is_number();
    if (!ok) fail_field(std::string(field) + "[" + std::to_string(i) + "]", std::is_integral_v<T> ? "must be a whole number" : "must be a number");
    if (!within(v[i], lo, hi))
      fail_field(std::string(field) + "[" + std::to_string(i) + "]",
           "= " + v[i].dump() + " is outside [" + nlohmann::json(lo).dump() + ", " + nlohmann::json(hi).dump() + "]");
    out.push_back(v[i].get<T>());
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
  auto const offload = list<double>(t, "offload_ratios", 0.0, 1.0);
  if (!offload.empty() || t.contains("offload_ratios")) s.offload_ratios = offload.empty() ? s.offload_ratios : offload;
  s.recompute_depths = list<int>(t, "recompute_depths", 0, config.model.layers);
  s.seq_shards = list<int>(t, "seq_shards", 1, 4096);
  for (int p : s.seq_shards)
    if (config.model.heads % p || config.model.seq_len() % p)
      fail_field("seq_shards", "contains " + std::to_string(p) + ", which does not divide model.heads (" +
                             std::to_string(config.model.heads) + ") and the sequence length (" +
                             std::to_string(config.model.seq_len()) + ")");
  s.micro_batches = list<int>(t, "micro_batches", 1, config.train.batch);
  for (int m : s.micro_batches)
    if (config.train.batch % m)
      fail_field("micro_batches", "contains " + std::to_string(m) + ", which does not divide train.batch = " +
                                std::to_string(config.train.batch) + " (the global batch stays fixed)");
  s.host_threads = list<int>(t, "host_threads", 0, 4096);
  s.power_limits_w = list<int>(t, "power_limits_w", 1, 100000);  // watts; needs NVML and privileges
  if (t.contains("offload_casts")) {
    auto const& v = t.at("offload_casts");
    if (!v.is_array() || v.empty()) fail_field("offload_casts", "must be a non-empty list of \"device\" and \"host\"");
    for (auto const& item : v) {
      std::string const name = item.is_string() ? item.get<std::string>() : item.dump();
      if (name != "device" && name != "host")
        fail_field("offload_casts", "contains " + (item.is_string() ? "\"" + name + "\"" : name) +
                                        "; allowed: \"device\", \"host\"");
      int const cast = name == "host" ? 1 : 0;
      if (std::find(s.offload_casts.begin(), s.offload_casts.end(), cast) == s.offload_casts.end())
        s.offload_casts.push_back(cast);
    }
    if (config.train.precision != Precision::bf16)
      fail_field("offload_casts", "is for bf16 runs (train.precision \"bf16\"): an fp32 run has no cast to place");
  }
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
