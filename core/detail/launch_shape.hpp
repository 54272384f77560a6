#pragma once
// What each kernel launch exposes to a GPU, for the launch audit (`joule bench --suite launches`,
// `make gpu-audit`) and the launch contract (tests/test_launch_contract.cpp): the threads it runs
// on a CUDA device, the thread block they come in and the team scratch the block asks for. A
// kernel states its CUDA shape whatever backend it runs on, so a CPU run of a training step lists
// what an H200 would be given. Nothing is recorded unless a tool installs a recorder; otherwise a
// launch pays one relaxed atomic load.
#include "core/detail/kernel_work.hpp"

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

// What a launch site states: its CUDA shape (a Kokkos kernel) or none (a library kernel: cuBLAS,
// cuBLASLt), its work (kernel_work.hpp), and whether it ran to recompute activations the forward
// pass dropped (the model's FLOPs do not count it twice).
struct LaunchNote {
  bool kokkos = true;
  LaunchShape shape;
  KernelWork work;
  bool recompute = false;
};

using LaunchRecorder = void (*)(char const* name, LaunchNote const& note);

// The part of a training step the launches that follow belong to, as the model and the optimizer
// state it: the step's set-up (zeroing a group's gradients), a parameter group's forward or
// backward kernels, the work on a group's finished gradients (its share of the norm, its copy to
// the host), its update (AdamW, the bf16 copy of the weights). Group -1: every group at once (the
// one multi-tensor AdamW launch). The roofline model weighs each part by how often a step runs it.
enum class StepPart { step, forward, backward, gradients, update };
struct StepSegment {
  StepPart part = StepPart::step;
  int group = -1;
};
using SegmentRecorder = void (*)(StepSegment segment);
inline std::atomic<SegmentRecorder>& segment_recorder() {
  static std::atomic<SegmentRecorder> recorder{nullptr};
  return recorder;
}
inline void note_segment(StepPart part, int group) {
  if (auto const r = segment_recorder().load(std::memory_order_relaxed)) r(StepSegment{part, group});
}

inline std::atomic<LaunchRecorder>& launch_recorder() {
  static std::atomic<LaunchRecorder> recorder{nullptr};
  return recorder;
}

// What the launching thread is doing, for the notes: kernels that a CUDA build would not launch
// (the CPU's widening of bf16 GEMM operands) are left out, a whole operator may count its kernels
// under one kind (attention's GEMMs and row kernels), and recomputation is marked.
struct LaunchContext {
  int not_on_cuda = 0;
  int recompute = 0;
  double model_flops_scale = 1;  // the share of a launch's products that are the model's (padding: less)
  bool kind_set = false;
  WorkKind kind = WorkKind::elementwise;
};
inline LaunchContext& launch_context() {
  static thread_local LaunchContext context;
  return context;
}
// While alive: launches on this thread are ones CUDA does not make (not noted).
struct NotOnCuda {
  NotOnCuda() { ++launch_context().not_on_cuda; }
  ~NotOnCuda() { --launch_context().not_on_cuda; }
  NotOnCuda(NotOnCuda const&) = delete;
  NotOnCuda& operator=(NotOnCuda const&) = delete;
};
// While alive: launches on this thread recompute activations.
struct Recomputing {
  Recomputing() { ++launch_context().recompute; }
  ~Recomputing() { --launch_context().recompute; }
  Recomputing(Recomputing const&) = delete;
  Recomputing& operator=(Recomputing const&) = delete;
};
// While alive: `share` of each launch's products on this thread are the model's (the LM head's
// padded vocabulary rows are not).
class ModelShare {
 public:
  explicit ModelShare(double share) : outer_(launch_context().model_flops_scale) {
    launch_context().model_flops_scale = share;
  }
  ~ModelShare() { launch_context().model_flops_scale = outer_; }
  ModelShare(ModelShare const&) = delete;
  ModelShare& operator=(ModelShare const&) = delete;

 private:
  double outer_;
};
// While alive: launches on this thread count as `kind` (the outermost scope wins).
class CountAs {
 public:
  explicit CountAs(WorkKind kind) : outer_(launch_context().kind_set) {
    if (!outer_) launch_context().kind_set = true, launch_context().kind = kind;
  }
  ~CountAs() {
    if (!outer_) launch_context().kind_set = false;
  }
  CountAs(CountAs const&) = delete;
  CountAs& operator=(CountAs const&) = delete;

 private:
  bool outer_;
};

inline void note_launch(char const* name, LaunchNote note) {
  auto const r = launch_recorder().load(std::memory_order_relaxed);
  if (!r) return;
  LaunchContext const& c = launch_context();
  if (c.not_on_cuda > 0) return;
  if (c.kind_set) note.work.kind = c.kind;
  note.work.model_flops *= c.model_flops_scale;
  note.recompute = c.recompute > 0;
  r(name, note);
}
inline void note_launch(char const* name, LaunchShape const& shape, KernelWork const& work) {
  note_launch(name, LaunchNote{true, shape, work, false});
}
// name: the kernel's label without the "joule::" prefix, as passed to label(). A team launch
// (block > 0) of team_size threads per team (default: block, a vector length of 1) with `shared`
// bytes of level-0 team scratch; a RangePolicy launch passes block 0.
inline void note_launch(char const* name, KernelWork const& work, long threads, int block = 0,
                        std::size_t shared = 0, int team_size = 0) {
  note_launch(name, LaunchShape{threads, block, shared, team_size > 0 ? team_size : block, 0}, work);
}
// A library kernel (cuBLAS, cuBLASLt): work only, its shape is the library's.
inline void note_library_launch(char const* name, KernelWork const& work) {
  note_launch(name, LaunchNote{false, LaunchShape{}, work, false});
}

}  // namespace joule::detail
