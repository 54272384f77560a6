#include "core/train/host_worker.hpp"

#include <Kokkos_Macros.hpp>

#include <future>
#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
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

// The CUDA device of the calling thread (the launching one), which the worker's threads must use
// too: a thread starts on device 0, whichever device the process was given. -1 without CUDA.
int launching_device() {
#if defined(KOKKOS_ENABLE_CUDA)
  int device = -1;
  cudaError_t const e = cudaGetDevice(&device);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("joule: HostWorker could not read the launching thread's CUDA device "
                                         "(cudaGetDevice: ") + cudaGetErrorString(e) + ")");
  return device;
#else
  return -1;
#endif
}

// At the start of each thread the worker starts: takes the launching thread's device, and tells
// the constructor whether it could (`started`). False: the thread must end at once.
bool start_on_device(int device, std::promise<void>& started) {
#if defined(KOKKOS_ENABLE_CUDA)
  cudaError_t const e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    started.set_exception(std::make_exception_ptr(std::runtime_error(
        "joule: HostWorker could not select CUDA device " + std::to_string(device) +
        " (the launching thread's) on its thread (cudaSetDevice: " + cudaGetErrorString(e) +
        "); its jobs' CUDA calls would go to another device")));
    return false;
  }
#else
  (void)device;
#endif
  started.set_value();
  return true;
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
  // The jobs issue CUDA calls (the optimizer's copies to the device): on the launching thread's
  // device, like everything else of the process, not on device 0.
  int const device = launching_device();
  std::vector<std::future<void>> started;
  auto const starting = [&started] {
    std::promise<void> p;
    started.push_back(p.get_future());
    return p;
  };
  worker_ = std::thread([this, cpus, device, ready = starting()]() mutable {
    pin_current_thread(cpus, 0);
    if (start_on_device(device, ready)) worker_loop();
  });
  for (int h = 1; h < threads; ++h)
    helpers_.emplace_back([this, cpus, h, device, ready = starting()]() mutable {
      pin_current_thread(cpus, std::size_t(h));
      if (start_on_device(device, ready)) helper_loop(h);
    });
  std::exception_ptr failed;
  for (auto& s : started) {
    try {
      s.get();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) {
    stop();  // no destructor runs for a constructor that throws
    std::rethrow_exception(failed);
  }
}

HostWorker::~HostWorker() { stop(); }

void HostWorker::stop() {
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
