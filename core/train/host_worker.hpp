#pragma once
// A thread, with helpers, that does host work handed to it, so that the thread launching device
// work never runs it: the offloaded optimizer's AdamW (the Grace cores on a GH200). Jobs are
// numbered 0..n-1 (the optimizer's parameter groups); a job is submitted at most once before it
// is waited for. Submitting returns at once; waiting returns when that job has run (and rethrows
// what it threw). Jobs run in submission order. Nothing is allocated after construction.
//
// Where the work runs is observable: each job records when it started and ended (steady clock,
// taken on the worker) and on which CPU, and the workers can be pinned to CPUs of their own
// (host_cores.hpp), which on a CPU-only machine separates "device" work from host work.
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace joule {

class HostWorker {
 public:
  using Clock = std::chrono::steady_clock;
  struct Span {
    Clock::time_point start, end;
    int cpu = -1;  // where the job's first chunk ran (-1: unknown)
  };

  // run(job) is the body of every job, called on the worker thread. `threads` >= 1 threads do
  // parallel() chunks: the worker and threads - 1 helpers. cpus: pin the worker and helpers to
  // these, one each, round robin (empty: not pinned).
  HostWorker(int jobs, int threads, std::vector<int> const& cpus, std::function<void(int job)> run);
  ~HostWorker();  // runs what is queued, then stops the threads
  HostWorker(HostWorker const&) = delete;
  HostWorker& operator=(HostWorker const&) = delete;

  void submit(int job);
  void wait(int job);
  bool pending(int job) const;
  int threads() const { return int(helpers_.size()) + 1; }
  std::thread::id thread_id() const { return worker_.get_id(); }
  Span last_span(int job) const;

  // Inside a job: f(chunk) for every chunk in [0, threads()), on the worker (chunk 0) and the
  // helpers at the same time; returns when all are done.
  template <class F>
  void parallel(F const& f) {
    parallel_impl(&f, [](void const* fn, int chunk) { (*static_cast<F const*>(fn))(chunk); });
  }

 private:
  void stop();  // runs what is queued, then ends the threads
  void worker_loop();
  void helper_loop(int index);
  void parallel_impl(void const* fn, void (*call)(void const*, int));

  std::function<void(int)> run_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<int> queue_;  // a ring of capacity `jobs`
  std::size_t head_ = 0, count_ = 0;
  std::vector<long long> submitted_, completed_;
  std::vector<std::exception_ptr> errors_;
  std::vector<Span> spans_;
  bool stopping_ = false;
  std::thread worker_;

  // parallel(): the chunk function of the current round, and who still runs one.
  std::mutex pool_mutex_;
  std::condition_variable pool_cv_, pool_done_cv_;
  void const* chunk_fn_ = nullptr;
  void (*chunk_call_)(void const*, int) = nullptr;
  long long round_ = 0;
  int remaining_ = 0;
  std::exception_ptr chunk_error_;
  std::vector<std::thread> helpers_;
};

}  // namespace joule
