#include "core/config/reconfigurable.hpp"

#include <nlohmann/json.hpp>

#include <cstring>
#include <type_traits>

namespace joule {

namespace {
template <class T>
double as_number(T v) {
  if constexpr (std::is_enum_v<T>) return double(static_cast<int>(v)); else return double(v);
}
template <class T>
T from_number(double v) {
  if constexpr (std::is_enum_v<T>) return static_cast<T>(int(v)); else return static_cast<T>(v);
}

// The row of a field held as `Member` in Reconfigurable and `Field` in TrainConfig.
template <auto Member, auto Field>
ReconfigurableField row(char const* name, char const* meaning, char const* note, char const* const* value_names = nullptr,
                        int value_count = 0) {
  using T = std::remove_reference_t<decltype(std::declval<Reconfigurable&>().*Member)>;
  static_assert(std::is_same_v<T, std::remove_reference_t<decltype(std::declval<TrainConfig&>().*Field)>>,
                "a reconfigurable field has the configuration field's type");
  return {name,
          [](Reconfigurable const& r) { return as_number(r.*Member); },
          [](Reconfigurable& r, double v) { r.*Member = from_number<T>(v); },
          [](TrainConfig const& t) { return as_number(t.*Field); },
          [](TrainConfig& t, double v) { t.*Field = from_number<T>(v); },
          !std::is_floating_point_v<T>,
          value_names,
          value_count,
          meaning,
          note};
}
}  // namespace

std::vector<ReconfigurableField> const& reconfigurable_fields() {
  using R = Reconfigurable;
  using T = TrainConfig;
  static std::vector<ReconfigurableField> const table = {
      row<&R::offload_ratio, &T::offload_ratio>("train.offload_ratio",
                                                "share of parameter bytes whose AdamW state lives on the host", ""),
      row<&R::recompute_depth, &T::recompute_depth>("train.recompute_depth", "blocks to recompute", ""),
      row<&R::host_threads, &T::host_threads>("train.host_threads", "threads for the host optimizer, 0 = all", ""),
      row<&R::micro_batch, &T::micro_batch>("train.micro_batch", "samples per forward/backward", "divides train.batch"),
      row<&R::seq_shards, &T::seq_shards>("train.seq_shards", "processes sharing each sequence, Ulysses style",
                                          "needs mpirun"),
      row<&R::offload_cast, &T::offload_cast>("train.offload_cast",
                                              "bf16: where offloaded weights are rounded to bf16", "", kOffloadCastNames,
                                              2),
  };
  return table;
}

std::string reconfigurable_flag(ReconfigurableField const& f) {
  std::string flag = std::string("--") + (std::strchr(f.name, '.') + 1);
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

std::string reconfigurable_allowed_text(ReconfigurableField const& f) {
  if (f.value_names) {
    std::string text;
    for (int i = 0; i < f.value_count; ++i) text += (i == 0 ? "" : i + 1 == f.value_count ? " or " : ", ") + std::string(f.value_names[i]);
    return text;
  }
  return field_range_text(f.name);
}

ReconfigurableField const* reconfigurable_field(char const* name) {
  for (auto const& f : reconfigurable_fields())
    if (std::strcmp(f.name, name) == 0) return &f;
  return nullptr;
}

bool Reconfigurable::operator==(Reconfigurable const& o) const {
  for (auto const& f : reconfigurable_fields())
    if (f.get(*this) != f.get(o)) return false;
  return true;
}

Reconfigurable reconfigurable_of(TrainConfig const& t) {
  Reconfigurable r;
  for (auto const& f : reconfigurable_fields()) f.set(r, f.configured(t));
  return r;
}

Config with_reconfigured(Config const& c, Reconfigurable const& r) {
  Config out = c;
  for (auto const& f : reconfigurable_fields()) f.configure(out.train, f.get(r));
  if (auto const problem = reconfigurable_problem(out.model, out.train); !problem.field.empty())
    throw ConfigError("train." + problem.field + " " + problem.what);
  // The stored text follows: only the fields that changed are written (one the configuration left
  // out stays out while it keeps its default), so the text reads as the user's plus the switch.
  nlohmann::json j;
  bool changed = false;
  for (auto const& f : reconfigurable_fields()) {
    double const v = f.get(r);
    if (v == f.configured(c.train)) continue;
    if (!changed) j = nlohmann::json::parse(c.json);
    changed = true;
    auto& field = j[nlohmann::json::json_pointer("/" + std::string(f.name).replace(std::strlen("train"), 1, "/"))];
    field = f.value_names ? nlohmann::json(f.value_names[int(v)]) : f.integer ? nlohmann::json((long long)v) : nlohmann::json(v);
  }
  if (changed) out.json = j.dump(2);
  return out;
}

}  // namespace joule
