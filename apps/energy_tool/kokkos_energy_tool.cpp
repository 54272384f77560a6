// joule's energy layer as a Kokkos Tools library: measured (or labelled-model) energy per region
// and per kernel for any Kokkos program, with no change to it (docs/energy-tool.md).
//
//   KOKKOS_TOOLS_LIBS=/path/libjoule_energy_tool.so ./app        (Kokkos 3.5 and later)
//   KOKKOS_PROFILE_LIBRARY=/path/libjoule_energy_tool.so ./app   (Kokkos 3.4)
//
// Everything measured goes through energy/ as joule's own runs use it: the sources and their
// discovery (NVML, hwmon, RAPL, the CPU-time model), the sampler thread and its trace, and the
// region timeline's attribution after the fact. Three timelines: the program's regions (push /
// pop), its kernels, deep copies and fences (begin / end, by name), and one for "inside any
// region" and the whole program, from which the energy outside regions follows. At finalize the
// result is a scheduler::ProfileRecord: printed (runlog/profile.hpp, the formatter `joule
// inspect` uses too) and written as a joule run log or a CSV (JOULE_ENERGY_OUT).
//
// Edges are stamped on the host clock and nothing is fenced: Kokkos is told the tool needs no
// global fencing, so on a GPU a kernel's edges are its launch and the return of its launch, not
// its execution (the table says so). JOULE_ENERGY_FENCE=1 asks Kokkos to fence around every
// kernel and fences at every region edge: exact edges, a serialised device.
#include "core/io/commit.hpp"
#include "energy/edge_clock.hpp"
#include "energy/monitor.hpp"
#include "energy/regions.hpp"
#include "energy/sampler.hpp"
#include "energy/source.hpp"
#include "runlog/profile.hpp"
#include "runlog/run_log.hpp"

#include <hdf5.h>
#include <impl/Kokkos_Profiling_C_Interface.h>  // C declarations only: no Kokkos symbol is linked

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#define JOULE_TOOL_EXPORT extern "C" __attribute__((visibility("default")))

