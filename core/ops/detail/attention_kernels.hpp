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

// The kernel's policy with its team scratch in both levels: its level-0 bytes in
// attention_shared_level's level (level 1 on the host, added to the kernel's own level 1).
template <class Kernel>
typename Kernel::Policy attention_policy(typename Kernel::Policy::execution_space const& space, int league) {
  using Policy = typename Kernel::Policy;
  bool const shared_in_level0 = attention_shared_level<typename Policy::execution_space>() == 0;
  std::size_t const level0 = shared_in_level0 ? Kernel::scratch_bytes(0) : 0;
  std::size_t const level1 = Kernel::scratch_bytes(1) + (shared_in_level0 ? 0 : Kernel::scratch_bytes(0));
  return Policy(space, league, Kernel::team_size())
      .set_scratch_size(0, Kokkos::PerTeam(level0))
      .set_scratch_size(1, Kokkos::PerTeam(level1));
}

// One pass's launch: the host- or GPU-shaped kernel over every (batch, head, tile of its rows),
// with `args` (its `tiles` filled in here); the note is the GPU shape's CUDA launch either way.
template <class BlockKernel, class HostKernel, bool Block, class ExecutionSpace, class Args>
void launch_attention_pass(ExecutionSpace const& space, char const* name, Args args, KernelWork const& work) {
  using Kernel = std::conditional_t<Block, BlockKernel, HostKernel>;
  AttentionShape const& s = args.s;
  auto const tiles_per_head = [&](int tile) { return (s.seq + tile - 1) / tile; };
  args.tiles = tiles_per_head(Kernel::kTile);
  note_attention_launch<BlockKernel>(name, long(s.batch) * s.heads * tiles_per_head(BlockKernel::kTile), work);
  Kokkos::parallel_for(label(name), attention_policy<Kernel>(space, s.batch * s.heads * args.tiles), Kernel{args});
}

template <int HD, bool Block, class ExecutionSpace, class Out, class Lse, class Qkv>
void launch_attention_forward(ExecutionSpace const& space, AttentionShape const& s, Out const& out,
                              Lse const& lse, Qkv const& qkv) {
  using Args = AttentionForwardArgs<Out, Lse, Qkv>;
  using T = typename Args::T;
  // q, k, v read, out written, lse written; q k^T, the softmax (~5 per pair) and p v
  launch_attention_pass<AttentionForwardBlockKernel<ExecutionSpace, HD, Out, Lse, Qkv>,
                        AttentionForwardKernel<ExecutionSpace, HD, Out, Lse, Qkv>, Block>(
      space, "attention_forward", Args{{s, qkv, T(attention_scale(HD)), 0}, out, lse},
      fused_attention_work(s, kAttentionForwardFlopsPerPair + 5.0 / s.head_dim, kAttentionForwardFlopsPerPair,
                           sizeof(typename Out::value_type), 3, 1, 1));
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
  using Args = AttentionBackwardArgs<DQkv, Delta, DOut, Qkv, Lse>;
  using T = typename Args::T;
  Args const args{{s, qkv, T(attention_scale(HD)), 0}, d_qkv, delta, d_out, lse};
  int const bytes = sizeof(typename DQkv::value_type);
  // q, k, v, d_out read, dk and dv written, lse and delta read; s, dp, dv, dk
  launch_attention_pass<AttentionBackwardKeyValueBlockKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>,
                        AttentionBackwardKeyValueKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>, Block>(
      space, "attention_backward_key_value", args, fused_attention_work(s, 8, 8, bytes, 4, 2, 2));
  // q, k, v, d_out read, dq written, lse and delta read; s and dp again (counted above), dq
  launch_attention_pass<AttentionBackwardQueryBlockKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>,
                        AttentionBackwardQueryKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>, Block>(
      space, "attention_backward_query", args, fused_attention_work(s, 6, 2, bytes, 4, 1, 2));
}

}  // namespace joule::detail
