#pragma once
// The host-shaped attention kernels (CPUs): a team is one thread that walks its tile in groups of
// kR rows, with register-blocked micro-tiles (attention_common.hpp has the design and the shared
// pieces; attention_block_kernels.hpp the GPU shape of the same algorithm, attention_kernels.hpp
// the launches that pick one).
#include "core/ops/detail/attention_common.hpp"

namespace joule::detail {

// What every host kernel shares: its tiles of kTile rows, sized so that NTiles [kTile, HD] tiles
// (and two vectors of kTile) fit the scratch budget, kR rows per thread, the team's own rows.
// Args: its operands (AttentionForwardArgs / AttentionBackwardArgs).
template <class ExecutionSpace, int HD, int NTiles, class Args>
struct AttentionHostKernelBase : Args {
  using typename Args::S, typename Args::T;
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Member = typename Policy::member_type;
  using Tile2 = ScratchMatrix<T, ExecutionSpace>;
  using Tile1 = ScratchVector<T, ExecutionSpace>;
  static constexpr int kTile = attention_tile<T, HD, NTiles, attention_scratch_budget<ExecutionSpace>()>();
  static constexpr int kR = attention_rows_per_thread<ExecutionSpace>();
  static_assert(kTile % kR == 0, "tile rows must split evenly over threads");
  // GPUs: one thread per kR rows; CPUs: a team is one thread that walks the tile.
  static constexpr int team_size() { return is_host_space<ExecutionSpace>() ? 1 : kTile / kR; }
  // The tiles are level-0 scratch (shared memory) on a GPU; attention_policy moves them to level 1
  // on the host, where they take them from (kLevel).
  static constexpr int kLevel = attention_shared_level<ExecutionSpace>();
  static std::size_t scratch_bytes(int level) {
    return level == 0 ? NTiles * Tile2::shmem_size(kTile, HD) + 2 * Tile1::shmem_size(kTile) : 0;
  }

  KOKKOS_INLINE_FUNCTION AttentionTeamTile team_tile(Member const& team) const {
    return AttentionTeamTile::decode<kTile, HD>(this->s, team.league_rank(), this->tiles);
  }
};

// Forward: one team per (batch, head, tile of kTile query rows); each thread owns kR rows and
// walks the key tiles (K transposed and V staged in scratch) with an online softmax.
template <class ExecutionSpace, int HD, class Out, class Lse, class Qkv>
struct AttentionForwardKernel
    : AttentionHostKernelBase<ExecutionSpace, HD, 4, AttentionForwardArgs<Out, Lse, Qkv>> {
  using Base = typename AttentionForwardKernel::AttentionHostKernelBase;  // scratch: q, o, kt, v; m, l
  using typename Base::S, typename Base::T, typename Base::Member, typename Base::Tile2, typename Base::Tile1;
  using Base::s, Base::out, Base::lse, Base::qkv, Base::scale, Base::kTile, Base::kR, Base::kLevel;

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    // (Plain locals, not a structured binding: lambdas may capture those only from C++20 on.)
    auto const t = this->team_tile(team);
    int const bh = t.bh, row0 = t.row0, n_rows = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;

    Tile2 q(team.team_scratch(kLevel), kTile, HD), o(team.team_scratch(kLevel), kTile, HD);
    Tile2 kt(team.team_scratch(kLevel), HD, kTile), v(team.team_scratch(kLevel), kTile, HD);
    Tile1 m(team.team_scratch(kLevel), kTile), l(team.team_scratch(kLevel), kTile);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](int i) {
      bool const in = i < n_rows;  // rows past the end are zero, computed but never stored
      for (int d = 0; d < HD; ++d) {
        q(i, d) = in ? scale * widen(qkv(token0 + row0 + i, q_col + d)) : T(0);  // pre-scaled query
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
          kt(d, j) = j < n_keys ? widen(qkv(token0 + key0 + j, k_col + d)) : T(0);
          v(j, d) = j < n_keys ? widen(qkv(token0 + key0 + j, v_col + d)) : T(0);
        }
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile / kR), [&](int g) {
        int const i0 = g * kR;
        if (i0 >= n_rows) return;
        T p[kR][kTile], correction[kR];
        int n_valid[kR];  // keys each row sees
        int const n_used = attention_group_keys<kR>(s, row0 + i0, n_rows - i0, key0, n_keys, n_valid);
        attention_tile_dot<kR, kTile, HD>(q.data() + i0 * HD, kt.data(), p, 0, n_used);
        for (int r = 0; r < kR; ++r) {
          T const m_old = m(i0 + r);
          T const tile_max = attention_row_max(p[r], n_valid[r], m_old);
          correction[r] = exp_of<ExecutionSpace>(m_old - tile_max);
          for (int j = 0; j < kTile; ++j)
            p[r][j] = attention_keep(j < n_valid[r], exp_of<ExecutionSpace>(p[r][j] - tile_max));
          l(i0 + r) = l(i0 + r) * correction[r] + attention_row_sum(p[r]);
          m(i0 + r) = tile_max;
        }
        attention_tile_axpy<kR, kTile, HD>(p, n_used, v.data(), o.data() + i0 * HD, correction);
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_rows), [&](int i) {
      T const inv = T(1) / l(i);
      for (int d = 0; d < HD; ++d) out(token0 + row0 + i, q_col + d) = narrow<S>(o(i, d) * inv);
      lse(bh, row0 + i) = m(i) + math::log(l(i));
    });
  }
};

