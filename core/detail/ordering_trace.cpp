#include "core/detail/ordering_trace.hpp"

#include <algorithm>

namespace joule::ordering {

char const* lane_name(Lane lane) {
  static char const* const names[kLanes] = {"the launching thread", "the host worker", "compute", "copies",
                                            "host_to_device"};
  return names[int(lane)];
}

Lane& this_thread_lane() {
  thread_local Lane lane = Lane::launcher;
  return lane;
}

void Trace::merge(Clock& into, Clock const& from) {
  for (int i = 0; i < kLanes; ++i) into[i] = std::max(into[i], from[i]);
}

void Trace::check(std::string const& buffer, Access const& earlier, Clock const& now, std::string const& what) {
  // Ordered when the later lane's clock has seen the earlier access (same lane: program order).
  if (earlier.lane < 0 || now[earlier.lane] >= earlier.stamp) return;
  violations_.push_back({buffer, earlier.what, what});
}

void Trace::access(Lane lane, char const* op, std::initializer_list<Buffer> reads,
                   std::initializer_list<Buffer> writes) {
  int const l = int(lane);
  Clock& clock = clocks_[l];
  ++clock[l];
  std::string const what = std::string(op) + " on " + lane_name(lane) + " (step " + std::to_string(step_) + ")";
  auto name = [](Buffer b) { return std::string(b.kind) + "[" + std::to_string(b.group) + "]"; };
  for (Buffer b : reads) {
    auto& h = buffers_[{b.kind, b.group}];
    check(name(b), h.write, clock, "read by " + what);
    h.reads[l] = {l, clock[l], "read by " + what};
    ++counts_[b.kind];
  }
  for (Buffer b : writes) {
    auto& h = buffers_[{b.kind, b.group}];
    check(name(b), h.write, clock, "written by " + what);
    for (auto const& r : h.reads) check(name(b), r, clock, "written by " + what);
    h.write = {l, clock[l], "written by " + what};
    h.reads = {};
    ++counts_[b.kind];
  }
}

void Trace::on_stream(Lane thread, Lane stream, char const* op, std::initializer_list<Buffer> reads,
                      std::initializer_list<Buffer> writes) {
  std::lock_guard<std::mutex> lock(mutex_);
  merge(clocks_[int(stream)], clocks_[int(thread)]);  // queued work starts after it was queued
  access(stream, op, reads, writes);
}

void Trace::on_host(Lane thread, char const* op, std::initializer_list<Buffer> reads,
                    std::initializer_list<Buffer> writes) {
  std::lock_guard<std::mutex> lock(mutex_);
  access(thread, op, reads, writes);
}

void Trace::event_recorded(Lane thread, void const* event, Lane stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  merge(clocks_[int(stream)], clocks_[int(thread)]);
  events_[event] = clocks_[int(stream)];
}

void Trace::stream_waits(Lane thread, Lane stream, void const* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  merge(clocks_[int(stream)], clocks_[int(thread)]);
  auto const it = events_.find(event);  // waiting for an event never recorded waits for nothing
  if (it != events_.end()) merge(clocks_[int(stream)], it->second);
}

void Trace::host_waits(Lane thread, void const* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto const it = events_.find(event);
  if (it != events_.end()) merge(clocks_[int(thread)], it->second);
}

void Trace::fence(Lane thread, Lane stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  merge(clocks_[int(thread)], clocks_[int(stream)]);
}

void Trace::signal(Lane thread, void const* key) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++clocks_[int(thread)][int(thread)];
  events_[key] = clocks_[int(thread)];
}

void Trace::await(Lane thread, void const* key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto const it = events_.find(key);
  if (it != events_.end()) merge(clocks_[int(thread)], it->second);
}

std::vector<Trace::Violation> Trace::violations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return violations_;
}

long Trace::accesses(char const* kind) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto const it = counts_.find(kind);
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace joule::ordering
