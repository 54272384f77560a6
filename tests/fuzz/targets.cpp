// The fuzz targets (see targets.hpp): each input goes to the library function joule uses for it.
#include "targets.hpp"

#include "core/data/dataset.hpp"
#include "core/config/config.hpp"
#include "core/train/trainer.hpp"
#include "runlog/run_log.hpp"

#include <Kokkos_Core.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>

namespace joule::fuzz {

namespace {

std::string last_message;

// A folder of this process's own, in memory where the system has one (inputs are written to a
// file for every run); removed at exit.
std::string const& scratch() {
  static std::string const folder = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string name = base + "/joule-fuzz-XXXXXX";
    if (!mkdtemp(name.data())) throw std::runtime_error("cannot create a folder under " + base);
    return name;
  }();
  return folder;
}

std::vector<std::string> scratch_files;

void remove_scratch() {
  for (auto const& f : scratch_files) std::remove(f.c_str());
  rmdir(scratch().c_str());
}

std::string scratch_file(std::string const& name) {
  static bool const registered = [] { return std::atexit(remove_scratch) == 0; }();
  (void)registered;
  std::string path = scratch() + "/" + name;
  scratch_files.push_back(path);
  return path;
}

void write_file(std::string const& path, std::uint8_t const* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<char const*>(data), std::streamsize(size));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string const& input_file() {
  static std::string const path = scratch_file("input.h5");
  return path;
}

// ---- the checkpoint target's trainer: a tiny model on a tiny dataset ----------------------------

char const* const kTinyConfig = R"({
  "model": {"layers": 1, "d_model": 16, "heads": 1, "mlp_ratio": 1, "image_size": 8, "patch_size": 8,
            "channels": 1, "frames": 1, "text_len": 4, "tie_embeddings": true},
  "data": {"path": "", "eval_fraction": 0.25},
  "train": {"batch": 2, "micro_batch": 2, "steps": 4, "lr": 0.003, "min_lr": 0.0003, "warmup_steps": 1,
            "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "eval_every": 0,
            "eval_samples": 1, "log_every": 1, "seed": 7, "recompute_depth": 0}
})";

struct TrainerFixture {
  std::string data_path;
  std::unique_ptr<Trainer> trainer;
};

TrainerFixture*& trainer_fixture_slot() {
  static TrainerFixture* fixture = nullptr;
  return fixture;
}

Trainer& tiny_trainer() {
  TrainerFixture*& fixture = trainer_fixture_slot();
  if (!fixture) {
    if (!Kokkos::is_initialized()) {
      setenv("OMP_NUM_THREADS", "1", 0);
      setenv("OMP_PROC_BIND", "false", 0);
      Kokkos::initialize();
    }
    fixture = new TrainerFixture;
    fixture->data_path = scratch_file("tiny-data.h5");
    std::string text = kTinyConfig;
    text.replace(text.find("\"path\": \"\""), 10, "\"path\": \"" + fixture->data_path + "\"");
    Config const cfg = parse_config(text, "fuzz trainer configuration");
    DatasetShape const shape{8, 1, 1, 8, 8, 4};
    std::vector<std::uint8_t> images(shape.count * shape.pixels_per_sample());
    for (std::size_t i = 0; i < images.size(); ++i) images[i] = std::uint8_t(i * 37);
    std::vector<std::int32_t> tokens;
    for (std::size_t s = 0; s < shape.count; ++s)
      for (std::int32_t t : {kTokenBos, std::int32_t('a' + s), kTokenEos, kTokenPad}) tokens.push_back(t);
    write_dataset(fixture->data_path, shape, images, tokens);
    fixture->trainer = std::make_unique<Trainer>(cfg, nullptr);
  }
  return *fixture->trainer;
}

// ---- the targets ------------------------------------------------------------------------------

Outcome config_target(std::uint8_t const* data, std::size_t size) {
  try {
    parse_config(std::string(reinterpret_cast<char const*>(data), size), "fuzz.json");
    return Outcome::accepted;
  } catch (ConfigError const& e) {
    last_message = e.what();
    return Outcome::rejected;
  }
}

Outcome dataset_target(std::uint8_t const* data, std::size_t size) {
  write_file(input_file(), data, size);
  try {
    auto const ds = Dataset::open(input_file());
    ds.read({0, ds.shape().count - 1});
    return Outcome::accepted;
  } catch (DatasetError const& e) {
    last_message = e.what();
    return Outcome::rejected;
  }
}

Outcome checkpoint_target(std::uint8_t const* data, std::size_t size) {
  Trainer& trainer = tiny_trainer();
  write_file(input_file(), data, size);
  try {
    trainer.resume(input_file());
    return Outcome::accepted;
  } catch (TrainingError const& e) {
    last_message = e.what();
    return Outcome::rejected;
  }
}

