#include "energy/regions.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace joule::energy {

namespace {
double steady() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// The library rule: regions that Kokkos and Kokkos-Kernels open themselves.
bool library_region(char const* name) { return std::strncmp(name, "Kokkos", 6) == 0; }

// Each thread has its own stack of open regions (pops carry no name in Kokkos' API), tagged with
// its recorder so that a later recorder never sees a stale stack. name < 0: a library region.
struct Open {
  int path;  // -1: a library region
  Stamp begin;
};
// The path of the innermost region open on this thread that is timed (not a library one): the
// parent of a region pushed now; -1 at the top level.
int open_parent(std::vector<Open> const& open) {
  for (auto it = open.rbegin(); it != open.rend(); ++it)
    if (it->path >= 0) return it->path;
  return -1;
}
struct Stack {
  RegionTimeline const* owner = nullptr;
  std::vector<Open> open;
};
thread_local Stack t_stack;

// Pending intervals beyond this are resolved on the way (without waiting), so that a long run
// that never asks for stats keeps a bounded backlog and a device clock's events are recycled.
constexpr std::size_t kBacklog = 1024;
}  // namespace

RegionTimeline::RegionTimeline(Sampler& sampler, EdgeMode mode, std::unique_ptr<EdgeClock> clock,
                               bool skip_library_regions)
    : sampler_(sampler),
      mode_(mode),
      skip_library_(skip_library_regions),
      clock_(std::move(clock)),
      total_(total_rule(sampler.channels())) {
  if (!clock_) throw std::logic_error("joule::energy::RegionTimeline: no edge clock");
  for (auto c : total_.channels) resolution_s_ = std::max(resolution_s_, sampler.resolution_s(c));
  closed_.reserve(kBacklog + 64);
  ready_.reserve(kBacklog + 64);
}

int RegionTimeline::intern(char const* name) {
  auto const it = ids_.find(std::string_view(name));
  if (it != ids_.end()) return it->second;
  int const id = int(names_.size());
  names_.emplace_back(name);
  ids_.emplace(names_.back(), id);
  return id;
}

int RegionTimeline::intern_path(int parent_path, int name) {
  auto const key = std::make_pair(parent_path, name);
  auto const it = path_ids_.find(key);
  if (it != path_ids_.end()) return it->second;
  int const id = int(paths_.size());
  RegionPath p;
  p.name = names_[std::size_t(name)];
  p.parent = parent_path;
  p.stats.parent = parent_path < 0 ? std::string() : paths_[std::size_t(parent_path)].name;
  paths_.push_back(std::move(p));
  path_ids_.emplace(key, id);
  return id;
}

void RegionTimeline::push(char const* name, double at) {
  if (at >= 0) {
    push(name, Stamp{at, -1});
    return;
  }
  double const enter = steady();
  if (t_stack.owner != this) t_stack = Stack{this, {}};
  if (skip_library_ && library_region(name)) {
    t_stack.open.push_back({-1, {}});
    std::lock_guard<std::mutex> lock(mutex_);
    ++library_regions_;
    account_locked(enter);
    return;
  }
  Stamp const s = clock_->stamp();
  int const parent = open_parent(t_stack.open);
  std::lock_guard<std::mutex> lock(mutex_);
  t_stack.open.push_back({intern_path(parent, intern(name)), s});
  account_locked(enter);
}

void RegionTimeline::push(char const* name, Stamp at) {
  double const enter = steady();
  if (t_stack.owner != this) t_stack = Stack{this, {}};
  int const parent = open_parent(t_stack.open);
  std::lock_guard<std::mutex> lock(mutex_);
  t_stack.open.push_back({intern_path(parent, intern(name)), at});
  account_locked(enter);
}

void RegionTimeline::pop(double at) {
  if (at >= 0)
    pop_at(Stamp{at, -1});
  else
    pop_at(std::nullopt);
}

void RegionTimeline::pop(Stamp at) { pop_at(at); }

void RegionTimeline::pop_at(std::optional<Stamp> at) {
  double const enter = steady();
  if (t_stack.owner != this || t_stack.open.empty()) return;  // pop without push: ignore
  Open const o = t_stack.open.back();
  t_stack.open.pop_back();
  if (o.path < 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    account_locked(enter);
    return;
  }
  Stamp const s = at ? *at : clock_->stamp();
  std::lock_guard<std::mutex> lock(mutex_);
  close_locked(o.path, o.begin, s, enter);
}

void RegionTimeline::close(char const* name, Stamp begin, Stamp end) {
  double const enter = steady();
  std::lock_guard<std::mutex> lock(mutex_);
  close_locked(intern_path(-1, intern(name)), begin, end, enter);
}

void RegionTimeline::close_locked(int path, Stamp begin, Stamp end, double entered) {
  closed_.push_back({path, begin, end});
  if (closed_.size() >= kBacklog) {
    resolve_locked();
    attribute_locked(sampler_.covered_until());
  }
  account_locked(entered);
}

void RegionTimeline::account_locked(double entered) {
  hook_seconds_ += steady() - entered;
  ++hook_calls_;
}

