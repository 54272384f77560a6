#include "parallel/mpi_communicator.hpp"

#include <cstdlib>

#include <mpi.h>

#include <vector>

namespace joule::parallel {

namespace {

void check(int code, char const* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw CommError(std::string("MPI ") + what + " failed: " + std::string(text, length));
}

// MPI counts are int: send large buffers in chunks.
constexpr std::size_t kMaxChunk = std::size_t(1) << 30;

class MpiRequest final : public Request {
 public:
  ~MpiRequest() override {
    for (auto& r : requests_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);  // abandoned (an error unwinds): let MPI finish it
  }
  void add(MPI_Request r) { requests_.push_back(r); }
  bool test() override {
    int done = 0;
    check(MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE), "Testall");
    return done != 0;
  }
  void wait() override {
    check(MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "Waitall");
  }

 private:
  std::vector<MPI_Request> requests_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(comm_, &rank_), "Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "Comm_size");
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  std::string backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce_sum(float* data, std::size_t count) override { allreduce(data, count, MPI_FLOAT); }
  void allreduce_sum(double* data, std::size_t count) override { allreduce(data, count, MPI_DOUBLE); }

  std::unique_ptr<Request> start_allreduce_sum(float* data, std::size_t count, void* /*after_stream*/) override {
    auto request = std::make_unique<MpiRequest>();
    for (std::size_t done = 0; done < count; done += kMaxChunk) {
      std::size_t const n = count - done < kMaxChunk ? count - done : kMaxChunk;
      MPI_Request r = MPI_REQUEST_NULL;
      check(MPI_Iallreduce(MPI_IN_PLACE, data + done, int(n), MPI_FLOAT, MPI_SUM, comm_, &r), "Iallreduce");
      request->add(r);
    }
    return request;
  }

  std::vector<std::string> gather(std::string const& mine, int root) override {
    if (mine.size() > kMaxChunk) throw CommError("gather: " + std::to_string(mine.size()) + " bytes is more than MPI's int counts allow");
    int const length = int(mine.size());
    std::vector<int> lengths(rank_ == root ? size_ : 0), offsets(lengths.size(), 0);
    check(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_), "Gather");
    std::size_t total = 0;
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      offsets[r] = int(total);
      total += std::size_t(lengths[r]);
    }
    std::vector<char> all(total + 1);
    check(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, root,
                      comm_), "Gatherv");
    std::vector<std::string> out;
    for (std::size_t r = 0; r < lengths.size(); ++r) out.emplace_back(all.data() + offsets[r], std::size_t(lengths[r]));
    return out;
  }

  void alltoall(float const* send, float* recv, std::size_t count) override {
    if (count > kMaxChunk) throw CommError("alltoall: " + std::to_string(count) + " elements per rank is more than MPI's int counts allow");
    check(MPI_Alltoall(send, int(count), MPI_FLOAT, recv, int(count), MPI_FLOAT, comm_), "Alltoall");
  }
  void alltoall_bf16(std::uint16_t const* send, std::uint16_t* recv, std::size_t count) override {
    if (count > kMaxChunk) throw CommError("alltoall: " + std::to_string(count) + " elements per rank is more than MPI's int counts allow");
    check(MPI_Alltoall(send, int(count), MPI_UINT16_T, recv, int(count), MPI_UINT16_T, comm_), "Alltoall");
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (std::size_t done = 0; done < bytes; done += kMaxChunk) {
      std::size_t const n = bytes - done < kMaxChunk ? bytes - done : kMaxChunk;
      check(MPI_Bcast(p + done, int(n), MPI_BYTE, root, comm_), "Bcast");
    }
  }
  void barrier() override { check(MPI_Barrier(comm_), "Barrier"); }
  std::unique_ptr<Communicator> split(int color, int key) const override {
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &sub), "Comm_split");
    return std::make_unique<MpiCommunicator>(sub, true);
  }

 private:
  template <class T>
  void allreduce(T* data, std::size_t count, MPI_Datatype type) {
    for (std::size_t done = 0; done < count; done += kMaxChunk) {
      std::size_t const n = count - done < kMaxChunk ? count - done : kMaxChunk;
      check(MPI_Allreduce(MPI_IN_PLACE, data + done, int(n), type, MPI_SUM, comm_), "Allreduce");
    }
  }
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "Init_thread");
  }
}

MpiSession::~MpiSession() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
}

void MpiSession::abort_job(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; should it, leave without finalising
}

std::unique_ptr<Communicator> MpiSession::world() const {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
}

}  // namespace joule::parallel
