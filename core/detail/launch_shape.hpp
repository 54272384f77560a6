#pragma once
// What each kernel launch exposes to a GPU, for the launch audit (`joule bench --suite launches`,
// `make gpu-audit`) and the launch contract (tests/test_launch_contract.cpp): the threads it runs
// on a CUDA device, the thread block they come in and the team scratch the block asks for. A
// kernel states its CUDA shape whatever backend it runs on, so a CPU run of a training step lists
// what an H200 would be given. Nothing is recorded unless a tool installs a recorder; otherwise a
// launch pays one relaxed atomic load.
#include <atomic>
#include <cstddef>

namespace joule::detail {

// ---- What Kokkos' CUDA backend grants a TeamPolicy launch --------------------------------------
// ParallelFor<TeamPolicy, Cuda>'s constructor (Kokkos 3.4.01 core/src/Cuda/Kokkos_Cuda_Parallel.hpp,
// 4.x to 4.6.01 and develop core/src/Cuda/Kokkos_Cuda_Parallel_Team.hpp) throws "insufficient
// shared memory" unless
//     (team_size + 2) * sizeof(double)  +  level-0 team scratch  <=  cudaDeviceProp::sharedMemPerBlock
// where team_size is Kokkos' team size (threads per block / vector length) and the first term is
// Kokkos' own team buffer (team reductions and broadcasts). sharedMemPerBlock is 48 KiB on every
// NVIDIA GPU: the 227 KB an H100/H200 block may use needs cudaFuncSetAttribute(...,
// cudaFuncAttributeMaxDynamicSharedMemorySize), which Kokkos' team launch never calls. (Kokkos'
// scratch_size_max(0) is stricter still: it reserves for a 1,024-thread team.) Level-1 scratch is
// global memory (a pool Kokkos sizes per launch), limited only by the device's memory.
inline constexpr std::size_t kCudaSharedMemPerBlock = 48 * 1024;

constexpr std::size_t cuda_team_reserved_shared(int team_size) {
  return std::size_t(team_size + 2) * sizeof(double);
}
// The most level-0 team scratch a team of `team_size` may ask for on CUDA.
constexpr std::size_t cuda_team_scratch_limit(int team_size) {
  return kCudaSharedMemPerBlock - cuda_team_reserved_shared(team_size);
}
// Bytes a team asks for to hold an unmanaged scratch View of n elements of T: what
// View::shmem_size(n) returns, n * sizeof(T) plus its alignment slack (sizeof(T) in Kokkos 3.4,
// max(sizeof(T), alignof(T), 8) from 4.0 on): the larger of the two, so one figure holds for
// every supported version.
template <class T>
constexpr std::size_t scratch_view_bytes(std::size_t n) {
  return n * sizeof(T) + (sizeof(T) > 8 ? sizeof(T) : 8);
}

struct LaunchShape {
  long threads = 0;  // threads launched on a CUDA device (teams × team size × vector length)
  int block = 0;     // threads per block; 0: Kokkos chooses (a RangePolicy's block size)
  std::size_t shared = 0;  // level-0 team scratch per block (shared memory), bytes; it bounds occupancy
  int team_size = 0;       // Kokkos' team size (block / vector length): sizes Kokkos' own team buffer
  std::size_t global_scratch = 0;  // level-1 team scratch per team (global memory), bytes
  // The contract above: a team launch fits what Kokkos grants it on CUDA.
  bool fits_cuda() const { return block == 0 || shared <= cuda_team_scratch_limit(team_size); }
};

using LaunchRecorder = void (*)(char const* name, LaunchShape shape);

inline std::atomic<LaunchRecorder>& launch_recorder() {
  static std::atomic<LaunchRecorder> recorder{nullptr};
  return recorder;
}

inline void note_launch(char const* name, LaunchShape const& shape) {
  if (auto const r = launch_recorder().load(std::memory_order_relaxed)) r(name, shape);
}
// name: the kernel's label without the "joule::" prefix, as passed to label(). A team launch
// (block > 0) of team_size threads per team (default: block, a vector length of 1) with `shared`
// bytes of level-0 team scratch; a RangePolicy launch passes block 0.
inline void note_launch(char const* name, long threads, int block = 0, std::size_t shared = 0, int team_size = 0) {
  note_launch(name, LaunchShape{threads, block, shared, team_size > 0 ? team_size : block, 0});
}

}  // namespace joule::detail
