#include "core/data/batch_prefetcher.hpp"

#include <H5pubconf.h>

#include <utility>

namespace joule {

bool BatchPrefetcher::reads_ahead() {
#if defined(H5_HAVE_THREADSAFE)
  return true;
#else
  return false;
#endif
}

BatchPrefetcher::BatchPrefetcher(Dataset const& data) : data_(data) {}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BatchPrefetcher::request(std::vector<std::size_t> const& samples) {
  if (!reads_ahead()) return;
  // The thread starts with the first request, not with the trainer: a trainer forks to read a
  // checkpoint before it trains (io::read_in_child, resume()), and a thread starting at that
  // moment can hold a lock (the allocator's, under ASan) that the child would then wait for.
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !reading_; });  // the buffer is the thread's while it reads
  done_ = false;
  error_ = nullptr;
  pending_ = !samples.empty();
  wanted_.assign(samples.begin(), samples.end());  // capacity kept: no allocation once grown
  lock.unlock();
  cv_.notify_all();
}

void BatchPrefetcher::take(std::vector<std::size_t> const& samples, HostBatch& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !pending_ && !reading_; });
  bool const hit = done_ && wanted_ == samples;
  done_ = false;
  if (hit) {
    ++counts_.prefetched;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    std::swap(out, ready_);
    return;
  }
  ++counts_.read_here;
  error_ = nullptr;
  lock.unlock();
  data_.read(samples, out);
}

BatchPrefetcher::Counts BatchPrefetcher::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

void BatchPrefetcher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || pending_; });
    if (stopping_) return;
    pending_ = false;
    reading_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      data_.read(wanted_, ready_);  // wanted_ and ready_ are not touched by others while reading_
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    reading_ = false;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace joule
