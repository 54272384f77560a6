#pragma once
// Kernels behind joule::attention_forward / attention_backward (see core/ops/attention.hpp).
//
// Work decomposition: one team per (batch, head, tile of rows). A tile's K/V (or Q/dO) rows are
// staged in team scratch and reused by every row of the other side. On GPUs a team has one
// thread per row; on CPUs a team is one thread that walks its tile (the scratch tile then acts
// as an L1/L2 cache block). Tile sizes are compile-time, from the head size and the scalar size,
// so per-thread arrays have static bounds and team scratch stays under 32 KiB.
//
// Dot products against a whole tile are written as "for d: for j: s[j] += a[d] * bt(d, j)" over
// a transposed copy of the tile: the inner loop has independent accumulators, so CPU compilers
// vectorise it without reassociating a reduction (no -ffast-math), and the result is the same
// on every backend.
#include "core/ops/detail/row_kernels.hpp"
#include "core/tensor.hpp"

#include <cmath>
#include <cstddef>

namespace joule::detail {

struct AttentionShape {
  int batch = 0, seq = 0, heads = 0, channels = 0, head_dim = 0;
  int open_prefix = 0;  // query i sees keys [0, min(seq, max(i + 1, open_prefix)))
};

KOKKOS_INLINE_FUNCTION int attention_key_end(int query, int seq, int open_prefix) {
  int const e = query + 1 > open_prefix ? query + 1 : open_prefix;
  return e < seq ? e : seq;
}
// First query that sees key j (every query from there on sees it too).
KOKKOS_INLINE_FUNCTION int attention_query_begin(int key, int open_prefix) {
  return key < open_prefix ? 0 : key;
}

// Which (batch, head, tile of rows) a team owns, and where that head's q/k/v columns are.
struct AttentionTeamTile {
  int bh, row0, n_rows, token0, q_col, k_col, v_col;

  template <int Tile, int HD>
  KOKKOS_INLINE_FUNCTION static AttentionTeamTile decode(AttentionShape const& s, int league_rank,
                                                         int tiles_per_head) {
    AttentionTeamTile t;
    t.bh = league_rank / tiles_per_head;
    int const h = t.bh % s.heads, b = t.bh / s.heads;
    t.row0 = (league_rank % tiles_per_head) * Tile;
    t.n_rows = s.seq - t.row0 < Tile ? s.seq - t.row0 : Tile;
    t.token0 = b * s.seq;
    t.q_col = h * HD;
    t.k_col = s.channels + h * HD;
    t.v_col = 2 * s.channels + h * HD;
    return t;
  }
};

// Rows per tile so that `n_tiles` tiles of [tile, HD] scalars fit in 32 KiB, between 4 and 64.
template <class T, int HD, int NTiles>
constexpr int attention_tile() {
  int t = 64;
  while (t > 4 && std::size_t(NTiles) * t * HD * sizeof(T) > 32768) t /= 2;
  return t;
}

template <class T, class ExecutionSpace>
using ScratchMatrix = Kokkos::View<T**, Kokkos::LayoutRight,
                                   typename ExecutionSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T, class ExecutionSpace>
using ScratchVector = Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

template <class ExecutionSpace, int HD, class Out, class Lse, class Qkv>
struct AttentionForwardKernel {
  using T = typename Out::non_const_value_type;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Tile2 = ScratchMatrix<T, ExecutionSpace>;
  using Tile1 = ScratchVector<T, ExecutionSpace>;
  static constexpr int kTile = attention_tile<T, HD, 4>();

  AttentionShape s;
  Out out;
  Lse lse;
  Qkv qkv;
  T scale;
  int row_tiles;

  static std::size_t scratch_bytes() {
    return 4 * Tile2::shmem_size(kTile, HD) + 2 * Tile1::shmem_size(kTile);  // q, o, kt, v
  }

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    // (Plain locals, not a structured binding: lambdas may capture those only from C++20 on.)
    auto const t = AttentionTeamTile::decode<kTile, HD>(s, team.league_rank(), row_tiles);
    int const bh = t.bh, row0 = t.row0, n_rows = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;

