#pragma once
// Named regions on the timeline where their work runs, given energy after the fact.
//
// joule's code opens regions through Kokkos' profiling API (Kokkos::Profiling::pushRegion /
// popRegion, or compat::ScopedRegion); this recorder installs itself as Kokkos' in-process tool
// callbacks, so every region opened anywhere is recorded without that code knowing about energy.
//
// Edges: an edge records a stamp from the edge clock (edge_clock.hpp) and nothing else — no
// sensor is read, nothing waits (except in the fenced mode). Regions opened by libraries (names
// beginning with "Kokkos": Kokkos-Kernels opens one around every BLAS call) are skipped: counted,
// not timed, since joule's own regions around them already cover their time.
//
// Attribution: a region's energy per channel is the integral of that channel's power over each
// of its intervals, computed from the sampler's trace once the trace covers the interval
// (Sampler::energy_between). Nested regions (block_forward inside forward) are each inclusive.
// Regions open at the same time on different threads or streams (backward on the GPU while
// optimizer_host runs on the Grace cores) each get the whole power of their span: a power sensor
// cannot tell who used it, so the power is not split, and region energies do not add up to the
// run's total. A region whose intervals are on average shorter than the total's sensors resolve
// (the sampling period, or the sensor's update period or averaging window) is flagged
// below_resolution: its energy is an interpolation, not a measurement of that region alone.
//
// Call paths: a region is recorded per call path, the chain of regions open on its thread when it
// was opened (step > forward > joule::block_forward apart from evaluate > greedy_captions >
// forward > joule::block_forward), each path with its own calls, time and energy. A path is
// interned to an id at its first push (after that, a push looks it up: no allocation on the step
// path). By name (stats()) is the sum over a name's paths.
#include "energy/edge_clock.hpp"
#include "energy/sampler.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace joule::energy {

struct RegionStats {
  long long calls = 0;
  double seconds = 0;           // summed over the calls (inclusive)
  std::vector<double> energy;   // joules per sampler channel (NaN for gauges)
  double total_j = 0;           // by the sampler's total rule
  bool below_resolution = false;
  // The region it was opened inside on its thread, most often ("" at the top level; library
  // regions are skipped, so a region inside a Kokkos-Kernels call names joule's region around it).
  // Regions are inclusive: a child's time and energy are part of its parent's. In a RegionPath:
  // the parent path's own name.
  std::string parent;
};

// One call path: a region as opened inside the regions then open on its thread.
struct RegionPath {
  std::string name;  // the region's own name (the path's last part)
  int parent = -1;   // the path it was opened inside: its index in the same table, always lower; -1: top level
  RegionStats stats;  // the calls, time and energy of this path alone (stats.parent: the parent's name)
};

// A table of paths by name: each name's calls, seconds and energy summed over its paths, its
// parent the parent name it was opened in most often (ties: the first path's). Paths without calls
// are left out.
std::map<std::string, RegionStats> regions_by_name(std::vector<RegionPath> const& paths, double resolution_s);

// What happened between two readings of paths() (before: an earlier reading of the same timeline,
// whose indices the later one keeps): the paths with calls in between, with the paths they were
// opened inside (kept, to keep the tree whole, even where they had no calls in between),
// re-indexed in the same order. An empty `before`: the paths with calls, and their ancestors.
std::vector<RegionPath> path_difference(std::vector<RegionPath> const& after, std::vector<RegionPath> const& before,
                                        double resolution_s);

// The timeline and its attribution, apart from who reports the edges: Kokkos-free, so that the
// Kokkos Tools connector (apps/energy_tool/), which must not carry a second Kokkos, uses it as is.
class RegionTimeline {
 public:
  // skip_library_regions: the library rule above (joule's own runs); a connector attributing
  // another program's regions keeps them.
  RegionTimeline(Sampler& sampler, EdgeMode mode, std::unique_ptr<EdgeClock> clock, bool skip_library_regions = true);
  virtual ~RegionTimeline() = default;
  RegionTimeline(RegionTimeline const&) = delete;
  RegionTimeline& operator=(RegionTimeline const&) = delete;

