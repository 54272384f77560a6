#pragma once
// Where a region edge's time comes from. An edge records a stamp and nothing else: no sensor is
// read and nothing is fenced (except in the fenced analysis mode, which asks for it).
//   host     the host clock when the edge is passed: right on host backends, where every kernel
//            has finished when its launch returns.
//   fenced   Kokkos::fence(), then the host clock: exact edges on any backend, at the price of
//            serialising the device at every edge (what kokkos-tools' and Zeus' regions do).
//   device   (CUDA) an event recorded on the stream the region's work runs on, converted to the
//            host clock afterwards against an anchor: an event the host synchronised with, so
//            that its host time is known. The stream comes from a provider the application
//            installs (the region opener's stream; default: Kokkos' default instance).
#include <functional>
#include <memory>
#include <string>

namespace joule::energy {

class Sampler;

enum class EdgeMode { timeline, fenced };
char const* to_string(EdgeMode mode);           // "timeline", "fenced"
EdgeMode edge_mode_from_string(std::string const& text);  // throws std::invalid_argument naming the choices

struct Stamp {
  double t = 0;    // host-clock seconds (sampler clock) when event < 0
  int event = -1;  // a device clock's event slot, resolved later
};

class EdgeClock {
 public:
  virtual ~EdgeClock() = default;
  virtual char const* name() const = 0;  // "host", "fenced", "cuda events"
  // Called on the thread passing the edge.
  virtual Stamp stamp() = 0;
  // The stamp's time on the sampler's clock; NaN while a device event has not completed. A
  // resolved stamp's slot is released.
  virtual double resolve(Stamp const& s) = 0;
  // Device clocks: take a fresh anchor (record an event, wait for it, read the host clock). Call
  // where the host waits for the device anyway (a step's end).
  virtual void calibrate() {}
};

// Where the work of the region whose edge is being passed on this thread runs: on the host
// (stamped with the host clock), or on a device stream (CUDA: a cudaStream_t; nullptr: the default
// instance's). The application installs the provider, since energy/ knows nothing of who opens
// regions on which stream; without one, every region is on the default stream.
struct Lane {
  bool host = false;
  void* stream = nullptr;
};
using StreamProvider = std::function<Lane()>;

// The clock for this build and mode: fenced -> fence + host clock; timeline -> device events on
// CUDA builds, the host clock otherwise (kokkos/edge_clock.cpp: the Kokkos layer).
std::unique_ptr<EdgeClock> make_edge_clock(Sampler const& sampler, EdgeMode mode, StreamProvider stream = {});
// The host clock, after `fence` when one is given (Kokkos-free: the connector fences through
// Kokkos Tools' programming interface).
std::unique_ptr<EdgeClock> make_host_edge_clock(Sampler const& sampler, std::function<void()> fence = {});

}  // namespace joule::energy
