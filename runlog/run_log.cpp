#include "runlog/run_log.hpp"

#include "core/io/commit.hpp"
#include "core/io/h5file.hpp"
#include "core/config/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>

namespace joule::scheduler {

namespace {

using io::H5File;

// ---- names and small helpers --------------------------------------------------------------

std::string trial_group(int index) { return fmt::format("/trials/{:04d}", index); }

std::string now_iso() {
  std::time_t const now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string make_run_id() {
  std::random_device device;
  std::uint64_t const id = (std::uint64_t(device()) << 32) ^ device() ^
                           std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  return fmt::format("{:016x}", id);
}

std::string join(std::vector<std::string> const& parts, char const* separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

std::vector<std::string> split_lines(std::string const& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t const end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

[[noreturn]] void fail(std::string const& path, std::string const& what) {
  throw RunLogError(path + ": " + what);
}

// Problems found while reading the layout are thrown as H5Error, like H5File's own, so one
// handler turns both into "FILE: damaged run log: WHAT".
[[noreturn]] void damaged(H5File const& f, std::string const& what) {
  throw io::H5Error(f.path() + ": " + what);
}

std::string without_path(std::string const& message, std::string const& path) {
  std::string const prefix = path + ": ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}

// ---- opening ------------------------------------------------------------------------------

enum class FileKind { missing, not_regular, not_hdf5, hdf5 };

// Looks for the HDF5 signature ourselves (at 0 or after a user block of 512, 1024, ... bytes),
// so "not HDF5" and "HDF5 but damaged" get different messages.
FileKind probe(std::string const& path, long long* size = nullptr) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return FileKind::missing;
  if (!S_ISREG(st.st_mode)) return FileKind::not_regular;
  if (size) *size = st.st_size;
  std::ifstream in(path, std::ios::binary);
  static char const signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  for (long long offset = 0; offset + 8 <= st.st_size; offset = offset ? offset * 2 : 512) {
    char bytes[8] = {};
    in.seekg(offset);
    if (!in.read(bytes, 8)) break;
    if (std::memcmp(bytes, signature, 8) == 0) return FileKind::hdf5;
  }
  return FileKind::not_hdf5;
}

void require_hdf5(std::string const& path) {
  switch (probe(path)) {
    case FileKind::missing: fail(path, "no such file");
    case FileKind::not_regular: fail(path, "not a regular file");
    case FileKind::not_hdf5: fail(path, "not an HDF5 file, so not a joule run log");
    case FileKind::hdf5: return;
  }
}

H5File open_existing(std::string const& path) {
  require_hdf5(path);
  try {
    return H5File(path, H5File::Mode::read);
  } catch (io::H5Error const&) {
    long long size = 0;
    probe(path, &size);
    fail(path, fmt::format("HDF5 cannot open this file ({} bytes): it is damaged or truncated", size));
  }
}

void require_format(H5File const& f) {
  if (!f.has_attribute("/", "format"))
    fail(f.path(), fmt::format("not a joule run log: no 'format' attribute on / (expected \"{}\")", kRunLogFormat));
  std::string format;
  try {
    format = f.attribute_string("/", "format");
  } catch (io::H5Error const& e) {
    fail(f.path(), "not a joule run log: " + without_path(e.what(), f.path()));
  }
  if (format != kRunLogFormat)
    fail(f.path(), fmt::format("not a joule run log: format is \"{}\", expected \"{}\"", format, kRunLogFormat));
}

// ---- reading ------------------------------------------------------------------------------

int read_int(H5File const& f, std::string const& object, std::string const& name) {
  long long const value = f.attribute_int(object, name);
  if (value < INT_MIN || value > INT_MAX)
    damaged(f, fmt::format("attribute '{}' on {} is {}, out of range for an int", name, object, value));
  return int(value);
}

template <class T>
std::vector<T> read_vector(H5File const& f, std::string const& dataset) {
  io::Dims dims;
  auto values = f.read<T>(dataset, &dims);
  if (dims.size() != 1) damaged(f, fmt::format("dataset {} has {} dimensions, expected 1", dataset, dims.size()));
  return values;
}

void require_length(H5File const& f, std::string const& dataset, std::size_t got, std::size_t want,
                    std::string const& like) {
  if (got != want) damaged(f, fmt::format("dataset {} holds {} values but {} holds {}", dataset, got, like, want));
}

Knobs read_knobs(H5File const& f, std::string const& group) {
  Knobs k;
  for (auto const& knob : knob_table()) {
    // A knob newer than the log (offload_cast, issue 29) was not searched there: unset.
    if (knob.has_unset && !f.has_attribute(group, knob.name)) {
      knob.set(k, knob.unset);
      continue;
    }
    knob.set(k, knob.integer ? double(read_int(f, group, knob.name)) : f.attribute_double(group, knob.name));
  }
  return k;
}

// A table in the region schema (name, calls, seconds, energy_j, below_resolution, parent) at group g:
// GROUP/regions of a trial, /train and /profile, and /profile/kernels.
std::vector<RegionMeasure> read_region_table(H5File const& f, std::string const& g) {
  auto const names = f.read_strings(g + "/name");
  auto const calls = read_vector<std::int64_t>(f, g + "/calls");
  auto const seconds = read_vector<double>(f, g + "/seconds");
  auto const energy = read_vector<double>(f, g + "/energy_j");
  require_length(f, g + "/calls", calls.size(), names.size(), g + "/name");
  require_length(f, g + "/seconds", seconds.size(), names.size(), g + "/name");
  require_length(f, g + "/energy_j", energy.size(), names.size(), g + "/name");
  // below_resolution: 1 where the region's calls are shorter than the sensors resolve (absent in
  // logs written before it was recorded).
  std::vector<std::int64_t> flagged(names.size(), 0);
  if (f.exists(g + "/below_resolution")) {
    flagged = read_vector<std::int64_t>(f, g + "/below_resolution");
    require_length(f, g + "/below_resolution", flagged.size(), names.size(), g + "/name");
  }
  // parent: the region each ran inside ("" at the top level; absent in logs written before it was
  // recorded, where every parent reads "").
  std::vector<std::string> parents(names.size());
  if (f.exists(g + "/parent")) {
    parents = f.read_strings(g + "/parent");
    require_length(f, g + "/parent", parents.size(), names.size(), g + "/name");
  }
  std::vector<RegionMeasure> regions(names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    regions[i] = RegionMeasure{names[i], calls[i], seconds[i], energy[i], flagged[i] != 0, parents[i]};
  return regions;
}

std::vector<RegionMeasure> read_regions(H5File const& f, std::string const& group) {
  return read_region_table(f, group + "/regions");
}

PowerTrace read_power(H5File const& f, std::string const& group) {
  PowerTrace p;
  p.domains = f.read_strings(group + "/power_domains");
  p.time_s = read_vector<double>(f, group + "/power_time_s");
  io::Dims dims;
  p.watts = f.read<double>(group + "/power_w", &dims);
  if (dims.size() != 2 || dims[0] != p.time_s.size() || dims[1] != p.domains.size())
    damaged(f, fmt::format("dataset {}/power_w has shape [{}], expected [{}, {}] (power_time_s by power_domains)",
                           group, fmt::join(dims, ", "), p.time_s.size(), p.domains.size()));
  return p;
}

bool is_complete(H5File const& f, std::string const& group) {
  return f.has_attribute(group, "complete") && f.attribute_int(group, "complete") == 1;
}

TrialRecord read_trial(H5File const& f, std::string const& g, int index) {
  TrialRecord t;
  t.index = index;
  t.knobs = read_knobs(f, g);
  std::string const status = f.attribute_string(g, "status");
  try {
    t.status = trial_status_from(status);
  } catch (std::invalid_argument const&) {
    damaged(f, fmt::format("attribute 'status' on {} is \"{}\", expected ok, infeasible or failed", g, status));
  }
  t.reason = f.attribute_string(g, "reason");
  t.time_per_step_s = f.attribute_double(g, "time_per_step_s");
  t.energy_per_step_j = f.attribute_double(g, "energy_per_step_j");
  t.objective = f.attribute_double(g, "objective");
  t.ci_relative = f.attribute_double(g, "ci_relative");
  t.repeats = read_int(f, g, "repeats");
  t.warmup_steps = read_int(f, g, "warmup_steps");
  t.measured_steps = read_int(f, g, "measured_steps");
  t.drift = f.attribute_double(g, "drift");
  for (auto const& [name, value] : {std::pair{"process_cpus", &t.process_cpus}, std::pair{"other_cpus", &t.other_cpus},
                                    std::pair{"steal_share", &t.steal_share},
                                    std::pair{"energy_resolution_s", &t.energy_resolution_s}})
    if (f.has_attribute(g, name)) *value = f.attribute_double(g, name);
  long long const bytes = f.attribute_int(g, "predicted_device_bytes");
  if (bytes < 0) damaged(f, fmt::format("attribute 'predicted_device_bytes' on {} is negative ({})", g, bytes));
  t.predicted_device_bytes = std::size_t(bytes);
  if (f.has_attribute(g, "link_bytes_per_step")) t.link_bytes_per_step = f.attribute_double(g, "link_bytes_per_step");
  for (auto const& [name, value] : {std::pair{"host_jobs_speculated", &t.host_jobs_speculated},
                                    std::pair{"host_jobs_rolled_back", &t.host_jobs_rolled_back}})
    if (f.has_attribute(g, name)) {  // absent in logs before issue 42
      *value = f.attribute_int(g, name);
      if (*value < 0) damaged(f, fmt::format("attribute '{}' on {} is negative ({})", name, g, *value));
    }
  t.step_time_s = read_vector<double>(f, g + "/step_time_s");
  t.step_energy_j = read_vector<double>(f, g + "/step_energy_j");
  if (f.exists(g + "/measured_on")) {  // logs from before in-flight tuning have none
    auto const on = read_vector<std::int32_t>(f, g + "/measured_on");
    require_length(f, g + "/measured_on", on.size(), t.step_time_s.size(), g + "/step_time_s");
    t.measured_on.assign(on.begin(), on.end());
  }
  t.regions = read_regions(f, g);
  t.power = read_power(f, g);
  return t;
}

// Parses a /trials child name ("0042"); -1 when it is not one.
int trial_index_of(std::string const& name) {
  auto const digit = [](char c) { return c >= '0' && c <= '9'; };
  if (name.empty() || name.size() > 9 || !std::all_of(name.begin(), name.end(), digit)) return -1;
  int const index = std::stoi(name);
  return trial_group(index) == "/trials/" + name ? index : -1;
}

// The complete trials in index order; paths of trial groups without their `complete` mark go to
// *incomplete (joule's writer never leaves one, see RunLogWriter::commit, but a reader must not
// trust that).
std::vector<TrialRecord> read_trials(H5File const& f, std::vector<std::string>* incomplete) {
  std::vector<TrialRecord> trials;
  for (auto const& name : f.children("/trials")) {
    int const index = trial_index_of(name);
    if (index < 0) damaged(f, "unexpected object /trials/" + name + " (trials are named by 4-digit index)");
    std::string const g = "/trials/" + name;
    if (!is_complete(f, g)) {
      incomplete->push_back(g);
      continue;
    }
    trials.push_back(read_trial(f, g, index));
  }
  std::sort(trials.begin(), trials.end(), [](auto const& a, auto const& b) { return a.index < b.index; });
  return trials;
}

RunHeader read_header(H5File const& f) {
  RunHeader h;
  h.joule_version = f.attribute_string("/", "joule_version");
  h.git_commit = f.attribute_string("/", "git_commit");
  h.kokkos_version = f.attribute_string("/", "kokkos_version");
  h.execution_space = f.attribute_string("/", "execution_space");
  h.host = f.attribute_string("/", "host");
  h.energy_source = f.attribute_string("/", "energy_source");
  h.energy_kind = f.attribute_string("/", "energy_kind");
  if (h.energy_kind != "measured" && h.energy_kind != "model")
    damaged(f, fmt::format("attribute 'energy_kind' on / is \"{}\", expected measured or model", h.energy_kind));
  if (f.has_attribute("/", "energy_regions")) h.energy_regions = f.attribute_string("/", "energy_regions");
  if (f.has_attribute("/", "tuning")) h.tuning = f.attribute_string("/", "tuning");
  if (h.tuning != "offline" && h.tuning != "in_flight" && h.tuning != "profile")
    damaged(f, fmt::format("attribute 'tuning' on / is \"{}\", expected offline, in_flight or profile", h.tuning));
  h.objective = f.attribute_string("/", "objective");
  h.strategy = f.attribute_string("/", "strategy");
  h.world_size = read_int(f, "/", "world_size");
  h.config_json = f.attribute_string("/", "config");
  if (f.has_attribute("/", "precision")) h.precision = f.attribute_string("/", "precision");
  if (f.has_attribute("/", "gemm_path")) h.gemm_path = f.attribute_string("/", "gemm_path");
  if (f.has_attribute("/", "attention_path")) h.attention_path = f.attribute_string("/", "attention_path");
  if (f.has_attribute("/", "host_cores")) h.host_cores = f.attribute_string("/", "host_cores");
  try {  // nothing may walk a configuration nested too deeply (see check_json_limits)
    check_json_limits(h.config_json, "attribute 'config' on /");
  } catch (ConfigError const& e) {
    damaged(f, e.what());
  }
  h.created = f.attribute_string("/", "created");
  h.device_memory_budget_bytes = f.attribute_double("/", "device_memory_budget_bytes");
  h.resumed = split_lines(f.attribute_string("/", "resumed"));
  return h;
}

TrainRecord read_train(H5File const& f) {
  std::string const g = "/train";
  TrainRecord t;
  t.knobs = read_knobs(f, g);
  t.seconds = f.attribute_double(g, "total_seconds");
  t.energy_j = f.attribute_double(g, "total_energy_j");
  auto const step = read_vector<std::int32_t>(f, g + "/step");
  auto const loss = read_vector<double>(f, g + "/loss");
  auto const lr = read_vector<double>(f, g + "/lr");
  auto const grad_norm = read_vector<double>(f, g + "/grad_norm");
  auto const seconds = read_vector<double>(f, g + "/seconds");
  require_length(f, g + "/loss", loss.size(), step.size(), g + "/step");
  require_length(f, g + "/lr", lr.size(), step.size(), g + "/step");
  require_length(f, g + "/grad_norm", grad_norm.size(), step.size(), g + "/step");
  require_length(f, g + "/seconds", seconds.size(), step.size(), g + "/step");
  for (std::size_t i = 0; i < step.size(); ++i) t.steps.push_back({step[i], loss[i], lr[i], grad_norm[i], seconds[i]});
  t.in_flight = f.has_attribute(g, "in_flight") && read_int(f, g, "in_flight") == 1;
  if (f.has_attribute(g, "switches")) {
    t.search_steps = read_int(f, g, "search_steps");
    t.switches = read_int(f, g, "switches");
    t.switch_seconds = f.attribute_double(g, "switch_seconds");
  }
  if (f.exists(g + "/step_end_s")) {  // logs from before in-flight tuning have none
    auto const end = read_vector<double>(f, g + "/step_end_s");
    require_length(f, g + "/step_end_s", end.size(), step.size(), g + "/step");
    for (std::size_t i = 0; i < step.size(); ++i) t.steps[i].end_s = end[i];
  }
  if (f.exists(g + "/trial")) {  // logs from before in-flight tuning have neither
    auto const trial = read_vector<std::int32_t>(f, g + "/trial");
    auto const measured = read_vector<std::int32_t>(f, g + "/measured");
    require_length(f, g + "/trial", trial.size(), step.size(), g + "/step");
    require_length(f, g + "/measured", measured.size(), step.size(), g + "/step");
    for (std::size_t i = 0; i < step.size(); ++i) {
      t.steps[i].trial = trial[i];
      t.steps[i].measured = measured[i] != 0;
    }
  }
  if (f.exists(g + "/host_jobs_rolled_back")) {  // logs before issue 42 have none
    auto const rolled = read_vector<std::int32_t>(f, g + "/host_jobs_rolled_back");
    require_length(f, g + "/host_jobs_rolled_back", rolled.size(), step.size(), g + "/step");
    for (std::size_t i = 0; i < step.size(); ++i) t.steps[i].host_jobs_rolled_back = rolled[i];
  }
  auto const eval_step = read_vector<std::int32_t>(f, g + "/eval_step");
  auto const eval_loss = read_vector<double>(f, g + "/eval_loss");
  auto const eval_accuracy = read_vector<double>(f, g + "/eval_accuracy");
  auto const eval_samples = read_vector<std::int32_t>(f, g + "/eval_samples");
  require_length(f, g + "/eval_loss", eval_loss.size(), eval_step.size(), g + "/eval_step");
  require_length(f, g + "/eval_accuracy", eval_accuracy.size(), eval_step.size(), g + "/eval_step");
  require_length(f, g + "/eval_samples", eval_samples.size(), eval_step.size(), g + "/eval_step");
  for (std::size_t i = 0; i < eval_step.size(); ++i)
    t.evals.push_back({eval_step[i], eval_loss[i], eval_accuracy[i], eval_samples[i]});
  t.regions = read_regions(f, g);
  t.power = read_power(f, g);
  return t;
}

ProfileRecord read_profile(H5File const& f) {
  std::string const g = "/profile";
  ProfileRecord p;
  p.program = f.attribute_string(g, "program");
  p.rank = read_int(f, g, "rank");
  p.sample_rate_hz = f.attribute_double(g, "sample_rate_hz");
  p.seconds = f.attribute_double(g, "seconds");
  p.energy_j = f.attribute_double(g, "energy_j");
  p.outside_seconds = f.attribute_double(g, "outside_seconds");
  p.outside_energy_j = f.attribute_double(g, "outside_energy_j");
  p.tool_seconds = f.attribute_double(g, "tool_seconds");
  p.tool_edges = f.attribute_int(g, "tool_edges");
  p.resolution_s = f.attribute_double(g, "resolution_s");
  p.regions = read_regions(f, g);
  p.kernels = read_region_table(f, g + "/kernels");
  p.power = read_power(f, g);
  return p;
}

// ---- writing ------------------------------------------------------------------------------

void write_knobs(H5File& f, std::string const& group, Knobs const& k) {
  for (auto const& knob : knob_table()) {
    if (knob.integer)
      f.set_attribute(group, knob.name, (long long)knob.get(k));
    else
      f.set_attribute(group, knob.name, knob.get(k));
  }
}

void write_doubles(H5File& f, std::string const& dataset, std::vector<double> const& values) {
  f.write(dataset, values.data(), {values.size()});
}

void write_region_table(H5File& f, std::string const& g, std::vector<RegionMeasure> const& regions) {
  f.create_group(g);
  std::vector<std::string> names, parents;
  std::vector<std::int64_t> calls, flagged;
  std::vector<double> seconds, energy;
  for (auto const& r : regions) {
    flagged.push_back(r.below_resolution ? 1 : 0);
    names.push_back(r.name);
    parents.push_back(r.parent);
    calls.push_back(r.calls);
    seconds.push_back(r.seconds);
    energy.push_back(r.energy_j);
  }
  f.write_strings(g + "/name", names);
  f.write(g + "/calls", calls.data(), {calls.size()});
  write_doubles(f, g + "/seconds", seconds);
  write_doubles(f, g + "/energy_j", energy);
  f.write(g + "/below_resolution", flagged.data(), {flagged.size()});
  f.write_strings(g + "/parent", parents);
}

void write_regions(H5File& f, std::string const& group, std::vector<RegionMeasure> const& regions) {
  write_region_table(f, group + "/regions", regions);
}

void write_power(H5File& f, std::string const& group, PowerTrace const& p) {
  f.write_strings(group + "/power_domains", p.domains);
  write_doubles(f, group + "/power_time_s", p.time_s);
  f.write(group + "/power_w", p.watts.data(), {p.time_s.size(), p.domains.size()});
}

// Checked before anything is written, so a bad record leaves no half group behind.
void check_power(std::string const& path, std::string const& what, PowerTrace const& p) {
  if (p.watts.size() != p.time_s.size() * p.domains.size())
    fail(path, fmt::format("{}: the power trace has {} values, expected {} samples x {} domains = {}", what,
                           p.watts.size(), p.time_s.size(), p.domains.size(), p.time_s.size() * p.domains.size()));
}

// Writes a group from scratch (replacing an old one), its `complete` mark last.
template <class Fill>
void write_group(H5File& f, std::string const& group, Fill const& fill) {
  f.remove(group);
  f.create_group(group);
  fill(group);
  f.set_attribute(group, "complete", 1LL);
}

void write_header(H5File& f, RunHeader const& h, std::string const& run_id) {
  f.set_attribute("/", "format", kRunLogFormat);
  f.set_attribute("/", "joule_version", h.joule_version);
  f.set_attribute("/", "git_commit", h.git_commit);
  f.set_attribute("/", "kokkos_version", h.kokkos_version);
  f.set_attribute("/", "execution_space", h.execution_space);
  f.set_attribute("/", "host", h.host);
  f.set_attribute("/", "energy_source", h.energy_source);
  f.set_attribute("/", "energy_kind", h.energy_kind);
  f.set_attribute("/", "energy_regions", h.energy_regions);
  f.set_attribute("/", "tuning", h.tuning);
  f.set_attribute("/", "objective", h.objective);
  f.set_attribute("/", "strategy", h.strategy);
  f.set_attribute("/", "world_size", (long long)h.world_size);
  f.set_attribute("/", "config", h.config_json);
  f.set_attribute("/", "precision", h.precision);
  f.set_attribute("/", "gemm_path", h.gemm_path);
  f.set_attribute("/", "attention_path", h.attention_path);
  f.set_attribute("/", "host_cores", h.host_cores);
  f.set_attribute("/", "created", h.created.empty() ? now_iso() : h.created);
  f.set_attribute("/", "device_memory_budget_bytes", h.device_memory_budget_bytes);
  f.set_attribute("/", "resumed", join(h.resumed, "\n"));
  f.set_attribute("/", "run_id", run_id);
  f.set_attribute("/", "knob_table", knob_table_json());  // how to label the knobs' values
}

// ---- atomic replacement -------------------------------------------------------------------

// ---- resuming -----------------------------------------------------------------------------

std::string json_text(nlohmann::json const& j) {
  std::string text = j.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

// "" when the two configurations are the same JSON value (text that is not JSON is compared as
// text), else where they differ.
std::string config_difference(std::string const& in_log, std::string const& now) {
  auto const a = nlohmann::json::parse(in_log, nullptr, false);
  auto const b = nlohmann::json::parse(now, nullptr, false);
  if (a.is_discarded() || b.is_discarded())
    return in_log == now ? "" : "the configuration text differs";
  if (a == b) return "";
  std::vector<std::string> places;
  auto const patch = nlohmann::json::diff(a, b);
  for (auto const& op : patch) {
    if (places.size() == 3) {
      places.push_back(fmt::format("and {} more", patch.size() - 3));
      break;
    }
    std::string const where = op["path"].get<std::string>();
    nlohmann::json::json_pointer const pointer(where);
    std::string const kind = op["op"].get<std::string>();
    if (kind == "replace")
      places.push_back(fmt::format("{} is {} in the log, {} now", where, json_text(a.at(pointer)), json_text(b.at(pointer))));
    else if (kind == "add")
      places.push_back(fmt::format("{} is new (not in the log's configuration)", where));
    else
      places.push_back(fmt::format("{} is in the log's configuration but not now", where));
  }
  return "the configuration differs: " + join(places, "; ");
}

std::vector<std::string> header_differences(RunHeader const& in_log, RunHeader const& now) {
  std::vector<std::string> differences;
  if (auto const config = config_difference(in_log.config_json, now.config_json); !config.empty())
    differences.push_back(config);
  if (in_log.objective != now.objective)
    differences.push_back(fmt::format("the objective is \"{}\" in the log, \"{}\" now", in_log.objective, now.objective));
  if (in_log.tuning != now.tuning)
    differences.push_back(fmt::format("the tuning is {} in the log, {} now (joule tune continues offline logs, "
                                      "joule train --tune in-flight ones)", in_log.tuning, now.tuning));
  if (in_log.world_size != now.world_size)
    differences.push_back(fmt::format("the world size is {} in the log, {} now", in_log.world_size, now.world_size));
  if (in_log.energy_kind != now.energy_kind)
    differences.push_back(
        fmt::format("the energy is {} in the log, {} now", in_log.energy_kind, now.energy_kind));
  return differences;
}

void check_header(std::string const& path, RunHeader const& h) {
  if (h.energy_kind != "measured" && h.energy_kind != "model")
    fail(path, fmt::format("energy_kind is \"{}\", expected measured or model", h.energy_kind));
}

}  // namespace

// ---- public ---------------------------------------------------------------------------------

TrialRecord const* RunLogContents::trial(int index) const {
  for (auto const& t : trials)
    if (t.index == index) return &t;
  return nullptr;
}

namespace {
// Runs `read` in a child process first (io::read_in_child): a log that crashes the HDF5 library
// is a RunLogError naming the file, not a crash of joule.
void read_in_child_first(std::string const& path, std::function<void()> const& read) {
  try {
    io::read_in_child(path, read, io::read_timeout_for(path));
  } catch (io::H5Error const& e) {
    throw RunLogError(e.what());
  }
}

RunLogContents read_run_log_here(std::string const& path);
}  // namespace

RunLogContents read_run_log(std::string const& path) {
  require_hdf5(path);
  read_in_child_first(path, [&] { read_run_log_here(path); });
  return read_run_log_here(path);
}

namespace {
RunLogContents read_run_log_here(std::string const& path) {
  H5File f = open_existing(path);
  require_format(f);
  RunLogContents log;
  log.path = path;
  try {
    log.header = read_header(f);
    log.trials = read_trials(f, &log.incomplete);
    if (f.exists("/best") && is_complete(f, "/best")) {
      log.best = read_int(f, "/best", "trial");
      if (!log.trial(log.best)) damaged(f, fmt::format("/best names trial {}, which the log does not hold", log.best));
      if (f.has_attribute("/best", "verdict")) {
        ChoiceRecord c;
        c.chosen = log.best;
        c.best = read_int(f, "/best", "search_best");
        c.baseline = read_int(f, "/best", "baseline");
        c.runner_up = read_int(f, "/best", "runner_up");
        for (int index : {c.best, c.baseline, c.runner_up})
          if (index != -1 && !log.trial(index))
            damaged(f, fmt::format("/best compares trial {}, which the log does not hold", index));
        c.baseline_is = f.attribute_string("/best", "baseline_is");
        c.verdict = f.attribute_string("/best", "verdict");
        for (auto const& [name, out] : {std::pair{"vs_baseline", &c.best_vs_baseline},
                                        std::pair{"vs_runner_up", &c.best_vs_runner_up}}) {
          out->difference = f.attribute_double("/best", std::string(name) + "_difference");
          out->noise = f.attribute_double("/best", std::string(name) + "_noise");
          out->significant = f.attribute_int("/best", std::string(name) + "_significant") != 0;
        }
        if (f.exists("/best/confirm_ratios")) c.confirm_ratios = read_vector<double>(f, "/best/confirm_ratios");
        log.choice = c;
      }
    }
    if (f.exists("/pareto") && is_complete(f, "/pareto")) {
      auto const indices = read_vector<std::int32_t>(f, "/pareto/trials");
      require_length(f, "/pareto/time_per_step_s", read_vector<double>(f, "/pareto/time_per_step_s").size(),
                     indices.size(), "/pareto/trials");
      require_length(f, "/pareto/energy_per_step_j", read_vector<double>(f, "/pareto/energy_per_step_j").size(),
                     indices.size(), "/pareto/trials");
      for (int index : indices)
        if (!log.trial(index)) damaged(f, fmt::format("/pareto/trials names trial {}, which the log does not hold", index));
      log.pareto.assign(indices.begin(), indices.end());
    }
    if (f.exists("/train") && is_complete(f, "/train")) log.train = read_train(f);
    if (f.exists("/profile") && is_complete(f, "/profile")) log.profile = read_profile(f);
  } catch (io::H5Error const& e) {
    fail(path, "damaged run log: " + without_path(e.what(), path));
  }
  return log;
}
}  // namespace

bool is_run_log(std::string const& path) {
  if (probe(path) != FileKind::hdf5) return false;
  auto const has_format = [&] {
    H5File f(path, H5File::Mode::read);
    return f.has_attribute("/", "format") && f.attribute_string("/", "format") == kRunLogFormat;
  };
  try {
    io::read_in_child(path, [&] { has_format(); }, io::read_timeout_for(path));
    return has_format();
  } catch (io::H5Error const&) {
    return false;
  }
}

namespace detail {
void (*run_log_before_commit)(std::string const& temporary_path) = nullptr;
}

template <class Change>
void RunLogWriter::commit(std::string const& what, Start start, Change const& change, bool replace) {
  if (std::string const problem = io::output_target_problem(path_); !problem.empty())
    fail(path_, "cannot " + what + ": it " + problem);
  if (struct stat st; !replace && ::lstat(path_.c_str(), &st) == 0)
    throw RunLogExists(path_ + ": cannot " + what + ": a file is already there, and this log replaces none");
  std::unique_ptr<io::Temporary> made;
  try {
    made = std::make_unique<io::Temporary>(path_);  // removed, with what is in it, on any error
  } catch (io::WriteError const& e) {
    fail(path_, "cannot " + what + ": " + e.what() + "; " + io::free_space_text(path_));
  }
  std::string const temporary = made->path();
  auto const problem = [&](std::string const& why) { fail(path_, "cannot " + what + ": " + why); };
  try {
    if (start == Start::from_log) {
      std::error_code error;
      std::filesystem::copy_file(path_, temporary, error);
      if (error) problem("cannot copy the log to " + made->shown() + " (" + error.message() + ")");
    }
    H5File f(temporary, start == Start::from_log ? H5File::Mode::read_write : H5File::Mode::truncate);
    if (start == Start::from_log) {
      std::string const id = f.has_attribute("/", "run_id") ? f.attribute_string("/", "run_id") : "";
      if (id != run_id_)
        problem("the log was replaced by another run (its run_id is " + id + ", this run's " + run_id_ + ")");
    }
    change(f);
    if (detail::run_log_before_commit) detail::run_log_before_commit(temporary);
    f.close();  // throws if it fails (a full disk), where the destructor would only fail silently
  } catch (io::H5Error const& e) {  // the file is closed here: everything written is in it
    problem(without_path(e.what(), temporary) + "; " + io::free_space_text(path_));
  }
  // A kill cannot undo a rename, but a power cut could without the syncs.
  if (!io::sync_path(temporary, false))
    problem(fmt::format("cannot sync {} to the disk ({}); {}", temporary, std::strerror(errno), io::free_space_text(path_)));
  try {
    made->commit_to(path_, replace);
  } catch (io::OutputExists const& e) {
    throw RunLogExists(path_ + ": cannot " + what + ": " + e.what());
  } catch (io::WriteError const& e) {
    problem(e.what());
  }
}

RunLogWriter RunLogWriter::create(std::string const& path, RunHeader const& header, bool replace) {
  check_header(path, header);
  RunHeader h = header;
  h.resumed.clear();
  std::string const run_id = make_run_id();
  RunLogWriter writer(path, run_id);
  writer.commit("create the run log", Start::empty, [&](H5File& f) {
    write_header(f, h, run_id);
    f.create_group("/trials");
  }, replace);
  return writer;
}

RunLogWriter RunLogWriter::resume(std::string const& path, RunHeader const& expected,
                                  std::vector<TrialRecord>* finished) {
  std::vector<TrialRecord> trials;
  std::vector<std::string> incomplete;
  RunHeader in_log;
  std::string run_id;
  require_hdf5(path);
  read_in_child_first(path, [&] {  // what is read below, where an HDF5 crash cannot take joule with it
    H5File f = open_existing(path);
    require_format(f);
    try {
      read_header(f);
      f.attribute_string("/", "run_id");
      std::vector<std::string> ignored;
      read_trials(f, &ignored);
    } catch (io::H5Error const&) {
    }
  });
  {
    H5File f = open_existing(path);
    require_format(f);
    try {
      in_log = read_header(f);
      auto const differences = header_differences(in_log, expected);
      if (!differences.empty())
        fail(path, "cannot resume: this log was made by a different run: " + join(differences, "; "));
      run_id = f.attribute_string("/", "run_id");
      trials = read_trials(f, &incomplete);
    } catch (io::H5Error const& e) {
      fail(path, "cannot resume, damaged run log: " + without_path(e.what(), path));
    }
  }
  RunLogWriter writer(path, run_id);
  writer.commit("record the resume", Start::from_log, [&](H5File& f) {
    for (auto const& group : incomplete) f.remove(group);  // the caller measures these trials again
    auto resumed = in_log.resumed;
    resumed.push_back(now_iso());
    f.set_attribute("/", "resumed", join(resumed, "\n"));
  });
  if (finished) *finished = std::move(trials);
  return writer;
}

RunLogWriter::RunLogWriter(RunLogWriter&& other) noexcept
    : path_(std::move(other.path_)), run_id_(std::move(other.run_id_)), open_(other.open_) {
  other.open_ = false;
}

RunLogWriter& RunLogWriter::operator=(RunLogWriter&& other) noexcept {
  if (this != &other) {
    path_ = std::move(other.path_);
    run_id_ = std::move(other.run_id_);
    open_ = other.open_;
    other.open_ = false;
  }
  return *this;
}

void RunLogWriter::require_open(char const* what) const {
  if (!open_) fail(path_, std::string("cannot ") + what + ": the run log writer is closed");
}

void RunLogWriter::append_trial(TrialRecord const& t) {
  require_open("append a trial");
  if (t.index < 0) fail(path_, fmt::format("cannot append a trial with index {}", t.index));
  std::string const group = trial_group(t.index);
  check_power(path_, group, t.power);
  if (t.measured_on.size() != t.step_time_s.size())
    fail(path_, fmt::format("{}: {} measured steps but {} step numbers (measured_on)", group, t.step_time_s.size(),
                            t.measured_on.size()));
  commit("write " + group, Start::from_log, [&](H5File& f) {
    if (f.exists(group) && is_complete(f, group))
      fail(path_, fmt::format("trial {} is already in the log ({})", t.index, group));
    write_group(f, group, [&](std::string const& g) {
      write_knobs(f, g, t.knobs);
      f.set_attribute(g, "status", to_string(t.status));
      f.set_attribute(g, "reason", t.reason);
      f.set_attribute(g, "time_per_step_s", t.time_per_step_s);
      f.set_attribute(g, "energy_per_step_j", t.energy_per_step_j);
      f.set_attribute(g, "objective", t.objective);
      f.set_attribute(g, "ci_relative", t.ci_relative);
      f.set_attribute(g, "repeats", (long long)t.repeats);
      f.set_attribute(g, "warmup_steps", (long long)t.warmup_steps);
      f.set_attribute(g, "measured_steps", (long long)t.measured_steps);
      f.set_attribute(g, "drift", t.drift);
      f.set_attribute(g, "process_cpus", t.process_cpus);
      f.set_attribute(g, "other_cpus", t.other_cpus);
      f.set_attribute(g, "steal_share", t.steal_share);
      f.set_attribute(g, "energy_resolution_s", t.energy_resolution_s);
      f.set_attribute(g, "energy_below_resolution", (long long)(t.energy_below_resolution() ? 1 : 0));
      f.set_attribute(g, "predicted_device_bytes", (long long)t.predicted_device_bytes);
      f.set_attribute(g, "link_bytes_per_step", t.link_bytes_per_step);
      f.set_attribute(g, "host_jobs_speculated", t.host_jobs_speculated);
      f.set_attribute(g, "host_jobs_rolled_back", t.host_jobs_rolled_back);
      write_doubles(f, g + "/step_time_s", t.step_time_s);
      write_doubles(f, g + "/step_energy_j", t.step_energy_j);
      std::vector<std::int32_t> const on(t.measured_on.begin(), t.measured_on.end());
      f.write(g + "/measured_on", on.data(), {on.size()});
      write_regions(f, g, t.regions);
      write_power(f, g, t.power);
    });
  });
}

void RunLogWriter::write_best(TrialRecord const& best, ChoiceRecord const* choice) {
  require_open("write /best");
  commit("write /best", Start::from_log, [&](H5File& f) {
    write_group(f, "/best", [&](std::string const& g) {
      f.set_attribute(g, "trial", (long long)best.index);
      write_knobs(f, g, best.knobs);
      f.set_attribute(g, "time_per_step_s", best.time_per_step_s);
      f.set_attribute(g, "energy_per_step_j", best.energy_per_step_j);
      f.set_attribute(g, "objective", best.objective);
      if (choice) {  // how it was chosen (scheduler/significance.hpp)
        f.set_attribute(g, "search_best", (long long)choice->best);
        f.set_attribute(g, "baseline", (long long)choice->baseline);
        f.set_attribute(g, "runner_up", (long long)choice->runner_up);
        f.set_attribute(g, "baseline_is", choice->baseline_is);
        f.set_attribute(g, "verdict", choice->verdict);
        for (auto const& [name, c] : {std::pair{"vs_baseline", &choice->best_vs_baseline},
                                      std::pair{"vs_runner_up", &choice->best_vs_runner_up}}) {
          f.set_attribute(g, std::string(name) + "_difference", c->difference);
          f.set_attribute(g, std::string(name) + "_noise", c->noise);
          f.set_attribute(g, std::string(name) + "_significant", (long long)c->significant);
        }
        if (!choice->confirm_ratios.empty()) write_doubles(f, g + "/confirm_ratios", choice->confirm_ratios);
      }
    });
  });
}

void RunLogWriter::write_pareto(std::vector<TrialRecord> const& front) {
  require_open("write /pareto");
  std::vector<std::int32_t> indices;
  std::vector<double> time, energy;
  for (auto const& t : front) {
    indices.push_back(t.index);
    time.push_back(t.time_per_step_s);
    energy.push_back(t.energy_per_step_j);
  }
  commit("write /pareto", Start::from_log, [&](H5File& f) {
    write_group(f, "/pareto", [&](std::string const& g) {
      f.write(g + "/trials", indices.data(), {indices.size()});
      write_doubles(f, g + "/time_per_step_s", time);
      write_doubles(f, g + "/energy_per_step_j", energy);
    });
  });
}

void RunLogWriter::write_train(TrainRecord const& t) {
  require_open("write /train");
  check_power(path_, "/train", t.power);
  std::vector<std::int32_t> step, trial, measured, rolled_back, eval_step, eval_samples;
  std::vector<double> loss, lr, grad_norm, seconds, end_s, eval_loss, eval_accuracy;
  for (auto const& s : t.steps) {
    step.push_back(s.step);
    end_s.push_back(s.end_s);
    trial.push_back(s.trial);
    measured.push_back(s.measured ? 1 : 0);
    rolled_back.push_back(s.host_jobs_rolled_back);
    loss.push_back(s.loss);
    lr.push_back(s.lr);
    grad_norm.push_back(s.grad_norm);
    seconds.push_back(s.seconds);
  }
  for (auto const& e : t.evals) {
    eval_step.push_back(e.step);
    eval_loss.push_back(e.loss);
    eval_accuracy.push_back(e.accuracy);
    eval_samples.push_back(e.samples);
  }
  commit("write /train", Start::from_log, [&](H5File& f) {
    write_group(f, "/train", [&](std::string const& g) {
      write_knobs(f, g, t.knobs);
      f.set_attribute(g, "total_seconds", t.seconds);
      f.set_attribute(g, "total_energy_j", t.energy_j);
      f.set_attribute(g, "in_flight", (long long)(t.in_flight ? 1 : 0));
      f.set_attribute(g, "search_steps", (long long)t.search_steps);
      f.set_attribute(g, "switches", (long long)t.switches);
      f.set_attribute(g, "switch_seconds", t.switch_seconds);
      f.write(g + "/step", step.data(), {step.size()});
      f.write(g + "/trial", trial.data(), {trial.size()});
      f.write(g + "/measured", measured.data(), {measured.size()});
      f.write(g + "/host_jobs_rolled_back", rolled_back.data(), {rolled_back.size()});
      write_doubles(f, g + "/loss", loss);
      write_doubles(f, g + "/lr", lr);
      write_doubles(f, g + "/grad_norm", grad_norm);
      write_doubles(f, g + "/seconds", seconds);
      write_doubles(f, g + "/step_end_s", end_s);
      f.write(g + "/eval_step", eval_step.data(), {eval_step.size()});
      write_doubles(f, g + "/eval_loss", eval_loss);
      write_doubles(f, g + "/eval_accuracy", eval_accuracy);
      f.write(g + "/eval_samples", eval_samples.data(), {eval_samples.size()});
      write_regions(f, g, t.regions);
      write_power(f, g, t.power);
    });
  });
}

void RunLogWriter::write_profile(ProfileRecord const& p) {
  require_open("write /profile");
  check_power(path_, "/profile", p.power);
  commit("write /profile", Start::from_log, [&](H5File& f) {
    if (!f.has_attribute("/", "tuning") || f.attribute_string("/", "tuning") != "profile")
      fail(path_, "cannot write /profile: the log's tuning is not \"profile\"");
    write_group(f, "/profile", [&](std::string const& g) {
      f.set_attribute(g, "program", p.program);
      f.set_attribute(g, "rank", (long long)p.rank);
      f.set_attribute(g, "sample_rate_hz", p.sample_rate_hz);
      f.set_attribute(g, "seconds", p.seconds);
      f.set_attribute(g, "energy_j", p.energy_j);
      f.set_attribute(g, "outside_seconds", p.outside_seconds);
      f.set_attribute(g, "outside_energy_j", p.outside_energy_j);
      f.set_attribute(g, "tool_seconds", p.tool_seconds);
      f.set_attribute(g, "tool_edges", p.tool_edges);
      f.set_attribute(g, "resolution_s", p.resolution_s);
      write_regions(f, g, p.regions);
      write_region_table(f, g + "/kernels", p.kernels);
      write_power(f, g, p.power);
    });
  });
}

}  // namespace joule::scheduler
