#pragma once
// The launches behind joule::attention_forward / attention_backward (see core/ops/attention.hpp):
// each picks the host-shaped kernels (attention_host_kernels.hpp) or the GPU-shaped ones
// (attention_block_kernels.hpp), whose design attention_common.hpp describes.
#include "core/ops/detail/attention_block_kernels.hpp"
#include "core/ops/detail/attention_host_kernels.hpp"

namespace joule::detail {

// The shape of a launch: host spaces get the register-blocked host kernels (one thread per team,
// L2-sized tiles), GPUs the 256-thread block kernels. Block = true picks the GPU kernels on any
// backend (the tests run them on the CPU). Either way the launch reports the CUDA shape, that of
// the block kernel: league x 256 threads in blocks of 256.
template <class ExecutionSpace>
constexpr bool attention_block_default() {
  return !is_host_space<ExecutionSpace>();
}

// The CUDA launch of a block kernel, for the launch audit and contract: `teams` blocks of 256
// threads, a team of 256 (vector length 1), its scratch in each level.
template <class BlockKernel>
void note_attention_launch(char const* name, long teams, KernelWork const& work) {
  note_launch(name,
              LaunchShape{teams * kBlockThreads, kBlockThreads, BlockKernel::scratch_bytes(0), kBlockThreads,
                          BlockKernel::scratch_bytes(1)},
              work);
}

// The kernel's policy with its team scratch in both levels.
template <class Kernel>
typename Kernel::Policy attention_policy(typename Kernel::Policy::execution_space const& space, int league) {
  return typename Kernel::Policy(space, league, Kernel::team_size())
      .set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes(0)))
      .set_scratch_size(1, Kokkos::PerTeam(Kernel::scratch_bytes(1)));
}

template <int HD, bool Block, class ExecutionSpace, class Out, class Lse, class Qkv>
void launch_attention_forward(ExecutionSpace const& space, AttentionShape const& s, Out const& out,
                              Lse const& lse, Qkv const& qkv) {
  using BlockKernel = AttentionForwardBlockKernel<ExecutionSpace, HD, Out, Lse, Qkv>;
  using Kernel = std::conditional_t<Block, BlockKernel, AttentionForwardKernel<ExecutionSpace, HD, Out, Lse, Qkv>>;
  using T = typename Kernel::T;
  int const row_tiles = (s.seq + Kernel::kTile - 1) / Kernel::kTile;
  Kernel kernel{s, out, lse, qkv, T(1.0 / std::sqrt(double(HD))), row_tiles};
  // q, k, v read, out written, lse written; q k^T, the softmax (~5 per pair) and p v
  note_attention_launch<BlockKernel>(
      "attention_forward", long(s.batch) * s.heads * ((s.seq + BlockKernel::kTile - 1) / BlockKernel::kTile),
      fused_attention_work(s, kAttentionForwardFlopsPerPair + 5.0 / s.head_dim, kAttentionForwardFlopsPerPair,
                           sizeof(typename Out::value_type), 3, 1, 1));
  Kokkos::parallel_for(label("attention_forward"), attention_policy<Kernel>(space, s.batch * s.heads * row_tiles),
                       kernel);
}

// delta[bh, i] = sum_d d_out[token, h*HD + d] * out[token, h*HD + d]
// One token's row per warp (for_each_row: 32 lanes over each head's HD columns, coalesced), a
// row reduction per head in the backend's fixed order: N*32 threads on a GPU, not N*heads
// threads each walking HD columns at a stride of HD.
template <int HD, class ExecutionSpace, class Delta, class DOut, class Out>
void attention_delta(ExecutionSpace const& space, AttentionShape const& s, Delta const& delta,
                     DOut const& d_out, Out const& out) {
  using T = typename Delta::non_const_value_type;
  int const seq = s.seq, heads = s.heads;
  int const read = sizeof(typename DOut::value_type) + sizeof(typename Out::value_type);
  KernelWork work = streaming_work(double(s.batch) * seq * s.channels, read, 0, 2, read, WorkKind::attention);
  work.bytes += double(s.batch) * seq * heads * sizeof(T);
  for_each_row(space, "attention_backward_delta", work, s.batch * seq,
               KOKKOS_LAMBDA(RowMember<ExecutionSpace> const& team, int token) {
    for (int h = 0; h < heads; ++h) {
      T const sum = vector_sum<ExecutionSpace, T>(
          team, HD, [&](int d) { return T(widen(d_out(token, h * HD + d)) * widen(out(token, h * HD + d))); });
      once_per_row(team, [&]() { delta((token / seq) * heads + h, token % seq) = sum; });
    }
  });
}

template <int HD, bool Block, class ExecutionSpace, class DQkv, class Delta, class DOut, class Qkv,
          class Out, class Lse>
void launch_attention_backward(ExecutionSpace const& space, AttentionShape const& s,
                               DQkv const& d_qkv, Delta const& delta, DOut const& d_out,
                               Qkv const& qkv, Out const& out, Lse const& lse) {
  attention_delta<HD>(space, s, delta, d_out, out);
  using T = compute_t<typename DQkv::non_const_value_type>;
  T const scale = T(1.0 / std::sqrt(double(HD)));
  auto const cuda_teams = [&](int tile) { return long(s.batch) * s.heads * ((s.seq + tile - 1) / tile); };
  {
    using BlockKernel = AttentionBackwardKeyValueBlockKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>;
    using Kernel = std::conditional_t<
        Block, BlockKernel, AttentionBackwardKeyValueKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>>;
    int const tiles = (s.seq + Kernel::kTile - 1) / Kernel::kTile;
    Kernel kernel{s, d_qkv, delta, d_out, qkv, lse, scale, tiles};
    // q, k, v, d_out read, dk and dv written, lse and delta read; s, dp, dv, dk
    note_attention_launch<BlockKernel>("attention_backward_key_value", cuda_teams(BlockKernel::kTile),
                                       fused_attention_work(s, 8, 8, sizeof(typename DQkv::value_type), 4, 2, 2));
    Kokkos::parallel_for(label("attention_backward_key_value"),
                         attention_policy<Kernel>(space, s.batch * s.heads * tiles), kernel);
  }
  {
    using BlockKernel = AttentionBackwardQueryBlockKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>;
    using Kernel = std::conditional_t<
        Block, BlockKernel, AttentionBackwardQueryKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>>;
    int const tiles = (s.seq + Kernel::kTile - 1) / Kernel::kTile;
    Kernel kernel{s, d_qkv, delta, d_out, qkv, lse, scale, tiles};
    // q, k, v, d_out read, dq written, lse and delta read; s and dp again (counted above), dq
    note_attention_launch<BlockKernel>("attention_backward_query", cuda_teams(BlockKernel::kTile),
                                       fused_attention_work(s, 6, 2, sizeof(typename DQkv::value_type), 4, 1, 2));
    Kokkos::parallel_for(label("attention_backward_query"), attention_policy<Kernel>(space, s.batch * s.heads * tiles),
                         kernel);
  }
}

}  // namespace joule::detail