    Tile2 q(team.team_scratch(0), kTile, HD), o(team.team_scratch(0), kTile, HD);
    Tile2 kt(team.team_scratch(0), HD, kTile), v(team.team_scratch(0), kTile, HD);
    Tile1 m(team.team_scratch(0), kTile), l(team.team_scratch(0), kTile);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_rows), [&](int i) {
      for (int d = 0; d < HD; ++d) {
        q(i, d) = scale * qkv(token0 + row0 + i, q_col + d);  // pre-scaled query
        o(i, d) = 0;
      }
      m(i) = T(-1e30);
      l(i) = 0;
    });
    // key_end is non-decreasing in the query index: the tile's last row bounds the key loop.
    int const key_limit = attention_key_end(row0 + n_rows - 1, s.seq, s.open_prefix);
    for (int key0 = 0; key0 < key_limit; key0 += kTile) {
      int const n_keys = key_limit - key0 < kTile ? key_limit - key0 : kTile;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](int j) {
        for (int d = 0; d < HD; ++d) {  // keys past the tile's end are zero, never used
          kt(d, j) = j < n_keys ? qkv(token0 + key0 + j, k_col + d) : T(0);
          v(j, d) = j < n_keys ? qkv(token0 + key0 + j, v_col + d) : T(0);
        }
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_rows), [&](int i) {
        int const end = attention_key_end(row0 + i, s.seq, s.open_prefix) - key0;
        int const n_valid = end < n_keys ? end : n_keys;
        if (n_valid <= 0) return;
        T score[kTile] = {};
        for (int d = 0; d < HD; ++d) {
          T const qd = q(i, d);
          for (int j = 0; j < kTile; ++j) score[j] += qd * kt(d, j);
        }
        T tile_max = m(i);
        for (int j = 0; j < n_valid; ++j) tile_max = score[j] > tile_max ? score[j] : tile_max;
        T const correction = math::exp(m(i) - tile_max);
        T row_sum = l(i) * correction;
        T acc[HD];
        for (int d = 0; d < HD; ++d) acc[d] = o(i, d) * correction;
        for (int j = 0; j < n_valid; ++j) {
          T const p = math::exp(score[j] - tile_max);
          row_sum += p;
          for (int d = 0; d < HD; ++d) acc[d] += p * v(j, d);
        }
        for (int d = 0; d < HD; ++d) o(i, d) = acc[d];
        m(i) = tile_max;
        l(i) = row_sum;
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_rows), [&](int i) {
      T const inv = T(1) / l(i);
      for (int d = 0; d < HD; ++d) out(token0 + row0 + i, q_col + d) = o(i, d) * inv;
      lse(bh, row0 + i) = m(i) + math::log(l(i));
    });
  }
};

template <int HD, class ExecutionSpace, class Out, class Lse, class Qkv>
void launch_attention_forward(ExecutionSpace const& space, AttentionShape const& s, Out const& out,
                              Lse const& lse, Qkv const& qkv) {
  using Kernel = AttentionForwardKernel<ExecutionSpace, HD, Out, Lse, Qkv>;
  using T = typename Kernel::T;
  int const row_tiles = (s.seq + Kernel::kTile - 1) / Kernel::kTile;
  Kernel kernel{s, out, lse, qkv, T(1.0 / std::sqrt(double(HD))), row_tiles};
  int const team_size = is_host_space<ExecutionSpace>() ? 1 : Kernel::kTile;
  Kokkos::TeamPolicy<ExecutionSpace> policy(space, s.batch * s.heads * row_tiles, team_size);
  Kokkos::parallel_for(label("attention_forward"),
                       policy.set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes())), kernel);
}

// delta[bh, i] = sum_d d_out[token, h*HD + d] * out[token, h*HD + d]
template <int HD, class ExecutionSpace, class Delta, class DOut, class Out>
void attention_delta(ExecutionSpace const& space, AttentionShape const& s, Delta const& delta,
                     DOut const& d_out, Out const& out) {
  using T = typename Delta::non_const_value_type;
  int const seq = s.seq, heads = s.heads;
  Kokkos::parallel_for(
      label("attention_backward_delta"),
      Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<2>>(space, {0, 0},
                                                             {s.batch * seq, heads}),
      KOKKOS_LAMBDA(int token, int h) {
        T sum = 0;
        for (int d = 0; d < HD; ++d) sum += d_out(token, h * HD + d) * out(token, h * HD + d);
        delta((token / seq) * heads + h, token % seq) = sum;
      });
}

// One team per (batch, head, key tile): accumulates dK and dV of its keys over all queries.
// Per key j and query tile: s_i = q_i.k_j and dp_i = dO_i.v_j for all i (over transposed Q and
// dO tiles), then dV_j += p_i dO_i and dK_j += ds_i q_i (over the row-major tiles).
template <class ExecutionSpace, int HD, class DQkv, class Delta, class DOut, class Qkv, class Lse>
struct AttentionBackwardKeyValueKernel {
  using T = typename DQkv::non_const_value_type;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Tile2 = ScratchMatrix<T, ExecutionSpace>;
  using Tile1 = ScratchVector<T, ExecutionSpace>;
  static constexpr int kTile = attention_tile<T, HD, 8>();

  AttentionShape s;
  DQkv d_qkv;
  Delta delta;
  DOut d_out;
  Qkv qkv;
  Lse lse;
  T scale;
  int key_tiles;

