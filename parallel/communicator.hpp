#pragma once
// Communicators: the collective operations joule's parallel training needs, on sub-groups of
// processes. MPI is the backend on CPUs (and CI); NCCL (nccl_communicator.hpp) is the backend for
// GPU buffers. Buffers are host pointers for MPI and device pointers for NCCL
// (device_buffers()); gather() and broadcast() always take host memory.
#include <cstddef>
#include <cstdint>
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
  // Device-ordered communicators (orders_on_device()): makes the work queued on `stream` (a
  // cudaStream_t) from now on wait for the collective, on the device, and returns true; the caller
  // then need not wait(). Others return false.
  virtual bool order_before(void* /*stream*/) { return false; }
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
  // after_stream: where the kernels that wrote `data` were queued. A device-ordered communicator
  // makes its own stream wait for them (an event: no host wait); for the others the caller must
  // have waited for them, and it is ignored.
  virtual std::unique_ptr<Request> start_allreduce_sum(float* data, std::size_t count, void* after_stream = nullptr) = 0;
  // Whether start_allreduce_sum orders itself after `after_stream` and its requests can order
  // later work by order_before() (NCCL, on its own CUDA stream), so nobody waits on the host.
  virtual bool orders_on_device() const { return false; }
  // Where the float buffers of allreduce_sum / alltoall live: false = host memory.
  virtual bool device_buffers() const { return false; }
  // Rank r sends send[j*count .. (j+1)*count) to rank j and receives rank j's block r into
  // recv[j*count .. (j+1)*count).
  virtual void alltoall(float const* send, float* recv, std::size_t count_per_rank) = 0;
  // The same for bf16 elements, given as their bit patterns (ncclBfloat16 on NCCL; MPI moves the
  // 2-byte words): a bf16 run's activations cross at half the bytes.
  virtual void alltoall_bf16(std::uint16_t const* send, std::uint16_t* recv, std::size_t count_per_rank) = 0;
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // Every rank's text at `root` (in rank order); other ranks get an empty vector.
  virtual std::vector<std::string> gather(std::string const& mine, int root) = 0;
  virtual void barrier() = 0;
  // Ranks with the same color form a new group, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) const = 0;
};

}  // namespace joule::parallel
