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

// Writing a run log: a new one or the one being resumed (its header checked against this run),
// each record committed whole (core/io/commit.hpp). run_log_read.cpp reads it.
namespace joule::scheduler {

using namespace detail;

namespace {

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


// ---- writing ------------------------------------------------------------------------------

void write_knobs(H5File& f, std::string const& group, Knobs const& k) {
  for (auto const& knob : knob_table()) {
    if (knob.integer)
      f.set_attribute(group, knob.name, (long long)knob.get(k));
    else
      f.set_attribute(group, knob.name, knob.get(k));
  }
}

// Every row of a record's table (record_fields.hpp), and nothing else of it.
template <class Record>
void write_fields(H5File& f, std::string const& group, Record const& r, std::vector<RecordField<Record>> const& fields) {
  for (auto const& field : fields)
    std::visit(
        [&](auto member) {
          auto const& value = r.*member;
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::string>)
            f.set_attribute(group, field.name, value);
          else
            f.set_attribute(group, field.name, (long long)value);
        },
        field.member);
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

// The same table per call path, with each row's parent_row (run_log_read.cpp checks that each
// names an earlier row).
void write_path_table(H5File& f, std::string const& g, std::vector<RegionMeasure> const& paths) {
  write_region_table(f, g, paths);
  std::vector<std::int64_t> rows;
  for (auto const& r : paths) rows.push_back(r.parent_row);
  f.write(g + "/parent_row", rows.data(), {rows.size()});
}

// GROUP/regions (by name, as every reader of v1 knows it) and GROUP/region_paths (by call path).
void write_regions(H5File& f, std::string const& group, std::vector<RegionMeasure> const& regions,
                   std::vector<RegionMeasure> const& paths) {
  write_region_table(f, group + "/regions", regions);
  write_path_table(f, group + "/region_paths", paths);
}

// A path table's rows point at earlier rows; checked before anything is written.
void check_paths(std::string const& path, std::string const& what, std::vector<RegionMeasure> const& paths) {
  for (std::size_t i = 0; i < paths.size(); ++i) {
    auto const p = paths[i].parent_row;
    if (p < -1 || p >= int(i))
      fail(path, fmt::format("{}: region path {} ({}) has parent_row {}, expected -1 or an earlier row", what, i,
                             paths[i].name, p));
  }
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

// RunLogWriter::create has filled in `created`.
void write_header(H5File& f, RunHeader const& h, std::string const& run_id) {
  f.set_attribute("/", "format", kRunLogFormat);
  write_fields(f, "/", h, header_fields());
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

namespace detail {
void (*run_log_before_commit)(std::string const& temporary_path) = nullptr;
}

namespace {
// A commit's copy of the log into its temporary: the file at `path` must be the one this writer
// last read or wrote (`last`, held open), unchanged since (io::FileIdentity::unchanged; a log
// renamed over the path, or written there by another program, is refused before HDF5 reads it,
// so a file swapped in after resume()'s guarded read cannot reach the library here), and it is
// copied from that descriptor.
template <class Problem>
void copy_log(std::string const& path, std::shared_ptr<io::InputFile const> const& last, std::string const& temporary,
              std::string const& shown, Problem const& problem) {
  std::unique_ptr<io::InputFile> now;
  try {
    now = std::make_unique<io::InputFile>(path, io::kHdf5Files);
  } catch (io::InputError const& e) {
    problem(e.what());
  }
  if (last) {
    io::FileIdentity const was = last->current();
    if (!now->identity().unchanged(was))
      problem("the log was replaced by another run, or changed by another program, since this run last read or "
              "wrote it (" + io::InputFile::change_text(was, now->identity()) + ")");
  }
  int const out = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (out < 0) problem(fmt::format("cannot copy the log to {} ({})", shown, std::strerror(errno)));
  std::vector<char> buffer(std::size_t(1) << 20);
  int error = 0;
  for (off_t at = 0; !error;) {
    ssize_t const n = ::pread(now->fd(), buffer.data(), buffer.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    for (ssize_t done = 0; done < n && !error;) {
      ssize_t const w = ::write(out, buffer.data() + done, std::size_t(n - done));
      if (w < 0 && errno != EINTR) error = errno;
      if (w > 0) done += w;
    }
    at += n;
  }
  if (::close(out) != 0 && !error) error = errno;
  if (error) problem(fmt::format("cannot copy the log to {} ({})", shown, std::strerror(error)));
  try {
    now->require_unchanged();
  } catch (io::InputError const& e) {
    problem(e.what());
  }
}
}  // namespace

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
    if (start == Start::from_log) copy_log(path_, log_, temporary, made->shown(), problem);
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
  // The file that is about to become the log, held open: the next commit copies it (copy_log).
  std::shared_ptr<io::InputFile const> written;
  try {
    written = std::make_shared<io::InputFile const>(temporary, io::kHdf5Files);
  } catch (io::InputError const& e) {
    problem(e.what());
  }
  try {
    made->commit_to(path_, replace);
    log_ = std::move(written);
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
  if (h.created.empty()) h.created = now_iso();
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
  // Opened once: the guarded read in a child, the read here and the first commit's copy are of
  // this one file.
  auto const in = std::make_shared<io::InputFile const>(open_run_log(path));
  read_in_child_first(*in, [&] {  // what is read below, where an HDF5 crash cannot take joule with it
    H5File f = open_existing(*in);
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
    H5File f = open_existing(*in);
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
  require_log_unchanged(*in);
  RunLogWriter writer(path, run_id);
  writer.log_ = in;
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
    : path_(std::move(other.path_)), run_id_(std::move(other.run_id_)), open_(other.open_), log_(std::move(other.log_)) {
  other.open_ = false;
}

RunLogWriter& RunLogWriter::operator=(RunLogWriter&& other) noexcept {
  if (this != &other) {
    path_ = std::move(other.path_);
    run_id_ = std::move(other.run_id_);
    open_ = other.open_;
    log_ = std::move(other.log_);
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
  check_paths(path_, group, t.region_paths);
  if (t.measured_on.size() != t.step_time_s.size())
    fail(path_, fmt::format("{}: {} measured steps but {} step numbers (measured_on)", group, t.step_time_s.size(),
                            t.measured_on.size()));
  commit("write " + group, Start::from_log, [&](H5File& f) {
    if (f.exists(group) && is_complete(f, group))
      fail(path_, fmt::format("trial {} is already in the log ({})", t.index, group));
    write_group(f, group, [&](std::string const& g) {
      write_knobs(f, g, t.knobs);
      f.set_attribute(g, "status", to_string(t.status));
      write_fields(f, g, t, trial_fields());
      // Derived, for readers of the file alone (TrialRecord computes it): not read back.
      f.set_attribute(g, "energy_below_resolution", (long long)(t.energy_below_resolution() ? 1 : 0));
      write_doubles(f, g + "/step_time_s", t.step_time_s);
      write_doubles(f, g + "/step_energy_j", t.step_energy_j);
      std::vector<std::int32_t> const on(t.measured_on.begin(), t.measured_on.end());
      f.write(g + "/measured_on", on.data(), {on.size()});
      write_regions(f, g, t.regions, t.region_paths);
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
  check_paths(path_, "/train", t.region_paths);
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
      write_regions(f, g, t.regions, t.region_paths);
      write_power(f, g, t.power);
    });
  });
}

void RunLogWriter::write_profile(ProfileRecord const& p) {
  require_open("write /profile");
  check_power(path_, "/profile", p.power);
  check_paths(path_, "/profile", p.region_paths);
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
      write_regions(f, g, p.regions, p.region_paths);
      write_region_table(f, g + "/kernels", p.kernels);
      write_power(f, g, p.power);
    });
  });
}

}  // namespace joule::scheduler
