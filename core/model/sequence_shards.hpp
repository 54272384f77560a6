#pragma once
// Ulysses (DeepSpeed-Ulysses) sequence parallelism, as the model sees it.
//
// P ranks share each sample: rank r holds tokens [r*S/P, (r+1)*S/P) of every sequence, for all
// layers except attention. Around attention an all-to-all turns "S/P tokens, all H heads" into
// "all S tokens, H/P heads" (rank j gets heads [j*H/P, (j+1)*H/P)), attention runs on whole
// sequences with the ordinary mask (positions are global, so the image-prefix mask stays right
// wherever the image tokens land), and the reverse all-to-all brings the output back. The
// backward pass mirrors both.
//
// core/ knows no communicator: the caller (apps/, tests) provides the collective operations over
// the ranks of one sequence group as functions.
#include "core/detail/launch_shape.hpp"
#include "core/precision/bf16.hpp"
#include "core/tensor.hpp"

#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>

namespace joule {

struct SequenceShards {
  int rank = 0, size = 1;
  // Rank r sends send[j*count .. (j+1)*count) to rank j and receives rank j's block r into
  // recv[j*count .. (j+1)*count). Host memory unless device_pointers.
  std::function<void(float const* send, float* recv, std::size_t count)> alltoall;
  // The same for bf16 tensors (bf16 runs: ncclBfloat16 on NCCL, 2-byte elements on MPI).
  std::function<void(bf16 const* send, bf16* recv, std::size_t count)> alltoall_bf16;
  // In place, over the group, host memory.
  std::function<void(double* data, std::size_t count)> allreduce_sum;
  bool device_pointers = false;  // alltoall takes device memory (NCCL) instead of host memory
  bool active() const { return size > 1; }
};

namespace detail {
// The buffer layout [P][B][S/P][width][C/P] seen from both sides, in one place.
struct UlyssesBufferLayout {
  int P, B, Sl, C, Cp, width;
  KOKKOS_INLINE_FUNCTION int local_rows() const { return B * Sl; }
  KOKKOS_INLINE_FUNCTION int local_cols() const { return width * C; }
  KOKKOS_INLINE_FUNCTION int heads_cols() const { return width * Cp; }
  std::size_t count_per_rank() const { return std::size_t(B) * Sl * width * Cp; }
  // local (row, col): column block w, head shard j (the rank it goes to / comes from), column c
  KOKKOS_INLINE_FUNCTION std::size_t local_index(int row, int col) const {
    int const w = col / C, j = (col % C) / Cp, c = col % Cp;
    return ((std::size_t(j) * B * Sl + row) * width + w) * Cp + c;
  }
  // flat = (i*B + b)*Sl + t: token t of rank i's shard of sample b
  KOKKOS_INLINE_FUNCTION int heads_row(int flat) const {
    int const i = flat / (B * Sl), b = (flat / Sl) % B, t = flat % Sl;
    return b * Sl * P + i * Sl + t;
  }
  KOKKOS_INLINE_FUNCTION std::size_t heads_index(int flat, int col) const {
    return std::size_t(flat) * width * Cp + col;
  }
};
}  // namespace detail

// The two all-to-alls of one attention layer and their staging buffers. A tensor of `width`
// column blocks of C columns (qkv: width 3, attention output: width 1) is exchanged between
//   local layout  [B*S/P, width*C]    this rank's tokens, all heads
//   head layout   [B*S,   width*C/P]  every token, this rank's heads
// Buffer layout (both directions): [P][B][S/P][width][C/P], block j for/from rank j.
template <class T, class MemorySpace>
class SequenceExchange {
 public:
  SequenceExchange() = default;
  // tokens_local = B*S/P; max_width = 3 (qkv).
  SequenceExchange(SequenceShards shards, int batch, int seq_local, int channels, int max_width = 3)
      : shards_(std::move(shards)), batch_(batch), seq_local_(seq_local), channels_(channels) {
    require(shards_.size >= 1 && channels % shards_.size == 0, "SequenceExchange",
            "channels " + std::to_string(channels) + " not divisible by " + std::to_string(shards_.size) + " shards");
    require(bool(shards_.alltoall), "SequenceExchange", "no all-to-all function given");
    std::size_t const n = std::size_t(batch) * seq_local * max_width * channels;
    send_ = Kokkos::View<T*, MemorySpace>(label("ulysses.send"), n);
    recv_ = Kokkos::View<T*, MemorySpace>(label("ulysses.recv"), n);
    if (!direct()) {
      host_send_ = Kokkos::create_mirror_view(send_);
      host_recv_ = Kokkos::create_mirror_view(recv_);
    }
  }

