// The edge clock of a program that links Kokkos (joule): fences through Kokkos, device events on
// Kokkos' CUDA streams. Apart from edge_clock.cpp so that the host clock links without Kokkos.
#include "energy/edge_clock.hpp"

#include "energy/kokkos/cuda_edge_clock.hpp"

#include <Kokkos_Core.hpp>

namespace joule::energy {

std::unique_ptr<EdgeClock> make_edge_clock(Sampler const& sampler, EdgeMode mode, StreamProvider stream) {
  if (mode == EdgeMode::fenced) return make_host_edge_clock(sampler, [] { Kokkos::fence(); });
  if (auto device = detail::make_cuda_edge_clock(sampler, std::move(stream))) return device;
  return make_host_edge_clock(sampler);
}

}  // namespace joule::energy
