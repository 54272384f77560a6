#pragma once
// A happens-before check of the optimizer's data path, as it would run on a GPU, on any backend.
//
// On a CPU build every kernel is complete when its launch returns, so a missing event between two
// instances is invisible there and a race on a GH200 goes unseen. The data path therefore states,
// at each step, what a CUDA build would do: which lane touches which buffer (the work queued on a
// stream, or a host thread), and each ordering it relies on (an event recorded and waited for, a
// job handed to the host worker and waited for, a fence). When a Trace is installed these are
// replayed on vector clocks with CUDA's semantics (a stream runs its work in order and after the
// host thread queued it, and is ordered with another stream or a host thread only through an event
// or a fence), and every pair of accesses to a buffer, one of them a write, that no chain of
// orderings connects is a violation. Not installed, each call is one relaxed atomic load.
#include <array>
#include <atomic>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace joule::ordering {

// The host threads and the device streams of the data path (an offloaded optimizer's).
enum class Lane : int { launcher, worker, compute, copies, host_to_device };
inline constexpr int kLanes = 5;
char const* lane_name(Lane lane);

// A buffer: a kind ("grad", "host_grad", "param", "host_param") and a parameter group.
struct Buffer {
  char const* kind;
  int group;
};

class Trace {
 public:
  struct Violation {
    std::string buffer;  // e.g. "grad[3]"
    std::string first, second;  // "d2h on copies (step 2)", "zero_gradients on compute (step 3)"
  };
  void set_step(long step) { step_ = step; }
  void on_stream(Lane thread, Lane stream, char const* op, std::initializer_list<Buffer> reads,
                 std::initializer_list<Buffer> writes);
  void on_host(Lane thread, char const* op, std::initializer_list<Buffer> reads, std::initializer_list<Buffer> writes);
  void event_recorded(Lane thread, void const* event, Lane stream);
  void stream_waits(Lane thread, Lane stream, void const* event);
  void host_waits(Lane thread, void const* event);
  void fence(Lane thread, Lane stream);
  void signal(Lane thread, void const* key);  // host threads: a hand-over (a job submitted, done)
  void await(Lane thread, void const* key);
  std::vector<Violation> violations() const;
  long accesses(char const* kind) const;  // how many accesses to buffers of this kind were seen

 private:
  using Clock = std::array<long, kLanes>;
  struct Access {
    int lane = -1;
    long stamp = 0;
    std::string what;
  };
  struct History {
    Access write;
    std::array<Access, kLanes> reads;
  };
  static void merge(Clock& into, Clock const& from);
  void access(Lane lane, char const* op, std::initializer_list<Buffer> reads, std::initializer_list<Buffer> writes);
  void check(std::string const& buffer, Access const& earlier, Clock const& now, std::string const& what);

  mutable std::mutex mutex_;
  std::array<Clock, kLanes> clocks_{};
  std::map<void const*, Clock> events_;
  std::map<std::pair<std::string, int>, History> buffers_;
  std::map<std::string, long> counts_;
  std::vector<Violation> violations_;
  long step_ = 0;
};

inline std::atomic<Trace*>& installed_trace() {
  static std::atomic<Trace*> trace{nullptr};
  return trace;
}
inline Trace* trace() { return installed_trace().load(std::memory_order_relaxed); }

// The host thread the calling code runs on (the launching thread unless a scope says otherwise).
Lane& this_thread_lane();
struct OnThread {
  explicit OnThread(Lane lane) : saved(this_thread_lane()) { this_thread_lane() = lane; }
  ~OnThread() { this_thread_lane() = saved; }
  OnThread(OnThread const&) = delete;
  OnThread& operator=(OnThread const&) = delete;
  Lane saved;
};

// The calls the data path makes; no-ops without a trace.
inline void on_stream(Lane stream, char const* op, std::initializer_list<Buffer> reads,
                      std::initializer_list<Buffer> writes) {
  if (auto* t = trace()) t->on_stream(this_thread_lane(), stream, op, reads, writes);
}
inline void on_host(char const* op, std::initializer_list<Buffer> reads, std::initializer_list<Buffer> writes) {
  if (auto* t = trace()) t->on_host(this_thread_lane(), op, reads, writes);
}
inline void event_recorded(void const* event, Lane stream) {
  if (auto* t = trace()) t->event_recorded(this_thread_lane(), event, stream);
}
inline void stream_waits(Lane stream, void const* event) {
  if (auto* t = trace()) t->stream_waits(this_thread_lane(), stream, event);
}
inline void host_waits(void const* event) {
  if (auto* t = trace()) t->host_waits(this_thread_lane(), event);
}
inline void fence(Lane stream) {
  if (auto* t = trace()) t->fence(this_thread_lane(), stream);
}
inline void signal(void const* key) {
  if (auto* t = trace()) t->signal(this_thread_lane(), key);
}
inline void await(void const* key) {
  if (auto* t = trace()) t->await(this_thread_lane(), key);
}

}  // namespace joule::ordering
