#pragma once
// Ordering between execution-space instances, and with host threads, without fencing whole
// instances: the one backend-specific piece of the data paths (the optimizer's copies, the
// model's batch staging). On CUDA an event (cudaEvent_t, created once, timing off): record() marks
// the work queued on an instance so far, make_wait() makes another instance's later work wait for
// it on the device, synchronize() lets a host thread wait for that work alone. On host backends a kernel is complete when its launch returns, so
// record() only fences the instance (a no-op when nothing is pending) and the rest does nothing.
#include "core/compat.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <utility>
#endif

namespace joule::detail {

#if defined(KOKKOS_ENABLE_CUDA)
class StreamEvent {
 public:
  StreamEvent() { check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"); }
  ~StreamEvent() {
    if (event_) cudaEventDestroy(event_);
  }
  StreamEvent(StreamEvent&& o) noexcept : event_(o.event_) { o.event_ = nullptr; }
  StreamEvent& operator=(StreamEvent&& o) noexcept {
    std::swap(event_, o.event_);
    return *this;
  }
  StreamEvent(StreamEvent const&) = delete;
  StreamEvent& operator=(StreamEvent const&) = delete;

  void record(Kokkos::Cuda const& space) { check(cudaEventRecord(event_, space.cuda_stream()), "cudaEventRecord"); }
  void make_wait(Kokkos::Cuda const& space) const {
    check(cudaStreamWaitEvent(space.cuda_stream(), event_, 0), "cudaStreamWaitEvent");
  }
  void synchronize() const { check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  // Host instances (a CUDA build's host space) order by fencing, as below.
  template <class HostSpace>
  void record(HostSpace const& space) {
    space.fence();
  }
  template <class HostSpace>
  void make_wait(HostSpace const&) const {}

 private:
  static void check(cudaError_t e, char const* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("joule: ") + what + ": " + cudaGetErrorString(e));
  }
  cudaEvent_t event_ = nullptr;
};
#else
class StreamEvent {
 public:
  template <class Space>
  void record(Space const& space) {
    space.fence();
  }
  template <class Space>
  void make_wait(Space const&) const {}
  void synchronize() const {}
};
#endif

}  // namespace joule::detail
