#pragma once
// Every launch noted (launch_shape.hpp) while a LaunchLog records, per kernel label, for the tools
// that read launch shapes: `joule bench --suite launches` and the launch contract's test. One log
// records at a time (it installs the process's recorder); it starts paused unless told otherwise.
#include "core/detail/launch_shape.hpp"

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::detail {

class LaunchLog {
 public:
  explicit LaunchLog(bool recording = true) {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (state().log) throw std::logic_error("LaunchLog: another log is recording");
    state().log = this;
    recording_ = recording;
    launch_recorder().store(&record);
  }
  ~LaunchLog() {
    launch_recorder().store(nullptr);
    std::lock_guard<std::mutex> lock(state().mutex);
    state().log = nullptr;
  }
  LaunchLog(LaunchLog const&) = delete;
  LaunchLog& operator=(LaunchLog const&) = delete;

  void set_recording(bool on) {
    std::lock_guard<std::mutex> lock(state().mutex);
    recording_ = on;
  }
  // Every shape noted so far, per label, in the order noted.
  std::map<std::string, std::vector<LaunchShape>> by_label() const {
    std::lock_guard<std::mutex> lock(state().mutex);
    return by_label_;
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
  static void record(char const* name, LaunchShape shape) {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (LaunchLog* const log = state().log; log && log->recording_) log->by_label_[name].push_back(shape);
  }

  bool recording_ = true;
  std::map<std::string, std::vector<LaunchShape>> by_label_;
};

}  // namespace joule::detail
