#include "parallel/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <vector>

#include <unistd.h>

namespace joule::parallel {

namespace {

void check_nccl(ncclResult_t code, char const* what) {
  if (code != ncclSuccess) throw CommError(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(code));
}
void check_cuda(cudaError_t code, char const* what) {
  if (code != cudaSuccess) throw CommError(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(code));
}

class NcclRequest final : public Request {
 public:
  explicit NcclRequest(cudaStream_t stream) {
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "EventCreate");
    check_cuda(cudaEventRecord(done_, stream), "EventRecord");
  }
  ~NcclRequest() override { cudaEventDestroy(done_); }
  bool test() override {
    cudaError_t const e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) return false;
    check_cuda(e, "EventQuery");
    return true;
  }
  void wait() override { check_cuda(cudaEventSynchronize(done_), "EventSynchronize"); }
  bool order_before(void* stream) override {
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_, 0), "StreamWaitEvent");
    return true;
  }

 private:
  cudaEvent_t done_{};
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::unique_ptr<Communicator> bootstrap) : mpi_(std::move(bootstrap)) {
    ncclUniqueId id{};
    if (mpi_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "GetUniqueId");
    mpi_->broadcast(&id, sizeof id, 0);
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "StreamCreate");
    check_cuda(cudaEventCreateWithFlags(&written_, cudaEventDisableTiming), "EventCreate");
    check_nccl(ncclCommInitRank(&comm_, mpi_->size(), id, mpi_->rank()), "CommInitRank");
  }
  ~NcclCommunicator() override {
    ncclCommDestroy(comm_);
    cudaEventDestroy(written_);
    cudaStreamDestroy(stream_);
  }
  std::string backend() const override { return "nccl"; }
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  bool device_buffers() const override { return true; }

  bool orders_on_device() const override { return true; }

  void allreduce_sum(float* data, std::size_t count) override { start_allreduce_sum(data, count, nullptr)->wait(); }
  void allreduce_sum(double* data, std::size_t count) override { mpi_->allreduce_sum(data, count); }  // host
  std::unique_ptr<Request> start_allreduce_sum(float* data, std::size_t count, void* after_stream) override {
    // The sum runs on this stream, after the kernels that wrote `data` (an event on their stream;
    // nullptr: the caller has waited for them). One event serves every call: a wait takes the
    // event's state when it is queued.
    if (after_stream) {
      check_cuda(cudaEventRecord(written_, static_cast<cudaStream_t>(after_stream)), "EventRecord");
      check_cuda(cudaStreamWaitEvent(stream_, written_, 0), "StreamWaitEvent");
    }
    check_nccl(ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_, stream_), "AllReduce");
    return std::make_unique<NcclRequest>(stream_);
  }
  void alltoall(float const* send, float* recv, std::size_t count) override {
    alltoall_typed(send, recv, count, ncclFloat);
  }
  void alltoall_bf16(std::uint16_t const* send, std::uint16_t* recv, std::size_t count) override {
    alltoall_typed(send, recv, count, ncclBfloat16);
  }
  template <class E>
  void alltoall_typed(E const* send, E* recv, std::size_t count, ncclDataType_t type) {
    check_nccl(ncclGroupStart(), "GroupStart");
    for (int peer = 0; peer < size(); ++peer) {
      check_nccl(ncclSend(send + peer * count, count, type, peer, comm_, stream_), "Send");
      check_nccl(ncclRecv(recv + peer * count, count, type, peer, comm_, stream_), "Recv");
    }
    check_nccl(ncclGroupEnd(), "GroupEnd");
    check_cuda(cudaStreamSynchronize(stream_), "StreamSynchronize");
  }
  void broadcast(void* data, std::size_t bytes, int root) override { mpi_->broadcast(data, bytes, root); }
  std::vector<std::string> gather(std::string const& mine, int root) override { return mpi_->gather(mine, root); }
  void barrier() override { mpi_->barrier(); }
  std::unique_ptr<Communicator> split(int color, int key) const override {
    return std::make_unique<NcclCommunicator>(mpi_->split(color, key));
  }

 private:
  std::unique_ptr<Communicator> mpi_;
  cudaStream_t stream_{};
  cudaEvent_t written_{};
  ncclComm_t comm_{};
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> bootstrap) {
  return std::make_unique<NcclCommunicator>(std::move(bootstrap));
}

std::string local_gpu_identity() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "GetDevice");
  char bus[64] = {};
  check_cuda(cudaDeviceGetPCIBusId(bus, sizeof bus, device), "DeviceGetPCIBusId");
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + bus;
}

}  // namespace joule::parallel
