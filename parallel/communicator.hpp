#pragma once
// Communicators: the collective operations joule's parallel training needs, on sub-groups of
// processes. MPI is the backend on CPUs (and CI); an NCCL backend for GPU buffers joins it with
// sequence parallelism. Buffers are host pointers for MPI.
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

namespace joule::parallel {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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
  // Rank r sends send[j*count .. (j+1)*count) to rank j and receives rank j's block r into
  // recv[j*count .. (j+1)*count).
  virtual void alltoall(float const* send, float* recv, std::size_t count_per_rank) = 0;
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ranks with the same color form a new group, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) const = 0;
};

}  // namespace joule::parallel
