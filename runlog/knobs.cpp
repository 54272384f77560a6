#include "runlog/knobs.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace joule::scheduler {

namespace {
constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

std::vector<double> all_offload_ratios(Config const&, int) { return {0, 0.25, 0.5, 0.75, 1}; }
std::vector<double> every_recompute_depth(Config const& c, int) {
  std::vector<double> depths;
  for (int k = 0; k <= c.model.layers; ++k) depths.push_back(k);
  return depths;
}
// Every divisor of the process count that divides the heads and the sequence.
std::vector<double> every_shard_count(Config const& c, int world) {
  std::vector<double> counts;
  for (int p = 1; p <= world; ++p)
    if (world % p == 0 && c.model.heads % p == 0 && c.model.seq_len() % p == 0) counts.push_back(p);
  return counts;
}
std::string power_limit_problem(Config const&, double w) {
  return w >= 1 && w <= 100000 ? "" : "outside [1, 100000] watts";
}
std::string cast_needs_bf16(Config const& c) {
  return c.train.precision == Precision::bf16 ? ""
                                              : "is for bf16 runs (train.precision \"bf16\"): an fp32 run has no cast to place";
}
}  // namespace

std::vector<KnobInfo> const& knob_table() {
  // name, label, column, config field, tune field, integer, neutral,
  // has_unset, unset, unset text, special, special text, format, unit,
  // searched by default, value problem, not searchable, own get and set (the power limit only)
  static std::vector<KnobInfo> const table = [] {
    std::vector<KnobInfo> rows = {
        {"offload_ratio", "offload", "offload", "train.offload_ratio", "offload_ratios", false, true,
         false, kNone, "", kNone, nullptr, "{:.2f}", "", all_offload_ratios},
        {"recompute_depth", "recompute", "recompute", "train.recompute_depth", "recompute_depths", true, true,
         false, kNone, "", kNone, nullptr, "{:.0f}", "", every_recompute_depth},
        {"seq_shards", "shards", "shards", "train.seq_shards", "seq_shards", true, false,
         false, kNone, "", kNone, nullptr, "{:.0f}", "", every_shard_count},
        {"micro_batch", "micro-batch", "micro-batch", "train.micro_batch", "micro_batches", true, false,
         true, 0, "config", kNone, nullptr, "{:.0f}", ""},
        {"host_threads", "host threads", "threads", "train.host_threads", "host_threads", true, true,
         true, -1, "config", 0, "all", "{:.0f}", ""},
        {"power_limit_w", "power limit", "power W", "", "power_limits_w", true, true,
         true, 0, "-", kNone, nullptr, "{:.0f}", " W", nullptr, power_limit_problem, nullptr,
         [](Knobs const& k) { return double(k.power_limit_w); }, [](Knobs& k, double v) { k.power_limit_w = int(v); }},
        // Arithmetic-neutral: both placements round with one function (tests/test_training.cpp).
        {"offload_cast", "cast on", "cast", "train.offload_cast", "offload_casts", true, true,
         true, -1, "config", kNone, nullptr, "{:.0f}", "", nullptr, nullptr, cast_needs_bf16},
    };
    for (auto& k : rows) {
      k.field_row = *k.config_field ? reconfigurable_field(k.config_field) : nullptr;
      if (*k.config_field && !k.field_row)
        throw std::logic_error(std::string("knob ") + k.name + ": " + k.config_field + " is no reconfigurable field");
      if (!k.field_row && (!k.own_get || !k.own_set))
        throw std::logic_error(std::string("knob ") + k.name + ": neither a configuration field nor a member of its own");
      if (k.field_row) k.value_names = k.field_row->value_names, k.value_count = k.field_row->value_count;
    }
    return rows;
  }();
  return table;
}

KnobInfo const& knob(std::string_view name) {
  std::string names;
  for (auto const& k : knob_table()) {
    if (name == k.name) return k;
    names += (names.empty() ? "" : ", ") + std::string(k.name);
  }
  throw std::invalid_argument("unknown knob '" + std::string(name) + "' (the knobs are: " + names + ")");
}

bool knob_is_set(KnobInfo const& k, double value) { return !k.has_unset || value != k.unset; }

std::string knob_value_problem(KnobInfo const& k, Config const& c, double value) {
  if (k.value_problem) return k.value_problem(c, value);
  if (!k.field()) return "";
  TrainConfig t = c.train;
  k.field()->configure(t, value);
  auto const problem = reconfigurable_problem(c.model, t);
  return problem.field.empty() ? "" : "train." + problem.field + " " + problem.what;
}

std::string config_pointer(KnobInfo const& k) {
  std::string pointer = std::string("/") + k.config_field;
  std::replace(pointer.begin(), pointer.end(), '.', '/');
  return pointer;
}

std::string knob_value_text(KnobInfo const& k, double value) {
  if (std::isnan(value)) return "-";
  if (!knob_is_set(k, value)) return k.unset_text;
  if (k.special_text && value == k.special) return k.special_text;
  if (k.value_names && value >= 0 && value < k.value_count && value == std::floor(value)) return k.value_names[int(value)];
  return fmt::format(fmt::runtime(k.format), value);
}

std::string knob_table_json() {
  auto number = [](double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };
  nlohmann::json rows = nlohmann::json::array();
  for (auto const& k : knob_table())
    rows.push_back({{"name", k.name},
                    {"label", k.label},
                    {"column", k.column},
                    {"config_field", k.config_field},
                    {"tune_field", k.tune_field},
                    {"integer", k.integer},
                    {"neutral", k.neutral},
                    {"unset", k.has_unset ? number(k.unset) : nlohmann::json()},
                    {"unset_text", k.unset_text},
                    {"special", k.special_text ? number(k.special) : nlohmann::json()},
                    {"special_text", k.special_text ? k.special_text : ""},
                    {"format", k.format},
                    {"unit", k.unit},
                    {"value_names", k.value_names ? nlohmann::json(std::vector<std::string>(
                                                        k.value_names, k.value_names + k.value_count))
                                                  : nlohmann::json::array()}});
  return rows.dump();
}

Knobs::Knobs() {
  for (auto const& k : knob_table())
    if (k.has_unset) k.set(*this, k.unset);
}

std::string Knobs::describe() const {
  // The optional knobs only when the search set them; otherwise the configuration's value holds.
  std::string text;
  for (auto const& k : knob_table()) {
    double const v = k.get(*this);
    if (!knob_is_set(k, v)) continue;
    text += fmt::format("{}{} {}{}", text.empty() ? "" : ", ", k.label, knob_value_text(k, v), k.unit);
  }
  return text;
}

bool Knobs::operator==(Knobs const& o) const {
  for (auto const& k : knob_table())
    if (k.get(*this) != k.get(o)) return false;
  return true;
}

}  // namespace joule::scheduler
