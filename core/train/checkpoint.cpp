// Checkpoints (docs/design.md, "Checkpoints"): the trainer's save and resume, the configuration
// and parameters a checkpoint holds, every tensor checked before it is used. Written through
// io::commit_file, so a crash or a full disk never costs the last good checkpoint.
#include "core/train/trainer.hpp"

#include "core/io/commit.hpp"
#include "core/io/h5file.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in fmt/format.h before fmt 11)
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace joule {

namespace {
constexpr char const* kCheckpointFormat = "joule-checkpoint-v1";
}  // namespace

void Trainer::save_checkpoint(std::string const& path) {
  optimizer_->wait_all();
  // Through an io::Temporary, synced, read back and renamed (io::commit_file): a crash or a full disk
  // mid-write never costs the last good checkpoint.
  io::CommitChecks checks;
  checks.expected_bytes = checkpoint_bytes(cfg_);
  checks.verify = io::verify_h5;
  io::commit_file(path, "checkpoint", [&](std::string const& tmp) {
    io::H5File f(tmp, io::H5File::Mode::truncate);
    f.set_attribute("/", "format", kCheckpointFormat);
    f.set_attribute("/", "step", (long long)step_);
    f.set_attribute("/", "sampler_epoch", sampler_.epoch());
    f.set_attribute("/", "sampler_cursor", sampler_.cursor());
    f.set_attribute("/", "seed", (long long)cfg_.train.seed);
    f.set_attribute("/", "config", cfg_.json);
    auto save = [&](char const* group, ModelParameters<float, DeviceMemory> const& p) {
      p.for_each_group([&](std::string const& name, auto const& storage) {
        auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), storage);
        f.write(std::string("/") + group + "/" + name, h.data(), {h.extent(0)});
      });
    };
    save("params", model_->params);
    optimizer_->save(f);
    if (!notes_.empty()) {
      std::vector<std::string> keys, values;
      for (auto const& [key, value] : notes_) keys.push_back(key), values.push_back(value);
      f.create_group("/notes");
      f.write_strings("/notes/keys", keys);
      f.write_strings("/notes/values", values);
    }
    f.close();
  }, checks);
}

std::uint64_t checkpoint_bytes(Config const& cfg) {
  // Parameters and the two AdamW moments in fp32, the configuration text, and HDF5's metadata
  // (measured: ~40 KiB for the tiny model; 64 KiB + 1% is a bound with margin).
  std::uint64_t const parameters = estimate_memory(cfg.model, 1, 0).parameters;
  std::uint64_t const data = 3 * parameters + cfg.json.size();
  return data + data / 100 + (64u << 10);
}

std::map<std::string, std::string> Trainer::checkpoint_notes(std::string const& path) {
  try {
    return checkpoint_notes(io::open_input(path));
  } catch (io::H5Error const& e) {
    throw TrainingError(std::string("cannot read checkpoint: ") + e.what());
  }
}

std::map<std::string, std::string> Trainer::checkpoint_notes(io::InputFile const& in) {
  auto const read = [&] {
    io::H5File f(in);
    std::map<std::string, std::string> notes;
    if (!f.exists("/notes")) return notes;
    auto const keys = f.read_strings("/notes/keys"), values = f.read_strings("/notes/values");
    if (keys.size() != values.size())
      throw TrainingError(in.path() + ": /notes/keys and /notes/values differ in length (a damaged checkpoint)");
    for (std::size_t i = 0; i < keys.size(); ++i) notes[keys[i]] = values[i];
    return notes;
  };
  try {
    io::read_in_child(in, [&] { read(); }, io::read_timeout_for(in));
    auto notes = read();
    io::require_unchanged(in);
    return notes;
  } catch (io::H5Error const& e) {
    throw TrainingError(std::string("cannot read checkpoint: ") + e.what());
  }
}

void Trainer::save_checkpoint_once(std::string const& path) {
  // Every process holds the same parameters (data parallel) or a whole copy of them (sequence
  // shards), so one writer suffices (two would write the file twice, and the
  // second rename would replace the first's).
  auto const& shards = model_->shards();
  bool const writer = dp_.rank == 0 && shards.rank == 0;
  std::string error;
  if (writer) {
    try {
      save_checkpoint(path);
    } catch (std::exception const& e) {
      error = e.what();
    }
  }
  if (distributed()) {  // the writer's outcome to every process: over the shards, then the replicas
    double failed = error.empty() ? 0.0 : 1.0;
    if (shards.active() && shards.allreduce_sum) shards.allreduce_sum(&failed, 1);
    if (dp_.size > 1 && dp_.allreduce_sum_double) dp_.allreduce_sum_double(&failed, 1);
    if (failed > 0 && error.empty())
      throw ErrorOnOtherProcess("checkpoint " + path +
                                " could not be written (the writing process, replica 0's first shard, says why)");
  }
  if (!error.empty()) throw TrainingError(error);
}

