// Region edges as CUDA events on the stream their work runs on. Events come from a pool made
// once (grown only if more edges are open than it holds); an edge records an event and returns,
// and the event's host-clock time is computed later, once it has completed, from its distance
// to an anchor event whose completion the host waited for. Nothing here waits in stamp(); only
// calibrate() does, and it is called where the host waits for the device anyway.
#include "energy/kokkos/cuda_edge_clock.hpp"

#include "energy/sampler.hpp"

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>

#include <cmath>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>
#endif

namespace joule::energy::detail {

#if defined(KOKKOS_ENABLE_CUDA)

namespace {

void check(cudaError_t e, char const* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("joule energy regions: ") + what + ": " + cudaGetErrorString(e));
}

class CudaEdgeClock final : public EdgeClock {
 public:
  CudaEdgeClock(Sampler const& sampler, StreamProvider stream) : sampler_(sampler), stream_(std::move(stream)) {
    grow(kInitialEvents);
    check(cudaEventCreate(&anchor_), "cudaEventCreate");
    calibrate();
  }
  ~CudaEdgeClock() override {
    for (auto e : events_) cudaEventDestroy(e);
    cudaEventDestroy(anchor_);
  }
  char const* name() const override { return "cuda events"; }

  Stamp stamp() override {
    Lane const lane = stream_ ? stream_() : Lane{};
    if (lane.host) return {sampler_.now(), -1};  // host work: its edge is now
    int slot;
    cudaEvent_t event;
    {
      // The handle is read under the lock: another thread's stamp() may grow events_ meanwhile.
      std::lock_guard<std::mutex> lock(mutex_);
      if (free_.empty()) grow(events_.size());  // more edges unresolved than the pool holds
      slot = free_.back();
      free_.pop_back();
      event = events_[slot];
    }
    auto const stream = lane.stream ? static_cast<cudaStream_t>(lane.stream) : Kokkos::Cuda().cuda_stream();
    check(cudaEventRecord(event, stream), "cudaEventRecord");
    return {0.0, slot};
  }

  double resolve(Stamp const& s) override {
    if (s.event < 0) return s.t;
    std::lock_guard<std::mutex> lock(mutex_);
    cudaEvent_t const e = events_.at(s.event);
    if (cudaEventQuery(e) != cudaSuccess) return std::nan("");  // not run yet
    float ms = 0;  // signed: negative for events before the anchor
    if (cudaEventElapsedTime(&ms, anchor_, e) != cudaSuccess) return std::nan("");
    free_.push_back(s.event);
    return anchor_host_ + 1e-3 * double(ms);
  }

  void calibrate() override {
    std::lock_guard<std::mutex> lock(mutex_);
    check(cudaEventRecord(anchor_, Kokkos::Cuda().cuda_stream()), "cudaEventRecord (anchor)");
    check(cudaEventSynchronize(anchor_), "cudaEventSynchronize (anchor)");
    anchor_host_ = sampler_.now();
  }

 private:
  static constexpr std::size_t kInitialEvents = 4096;
  void grow(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      cudaEvent_t e;
      check(cudaEventCreate(&e), "cudaEventCreate");
      free_.push_back(int(events_.size()));
      events_.push_back(e);
    }
  }
  Sampler const& sampler_;
  StreamProvider stream_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> events_;
  std::vector<int> free_;
  cudaEvent_t anchor_{};
  double anchor_host_ = 0;
};

}  // namespace

std::unique_ptr<EdgeClock> make_cuda_edge_clock(Sampler const& sampler, StreamProvider stream) {
  return std::make_unique<CudaEdgeClock>(sampler, std::move(stream));
}

#else

std::unique_ptr<EdgeClock> make_cuda_edge_clock(Sampler const&, StreamProvider) { return nullptr; }

#endif

}  // namespace joule::energy::detail
