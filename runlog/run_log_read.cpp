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
#include <type_traits>
#include <variant>

#include "runlog/detail/run_log_file.hpp"
#include "runlog/record_fields.hpp"

// Reading a run log: opening it (with a message for each way it is not one), every group and
// table, and the public read_run_log / is_run_log. run_log.cpp writes and resumes it.
namespace joule::scheduler {

namespace detail {

// ---- names and small helpers --------------------------------------------------------------

std::string trial_group(int index) { return fmt::format("/trials/{:04d}", index); }

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

enum class FileKind { not_hdf5, hdf5 };

// Looks for the HDF5 signature ourselves (at 0 or after a user block of 512, 1024, ... bytes),
// so "not HDF5" and "HDF5 but damaged" get different messages. Read through the descriptor opened.
FileKind probe(io::InputFile const& in) {
  static char const signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  long long const size = (long long)in.identity().size;
  for (long long offset = 0; offset + 8 <= size; offset = offset ? offset * 2 : 512) {
    char bytes[8] = {};
    ssize_t n;
    do n = ::pread(in.fd(), bytes, 8, off_t(offset));
    while (n < 0 && errno == EINTR);
    if (n != 8) break;
    if (std::memcmp(bytes, signature, 8) == 0) return FileKind::hdf5;
  }
  return FileKind::not_hdf5;
}

io::InputFile open_log(std::string const& path) {
  try {
    return io::InputFile(path, io::kHdf5Files);
  } catch (io::InputError const& e) {
    if (e.system_error() == ENOENT) fail(path, "no such file");
    throw RunLogError(e.what());
  }
}

void require_hdf5(io::InputFile const& in) {
  if (probe(in) != FileKind::hdf5) fail(in.path(), "not an HDF5 file, so not a joule run log");
}

void require_log_unchanged(io::InputFile const& in) {
  try {
    in.require_unchanged();
  } catch (io::InputError const& e) {
    throw RunLogError(e.what());
  }
}

io::InputFile open_run_log(std::string const& path) {
  io::InputFile in = open_log(path);
  require_hdf5(in);
  return in;
}

H5File open_existing(io::InputFile const& in) {
  require_hdf5(in);
  try {
    return H5File(in);
  } catch (io::H5Error const&) {
    require_log_unchanged(in);  // a file changed meanwhile is said as that
    fail(in.path(), fmt::format("HDF5 cannot open this file ({} bytes): it is damaged or truncated", in.identity().size));
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

// Every row of a record's table (record_fields.hpp) into `r`; a kOptional row the file lacks
// leaves its member as it is (the default).
template <class Record>
void read_fields(H5File const& f, std::string const& group, Record& r, std::vector<RecordField<Record>> const& fields) {
  for (auto const& field : fields) {
    if ((field.flags & kOptional) && !f.has_attribute(group, field.name)) continue;
    std::visit(
        [&](auto member) {
          auto& value = r.*member;
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, double>) {
            value = f.attribute_double(group, field.name);
          } else if constexpr (std::is_same_v<T, std::string>) {
            value = f.attribute_string(group, field.name);
          } else if constexpr (std::is_same_v<T, int>) {
            value = read_int(f, group, field.name);
          } else {
            long long const n = f.attribute_int(group, field.name);
            if (n < 0 && (std::is_unsigned_v<T> || (field.flags & kCount)))
              damaged(f, fmt::format("attribute '{}' on {} is negative ({})", field.name, group, n));
            value = T(n);
          }
        },
        field.member);
  }
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

// GROUP/region_paths: the table per call path, each row's parent an earlier row (parent_row, -1:
// the top level) whose name is its `parent`. Absent in logs written before regions were recorded
// per call path: empty (readers then use GROUP/regions, by name).
std::vector<RegionMeasure> read_region_paths(H5File const& f, std::string const& group) {
  std::string const g = group + "/region_paths";
  if (!f.exists(g)) return {};
  auto paths = read_region_table(f, g);
  auto const rows = read_vector<std::int64_t>(f, g + "/parent_row");
  require_length(f, g + "/parent_row", rows.size(), paths.size(), g + "/name");
  for (std::size_t i = 0; i < paths.size(); ++i) {
    if (rows[i] < -1 || rows[i] >= std::int64_t(i))
      damaged(f, fmt::format("{}/parent_row[{}] is {}, expected -1 or an earlier row (0 to {})", g, i, rows[i],
                             std::int64_t(i) - 1));
    std::string const want = rows[i] < 0 ? std::string() : paths[std::size_t(rows[i])].name;
    if (paths[i].parent != want)
      damaged(f, fmt::format("{}/parent[{}] is \"{}\", but parent_row {} is \"{}\"", g, i, paths[i].parent, rows[i], want));
    paths[i].parent_row = int(rows[i]);
  }
  return paths;
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
  read_fields(f, g, t, trial_fields());
  t.step_time_s = read_vector<double>(f, g + "/step_time_s");
  t.step_energy_j = read_vector<double>(f, g + "/step_energy_j");
  if (f.exists(g + "/measured_on")) {  // logs from before in-flight tuning have none
    auto const on = read_vector<std::int32_t>(f, g + "/measured_on");
    require_length(f, g + "/measured_on", on.size(), t.step_time_s.size(), g + "/step_time_s");
    t.measured_on.assign(on.begin(), on.end());
  }
  t.regions = read_regions(f, g);
  t.region_paths = read_region_paths(f, g);
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
  read_fields(f, "/", h, header_fields());
  if (h.energy_kind != "measured" && h.energy_kind != "model")
    damaged(f, fmt::format("attribute 'energy_kind' on / is \"{}\", expected measured or model", h.energy_kind));
  if (h.tuning != "offline" && h.tuning != "in_flight" && h.tuning != "profile")
    damaged(f, fmt::format("attribute 'tuning' on / is \"{}\", expected offline, in_flight or profile", h.tuning));
  try {  // nothing may walk a configuration nested too deeply (see check_json_limits)
    check_json_limits(h.config_json, "attribute 'config' on /");
  } catch (ConfigError const& e) {
    damaged(f, e.what());
  }
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
  t.region_paths = read_region_paths(f, g);
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
  p.region_paths = read_region_paths(f, g);
  p.kernels = read_region_table(f, g + "/kernels");
  p.power = read_power(f, g);
  return p;
}

}  // namespace detail

using namespace detail;

// ---- public ---------------------------------------------------------------------------------

TrialRecord const* RunLogContents::trial(int index) const {
  for (auto const& t : trials)
    if (t.index == index) return &t;
  return nullptr;
}

namespace detail {
// Runs `read` in a child process first (io::read_in_child): a log that crashes the HDF5 library
// is a RunLogError naming the file, not a crash of joule.
void read_in_child_first(io::InputFile const& in, std::function<void()> const& read) {
  try {
    io::read_in_child(in, read, io::read_timeout_for(in));
  } catch (io::H5Error const& e) {
    throw RunLogError(e.what());
  }
}
}  // namespace detail

namespace {
RunLogContents read_run_log_here(io::InputFile const& in);
}  // namespace

RunLogContents read_run_log(std::string const& path) {
  io::InputFile const in = open_run_log(path);  // opened once: the child and this process read this file
  read_in_child_first(in, [&] { read_run_log_here(in); });
  RunLogContents log = read_run_log_here(in);
  require_log_unchanged(in);
  return log;
}

namespace {
RunLogContents read_run_log_here(io::InputFile const& in) {
  std::string const& path = in.path();
  H5File f = open_existing(in);
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
  try {
    return is_run_log(io::InputFile(path, io::kHdf5Files));
  } catch (io::InputError const&) {
    return false;
  }
}

bool is_run_log(io::InputFile const& in) {
  if (probe(in) != FileKind::hdf5) return false;
  auto const has_format = [&] {
    H5File f(in);
    return f.has_attribute("/", "format") && f.attribute_string("/", "format") == kRunLogFormat;
  };
  try {
    io::read_in_child(in, [&] { has_format(); }, io::read_timeout_for(in));
    bool const is = has_format();
    in.require_unchanged();
    return is;
  } catch (io::H5Error const&) {
    return false;
  } catch (io::InputError const&) {
    return false;
  }
}

}  // namespace joule::scheduler
