#pragma once
// The knobs the scheduler tunes, and the one table that says everything about them: the search
// walks its rows, the run log writes and reads one attribute per row, Knobs::describe(), the
// report's columns and the CSV read their names and texts from it, and the run log stores it
// (attribute `knob_table`) so that the plotting script labels values as joule does.
#include "core/config/reconfigurable.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace joule::scheduler {

// One point of the search space: the running trainer's settings (Reconfigurable; a knob that
// sets a configuration field reads and sets its member there, so a new field of Reconfigurable is
// a member here with nothing added) and the GPU power limit. A knob the search does not vary
// holds its row's unset value, which Knobs() gives every such knob: micro_batch 0, host_threads
// -1, offload_cast -1 (outside its names) keep the configuration's value; power 0 is not touched.
struct Knobs : Reconfigurable {
  int power_limit_w = 0;  // GPU power limit; 0: not touched

  Knobs();
  // "offload 0.50, recompute 2, shards 1" (+ the optional knobs that are set).
  std::string describe() const;
  bool operator==(Knobs const& o) const;
  bool operator!=(Knobs const& o) const { return !(*this == o); }
};

struct KnobInfo {
  char const* name;          // run-log attribute, CSV column, the strategy's dimension
  char const* label;         // in describe(): "offload 0.50"
  char const* column;        // the report's column heading
  char const* config_field;  // the field of the training configuration it sets ("": none, a GPU setting)
  char const* tune_field;    // the tune section's list of values
  bool integer;              // whole numbers (an integer attribute in the log)
  // Bitwise the same parameters whatever its value (tested for each); the others give the same
  // mathematics up to summation order.
  bool neutral;
  // The value meaning "not set by the search" (the configuration's value, or not touched), with
  // its text; has_unset false: the search always sets it.
  bool has_unset;
  double unset;
  char const* unset_text;
  // A value with a name of its own (host threads 0: "all"); special_text nullptr: none.
  double special;
  char const* special_text;
  char const* format;  // format of a plain value, the same for fmt and Python: "{:.2f}", "{:.0f}"
  char const* unit;    // after the value in describe(): " W"
  // The values searched where the tune section gives none (absent, or "all"), for configuration
  // `c` run on `world` processes; nullptr: none, the configuration's value.
  std::vector<double> (*searched_by_default)(Config const& c, int world) = nullptr;
  // What is wrong with `value` for configuration `c` beyond its type ("" when allowed); nullptr:
  // what the running trainer's field allows (reconfigurable_problem, the configuration's own check).
  std::string (*value_problem)(Config const& c, double value) = nullptr;
  // Why the knob cannot be searched in configuration `c` ("" when it can): an fp32 run has no cast
  // to place. nullptr: always.
  std::string (*not_searchable)(Config const& c) = nullptr;

  // A knob that is no configuration field (the power limit): its member of Knobs.
  double (*own_get)(Knobs const&) = nullptr;
  void (*own_set)(Knobs&, double) = nullptr;

  // Filled by knob_table() from the running trainer's field named config_field
  // (core/config/reconfigurable.hpp); nullptr for a knob that is no configuration field.
  ReconfigurableField const* field_row = nullptr;
  // A knob whose values are names (train.offload_cast: 0 "device", 1 "host"): value v is
  // value_names[v] in the configuration, in texts and in the tune section; nullptr: numbers.
  // The field's names.
  char const* const* value_names = nullptr;
  int value_count = 0;

  ReconfigurableField const* field() const { return field_row; }
  double configured(Config const& c) const { return field_row->configured(c.train); }  // the configuration's value
  // The knob's value in a point of the search, through its field (or its own member).
  double get(Knobs const& k) const { return field_row ? field_row->get(k) : own_get(k); }
  void set(Knobs& k, double v) const { field_row ? field_row->set(k, v) : own_set(k, v); }
};

// Every knob, in the order the strategy takes them, describe() lists them and the log's and
// report's columns show them; the search space varies the first fastest.
std::vector<KnobInfo> const& knob_table();
KnobInfo const& knob(std::string_view name);  // throws std::invalid_argument naming the knobs
bool knob_is_set(KnobInfo const& k, double value);
// What is wrong with `value` of knob `k` for configuration `c` ("" when it may be tried): its
// value_problem, else its configuration field's check.
std::string knob_value_problem(KnobInfo const& k, Config const& c, double value);
// The configuration field as a JSON pointer: "train.offload_ratio" -> "/train/offload_ratio".
std::string config_pointer(KnobInfo const& k);
// A value for people: "0.50", "2", "all", "config", "host", "-".
std::string knob_value_text(KnobInfo const& k, double value);
// The table as JSON (name, label, column, config/tune fields, integer, neutral, unset and its
// text, the special value and its text, format, unit, value names): what readers of the run log
// need to label values.
std::string knob_table_json();

}  // namespace joule::scheduler