namespace {
// Names for the elements of each group's buffer: group -> (offset, size, tensor name), so a bad
// value in a checkpoint is reported as "block.1.attn.qkv.weight[37]", not as an offset.
using TensorLayout = std::map<std::string, std::vector<std::tuple<std::size_t, std::size_t, std::string>>>;

TensorLayout tensor_layout(ModelParameters<float, DeviceMemory> const& p) {
  TensorLayout layout;
  p.for_each_group([&](std::string const& group, auto const& storage) {
    float const* base = storage.data();
    std::size_t const n = storage.extent(0);
    auto& tensors = layout[group];
    p.for_each_tensor([&](std::string const& name, ParamRole, auto const& view) {
      float const* q = view.data();
      if (q >= base && q < base + n) tensors.emplace_back(std::size_t(q - base), view.span(), name);
    });
  });
  return layout;
}

std::string element_name(TensorLayout const& layout, std::string const& group, std::size_t i) {
  auto const it = layout.find(group);
  if (it != layout.end())
    for (auto const& [offset, size, name] : it->second)
      if (i >= offset && i < offset + size) return fmt::format("{}[{}]", name, i - offset);
  return fmt::format("{}, element {}", group, i);
}

// One tensor of a checkpoint, checked before it is used: present, float32 of the model's size,
// every value finite (and >= 0 for AdamW's second moment).
std::vector<float> read_checked(io::H5File const& f, TensorLayout const& layout, char const* kind,
                                std::string const& group, std::size_t size) {
  std::string const object = std::string("/") + kind + "/" + group;
  if (!f.exists(object)) throw TrainingError(f.path() + ": missing " + object + " (a checkpoint of this model holds it)");
  std::string const type = f.dtype(object);
  if (type != "float32") throw TrainingError(f.path() + ": " + object + " has element type " + type + ", expected float32");
  io::Dims const dims = f.dims(object);
  if (dims.size() != 1 || dims[0] != size)
    throw TrainingError(fmt::format("{}: {} has shape [{}], expected [{}] for this model", f.path(), object,
                                    fmt::join(dims, ", "), size));
  std::vector<float> values = f.read<float>(object);
  bool const second_moment = std::string(kind) == "adam_v";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i]))
      throw TrainingError(fmt::format("{}: {} holds {} at {}: the checkpoint is damaged (non-finite {}); it cannot be "
                                      "resumed", f.path(), object, values[i], element_name(layout, group, i),
                                      std::string(kind) == "params" ? "parameter" : "optimizer state"));
    if (second_moment && values[i] < 0)
      throw TrainingError(fmt::format("{}: {} holds {} at {}: the checkpoint is damaged (AdamW's second moment "
                                      "cannot be negative); it cannot be resumed", f.path(), object, values[i],
                                      element_name(layout, group, i)));
  }
  return values;
}

long long checked_attribute(io::H5File const& f, char const* name, long long lo, long long hi, std::string const& why) {
  long long const v = f.attribute_int("/", name);
  if (v < lo || v > hi)
    throw TrainingError(fmt::format("{}: attribute '{}' on / is {}; allowed: {}..{}{}", f.path(), name, v, lo, hi, why));
  return v;
}

// Every parameter group of a checkpoint, each checked (read_checked) against `params`' sizes.
std::vector<std::vector<float>> read_checked_parameters(io::H5File const& f,
                                                        ModelParameters<float, DeviceMemory> const& params) {
  TensorLayout const layout = tensor_layout(params);
  std::vector<std::vector<float>> groups;
  params.for_each_group([&](std::string const& name, auto const& storage) {
    groups.push_back(read_checked(f, layout, "params", name, storage.extent(0)));
  });
  return groups;
}

// Copies groups read by read_checked_parameters() into the model's parameters.
void store_parameters(std::vector<std::vector<float>> const& groups, ModelParameters<float, DeviceMemory>& params) {
  std::size_t g = 0;
  params.for_each_group([&](std::string const&, auto const& storage) {
    auto h = Kokkos::create_mirror_view(storage);
    std::copy(groups[g].begin(), groups[g].end(), h.data());
    Kokkos::deep_copy(storage, h);
    ++g;
  });
}

// The configuration stored in a checkpoint, checked to be JSON with a model section.
nlohmann::json saved_config(io::H5File const& f) {
  std::string const& path = f.path();
  if (!f.has_attribute("/", "format") || f.attribute_string("/", "format") != kCheckpointFormat)
    throw TrainingError(path + ": not a joule checkpoint (no format = " + kCheckpointFormat + ")");
  std::string const where = path + ": attribute 'config' on /";
  std::string const text = f.attribute_string("/", "config");
  nlohmann::json saved;
  try {
    check_json_limits(text, where);  // before nlohmann walks it
    saved = nlohmann::json::parse(text);
  } catch (ConfigError const& e) {
    throw TrainingError(std::string(e.what()) + " (a damaged checkpoint)");
  } catch (nlohmann::json::exception const& e) {
    throw TrainingError(where + " is not valid JSON (a damaged checkpoint): " + e.what());
  }
  if (!saved.is_object() || !saved.contains("model") || !saved["model"].is_object())
    throw TrainingError(where + " has no model section (a damaged checkpoint)");
  return saved;
}
}  // namespace

