#pragma once
// Every launch noted (launch_shape.hpp) while a LaunchLog records: the Kokkos kernels' shapes per
// label, for the tools that read launch shapes (`joule bench --suite launches`, the launch
// contract's test), and every launch in order with its work and the part of the step it belongs
// to (note_segment), for the roofline model (core/perf/roofline.hpp). One log records at a time (it
// installs the process's recorder); it starts paused unless told otherwise.
#include "core/detail/launch_shape.hpp"

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::detail {

struct RecordedLaunch {
  std::string label;
  LaunchNote note;
  StepSegment segment;
};

class LaunchLog {
 public:
  explicit LaunchLog(bool recording = true) {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (state().log) throw std::logic_error("LaunchLog: another log is recording");
    state().log = this;
    recording_ = recording;
    launch_recorder().store(&record);
    segment_recorder().store(&record_segment);
  }
  ~LaunchLog() {
    launch_recorder().store(nullptr);
    segment_recorder().store(nullptr);
    std::lock_guard<std::mutex> lock(state().mutex);
    state().log = nullptr;
  }
  LaunchLog(LaunchLog const&) = delete;
  LaunchLog& operator=(LaunchLog const&) = delete;

  void set_recording(bool on) {
    std::lock_guard<std::mutex> lock(state().mutex);
    recording_ = on;
  }
  // Every Kokkos kernel's shape noted so far, per label, in the order noted.
  std::map<std::string, std::vector<LaunchShape>> by_label() const {
    std::lock_guard<std::mutex> lock(state().mutex);
    return by_label_;
  }
  // Every launch noted so far (library kernels too), in order.
  std::vector<RecordedLaunch> launches() const {
    std::lock_guard<std::mutex> lock(state().mutex);
    return launches_;
  }

 private:
  struct State {
    std::mutex mutex;
    LaunchLog* log = nullptr;
  };
  static State& state() {
    static State s;
    return s;
  }
  static void record(char const* name, LaunchNote const& note) {
    std::lock_guard<std::mutex> lock(state().mutex);
    LaunchLog* const log = state().log;
    if (!log || !log->recording_) return;
    if (note.kokkos) log->by_label_[name].push_back(note.shape);
    log->launches_.push_back(RecordedLaunch{name, note, log->segment_});
  }

  static void record_segment(StepSegment segment) {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (LaunchLog* const log = state().log) log->segment_ = segment;
  }

  bool recording_ = true;
  StepSegment segment_;
  std::map<std::string, std::vector<LaunchShape>> by_label_;
  std::vector<RecordedLaunch> launches_;
};

}  // namespace joule::detail