Outcome run_log_target(std::uint8_t const* data, std::size_t size) {
  write_file(input_file(), data, size);
  bool const claims = scheduler::is_run_log(input_file());  // never throws
  try {
    scheduler::read_run_log(input_file());
    if (!claims) throw std::logic_error("read_run_log accepted a file is_run_log() does not recognise");
    return Outcome::accepted;
  } catch (scheduler::RunLogError const& e) {
    last_message = e.what();
    return Outcome::rejected;
  }
}

// ---- seeds ------------------------------------------------------------------------------------

scheduler::TrialRecord seed_trial(int index, scheduler::TrialStatus status) {
  scheduler::TrialRecord t;
  t.index = index;
  t.knobs.offload_ratio = 0.25 * index;
  t.knobs.recompute_depth = index;
  t.status = status;
  if (status == scheduler::TrialStatus::ok) {
    t.time_per_step_s = 0.1 + index;
    t.energy_per_step_j = 2.0 + index;
    t.objective = t.time_per_step_s * t.energy_per_step_j;
    t.ci_relative = 0.01;
    t.repeats = 2;
    t.warmup_steps = 1;
    t.measured_steps = 3;
    t.drift = 1.0;
    t.step_time_s = {0.1, 0.11, 0.12};
    t.step_energy_j = {2.0, 2.1, 2.2};
    t.measured_on = {4, 5, 6};
    t.regions = {{"forward", 3, 0.1, 1.0, false, ""}, {"backward", 3, 0.2, 2.0, true, "forward"}};
    t.power.domains = {"package", "dram"};
    t.power.time_s = {0.0, 0.05};
    t.power.watts = {10, 2, 11, 3};
  } else {
    t.reason = "needs 2.0 GiB, 1.0 GiB allowed";
  }
  t.predicted_device_bytes = 1000 + index;
  return t;
}

}  // namespace

Target target_named(std::string const& name) {
  if (name == "config") return config_target;
  if (name == "dataset") return dataset_target;
  if (name == "checkpoint") return checkpoint_target;
  if (name == "run_log") return run_log_target;
  return nullptr;
}

std::vector<std::string> target_names() { return {"config", "dataset", "checkpoint", "run_log"}; }

std::string const& last_rejection() { return last_message; }

std::vector<std::string> write_seeds(std::string const& target, std::string const& folder) {
  std::vector<std::string> paths;
  if (target == "config") {
    std::string text = kTinyConfig;
    text.replace(text.find("\"path\": \"\""), 10, "\"path\": \"data.h5\"");
    paths.push_back(folder + "/seed-tiny.json");
    std::ofstream(paths.back()) << text;
  } else if (target == "dataset") {
    DatasetShape const shape{3, 2, 3, 4, 4, 5};
    std::vector<std::uint8_t> images(shape.count * shape.pixels_per_sample(), 17);
    std::vector<std::int32_t> tokens;
    for (std::size_t s = 0; s < shape.count; ++s)
      for (std::int32_t t : {kTokenBos, std::int32_t('x'), std::int32_t('y'), kTokenEos, kTokenPad}) tokens.push_back(t);
    paths.push_back(folder + "/seed-dataset.h5");
    write_dataset(paths.back(), shape, images, tokens);
  } else if (target == "checkpoint") {
    Trainer& trainer = tiny_trainer();
    trainer.run(1);  // AdamW moments that are not all zero
    paths.push_back(folder + "/seed-checkpoint.h5");
    trainer.save_checkpoint(paths.back());
  } else if (target == "run_log") {
    scheduler::RunHeader h;
    h.joule_version = "0.1.0";
    h.git_commit = "abc";
    h.kokkos_version = "3.4.1";
    h.execution_space = "OpenMP";
    h.host = "fuzz";
    h.energy_source = "model";
    h.energy_kind = "model";
    h.objective = "edp";
    h.strategy = "grid";
    h.config_json = R"({"model": {"layers": 1}, "train": {"steps": 3}})";
    h.created = "2024-01-01T00:00:00Z";
    paths.push_back(folder + "/seed-run-log.h5");
    std::remove(paths.back().c_str());
    auto writer = scheduler::RunLogWriter::create(paths.back(), h);
    auto const a = seed_trial(0, scheduler::TrialStatus::ok), b = seed_trial(1, scheduler::TrialStatus::infeasible);
    writer.append_trial(a);
    writer.append_trial(b);
    writer.write_best(a);
    writer.write_pareto({a});
    scheduler::TrainRecord train;
    train.steps = {{1, 5.0, 0.001, 1.0, 0.1}, {2, 4.0, 0.002, 0.9, 0.1}};
    train.evals = {{2, 4.5, 0.25, 4}};
    train.regions = {{"step", 2, 0.2, 3.0, false, ""}};
    train.seconds = 0.2;
    train.energy_j = 3.0;
    writer.write_train(train);
  } else {
    throw std::invalid_argument("no fuzz target named " + target);
  }
  return paths;
}

void shutdown() {
  TrainerFixture*& fixture = trainer_fixture_slot();
  if (fixture) {
    delete fixture;
    fixture = nullptr;
  }
}

}  // namespace joule::fuzz