  EdgeMode mode() const { return mode_; }
  char const* clock_name() const { return clock_->name(); }
  // The coarsest resolution among the channels of the total (see Sampler::resolution_s).
  double resolution_s() const { return resolution_s_; }

  // Every region closed so far whose interval the trace covers, attributed. With settle, first
  // anchors a device clock and waits until the sampler has covered the last closed edge (at most
  // about one sampling period), so that everything closed before the call is included.
  std::map<std::string, RegionStats> stats(bool settle = false);
  // The same per call path: every path opened so far, indexed by its id (a parent before its
  // children; paths whose calls are not attributed yet have calls = 0). by name: regions_by_name().
  std::vector<RegionPath> paths(bool settle = false);
  // What stats(true) waits for: anchors a device clock and returns the latest end, on the
  // sampler's clock, of what is closed but not yet attributed (-1: nothing). Several timelines
  // on one sampler settle with one wait: the largest of theirs, then stats() on each.
  double pending_until();
  // Time spent inside the callbacks themselves (their overhead), and how many there were.
  double hook_seconds() const;
  long long hook_calls() const;
  long long library_regions() const;  // skipped by the library rule

  // Used by the Kokkos callbacks; tests pass an explicit time (seconds on the sampler's clock)
  // to stand in for a device stream's timestamps.
  void push(char const* name, double at = -1);
  void pop(double at = -1);
  // The same with an edge the caller stamped (stamp() below; a device event keeps its slot).
  void push(char const* name, Stamp at);
  void pop(Stamp at);
  // An interval whose edges the caller stamped itself (kernels: begin and end carry an id, not a
  // per-thread nesting): stamp() at each edge, close() at the end.
  Stamp stamp() { return clock_->stamp(); }
  void close(char const* name, Stamp begin, Stamp end);

 private:
  struct Closed {
    int path;
    Stamp begin, end;
  };
  struct Attributed {
    int path;
    double t0, t1;
  };
  int intern(char const* name);
  int intern_path(int parent_path, int name);  // -1: the top level
  void pop_at(std::optional<Stamp> at);  // nullopt: stamp it now
  // The tail every closing edge shares: the interval queued (resolved on the way past the
  // backlog), then the hook's time accounted.
  void close_locked(int path, Stamp begin, Stamp end, double entered);
  void account_locked(double entered);
  void resolve_locked();  // closed -> ready where the clock knows both edges' times
  void attribute_locked(double covered_until);

  Sampler& sampler_;
  EdgeMode mode_;
  bool skip_library_;
  std::unique_ptr<EdgeClock> clock_;
  TotalRule total_;
  double resolution_s_ = 0;
  mutable std::mutex mutex_;
  std::map<std::string, int, std::less<>> ids_;
  std::vector<std::string> names_;
  std::vector<Closed> closed_;    // edges stamped, times maybe not known yet (device events)
  std::vector<Attributed> ready_; // times known, waiting for the trace to cover them
  double last_edge_ = 0;
  std::map<std::pair<int, int>, int> path_ids_;  // (parent path, name) -> path id
  std::vector<RegionPath> paths_;                // by path id, the figures attributed so far
  double hook_seconds_ = 0;
  long long hook_calls_ = 0, library_regions_ = 0;
};

// The timeline fed by Kokkos' in-process region callbacks (kokkos/regions.cpp): one at a time.
// The clock defaults to make_edge_clock(sampler, mode).
class RegionRecorder : public RegionTimeline {
 public:
  explicit RegionRecorder(Sampler& sampler, EdgeMode mode = EdgeMode::timeline,
                          std::unique_ptr<EdgeClock> clock = nullptr);
  ~RegionRecorder() override;  // removes the callbacks
};

}  // namespace joule::energy