  static std::size_t scratch_bytes() {  // k, v, dk, dv, q, qt, dout, doutt; lse, delta
    return 8 * Tile2::shmem_size(kTile, HD) + 2 * Tile1::shmem_size(kTile);
  }

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    auto const t = AttentionTeamTile::decode<kTile, HD>(s, team.league_rank(), key_tiles);
    int const bh = t.bh, key0 = t.row0, n_keys = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;

    Tile2 k(team.team_scratch(0), kTile, HD), v(team.team_scratch(0), kTile, HD);
    Tile2 dk(team.team_scratch(0), kTile, HD), dv(team.team_scratch(0), kTile, HD);
    Tile2 q(team.team_scratch(0), kTile, HD), qt(team.team_scratch(0), HD, kTile);
    Tile2 dout(team.team_scratch(0), kTile, HD), doutt(team.team_scratch(0), HD, kTile);
    Tile1 row_lse(team.team_scratch(0), kTile), row_delta(team.team_scratch(0), kTile);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_keys), [&](int j) {
      for (int d = 0; d < HD; ++d) {
        k(j, d) = qkv(token0 + key0 + j, k_col + d);
        v(j, d) = qkv(token0 + key0 + j, v_col + d);
        dk(j, d) = 0;
        dv(j, d) = 0;
      }
    });
    // query_begin is non-decreasing in the key index: the tile's first key bounds the query loop.
    for (int query0 = attention_query_begin(key0, s.open_prefix); query0 < s.seq; query0 += kTile) {
      int const n_queries = s.seq - query0 < kTile ? s.seq - query0 : kTile;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](int i) {
        bool const in = i < n_queries;  // rows past the end are zero, never used
        for (int d = 0; d < HD; ++d) {
          T const qv = in ? scale * qkv(token0 + query0 + i, q_col + d) : T(0);
          T const gv = in ? d_out(token0 + query0 + i, q_col + d) : T(0);
          q(i, d) = qt(d, i) = qv;  // pre-scaled query: d score / d k = scale * q
          dout(i, d) = doutt(d, i) = gv;
        }
        row_lse(i) = in ? lse(bh, query0 + i) : T(0);
        row_delta(i) = in ? delta(bh, query0 + i) : T(0);
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_keys), [&](int j) {
        int const first = attention_query_begin(key0 + j, s.open_prefix) - query0;
        int const begin = first > 0 ? first : 0;
        if (begin >= n_queries) return;
        T score[kTile] = {}, dp[kTile] = {};
        for (int d = 0; d < HD; ++d) {
          T const kd = k(j, d), vd = v(j, d);
          for (int i = 0; i < kTile; ++i) {
            score[i] += qt(d, i) * kd;
            dp[i] += doutt(d, i) * vd;
          }
        }
        T acc_k[HD], acc_v[HD];
        for (int d = 0; d < HD; ++d) {
          acc_k[d] = dk(j, d);
          acc_v[d] = dv(j, d);
        }
        for (int i = begin; i < n_queries; ++i) {
          T const p = math::exp(score[i] - row_lse(i));
          T const ds = p * (dp[i] - row_delta(i));
          for (int d = 0; d < HD; ++d) {
            acc_v[d] += p * dout(i, d);
            acc_k[d] += ds * q(i, d);
          }
        }
        for (int d = 0; d < HD; ++d) {
          dk(j, d) = acc_k[d];
          dv(j, d) = acc_v[d];
        }
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_keys), [&](int j) {
      for (int d = 0; d < HD; ++d) {
        d_qkv(token0 + key0 + j, k_col + d) = dk(j, d);
        d_qkv(token0 + key0 + j, v_col + d) = dv(j, d);
      }
    });
  }
};

// One team per (batch, head, query tile): accumulates dQ of its queries over the keys they see.
// Per query i and key tile: s_j and dp_j over transposed K and V tiles, then dQ_i += ds_j k_j.
template <class ExecutionSpace, int HD, class DQkv, class Delta, class DOut, class Qkv, class Lse>
struct AttentionBackwardQueryKernel {
  using T = typename DQkv::non_const_value_type;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Tile2 = ScratchMatrix<T, ExecutionSpace>;
  using Tile1 = ScratchVector<T, ExecutionSpace>;
  static constexpr int kTile = attention_tile<T, HD, 6>();

  AttentionShape s;
  DQkv d_qkv;
  Delta delta;
  DOut d_out;
  Qkv qkv;
  Lse lse;
  T scale;
  int row_tiles;

  static std::size_t scratch_bytes() {  // q, dout, dq, k, kt, vt; lse, delta
    return 6 * Tile2::shmem_size(kTile, HD) + 2 * Tile1::shmem_size(kTile);
  }

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    // (Plain locals, not a structured binding: lambdas may capture those only from C++20 on.)
    auto const t = AttentionTeamTile::decode<kTile, HD>(s, team.league_rank(), row_tiles);
    int const bh = t.bh, row0 = t.row0, n_rows = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;

