// The one unit that feeds a RegionTimeline from Kokkos' in-process region callbacks (joule's own
// runs). Apart from regions.cpp so that the timeline links without Kokkos (apps/energy_tool/).
#include "energy/regions.hpp"

#include <Kokkos_Core.hpp>

#include <stdexcept>

namespace joule::energy {

namespace {
RegionRecorder* g_recorder = nullptr;
// A Kokkos Tools library loaded into this process (KOKKOS_TOOLS_LIBS: an NVTX connector, a
// space-time stack, joule's own energy tool) had Kokkos' region callbacks before the recorder took
// them: it keeps getting every region, and gets its callbacks back when the recorder goes.
Kokkos::Tools::Experimental::EventSet g_loaded_tool{};
void on_push(char const* name) {
  if (g_loaded_tool.push_region) g_loaded_tool.push_region(name);
  if (g_recorder) g_recorder->push(name);
}
void on_pop() {
  if (g_recorder) g_recorder->pop();
  if (g_loaded_tool.pop_region) g_loaded_tool.pop_region();
}
}  // namespace

RegionRecorder::RegionRecorder(Sampler& sampler, EdgeMode mode, std::unique_ptr<EdgeClock> clock)
    : RegionTimeline(sampler, mode, clock ? std::move(clock) : make_edge_clock(sampler, mode)) {
  if (g_recorder) throw std::logic_error("joule::energy::RegionRecorder: one recorder at a time");
  g_recorder = this;
  g_loaded_tool = Kokkos::Tools::Experimental::get_callbacks();
  Kokkos::Tools::Experimental::set_push_region_callback(on_push);
  Kokkos::Tools::Experimental::set_pop_region_callback(on_pop);
}

RegionRecorder::~RegionRecorder() {
  Kokkos::Tools::Experimental::set_push_region_callback(g_loaded_tool.push_region);
  Kokkos::Tools::Experimental::set_pop_region_callback(g_loaded_tool.pop_region);
  g_loaded_tool = {};
  g_recorder = nullptr;
}

}  // namespace joule::energy
