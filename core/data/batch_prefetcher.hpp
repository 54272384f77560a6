#pragma once
// Reads the next batch on a thread of its own while the launching thread queues the current
// one's kernels: on a GPU the HDF5 read (and its file checks) would otherwise run while the device
// idles between micro-batches. One batch ahead, two buffers swapped (no allocation once they have
// grown). Correct by construction: take(samples) returns the prefetched batch only if it was
// requested for exactly these samples, and reads them on the calling thread otherwise (after a
// change of micro-batch size, a restored sampler, a draw that starts a new epoch). A read that
// failed on the thread is rethrown by the take() that wanted it. Other reads may run meanwhile
// where the HDF5 library is built thread-safe (H5_HAVE_THREADSAFE, as Debian's is); with one that
// is not, there is no thread and take() reads every batch itself. The thread starts at the first
// request(): fork (io::read_in_child) only before that, or with no read in flight.
#include "core/data/dataset.hpp"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace joule {

class BatchPrefetcher {
 public:
  explicit BatchPrefetcher(Dataset const& data);
  ~BatchPrefetcher();  // waits for a read in progress
  BatchPrefetcher(BatchPrefetcher const&) = delete;
  BatchPrefetcher& operator=(BatchPrefetcher const&) = delete;

  // Starts reading `samples` (empty: nothing to read ahead). A request not yet taken is dropped.
  void request(std::vector<std::size_t> const& samples);
  // The batch of `samples`, into `out` (its buffers reused).
  void take(std::vector<std::size_t> const& samples, HostBatch& out);

  struct Counts {
    long long prefetched = 0, read_here = 0;  // batches taken from the thread, read by take()
  };
  Counts counts() const;
  static bool reads_ahead();  // false: the HDF5 library is not thread-safe, take() reads

 private:
  void loop();
  Dataset const& data_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::size_t> wanted_;  // the request being (or to be) read
  HostBatch ready_;                  // its batch, once read
  std::exception_ptr error_;
  bool pending_ = false, reading_ = false, done_ = false, stopping_ = false;
  Counts counts_;
  std::thread thread_;  // last: starts once the rest is initialised
};

}  // namespace joule