    Tile2 q(team.team_scratch(0), kTile, HD), dout(team.team_scratch(0), kTile, HD);
    Tile2 dq(team.team_scratch(0), kTile, HD), k(team.team_scratch(0), kTile, HD);
    Tile2 kt(team.team_scratch(0), HD, kTile), vt(team.team_scratch(0), HD, kTile);
    Tile1 row_lse(team.team_scratch(0), kTile), row_delta(team.team_scratch(0), kTile);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_rows), [&](int i) {
      for (int d = 0; d < HD; ++d) {
        q(i, d) = scale * qkv(token0 + row0 + i, q_col + d);
        dout(i, d) = d_out(token0 + row0 + i, q_col + d);
        dq(i, d) = 0;
      }
      row_lse(i) = lse(bh, row0 + i);
      row_delta(i) = delta(bh, row0 + i);
    });
    int const key_limit = attention_key_end(row0 + n_rows - 1, s.seq, s.open_prefix);
    for (int key0 = 0; key0 < key_limit; key0 += kTile) {
      int const n_keys = key_limit - key0 < kTile ? key_limit - key0 : kTile;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](int j) {
        bool const in = j < n_keys;  // keys past the end are zero, never used
        for (int d = 0; d < HD; ++d) {
          T const kv = in ? qkv(token0 + key0 + j, k_col + d) : T(0);
          k(j, d) = kt(d, j) = kv;
          vt(d, j) = in ? qkv(token0 + key0 + j, v_col + d) : T(0);
        }
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_rows), [&](int i) {
        int const end = attention_key_end(row0 + i, s.seq, s.open_prefix) - key0;
        int const n_valid = end < n_keys ? end : n_keys;
        if (n_valid <= 0) return;
        T score[kTile] = {}, dp[kTile] = {};
        for (int d = 0; d < HD; ++d) {
          T const qd = q(i, d), gd = dout(i, d);
          for (int j = 0; j < kTile; ++j) {
            score[j] += qd * kt(d, j);
            dp[j] += gd * vt(d, j);
          }
        }
        T acc[HD];
        for (int d = 0; d < HD; ++d) acc[d] = dq(i, d);
        for (int j = 0; j < n_valid; ++j) {
          T const ds = math::exp(score[j] - row_lse(i)) * (dp[j] - row_delta(i));
          for (int d = 0; d < HD; ++d) acc[d] += ds * k(j, d);
        }
        for (int d = 0; d < HD; ++d) dq(i, d) = acc[d];
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_rows), [&](int i) {
      for (int d = 0; d < HD; ++d) d_qkv(token0 + row0 + i, q_col + d) = scale * dq(i, d);
    });
  }
};

template <int HD, class ExecutionSpace, class DQkv, class Delta, class DOut, class Qkv, class Out,
          class Lse>
void launch_attention_backward(ExecutionSpace const& space, AttentionShape const& s,
                               DQkv const& d_qkv, Delta const& delta, DOut const& d_out,
                               Qkv const& qkv, Out const& out, Lse const& lse) {
  attention_delta<HD>(space, s, delta, d_out, out);
  using T = typename DQkv::non_const_value_type;
  T const scale = T(1.0 / std::sqrt(double(HD)));
  {
    using Kernel = AttentionBackwardKeyValueKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>;
    int const tiles = (s.seq + Kernel::kTile - 1) / Kernel::kTile;
    Kernel kernel{s, d_qkv, delta, d_out, qkv, lse, scale, tiles};
    int const team_size = is_host_space<ExecutionSpace>() ? 1 : Kernel::kTile;
    Kokkos::TeamPolicy<ExecutionSpace> policy(space, s.batch * s.heads * tiles, team_size);
    Kokkos::parallel_for(label("attention_backward_key_value"),
                         policy.set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes())),
                         kernel);
  }
  {
    using Kernel = AttentionBackwardQueryKernel<ExecutionSpace, HD, DQkv, Delta, DOut, Qkv, Lse>;
    int const tiles = (s.seq + Kernel::kTile - 1) / Kernel::kTile;
    Kernel kernel{s, d_qkv, delta, d_out, qkv, lse, scale, tiles};
    int const team_size = is_host_space<ExecutionSpace>() ? 1 : Kernel::kTile;
    Kokkos::TeamPolicy<ExecutionSpace> policy(space, s.batch * s.heads * tiles, team_size);
    Kokkos::parallel_for(label("attention_backward_query"),
                         policy.set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes())),
                         kernel);
  }
}

}  // namespace joule::detail