void Trainer::resume(std::string const& path) {
  try {
    resume(io::open_input(path));
  } catch (io::H5Error const& e) {
    throw TrainingError(std::string("cannot resume: ") + e.what());
  }
}

void Trainer::resume(io::InputFile const& in) {
  std::string const& path = in.path();
  optimizer_->wait_all();
  // Everything is read and checked before anything changes, so a damaged checkpoint leaves the
  // trainer as it was and its message names the file and the object at fault.
  struct State {
    int step = 0;
    long long epoch = 0, cursor = 0;
    std::vector<std::vector<float>> params;  // per group
    Optimizer::Moments moments;              // per group, in the same order
  };
  auto const read_state = [&]() -> State {
    State state;
    io::H5File f(in);
    nlohmann::json const saved = saved_config(f);
    auto const current = nlohmann::json::parse(cfg_.json);
    if (saved.at("model") != current.at("model"))
      throw TrainingError(path + ": saved with a different model configuration: " + saved.at("model").dump() +
                          " vs now " + current.at("model").dump());

    state.step = int(checked_attribute(f, "step", 0, INT_MAX, ""));
    long long const train_samples = (long long)train_indices_.size();
    state.epoch = checked_attribute(f, "sampler_epoch", 0, LLONG_MAX, " (an impossible sampler position)");
    state.cursor = checked_attribute(
        f, "sampler_cursor", 0, train_samples,
        fmt::format(" (an impossible sampler position: the training part of {} holds {} samples)", cfg_.data.path,
                    train_samples));

    state.params = read_checked_parameters(f, model_->params);
    TensorLayout const layout = tensor_layout(model_->params);
    std::size_t g = 0;
    model_->params.for_each_group([&](std::string const& name, auto const&) {
      // The optimizer's groups are the model's, in this order (Optimizer's constructor).
      state.moments.m.push_back(read_checked(f, layout, "adam_m", name, state.params[g].size()));
      state.moments.v.push_back(read_checked(f, layout, "adam_v", name, state.params[g].size()));
      ++g;
    });
    return state;
  };
  try {
    // First in a child process, where a crash of the HDF5 library on a forged file ends only it;
    // then here, from the same descriptor, and nothing is used if the file changed meanwhile.
    io::read_in_child(in, [&] { read_state(); }, io::read_timeout_for(in));
    State const state = read_state();
    io::require_unchanged(in);
    store_parameters(state.params, model_->params);
    optimizer_->sync_master_weights();
    optimizer_->set_moments(state.moments);
    step_ = state.step;
    sampler_.restore(state.epoch, state.cursor);
  } catch (io::H5Error const& e) {
    throw TrainingError(std::string("cannot resume: ") + e.what());
  }
  if (log_) *log_ << fmt::format("resumed from {} at step {}\n", path, step_);
}

Config checkpoint_config(std::string const& path) {
  try {
    return checkpoint_config(io::open_input(path));
  } catch (io::H5Error const& e) {
    throw TrainingError(std::string("cannot read checkpoint: ") + e.what());
  }
}

Config checkpoint_config(io::InputFile const& in) {
  try {
    io::read_in_child(in, [&] { saved_config(io::H5File(in)); }, io::read_timeout_for(in));
    std::string const text = saved_config(io::H5File(in)).dump();
    io::require_unchanged(in);
    return parse_config(text, in.path() + " (its stored configuration)");
  } catch (io::H5Error const& e) {
    throw TrainingError(std::string("cannot read checkpoint: ") + e.what());
  }
}

void load_checkpoint_parameters(std::string const& path, Model& model) {
  try {
    load_checkpoint_parameters(io::open_input(path), model);
  } catch (io::H5Error const& e) {
    throw TrainingError(std::string("cannot read checkpoint: ") + e.what());
  }
}

void load_checkpoint_parameters(io::InputFile const& in, Model& model) {
  auto const read = [&] {
    io::H5File f(in);
    saved_config(f);  // a joule checkpoint; each tensor's size is checked against the model
    return read_checked_parameters(f, model.params);
  };
  try {
    io::read_in_child(in, [&] { read(); }, io::read_timeout_for(in));
    auto const groups = read();
    io::require_unchanged(in);
    store_parameters(groups, model.params);
    ExecSpace const space;
    model.update_kernel_weights(space);  // a bf16 model's kernels read their copy
    space.fence();
  } catch (io::H5Error const& e) {
    throw TrainingError(std::string("cannot read checkpoint: ") + e.what());
  }
}

}  // namespace joule
