// The one unit that feeds a RegionTimeline from Kokkos' in-process region callbacks (joule's own
// runs). Apart from regions.cpp so that the timeline links without Kokkos (apps/energy_tool/).
#include "energy/regions.hpp"

#include <Kokkos_Core.hpp>

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
}  // namespace

RegionRecorder::RegionRecorder(Sampler& sampler, EdgeMode mode, std::unique_ptr<EdgeClock> clock)
    : RegionTimeline(sampler, mode, clock ? std::move(clock) : make_edge_clock(sampler, mode)) {
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

}  // namespace joule::energy
