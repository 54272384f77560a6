#pragma once
// Communicators: the collective operations joule's parallel training needs, on sub-groups of
// processes. MPI is the backend on CPUs (and CI); NCCL (nccl_communicator.hpp) is the backend for
// GPU buffers. Buffers are host pointers for MPI and device pointers for NCCL
// (device_buffers()); gather() and broadcast() always take host memory.
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::parallel {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective in flight (started by start_allreduce_sum).
class Request {
 public:
  virtual ~Request() = default;
  virtual bool test() = 0;  // lets the library make progress; true once complete
  virtual void wait() = 0;  // returns once complete; throws CommError on failure
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place sum over all ranks of the group.
  virtual void allreduce_sum(float* data, std::size_t count) = 0;
  virtual void allreduce_sum(double* data, std::size_t count) = 0;
  // The same, started now and completed by the returned request, so that communication overlaps
  // with work done meanwhile (gradient buckets during the backward pass). The buffer must stay
  // untouched until wait() returns.
  virtual std::unique_ptr<Request> start_allreduce_sum(float* data, std::size_t count) = 0;
  // Where the float buffers of allreduce_sum / alltoall live: false = host memory.
  virtual bool device_buffers() const { return false; }
  // Rank r sends send[j*count .. (j+1)*count) to rank j and receives rank j's block r into
  // recv[j*count .. (j+1)*count).
  virtual void alltoall(float const* send, float* recv, std::size_t count_per_rank) = 0;
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // Every rank's text at `root` (in rank order); other ranks get an empty vector.
  virtual std::vector<std::string> gather(std::string const& mine, int root) = 0;
  virtual void barrier() = 0;
  // Ranks with the same color form a new group, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) const = 0;
};

}  // namespace joule::parallel
