#pragma once
// What a running trainer may change between optimizer steps (Trainer::reconfigure), typed: six
// fields of TrainConfig, each of the same name. Everything else of a run is fixed for its life, so
// a switch cannot change it by construction. reconfigurable_fields() is the one list of them: the
// trainer, its messages and the scheduler's knob table read it (every knob that sets a
// configuration field names a row here: tests/test_scheduler.cpp fails when they disagree).
#include "core/config/config.hpp"

#include <string>
#include <vector>

namespace joule {

struct Reconfigurable {
  double offload_ratio = 0.0;  // train.offload_ratio
  int recompute_depth = 0;     // train.recompute_depth
  int host_threads = 0;        // train.host_threads
  int micro_batch = 32;        // train.micro_batch
  int seq_shards = 1;          // train.seq_shards (the process groups re-formed with it)
  TrainConfig::OffloadCast offload_cast = TrainConfig::OffloadCast::device;  // train.offload_cast

  bool operator==(Reconfigurable const& o) const;
  bool operator!=(Reconfigurable const& o) const { return !(*this == o); }
};

// One field: its configuration name, and typed access as a number to the struct and to the
// configuration (a named value by its index: offload_cast 0 "device", 1 "host").
struct ReconfigurableField {
  char const* name;  // "train.offload_ratio"
  double (*get)(Reconfigurable const&);
  void (*set)(Reconfigurable&, double);
  double (*configured)(TrainConfig const&);
  void (*configure)(TrainConfig&, double);
  bool integer;                    // written to the configuration's text as an integer
  char const* const* value_names;  // written as these names; nullptr: as numbers
  int value_count;
  char const* meaning;  // for people: `joule train`'s flag (--offload-ratio, ...) shows it in --help
  char const* note;     // what else bounds it ("" none): "divides train.batch"
};
// `joule train --offload-ratio` for "train.offload_ratio".
std::string reconfigurable_flag(ReconfigurableField const& f);
// "0 to 1", "0 to model.layers", "device or host": what the field allows, for help texts.
std::string reconfigurable_allowed_text(ReconfigurableField const& f);
std::vector<ReconfigurableField> const& reconfigurable_fields();
// The row named `name` ("train.micro_batch"); nullptr when the field is not reconfigurable.
ReconfigurableField const* reconfigurable_field(char const* name);

Reconfigurable reconfigurable_of(TrainConfig const& t);
// `c` with `r`'s values: its typed fields and its stored text (`json`, which checkpoints and run
// logs keep), checked as parse_config checks them against the rest of the configuration (ranges,
// micro_batch dividing batch, seq_shards dividing heads and the sequence, recompute_depth at most
// the layers). Throws ConfigError naming the field.
Config with_reconfigured(Config const& c, Reconfigurable const& r);

}  // namespace joule
