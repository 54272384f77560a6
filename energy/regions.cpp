#include "energy/regions.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <tuple>
#include <stdexcept>

namespace joule::energy {

namespace {
RegionRecorder* g_recorder = nullptr;
void on_push(char const* name) {
  if (g_recorder) g_recorder->push(name);
}
void on_pop() {
  if (g_recorder) g_recorder->pop();
}
double steady() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

RegionRecorder::RegionRecorder(Sampler& sampler, bool snapshot_at_edges)
    : sampler_(sampler), snapshot_(snapshot_at_edges) {
  if (g_recorder) throw std::logic_error("joule::energy::RegionRecorder: one recorder at a time");
  g_recorder = this;
  Kokkos::Tools::Experimental::set_push_region_callback(on_push);
  Kokkos::Tools::Experimental::set_pop_region_callback(on_pop);
}

RegionRecorder::~RegionRecorder() {
  Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
  Kokkos::Tools::Experimental::set_pop_region_callback(nullptr);
  g_recorder = nullptr;
}

namespace {
// Each thread has its own stack of open regions (pops carry no name in Kokkos' API), tagged
// with its recorder so that a later recorder never sees a stale stack.
struct Stack {
  RegionRecorder const* owner = nullptr;
  std::vector<std::tuple<std::string, double, std::vector<double>>> open;
};
thread_local Stack t_stack;
}  // namespace

void RegionRecorder::push(char const* name, double at) {
  double const enter = steady();
  double const t = at >= 0 ? at : sampler_.now();
  std::vector<double> e = snapshot_ || at >= 0 ? sampler_.snapshot(at) : std::vector<double>();
  if (t_stack.owner != this) t_stack = Stack{this, {}};
  t_stack.open.emplace_back(name, t, std::move(e));
  std::lock_guard<std::mutex> lock(mutex_);
  hook_seconds_ += steady() - enter;
  ++hook_calls_;
}

void RegionRecorder::pop(double at) {
  double const enter = steady();
  if (t_stack.owner != this || t_stack.open.empty()) return;  // pop without push: ignore
  auto [name, t0, e0] = std::move(t_stack.open.back());
  t_stack.open.pop_back();
  double const t = at >= 0 ? at : sampler_.now();
  std::vector<double> const e1 = snapshot_ || at >= 0 ? sampler_.snapshot(at) : std::vector<double>();
  std::lock_guard<std::mutex> lock(mutex_);
  RegionStats& s = stats_[name];
  ++s.calls;
  s.seconds += t - t0;
  if (s.energy.size() < e1.size()) s.energy.resize(e1.size(), 0.0);
  for (std::size_t i = 0; i < e1.size() && i < e0.size(); ++i) s.energy[i] += e1[i] - e0[i];
  hook_seconds_ += steady() - enter;
  ++hook_calls_;
}

std::map<std::string, RegionStats> RegionRecorder::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}
double RegionRecorder::hook_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hook_seconds_;
}
long long RegionRecorder::hook_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hook_calls_;
}

}  // namespace joule::energy
