#pragma once
// The one place where Kokkos (core) version differences live; those of Kokkos-Kernels are in
// compat_kernels.hpp, so that code which needs no Kokkos-Kernels does not include it. joule builds against Kokkos 3.4 (Debian's
// trilinos source) and 4.x/5.x (what GH200 users have); everything else in joule uses only the
// names defined here or API that exists unchanged in all of them.
#include <Kokkos_Core.hpp>

#include <string>
#include <type_traits>
#include <utility>

#ifndef KOKKOS_VERSION
#error "joule needs KOKKOS_VERSION (Kokkos 3.4 or newer)"
#endif
#if KOKKOS_VERSION < 30400
#error "joule needs Kokkos 3.4 or newer"
#endif

namespace joule::math {
// Math functions moved from Kokkos::Experimental:: to Kokkos:: in 3.7.
#if KOKKOS_VERSION >= 30700
using Kokkos::exp;
using Kokkos::fabs;
using Kokkos::log;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif
}  // namespace joule::math

namespace joule::compat {

// Kokkos' thread-count flag as this Kokkos reads it, and the spelling it does not: --kokkos-threads
// up to 3.6, --kokkos-num-threads from 3.7 (3.4 knows only the first, 4.6 only the second:
// `--kokkos-threads=1` makes a Kokkos 4.6 program exit with status 109). joule takes both and hands
// Kokkos the one it reads (apps/environment.cpp).
#if KOKKOS_VERSION >= 30700
inline constexpr char const* kKokkosThreadsFlag = "--kokkos-num-threads=";
inline constexpr char const* kKokkosThreadsFlagOther = "--kokkos-threads=";
#else
inline constexpr char const* kKokkosThreadsFlag = "--kokkos-threads=";
inline constexpr char const* kKokkosThreadsFlagOther = "--kokkos-num-threads=";
#endif

// View<...>::HostMirror is deprecated in 5.x and View<...>::host_mirror_type is not what
// create_mirror_view returns in 3.4: name the mirror type by what create_mirror_view returns.
template <class View>
using host_mirror_t = decltype(Kokkos::create_mirror_view(std::declval<View const&>()));

// Where the work of the region being opened on this thread runs, for tools that stamp region
// edges on the timeline of that work (energy/'s device clock): on the host (stamp the host clock),
// or on a device stream (CUDA: its cudaStream_t; nullptr: the default instance's).
struct RegionLane {
  bool host = false;
  void* stream = nullptr;
};
namespace detail {
inline thread_local RegionLane t_region_lane{};
}  // namespace detail
inline RegionLane region_lane() { return detail::t_region_lane; }

// Whether ExecutionSpace is Kokkos::Cuda (false where this Kokkos has no CUDA backend): the
// spaces whose GEMMs go to cuBLAS / cuBLASLt and whose streams joule orders.
template <class ExecutionSpace>
constexpr bool is_cuda_space() {
#if defined(KOKKOS_ENABLE_CUDA)
  return std::is_same_v<ExecutionSpace, Kokkos::Cuda>;
#else
  return false;
#endif
}

template <class ExecutionSpace>
RegionLane lane_of(ExecutionSpace const& space) {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (is_cuda_space<ExecutionSpace>()) return {false, static_cast<void*>(space.cuda_stream())};
#endif
  (void)space;
  return {Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible, nullptr};
}

// Kokkos::Profiling::ScopedRegion exists from 4.1 on; this is the same thing for every version.
// With an execution space instance, the region's edges belong to that instance's timeline
// (region_lane()); without, a region is on the timeline of the region around it.
class ScopedRegion {
 public:
  explicit ScopedRegion(std::string const& name) : previous_(detail::t_region_lane) {
    Kokkos::Profiling::pushRegion(name);
  }
  template <class ExecutionSpace>
  ScopedRegion(ExecutionSpace const& space, std::string const& name) : previous_(detail::t_region_lane) {
    detail::t_region_lane = lane_of(space);
    Kokkos::Profiling::pushRegion(name);
  }
  ~ScopedRegion() {
    Kokkos::Profiling::popRegion();  // stamped on the region's own lane
    detail::t_region_lane = previous_;
  }
  ScopedRegion(ScopedRegion const&) = delete;
  ScopedRegion& operator=(ScopedRegion const&) = delete;

 private:
  RegionLane previous_;
};

// An execution space instance that can run independently of the default one (its own CUDA
// stream), for copies that should overlap with compute. Kokkos >= 4 splits one off the default
// instance; older Kokkos has no portable way, and the default instance is used (correct, no
// overlap).
template <class ExecutionSpace>
ExecutionSpace independent_instance() {
#if KOKKOS_VERSION >= 40000
  return Kokkos::Experimental::partition_space(ExecutionSpace(), 1)[0];
#else
  return ExecutionSpace();
#endif
}

}  // namespace joule::compat