namespace joule::energy::tool {
namespace {

// --- options (environment variables; docs/energy-tool.md) ------------------------------------

struct Options {
  std::string out;        // JOULE_ENERGY_OUT: a .h5 run log or a .csv table (per process: output_name)
  double rate_hz = Sampler::kDefaultRateHz;  // JOULE_ENERGY_RATE_HZ
  bool kernels = true;    // JOULE_ENERGY_KERNELS: 0 attributes regions only
  bool fence = false;     // JOULE_ENERGY_FENCE: 1 fences at every edge (exact, slower)
  int top = 12;           // JOULE_ENERGY_TOP: rows per table
  bool quiet = false;     // JOULE_ENERGY_QUIET: 1 prints no table (the file only)
};

bool ends_with(std::string const& s, std::string_view tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

[[noreturn]] void bad_option(char const* name, char const* value, char const* allowed) {
  throw std::runtime_error(std::string(name) + "='" + value + "': allowed " + allowed);
}

bool flag(char const* name, bool fallback) {
  char const* v = std::getenv(name);
  if (!v || !*v) return fallback;
  if (!std::strcmp(v, "1") || !std::strcmp(v, "yes") || !std::strcmp(v, "true")) return true;
  if (!std::strcmp(v, "0") || !std::strcmp(v, "no") || !std::strcmp(v, "false")) return false;
  bad_option(name, v, "1/yes/true or 0/no/false");
}

double number(char const* name, double fallback, double lo, double hi, char const* allowed) {
  char const* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  double const x = std::strtod(v, &end);
  if (errno || end == v || *end || !(x >= lo && x <= hi)) bad_option(name, v, allowed);
  return x;
}

// The rank from the usual launchers' variables (Open MPI, MPICH/Hydra, PMIx, Slurm, MVAPICH);
// -1 when none is set (one process).
int rank_from_environment() {
  for (char const* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK"})
    if (char const* v = std::getenv(name); v && *v) {
      char* end = nullptr;
      long const r = std::strtol(v, &end, 10);
      if (*end == 0 && r >= 0) return int(r);
    }
  return -1;
}

Options read_options() {
  Options o;
  if (char const* v = std::getenv("JOULE_ENERGY_OUT")) o.out = v;
  o.rate_hz = number("JOULE_ENERGY_RATE_HZ", o.rate_hz, 1, 10000, "a sampling rate in Hz, 1..10000");
  o.kernels = flag("JOULE_ENERGY_KERNELS", o.kernels);
  o.fence = flag("JOULE_ENERGY_FENCE", o.fence);
  o.top = int(number("JOULE_ENERGY_TOP", o.top, 1, 1000000, "a row count, 1..1000000"));
  o.quiet = flag("JOULE_ENERGY_QUIET", o.quiet);
  if (!o.out.empty() && !ends_with(o.out, ".h5") && !ends_with(o.out, ".csv"))
    bad_option("JOULE_ENERGY_OUT", o.out.c_str(),
               "a path ending in .h5 (a joule run log: `joule inspect`, plot_run.py) or .csv (the table)");
  return o;
}

// A Slurm array task's "<job>_<task>" (SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID), or "" outside an
// array. Every task of an array has SLURM_PROCID 0 and usually the same JOULE_ENERGY_OUT: the name
// tells their files apart. Only decimal ids are taken (nothing else reaches the file name).
std::string array_task_from_environment() {
  auto const id = [](char const* name) -> std::string {
    char const* v = std::getenv(name);
    if (!v || !*v || std::strlen(v) > 20) return "";
    for (char const* c = v; *c; ++c)
      if (*c < '0' || *c > '9') return "";
    return v;
  };
  std::string const job = id("SLURM_ARRAY_JOB_ID"), task = id("SLURM_ARRAY_TASK_ID");
  return job.empty() || task.empty() ? "" : job + "_" + task;
}

// The file a process is meant to write: name.h5 as given for one process; name.rank3.h5 where a
// launcher set a rank; name.array<job>_<task>.h5 or name.array<job>_<task>.rank3.h5 in a Slurm
// array task. Processes that still share a name (two jobs with one JOULE_ENERGY_OUT, two steps
// of one job) get the first free name beside it (report()): names stay predictable, no pid in them.
std::string output_name(std::string const& path, int rank, std::string const& array_task) {
  auto const dot = path.rfind('.');
  std::string middle;
  if (!array_task.empty()) middle += ".array" + array_task;
  if (rank >= 0) middle += ".rank" + std::to_string(rank);
  return path.substr(0, dot) + middle + path.substr(dot);
}

// The program's command line, from /proc (arguments joined by spaces); "" where there is none.
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\0') text.pop_back();
  std::replace(text.begin(), text.end(), '\0', ' ');
  return text;
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? name : "";
}

// --- the state of one loaded tool ------------------------------------------------------------

// What a kernel, deep copy or fence begins with; ended by its id (the stack depth on its thread:
// Kokkos ends what it began on a thread in reverse order).
struct OpenOp {
  std::string name;
  Stamp begin;
};

struct State {
  Options options;
  int rank = -1;
  std::string array_task;  // "<job>_<task>" in a Slurm array, else ""
  pid_t pid = 0;  // a forked child inherits the state but not the sampler thread: it stays silent
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<RegionTimeline> regions, kernels, outer;
  std::vector<std::string> notes;
  Stamp program_begin;
  uint64_t interface_version = 0;
};

State* g_state = nullptr;
void (*g_fence)(uint32_t) = nullptr;  // Kokkos' fence, from the tool programming interface
thread_local std::vector<OpenOp> t_ops;
thread_local std::size_t t_ops_depth = 0;
thread_local int t_region_depth = 0;
thread_local Stamp t_outer_begin;

bool active() { return g_state && g_state->pid == ::getpid(); }

// Set while this thread runs the tool's own fence. From Kokkos 4.0 the tool interface's fence is a
// named Kokkos::fence, which calls the tool's begin_fence and end_fence: with fenced edges, whose
// stamps fence, that recursed until the stack ran out (a segfault with JOULE_ENERGY_FENCE=1 under
// Kokkos 4.6). The tool's own fence is not the program's: it is neither stamped nor attributed.
thread_local bool t_in_tool_fence = false;

void fence_all() {
  if (!g_fence || t_in_tool_fence) return;
  struct Inside {
    Inside() { t_in_tool_fence = true; }
    ~Inside() { t_in_tool_fence = false; }
  } inside;
  g_fence(0);
}

using scheduler::Operation;

// A kernel, deep copy or fence begins: its name (with its kind's prefix) and stamp kept on this
// thread until its end.
void begin_op(Operation kind, char const* name, uint64_t* id) {
  std::string_view const prefix = scheduler::operation_kind(kind).prefix;
  if (!active() || !g_state->kernels || t_in_tool_fence) {
    if (id) *id = 0;
    return;
  }
  if (t_ops.size() <= t_ops_depth) t_ops.resize(t_ops_depth + 1);
  OpenOp& op = t_ops[t_ops_depth];
  op.name.assign(prefix);
  op.name += name;
  op.begin = g_state->kernels->stamp();
  if (id) *id = ++t_ops_depth;
}

void end_op(uint64_t id) {
  if (!active() || !g_state->kernels || id == 0 || id != t_ops_depth) return;
  Stamp const end = g_state->kernels->stamp();
  --t_ops_depth;
  g_state->kernels->close(t_ops[t_ops_depth].name.c_str(), t_ops[t_ops_depth].begin, end);
}

// --- the finalize report ---------------------------------------------------------------------

std::vector<scheduler::RegionMeasure> measures(std::map<std::string, RegionStats> const& stats) {
  std::vector<scheduler::RegionMeasure> out;
  for (auto const& [name, st] : stats) out.push_back({name, st.calls, st.seconds, st.total_j, st.below_resolution, st.parent});
  // Largest energy first, in the file as in the table.
  std::stable_sort(out.begin(), out.end(), [](auto const& a, auto const& b) { return a.energy_j > b.energy_j; });
  return out;
}

// The table per call path, in the timeline's order (a path after the one it was opened in).
std::vector<scheduler::RegionMeasure> path_measures(std::vector<RegionPath> const& paths) {
  std::vector<scheduler::RegionMeasure> out;
  for (auto const& p : paths)
    out.push_back({p.name, p.stats.calls, p.stats.seconds, p.stats.total_j, p.stats.below_resolution, p.stats.parent, p.parent});
  return out;
}

// The profile as joule's run log (`joule inspect`, plot_run.py read it) or as the CSV table; each
// through a temporary and a rename, so a failure leaves no half file (and never the program's).
void write_output(std::string const& path, scheduler::RunHeader const& header, scheduler::ProfileRecord const& profile) {
  if (ends_with(path, ".h5")) {
    // HDF5's error printing is the program's (joule's H5File turns it off for itself).
    H5E_auto2_t handler = nullptr;
    void* data = nullptr;
    H5Eget_auto2(H5E_DEFAULT, &handler, &data);
    try {
      auto log = scheduler::RunLogWriter::create(path, header, /*replace=*/false);
      log.write_profile(profile);
      log.close();
    } catch (std::exception const& e) {
      H5Eset_auto2(H5E_DEFAULT, handler, data);
      throw;
    }
    H5Eset_auto2(H5E_DEFAULT, handler, data);
    return;
  }
  io::CommitChecks no_replace;
  no_replace.replace = false;
  io::commit_file(path, "energy profile", [&](std::string const& temporary) {
    std::ofstream f(temporary);
    f << scheduler::format_profile_csv(header, profile);
    f.close();
    if (!f) throw std::runtime_error(std::string("cannot write it (") + std::strerror(errno) + ")");
  }, no_replace);
}

// JOULE_ENERGY_OUT never replaces a file (a user's, or an earlier run's log: joule never overwrites
// one): where one is, the profile goes beside it, NAME.1.EXT, NAME.2.EXT, ... (the first free).
// The n-th candidate: NAME.EXT itself for n = 0.
constexpr int kNeighbours = 9999;
std::string path_beside(std::string const& path, int n) {
  if (n == 0) return path;
  std::size_t const slash = path.find_last_of('/'), dot = path.find_last_of('.');
  bool const has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  std::string const stem = has_ext ? path.substr(0, dot) : path, ext = has_ext ? path.substr(dot) : "";
  return stem + "." + std::to_string(n) + ext;
}

// Why `path` cannot be the profile's name ("a regular file is there"), or "" when it is free.
// Throws where it cannot be told (the folder cannot be searched: no name in it could be written).
std::string name_taken(std::string const& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    char const* kind = S_ISREG(st.st_mode)   ? "a regular file"
                       : S_ISLNK(st.st_mode) ? "a symbolic link"
                       : S_ISDIR(st.st_mode) ? "a folder"
                                             : "something that is not a regular file";
    return std::string(kind) + " is there";
  }
  if (errno == ENOENT) return "";
  throw std::runtime_error(path + ": cannot be looked at (" + std::strerror(errno) + ")");
}

std::string base_name(std::string const& path) {
  std::size_t const slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Writes the profile to the first free name from `named` on. A name free when looked at may be
// taken by another process before this one's rename (processes that share a name end at once:
// an array of jobs, a node's ranks): the write then replaces nothing (io::OutputExists,
// scheduler::RunLogExists) and the next free name is tried. Returns the name written; throws
// naming the first and last names tried and why the last could not be written. Any other error
// (a full disk, an unsafe folder) ends the search, naming the file: the next name would fail alike.
std::string write_beside(std::string const& named, scheduler::RunHeader const& header,
                         scheduler::ProfileRecord const& profile) {
  std::string why;  // why the last name tried was not written
  for (int n = 0; n <= kNeighbours; ++n) {
    std::string const path = path_beside(named, n);
    if (why = name_taken(path); !why.empty()) continue;
    try {
      write_output(path, header, profile);
      return path;
    } catch (io::OutputExists const&) {
      why = "another process wrote that name while this one wrote its profile";
    } catch (scheduler::RunLogExists const&) {
      why = "another process wrote that name while this one wrote its profile";
    }  // any other error (its message names the file) ends the search: the next name would fail alike
  }
  throw std::runtime_error(named + " and " + base_name(path_beside(named, 1)) + " ... " +
                           base_name(path_beside(named, kNeighbours)) + " are all taken (the last, " +
                           path_beside(named, kNeighbours) + ": " + why +
                           "); the tool never replaces a file: move those files away, or set JOULE_ENERGY_OUT to a "
                           "name of its own");
}

// How the last report went, for a program that drives the tool itself (joule_energy_tool_last_output).
// Never destroyed: a program may finalize Kokkos from its own static destructors, after this
// library's would have run.
struct Outcome {
  int written = -1;  // 1: `text` is the file written; 0: `text` says why no profile was; -1: no report
  std::string text;
};
Outcome& g_outcome = *new Outcome;

void report(State& s) {
  Stamp const program_end = s.outer->stamp();
  s.outer->close("(program)", s.program_begin, program_end);
  // One wait for the sampler to cover the last edge of all three timelines, then each attributed.
  double need = std::max(s.regions->pending_until(), s.outer->pending_until());
  if (s.kernels) need = std::max(need, s.kernels->pending_until());
  if (need >= 0) s.sampler->wait_until_covered(need);
  auto const region_paths = path_difference(s.regions->paths(), {}, s.regions->resolution_s());  // those with calls
  auto const regions = regions_by_name(region_paths, s.regions->resolution_s());
  auto const kernels = s.kernels ? s.kernels->stats() : std::map<std::string, RegionStats>{};
  auto const outer = s.outer->stats();
  Monitor monitor(*s.sampler);
  auto const trace = monitor.measure({"program", s.program_begin.t, program_end.t}, /*with_trace=*/true);
  s.sampler->stop();

  RegionStats program, inside;
  if (auto it = outer.find("(program)"); it != outer.end()) program = it->second;
  if (auto it = outer.find("(in regions)"); it != outer.end()) inside = it->second;

  scheduler::RunHeader h;
  h.joule_version = JOULE_VERSION;
  h.git_commit = JOULE_GIT_COMMIT;
  h.kokkos_version = "the program's (Kokkos Tools interface " + std::to_string(s.interface_version) + ")";
  h.host = host_name();
  h.energy_source = trace.total_description;
  h.energy_kind = trace.measured ? "measured" : "model";
  h.energy_regions = s.options.fence ? "edges fenced (exact on any backend)"
                                     : "edges on the host clock, no fence added (on a GPU, kernel edges are "
                                       "launches: JOULE_ENERGY_FENCE=1 for exact ones)";
  h.tuning = "profile";
  h.config_json = "{}";

  scheduler::ProfileRecord p;
  p.program = command_line();
  p.rank = s.rank;
  p.sample_rate_hz = s.sampler->rate_hz();
  p.seconds = program.seconds;
  p.energy_j = program.total_j;
  p.outside_seconds = program.seconds - inside.seconds;
  p.outside_energy_j = program.total_j - inside.total_j;
  p.tool_seconds = s.regions->hook_seconds() + s.outer->hook_seconds() + (s.kernels ? s.kernels->hook_seconds() : 0);
  p.tool_edges = s.regions->hook_calls() + s.outer->hook_calls() + (s.kernels ? s.kernels->hook_calls() : 0);
  p.resolution_s = s.regions->resolution_s();
  p.regions = measures(regions);
  p.region_paths = path_measures(region_paths);
  p.kernels = measures(kernels);
  p.power = {trace.trace_columns, trace.trace_time_s, trace.trace_watts};

  if (!s.options.quiet) {
    std::string text = "\n" + scheduler::format_profile_report(h, p, s.options.top);
    // Discovery's notes (a sensor not readable, and why) under the first line.
    std::string notes;
    for (auto const& n : s.notes) notes += "  note: " + n + "\n";
    text.insert(text.find('\n', 1) + 1, notes);
    std::fputs(text.c_str(), stderr);
  }
  if (!s.options.out.empty()) {
    std::string const named = output_name(s.options.out, s.rank, s.array_task);
    try {
      std::string const path = write_beside(named, h, p);
      g_outcome = {1, path};
      if (path != named)
        std::fprintf(stderr, "joule energy tool: %s is already there and is never replaced; written beside it: %s\n",
                     named.c_str(), path.c_str());
      else if (!s.options.quiet)
        std::fprintf(stderr, "  written: %s\n", path.c_str());
    } catch (std::exception const& e) {
      // Said whatever JOULE_ENERGY_QUIET asks: the profile is lost, and a Kokkos tool cannot
      // change the program's exit status to say so.
      g_outcome = {0, e.what()};
      std::fprintf(stderr, "joule energy tool: ERROR: no profile written: %s\n", e.what());
    }
  }
}

}  // namespace
}  // namespace joule::energy::tool

using namespace joule::energy;
using namespace joule::energy::tool;

// --- the Kokkos Tools entry points -----------------------------------------------------------

JOULE_TOOL_EXPORT void kokkosp_request_tool_settings(uint32_t, Kokkos_Tools_ToolSettings* settings) {
  // Called before init: whether Kokkos fences around every kernel for this tool.
  try {
    settings->requires_global_fencing = flag("JOULE_ENERGY_FENCE", false);
  } catch (std::exception const&) {
    settings->requires_global_fencing = false;  // init says what is wrong, and attributes nothing
  }
}

JOULE_TOOL_EXPORT void kokkosp_provide_tool_programming_interface(uint32_t, Kokkos_Tools_ToolProgrammingInterface api) {
  g_fence = api.fence;  // before or after init, by Kokkos version
}

JOULE_TOOL_EXPORT void kokkosp_init_library(int, uint64_t interface_version, uint32_t,
                                            Kokkos_Profiling_KokkosPDeviceInfo*) {
  g_outcome = {};
  try {
    auto s = std::make_unique<State>();
    s->options = read_options();
    s->rank = rank_from_environment();
    s->array_task = array_task_from_environment();
    s->pid = ::getpid();
    s->interface_version = interface_version;
    std::vector<SourceAttempt> attempts;
    auto sources = discover_sources(SourceOptions::from_environment_variables(), &s->notes, &attempts);
    // Why a sensor was not used, for every one not found (no sensor at all, or a node's sensors
    // left to its local rank 0): said under the table's first line.
    for (auto const& a : attempts)
      if (!a.found) s->notes.push_back(a.source + " (" + a.looked_for + "): " + a.outcome);
    s->sampler = std::make_unique<Sampler>(std::move(sources), s->options.rate_hz);
    EdgeMode const mode = s->options.fence ? EdgeMode::fenced : EdgeMode::timeline;
    auto clock = [&] { return make_host_edge_clock(*s->sampler, s->options.fence ? std::function<void()>(fence_all)
                                                                                   : std::function<void()>()); };
    // The program's regions are its own: none is skipped by joule's library rule.
    s->regions = std::make_unique<RegionTimeline>(*s->sampler, mode, clock(), /*skip_library_regions=*/false);
    if (s->options.kernels) s->kernels = std::make_unique<RegionTimeline>(*s->sampler, mode, clock(), false);
    s->outer = std::make_unique<RegionTimeline>(*s->sampler, mode, make_host_edge_clock(*s->sampler), false);
    s->sampler->start();
    s->program_begin = s->outer->stamp();
    g_state = s.release();
  } catch (std::exception const& e) {
    g_outcome = {0, std::string("not attributing energy: ") + e.what()};
    std::fprintf(stderr, "joule energy tool: not attributing energy: %s\n", e.what());
  }
}

JOULE_TOOL_EXPORT void kokkosp_finalize_library() {
  if (!g_state) return;
  if (g_state->pid != ::getpid()) return;  // a forked child: the parent reports
  try {
    report(*g_state);
  } catch (std::exception const& e) {
    g_outcome = {0, std::string("no report: ") + e.what()};
    std::fprintf(stderr, "joule energy tool: ERROR: no report: %s\n", e.what());
  }
  delete g_state;
  g_state = nullptr;
}

// Not a Kokkos Tools entry point: for a program that loads the tool itself and must know what it
// wrote (`joule bench --suite energy`, which dlopens it). After kokkosp_finalize_library: 1 and
// *text the file the profile was written to (the name given, or the first free one beside it);
// 0 and *text why no profile was written (as said on stderr); -1 and *text "" where no report
// was made or no JOULE_ENERGY_OUT was set. *text stays valid until the next kokkosp_init_library.
JOULE_TOOL_EXPORT int joule_energy_tool_last_output(char const** text) {
  if (text) *text = g_outcome.text.c_str();
  return g_outcome.written;
}

JOULE_TOOL_EXPORT void kokkosp_push_profile_region(char const* name) {
  if (!active()) return;
  // One stamp for the region and, at depth 0, "inside any region": the two timelines then agree
  // exactly, and the energy outside regions is the program's less theirs. (Every clock the tool
  // uses is a host clock, so one stamp serves both.)
  Stamp const at = g_state->regions->stamp();
  if (t_region_depth++ == 0) t_outer_begin = at;
  g_state->regions->push(name, at);
}

JOULE_TOOL_EXPORT void kokkosp_pop_profile_region() {
  if (!active() || t_region_depth == 0) return;  // a pop without its push: ignored
  Stamp const at = g_state->regions->stamp();
  g_state->regions->pop(at);
  if (--t_region_depth == 0) g_state->outer->close("(in regions)", t_outer_begin, at);
}

JOULE_TOOL_EXPORT void kokkosp_begin_parallel_for(char const* name, uint32_t, uint64_t* id) { begin_op(Operation::kernel, name, id); }
JOULE_TOOL_EXPORT void kokkosp_end_parallel_for(uint64_t id) { end_op(id); }
JOULE_TOOL_EXPORT void kokkosp_begin_parallel_reduce(char const* name, uint32_t, uint64_t* id) { begin_op(Operation::kernel, name, id); }
JOULE_TOOL_EXPORT void kokkosp_end_parallel_reduce(uint64_t id) { end_op(id); }
JOULE_TOOL_EXPORT void kokkosp_begin_parallel_scan(char const* name, uint32_t, uint64_t* id) { begin_op(Operation::kernel, name, id); }
JOULE_TOOL_EXPORT void kokkosp_end_parallel_scan(uint64_t id) { end_op(id); }
JOULE_TOOL_EXPORT void kokkosp_begin_fence(char const* name, uint32_t, uint64_t* id) { begin_op(Operation::fence, name, id); }
JOULE_TOOL_EXPORT void kokkosp_end_fence(uint64_t id) { end_op(id); }

// Deep copies have no id: the end closes this thread's innermost open operation.
JOULE_TOOL_EXPORT void kokkosp_begin_deep_copy(Kokkos_Profiling_SpaceHandle dst, char const*, void const*,
                                               Kokkos_Profiling_SpaceHandle src, char const*, void const*, uint64_t) {
  std::string name = std::string(dst.name, strnlen(dst.name, sizeof dst.name)) + " <- " +
                     std::string(src.name, strnlen(src.name, sizeof src.name));
  uint64_t id = 0;
  begin_op(Operation::deep_copy, name.c_str(), &id);
}
JOULE_TOOL_EXPORT void kokkosp_end_deep_copy() { end_op(t_ops_depth); }
