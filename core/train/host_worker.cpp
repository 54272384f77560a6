#include "core/train/host_worker.hpp"

#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace joule {

namespace {

void pin_current_thread(std::vector<int> const& cpus, std::size_t index) {
#if defined(__linux__)
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpus[index % cpus.size()], &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort: unpinned otherwise
#else
  (void)cpus;
  (void)index;
#endif
}

int current_cpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

}  // namespace

HostWorker::HostWorker(int jobs, int threads, std::vector<int> const& cpus, std::function<void(int)> run)
    : run_(std::move(run)),
      queue_(std::size_t(jobs > 0 ? jobs : 1)),
      submitted_(std::size_t(jobs), 0),
      completed_(std::size_t(jobs), 0),
      errors_(std::size_t(jobs)),
      spans_(std::size_t(jobs)) {
  if (jobs < 1 || threads < 1)
    throw std::invalid_argument("HostWorker: needs at least one job and one thread, got " + std::to_string(jobs) +
                                " and " + std::to_string(threads));
  worker_ = std::thread([this, cpus] {
    pin_current_thread(cpus, 0);
    worker_loop();
  });
  for (int h = 1; h < threads; ++h)
    helpers_.emplace_back([this, cpus, h] {
      pin_current_thread(cpus, std::size_t(h));
      helper_loop(h);
    });
}

HostWorker::~HostWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    chunk_fn_ = nullptr;
    ++round_;  // round with no function: helpers leave
  }
  pool_cv_.notify_all();
  for (auto& h : helpers_) h.join();
}

void HostWorker::submit(int job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job < 0 || job >= int(submitted_.size()))
      throw std::out_of_range("HostWorker::submit: job " + std::to_string(job) + " outside [0, " +
                              std::to_string(submitted_.size()) + ")");
    if (submitted_[job] != completed_[job])
      throw std::logic_error("HostWorker::submit: job " + std::to_string(job) + " is still pending");
    ++submitted_[job];
    errors_[job] = nullptr;
    queue_[(head_ + count_) % queue_.size()] = job;
    ++count_;
  }
  work_cv_.notify_one();
}

void HostWorker::wait(int job) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return completed_[job] == submitted_[job]; });
  if (errors_[job]) {
    auto e = errors_[job];
    errors_[job] = nullptr;
    std::rethrow_exception(e);
  }
}

bool HostWorker::pending(int job) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_[job] != submitted_[job];
}

HostWorker::Span HostWorker::last_span(int job) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_[job];
}

void HostWorker::worker_loop() {
  for (;;) {
    int job = -1;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return count_ > 0 || stopping_; });
      if (count_ == 0) return;  // stopping, and nothing left
      job = queue_[head_];
      head_ = (head_ + 1) % queue_.size();
      --count_;
    }
    Span span;
    span.start = Clock::now();
    span.cpu = current_cpu();
    std::exception_ptr error;
    try {
      run_(job);
    } catch (...) {
      error = std::current_exception();
    }
    span.end = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      spans_[job] = span;
      errors_[job] = error;
      ++completed_[job];
    }
    done_cv_.notify_all();
  }
}

void HostWorker::helper_loop(int index) {
  long long seen = 0;
  for (;;) {
    void const* fn = nullptr;
    void (*call)(void const*, int) = nullptr;
    {
      std::unique_lock<std::mutex> lock(pool_mutex_);
      pool_cv_.wait(lock, [&] { return round_ != seen; });
      seen = round_;
      fn = chunk_fn_;
      call = chunk_call_;
    }
    if (!fn) return;
    std::exception_ptr error;
    try {
      call(fn, index);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(pool_mutex_);
      if (error && !chunk_error_) chunk_error_ = error;
      --remaining_;
    }
    pool_done_cv_.notify_one();
  }
}

void HostWorker::parallel_impl(void const* fn, void (*call)(void const*, int)) {
  if (!helpers_.empty()) {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    chunk_fn_ = fn;
    chunk_call_ = call;
    chunk_error_ = nullptr;
    remaining_ = int(helpers_.size());
    ++round_;
  }
  pool_cv_.notify_all();
  std::exception_ptr error;
  try {
    call(fn, 0);
  } catch (...) {
    error = std::current_exception();
  }
  if (!helpers_.empty()) {
    std::unique_lock<std::mutex> lock(pool_mutex_);
    pool_done_cv_.wait(lock, [&] { return remaining_ == 0; });
    if (!error) error = chunk_error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace joule