  // heads [B*S, width*C/P] <- local [B*S/P, width*C]
  template <class ExecutionSpace, class Heads, class Local>
  void to_heads(ExecutionSpace const& space, Heads const& heads, Local const& local, int width) const {
    compat::ScopedRegion region(space, "ulysses_all_to_all");
    check(heads, local, width);
    auto const L = layout(width);
    auto const send = send_, recv = recv_;
    detail::note_launch("ulysses_pack_local", detail::moved_work(double(long(L.local_rows()) * L.local_cols()), int(sizeof(T))), long(L.local_rows()) * L.local_cols());
    Kokkos::parallel_for(
        label("ulysses_pack_local"),
        Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(space, {0, 0}, {L.local_rows(), L.local_cols()}),
        KOKKOS_LAMBDA(int row, int col) { send[L.local_index(row, col)] = local(row, col); });
    exchange(space, L.count_per_rank());
    detail::note_launch("ulysses_unpack_heads", detail::moved_work(double(long(L.local_rows()) * L.P * L.heads_cols()), int(sizeof(T))), long(L.local_rows()) * L.P * L.heads_cols());
    Kokkos::parallel_for(
        label("ulysses_unpack_heads"),
        Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(space, {0, 0}, {L.local_rows() * L.P, L.heads_cols()}),
        KOKKOS_LAMBDA(int flat, int col) { heads(L.heads_row(flat), col) = recv[L.heads_index(flat, col)]; });
  }

  // local [B*S/P, width*C] <- heads [B*S, width*C/P]
  template <class ExecutionSpace, class Local, class Heads>
  void to_local(ExecutionSpace const& space, Local const& local, Heads const& heads, int width) const {
    compat::ScopedRegion region(space, "ulysses_all_to_all");
    check(heads, local, width);
    auto const L = layout(width);
    auto const send = send_, recv = recv_;
    detail::note_launch("ulysses_pack_heads", detail::moved_work(double(long(L.local_rows()) * L.P * L.heads_cols()), int(sizeof(T))), long(L.local_rows()) * L.P * L.heads_cols());
    Kokkos::parallel_for(
        label("ulysses_pack_heads"),
        Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(space, {0, 0}, {L.local_rows() * L.P, L.heads_cols()}),
        KOKKOS_LAMBDA(int flat, int col) { send[L.heads_index(flat, col)] = heads(L.heads_row(flat), col); });
    exchange(space, L.count_per_rank());
    detail::note_launch("ulysses_unpack_local", detail::moved_work(double(long(L.local_rows()) * L.local_cols()), int(sizeof(T))), long(L.local_rows()) * L.local_cols());
    Kokkos::parallel_for(
        label("ulysses_unpack_local"),
        Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(space, {0, 0}, {L.local_rows(), L.local_cols()}),
        KOKKOS_LAMBDA(int row, int col) { local(row, col) = recv[L.local_index(row, col)]; });
  }

 private:
  detail::UlyssesBufferLayout layout(int width) const {
    return {shards_.size, batch_, seq_local_, channels_, channels_ / shards_.size, width};
  }

  // Device buffers go to the collective directly when it takes them (NCCL) or when the memory
  // is the host's (CPU builds); otherwise they are staged through host mirrors.
  bool direct() const {
    return shards_.device_pointers || Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;
  }
  template <class Heads, class Local>
  void check(Heads const& heads, Local const& local, int width) const {
    int const P = shards_.size;
    require(int(local.extent(0)) == batch_ * seq_local_ && int(local.extent(1)) == width * channels_ &&
                int(heads.extent(0)) == batch_ * seq_local_ * P &&
                int(heads.extent(1)) == width * channels_ / P && std::size_t(width) * channels_ * batch_ * seq_local_ <= send_.span(),
            "SequenceExchange", "local " + shape_of(local) + ", heads " + shape_of(heads) + ", width " +
                                    std::to_string(width));
  }
  template <class ExecutionSpace>
  void exchange(ExecutionSpace const& space, std::size_t count_per_rank) const {
    auto const alltoall = [&](T const* send, T* recv) {
      if constexpr (std::is_same_v<T, bf16>) {
        require(bool(shards_.alltoall_bf16), "SequenceExchange", "no bf16 all-to-all function given");
        shards_.alltoall_bf16(send, recv, count_per_rank);
      } else if constexpr (std::is_same_v<T, float>) {
        shards_.alltoall(send, recv, count_per_rank);
      } else {  // (the double-precision reference tests never shard)
        require(false, "SequenceExchange", "the all-to-all moves fp32 or bf16 tensors only");
      }
    };
    space.fence();  // the packed buffer is complete
    if (direct()) {
      alltoall(send_.data(), recv_.data());
    } else {
      std::size_t const n = count_per_rank * shards_.size;
      Kokkos::deep_copy(space, Kokkos::subview(host_send_, std::make_pair(std::size_t(0), n)),
                        Kokkos::subview(send_, std::make_pair(std::size_t(0), n)));
      space.fence();
      alltoall(host_send_.data(), host_recv_.data());
      Kokkos::deep_copy(space, Kokkos::subview(recv_, std::make_pair(std::size_t(0), n)),
                        Kokkos::subview(host_recv_, std::make_pair(std::size_t(0), n)));
    }
  }

  SequenceShards shards_;
  int batch_ = 0, seq_local_ = 0, channels_ = 0;
  Kokkos::View<T*, MemorySpace> send_, recv_;
  compat::host_mirror_t<Kokkos::View<T*, MemorySpace>> host_send_, host_recv_;
};

}  // namespace joule