void RegionTimeline::resolve_locked() {
  std::size_t kept = 0;
  for (auto& c : closed_) {
    double const t0 = clock_->resolve(c.begin);
    if (!std::isnan(t0)) c.begin = {t0, -1};
    double const t1 = clock_->resolve(c.end);
    if (!std::isnan(t1)) c.end = {t1, -1};
    if (c.begin.event < 0 && c.end.event < 0)
      ready_.push_back({c.path, c.begin.t, std::max(c.begin.t, c.end.t)});
    else
      closed_[kept++] = c;
  }
  closed_.resize(kept);
}

void RegionTimeline::attribute_locked(double covered_until) {
  // Group the covered intervals by path, then integrate each channel over them in one pass.
  std::map<int, std::vector<std::pair<double, double>>> by_path;
  std::size_t kept = 0;
  for (auto const& r : ready_) {
    if (r.t1 <= covered_until)
      by_path[r.path].push_back({r.t0, r.t1});
    else
      ready_[kept++] = r;
  }
  ready_.resize(kept);
  std::size_t const channels = sampler_.channels().size();
  for (auto const& [id, intervals] : by_path) {
    RegionStats& s = paths_[std::size_t(id)].stats;
    s.energy.resize(channels, 0.0);
    s.calls += static_cast<long long>(intervals.size());
    for (auto const& [t0, t1] : intervals) s.seconds += t1 - t0;
    std::vector<double> e;
    for (std::size_t c = 0; c < channels; ++c) {
      e.assign(intervals.size(), 0.0);
      sampler_.add_energy(c, intervals, e);
      double sum = 0;
      for (double x : e) sum += x;
      s.energy[c] += sum;  // NaN stays NaN (gauges, or a trace with a hole)
    }
    s.total_j = 0;
    for (auto c : total_.channels) s.total_j += s.energy[c];
    s.below_resolution = s.calls > 0 && s.seconds / double(s.calls) < resolution_s_;
  }
}

double RegionTimeline::pending_until() {
  std::lock_guard<std::mutex> lock(mutex_);
  clock_->calibrate();
  resolve_locked();
  double need = -1;
  for (auto const& r : ready_) need = std::max(need, r.t1);
  return need;
}

std::vector<RegionPath> RegionTimeline::paths(bool settle) {
  if (settle) {
    double const need = pending_until();
    if (need >= 0) sampler_.wait_until_covered(need);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  resolve_locked();
  attribute_locked(sampler_.covered_until());
  return paths_;
}

std::map<std::string, RegionStats> RegionTimeline::stats(bool settle) { return regions_by_name(paths(settle), resolution_s_); }

double RegionTimeline::hook_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hook_seconds_;
}
long long RegionTimeline::hook_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hook_calls_;
}
long long RegionTimeline::library_regions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return library_regions_;
}

std::map<std::string, RegionStats> regions_by_name(std::vector<RegionPath> const& paths, double resolution_s) {
  std::map<std::string, RegionStats> out;
  std::map<std::string, std::vector<std::pair<std::string, long long>>> parents;  // name -> (parent, calls), first seen first
  for (auto const& p : paths) {
    if (p.stats.calls <= 0) continue;
    RegionStats& s = out[p.name];
    s.calls += p.stats.calls;
    s.seconds += p.stats.seconds;
    s.total_j += p.stats.total_j;
    if (s.energy.size() < p.stats.energy.size()) s.energy.resize(p.stats.energy.size(), 0.0);
    for (std::size_t c = 0; c < p.stats.energy.size(); ++c) s.energy[c] += p.stats.energy[c];
    auto& seen = parents[p.name];
    auto const it = std::find_if(seen.begin(), seen.end(), [&](auto const& e) { return e.first == p.stats.parent; });
    if (it == seen.end())
      seen.emplace_back(p.stats.parent, p.stats.calls);
    else
      it->second += p.stats.calls;
  }
  for (auto& [name, s] : out) {
    s.below_resolution = s.seconds / double(s.calls) < resolution_s;
    auto const& seen = parents[name];
    s.parent = std::max_element(seen.begin(), seen.end(), [](auto const& a, auto const& b) { return a.second < b.second; })->first;
  }
  return out;
}

std::vector<RegionPath> path_difference(std::vector<RegionPath> const& after, std::vector<RegionPath> const& before,
                                        double resolution_s) {
  std::vector<char> keep(after.size(), 0);
  auto const calls_before = [&](std::size_t i) { return i < before.size() ? before[i].stats.calls : 0LL; };
  for (std::size_t i = after.size(); i-- > 0;) {  // children after their parents: a kept child keeps its parent
    if (after[i].stats.calls != calls_before(i)) keep[i] = 1;
    if (keep[i] && after[i].parent >= 0) keep[std::size_t(after[i].parent)] = 1;
  }
  std::vector<int> row(after.size(), -1);
  std::vector<RegionPath> out;
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (!keep[i]) continue;
    RegionPath d = after[i];
    d.parent = d.parent < 0 ? -1 : row[std::size_t(d.parent)];
    if (i < before.size()) {
      auto const& was = before[i].stats;
      d.stats.calls -= was.calls;
      d.stats.seconds -= was.seconds;
      d.stats.total_j -= was.total_j;
      for (std::size_t c = 0; c < d.stats.energy.size() && c < was.energy.size(); ++c) d.stats.energy[c] -= was.energy[c];
    }
    d.stats.below_resolution = d.stats.calls > 0 && d.stats.seconds / double(d.stats.calls) < resolution_s;
    row[i] = int(out.size());
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace joule::energy
