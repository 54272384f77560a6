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
// region" and the whole program, from which the energy outside regions follows.
//
// Edges are stamped on the host clock and nothing is fenced: Kokkos is told the tool needs no
// global fencing, so on a GPU a kernel's edges are its launch and the return of its launch, not
// its execution (the table says so). JOULE_ENERGY_FENCE=1 asks Kokkos to fence around every
// kernel and fences at every region edge: exact edges, a serialised device.
#include "energy/edge_clock.hpp"
#include "energy/regions.hpp"
#include "energy/sampler.hpp"
#include "energy/source.hpp"

#include <impl/Kokkos_Profiling_C_Interface.h>  // C declarations only: no Kokkos symbol is linked

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
#include <vector>

#define JOULE_TOOL_EXPORT extern "C" __attribute__((visibility("default")))

namespace joule::energy::tool {
namespace {

// --- options (environment variables; docs/energy-tool.md) ------------------------------------

struct Options {
  std::string out;        // JOULE_ENERGY_OUT: a .csv table (per rank: name.rank<R>.csv)
  double rate_hz = Sampler::kDefaultRateHz;  // JOULE_ENERGY_RATE_HZ
  bool kernels = true;    // JOULE_ENERGY_KERNELS: 0 attributes regions only
  bool fence = false;     // JOULE_ENERGY_FENCE: 1 fences at every edge (exact, slower)
  int top = 12;           // JOULE_ENERGY_TOP: rows per table
  bool quiet = false;     // JOULE_ENERGY_QUIET: 1 prints no table (the file only)
};

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
  if (!o.out.empty() && (o.out.size() < 5 || o.out.compare(o.out.size() - 4, 4, ".csv") != 0))
    bad_option("JOULE_ENERGY_OUT", o.out.c_str(), "a path ending in .csv (the per-region and per-kernel table)");
  return o;
}

// name.csv -> name.rank3.csv where a launcher set a rank: one file per process, never shared.
std::string file_for_rank(std::string const& path, int rank) {
  if (rank < 0) return path;
  return path.substr(0, path.size() - 4) + ".rank" + std::to_string(rank) + ".csv";
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

void fence_all() {
  if (g_fence) g_fence(0);
}

void begin_op(std::string_view prefix, char const* name, uint64_t* id) {
  if (!active() || !g_state->kernels) {
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

struct Row {
  char const* kind;
  std::string name;
  RegionStats stats;
};

char const* kind_of(std::string const& name) {
  if (name.rfind("deep_copy ", 0) == 0) return "deep_copy";
  if (name.rfind("fence ", 0) == 0) return "fence";
  return "kernel";
}

std::string csv_field(std::string const& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void report(State& s) {
  Stamp const program_end = s.outer->stamp();
  s.outer->close("(program)", s.program_begin, program_end);
  auto const regions = s.regions->stats(/*settle=*/true);
  auto const kernels = s.kernels ? s.kernels->stats(true) : std::map<std::string, RegionStats>{};
  auto const outer = s.outer->stats(true);
  s.sampler->stop();

  TotalRule const total = total_rule(s.sampler->channels());
  RegionStats program, inside;
  if (auto it = outer.find("(program)"); it != outer.end()) program = it->second;
  if (auto it = outer.find("(in regions)"); it != outer.end()) inside = it->second;
  double const outside_j = program.total_j - inside.total_j, outside_s = program.seconds - inside.seconds;

  std::vector<Row> rows;
  for (auto const& [name, st] : regions) rows.push_back({"region", name, st});
  for (auto const& [name, st] : kernels) rows.push_back({kind_of(name), name, st});
  std::stable_sort(rows.begin(), rows.end(), [](Row const& a, Row const& b) { return a.stats.total_j > b.stats.total_j; });

  std::string const label = total.measured ? "measured: " + total.description
                                           : "MODEL ESTIMATE (no sensor readable): " + total.description;
  std::string const edges = s.options.fence ? "edges fenced (exact on any backend)"
                                            : "edges on the host clock, no fence added (on a GPU, kernel edges are "
                                              "launches: JOULE_ENERGY_FENCE=1 for exact ones)";
  if (!s.options.quiet) {
    std::FILE* e = stderr;
    std::fprintf(e, "\njoule energy tool%s: %.3f s, %.3f J (%s), sampled at %g Hz; %s\n",
                 s.rank >= 0 ? (" (rank " + std::to_string(s.rank) + ")").c_str() : "", program.seconds,
                 program.total_j, label.c_str(), s.sampler->rate_hz(), edges.c_str());
    for (auto const& n : s.notes) std::fprintf(e, "  note: %s\n", n.c_str());
    std::fprintf(e, "  %-9s %-44s %9s %10s %6s %11s %6s %8s\n", "kind", "name", "calls", "time s", "time%", "energy J",
                 "J%", "mean W");
    auto const share = [](double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; };
    for (char const* want : {"region", "kernel"}) {
      int shown = 0;
      for (auto const& r : rows) {
        bool const is_region = !std::strcmp(r.kind, "region");
        if (is_region != !std::strcmp(want, "region") || shown++ >= s.options.top) continue;
        std::string name = r.name.size() > 44 ? r.name.substr(0, 41) + "..." : r.name;
        std::fprintf(e, "  %-9s %-44s %9lld %10.4f %6.1f %11.4f %6.1f %8.2f%s\n", r.kind, name.c_str(), r.stats.calls,
                     r.stats.seconds, share(r.stats.seconds, program.seconds), r.stats.total_j,
                     share(r.stats.total_j, program.total_j), r.stats.seconds > 0 ? r.stats.total_j / r.stats.seconds : 0.0,
                     r.stats.below_resolution ? "  (below resolution)" : "");
      }
    }
    std::fprintf(e, "  outside any region: %.4f s, %.4f J (%.1f%% of the program's energy)\n", outside_s, outside_j,
                 share(outside_j, program.total_j));
    double hook_s = s.regions->hook_seconds() + s.outer->hook_seconds() + (s.kernels ? s.kernels->hook_seconds() : 0);
    long long const hooks = s.regions->hook_calls() + s.outer->hook_calls() + (s.kernels ? s.kernels->hook_calls() : 0);
    std::fprintf(e, "  the tool's own time: %lld edges, %.3f ms inside them (%.2f%% of the program's time)\n", hooks,
                 1e3 * hook_s, share(hook_s, program.seconds));
    std::fprintf(e, "  (below resolution): calls shorter on average than the sensors resolve (%.3g s): their energy "
                    "is interpolated from the trace, aggregated by name. Regions and kernels are inclusive and "
                    "overlap, so their energies do not add up.\n",
                 s.regions->resolution_s());
  }

  if (!s.options.out.empty()) {
    std::string const path = file_for_rank(s.options.out, s.rank), tmp = path + ".tmp";
    {
      std::ofstream f(tmp);
      f << "kind,name,calls,seconds,energy_j,mean_w,below_resolution,source\n";
      auto const line = [&](char const* kind, std::string const& name, RegionStats const& st) {
        f << kind << ',' << csv_field(name) << ',' << st.calls << ',' << st.seconds << ',' << st.total_j << ','
          << (st.seconds > 0 ? st.total_j / st.seconds : 0.0) << ',' << (st.below_resolution ? 1 : 0) << ','
          << csv_field(label) << '\n';
      };
      f.precision(9);
      line("program", "(program)", program);
      RegionStats out_stats;
      out_stats.calls = 1, out_stats.seconds = outside_s, out_stats.total_j = outside_j;
      line("outside", "(outside any region)", out_stats);
      for (auto const& r : rows) line(r.kind, r.name, r.stats);
      f.flush();
      if (!f) {
        std::fprintf(stderr, "joule energy tool: cannot write %s (%s); no table written\n", tmp.c_str(), std::strerror(errno));
        std::remove(tmp.c_str());
        return;
      }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      std::fprintf(stderr, "joule energy tool: cannot rename %s to %s (%s)\n", tmp.c_str(), path.c_str(), std::strerror(errno));
    else if (!s.options.quiet)
      std::fprintf(stderr, "  table: %s\n", path.c_str());
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
  try {
    auto s = std::make_unique<State>();
    s->options = read_options();
    s->rank = rank_from_environment();
    s->pid = ::getpid();
    s->interface_version = interface_version;
    auto sources = discover_sources(SourceOptions::from_environment_variables(), &s->notes);
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
    std::fprintf(stderr, "joule energy tool: not attributing energy: %s\n", e.what());
  }
}

JOULE_TOOL_EXPORT void kokkosp_finalize_library() {
  if (!g_state) return;
  if (g_state->pid != ::getpid()) return;  // a forked child: the parent reports
  try {
    report(*g_state);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "joule energy tool: no report: %s\n", e.what());
  }
  delete g_state;
  g_state = nullptr;
}

JOULE_TOOL_EXPORT void kokkosp_push_profile_region(char const* name) {
  if (!active()) return;
  // One stamp for the region and, at depth 0, "inside any region": the two timelines then agree
  // exactly, and the energy outside regions is the program's less theirs. (Every clock the tool
  // uses is a host clock, whose stamp is its time.)
  Stamp const at = g_state->regions->stamp();
  if (t_region_depth++ == 0) t_outer_begin = at;
  g_state->regions->push(name, at.t);
}

JOULE_TOOL_EXPORT void kokkosp_pop_profile_region() {
  if (!active() || t_region_depth == 0) return;  // a pop without its push: ignored
  Stamp const at = g_state->regions->stamp();
  g_state->regions->pop(at.t);
  if (--t_region_depth == 0) g_state->outer->close("(in regions)", t_outer_begin, at);
}

JOULE_TOOL_EXPORT void kokkosp_begin_parallel_for(char const* name, uint32_t, uint64_t* id) { begin_op("", name, id); }
JOULE_TOOL_EXPORT void kokkosp_end_parallel_for(uint64_t id) { end_op(id); }
JOULE_TOOL_EXPORT void kokkosp_begin_parallel_reduce(char const* name, uint32_t, uint64_t* id) { begin_op("", name, id); }
JOULE_TOOL_EXPORT void kokkosp_end_parallel_reduce(uint64_t id) { end_op(id); }
JOULE_TOOL_EXPORT void kokkosp_begin_parallel_scan(char const* name, uint32_t, uint64_t* id) { begin_op("", name, id); }
JOULE_TOOL_EXPORT void kokkosp_end_parallel_scan(uint64_t id) { end_op(id); }
JOULE_TOOL_EXPORT void kokkosp_begin_fence(char const* name, uint32_t, uint64_t* id) { begin_op("fence ", name, id); }
JOULE_TOOL_EXPORT void kokkosp_end_fence(uint64_t id) { end_op(id); }

// Deep copies have no id: the end closes this thread's innermost open operation.
JOULE_TOOL_EXPORT void kokkosp_begin_deep_copy(Kokkos_Profiling_SpaceHandle dst, char const*, void const*,
                                               Kokkos_Profiling_SpaceHandle src, char const*, void const*, uint64_t) {
  std::string name = std::string(dst.name, strnlen(dst.name, sizeof dst.name)) + " <- " +
                     std::string(src.name, strnlen(src.name, sizeof src.name));
  uint64_t id = 0;
  begin_op("deep_copy ", name.c_str(), &id);
}
JOULE_TOOL_EXPORT void kokkosp_end_deep_copy() { end_op(t_ops_depth); }