// One team per (batch, head, key tile): accumulates dK and dV of its keys over all queries.
// Each thread owns kR keys. Per query tile: s = k q^T and dp = v dO^T against transposed Q and
// dO tiles, p = exp(s - lse), ds = p (dp - delta), then dV += p dO and dK += ds Q against the
// row-major tiles (register-blocked micro-tiles, see attention_tile_dot / attention_tile_axpy).
template <class ExecutionSpace, int HD, class DQkv, class Delta, class DOut, class Qkv, class Lse>
struct AttentionBackwardKeyValueKernel
    : AttentionHostKernelBase<ExecutionSpace, HD, 8, AttentionBackwardArgs<DQkv, Delta, DOut, Qkv, Lse>> {
  using Base = typename AttentionBackwardKeyValueKernel::AttentionHostKernelBase;  // scratch: k, v, dk, dv, q, qt, dout, doutt; lse, delta
  using typename Base::S, typename Base::T, typename Base::Member, typename Base::Tile2, typename Base::Tile1;
  using Base::s, Base::d_qkv, Base::delta, Base::d_out, Base::qkv, Base::lse, Base::scale, Base::kTile, Base::kR, Base::kLevel;

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    auto const t = this->team_tile(team);
    int const bh = t.bh, key0 = t.row0, n_keys = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;

    Tile2 k(team.team_scratch(kLevel), kTile, HD), v(team.team_scratch(kLevel), kTile, HD);
    Tile2 dk(team.team_scratch(kLevel), kTile, HD), dv(team.team_scratch(kLevel), kTile, HD);
    Tile2 q(team.team_scratch(kLevel), kTile, HD), qt(team.team_scratch(kLevel), HD, kTile);
    Tile2 dout(team.team_scratch(kLevel), kTile, HD), doutt(team.team_scratch(kLevel), HD, kTile);
    Tile1 row_lse(team.team_scratch(kLevel), kTile), row_delta(team.team_scratch(kLevel), kTile);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](int j) {
      bool const in = j < n_keys;  // keys past the end are zero, computed but never stored
      for (int d = 0; d < HD; ++d) {
        k(j, d) = in ? widen(qkv(token0 + key0 + j, k_col + d)) : T(0);
        v(j, d) = in ? widen(qkv(token0 + key0 + j, v_col + d)) : T(0);
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
          T const qv = in ? scale * widen(qkv(token0 + query0 + i, q_col + d)) : T(0);
          T const gv = in ? widen(d_out(token0 + query0 + i, q_col + d)) : T(0);
          q(i, d) = qt(d, i) = qv;  // pre-scaled query: d score / d k = scale * q
          dout(i, d) = doutt(d, i) = gv;
        }
        row_lse(i) = in ? lse(bh, query0 + i) : T(0);
        row_delta(i) = in ? delta(bh, query0 + i) : T(0);
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile / kR), [&](int g) {
        int const j0 = g * kR;
        if (j0 >= n_keys) return;
        // Queries [begin, n_queries) of the tile see key j0 (and every later key of the group
        // sees a subset of those).
        int const first = attention_query_begin(key0 + j0, s.open_prefix) - query0;
        int const begin = first > 0 ? first : 0;
        if (begin >= n_queries) return;
        T p[kR][kTile], ds[kR][kTile], one[kR];
        attention_tile_dot<kR, kTile, HD>(k.data() + j0 * HD, qt.data(), p, begin, n_queries);
        attention_tile_dot<kR, kTile, HD>(v.data() + j0 * HD, doutt.data(), ds, begin, n_queries);
        for (int r = 0; r < kR; ++r) {
          int const f = attention_query_begin(key0 + j0 + r, s.open_prefix) - query0;
          int const b = j0 + r < n_keys ? (f > 0 ? f : 0) : kTile;
          for (int i = 0; i < kTile; ++i) {
            bool const keep = i >= b && i < n_queries;
            T const e = attention_keep(keep, exp_of<ExecutionSpace>(p[r][i] - row_lse(i)));
            p[r][i] = e;
            ds[r][i] = e * (ds[r][i] - row_delta(i));
          }
          one[r] = 1;
        }
        // Rows before `begin` have p = ds = 0 for every key of the group: start the sums there.
        attention_tile_axpy_from<kR, kTile, HD>(p, begin, n_queries, dout.data(), dv.data() + j0 * HD, one);
        attention_tile_axpy_from<kR, kTile, HD>(ds, begin, n_queries, q.data(), dk.data() + j0 * HD, one);
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_keys), [&](int j) {
      for (int d = 0; d < HD; ++d) {
        d_qkv(token0 + key0 + j, k_col + d) = narrow<S>(dk(j, d));
        d_qkv(token0 + key0 + j, v_col + d) = narrow<S>(dv(j, d));
      }
    });
  }
};

