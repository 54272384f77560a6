#pragma once
// What each kernel launch exposes to a GPU, for the launch audit (`joule bench --suite launches`,
// `make gpu-audit`): the threads it runs on a CUDA device and the thread block they come in. A
// kernel states its CUDA shape whatever backend it runs on, so a CPU run of a training step lists
// what an H200 would be given. Nothing is recorded unless a tool installs a recorder; otherwise a
// launch pays one relaxed atomic load.
#include <atomic>
#include <cstddef>

namespace joule::detail {

struct LaunchShape {
  long threads = 0;  // threads launched on a CUDA device (teams × team size × vector length)
  int block = 0;     // threads per block; 0: Kokkos chooses (a RangePolicy's block size)
  std::size_t shared = 0;  // dynamic shared memory per block (team scratch), bytes; it bounds occupancy
};

using LaunchRecorder = void (*)(char const* name, LaunchShape shape);

inline std::atomic<LaunchRecorder>& launch_recorder() {
  static std::atomic<LaunchRecorder> recorder{nullptr};
  return recorder;
}

// name: the kernel's label without the "joule::" prefix, as passed to label().
inline void note_launch(char const* name, long threads, int block = 0, std::size_t shared = 0) {
  if (auto const r = launch_recorder().load(std::memory_order_relaxed)) r(name, LaunchShape{threads, block, shared});
}

}  // namespace joule::detail