// One team per (batch, head, query tile): accumulates dQ of its queries over the keys they see.
// Each thread owns kR queries. Per key tile: s = q k^T and dp = dO v^T against transposed K and
// V tiles, ds = exp(s - lse) (dp - delta), then dQ += ds K against the row-major K tile.
template <class ExecutionSpace, int HD, class DQkv, class Delta, class DOut, class Qkv, class Lse>
struct AttentionBackwardQueryKernel
    : AttentionHostKernelBase<ExecutionSpace, HD, 6, AttentionBackwardArgs<DQkv, Delta, DOut, Qkv, Lse>> {
  using Base = typename AttentionBackwardQueryKernel::AttentionHostKernelBase;  // scratch: q, dout, dq, k, kt, vt; lse, delta
  using typename Base::S, typename Base::T, typename Base::Member, typename Base::Tile2, typename Base::Tile1;
  using Base::s, Base::d_qkv, Base::delta, Base::d_out, Base::qkv, Base::lse, Base::scale, Base::kTile, Base::kR, Base::kLevel;

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    // (Plain locals, not a structured binding: lambdas may capture those only from C++20 on.)
    auto const t = this->team_tile(team);
    int const bh = t.bh, row0 = t.row0, n_rows = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;

    Tile2 q(team.team_scratch(kLevel), kTile, HD), dout(team.team_scratch(kLevel), kTile, HD);
    Tile2 dq(team.team_scratch(kLevel), kTile, HD), k(team.team_scratch(kLevel), kTile, HD);
    Tile2 kt(team.team_scratch(kLevel), HD, kTile), vt(team.team_scratch(kLevel), HD, kTile);
    Tile1 row_lse(team.team_scratch(kLevel), kTile), row_delta(team.team_scratch(kLevel), kTile);

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](int i) {
      bool const in = i < n_rows;  // rows past the end are zero, computed but never stored
      for (int d = 0; d < HD; ++d) {
        q(i, d) = in ? scale * widen(qkv(token0 + row0 + i, q_col + d)) : T(0);
        dout(i, d) = in ? widen(d_out(token0 + row0 + i, q_col + d)) : T(0);
        dq(i, d) = 0;
      }
      row_lse(i) = in ? lse(bh, row0 + i) : T(0);
      row_delta(i) = in ? delta(bh, row0 + i) : T(0);
    });
    int const key_limit = attention_key_end(row0 + n_rows - 1, s.seq, s.open_prefix);
    for (int key0 = 0; key0 < key_limit; key0 += kTile) {
      int const n_keys = key_limit - key0 < kTile ? key_limit - key0 : kTile;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](int j) {
        bool const in = j < n_keys;  // keys past the end are zero, never used
        for (int d = 0; d < HD; ++d) {
          T const kv = in ? widen(qkv(token0 + key0 + j, k_col + d)) : T(0);
          k(j, d) = kt(d, j) = kv;
          vt(d, j) = in ? widen(qkv(token0 + key0 + j, v_col + d)) : T(0);
        }
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile / kR), [&](int g) {
        int const i0 = g * kR;
        if (i0 >= n_rows) return;
        T ds[kR][kTile], dp[kR][kTile], one[kR];
        int n_valid[kR];
        int const n_used = attention_group_keys<kR>(s, row0 + i0, n_rows - i0, key0, n_keys, n_valid);
        for (int r = 0; r < kR; ++r) one[r] = 1;
        attention_tile_dot<kR, kTile, HD>(q.data() + i0 * HD, kt.data(), ds, 0, n_used);
        attention_tile_dot<kR, kTile, HD>(dout.data() + i0 * HD, vt.data(), dp, 0, n_used);
        for (int r = 0; r < kR; ++r) {
          T const m = row_lse(i0 + r), dl = row_delta(i0 + r);
          for (int j = 0; j < kTile; ++j)
            ds[r][j] = attention_keep(j < n_valid[r], exp_of<ExecutionSpace>(ds[r][j] - m)) * (dp[r][j] - dl);
        }
        attention_tile_axpy<kR, kTile, HD>(ds, n_used, k.data(), dq.data() + i0 * HD, one);
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n_rows), [&](int i) {
      for (int d = 0; d < HD; ++d) d_qkv(token0 + row0 + i, q_col + d) = narrow<S>(scale * dq(i, d));
    });
  }
};

}  // namespace joule::detail
