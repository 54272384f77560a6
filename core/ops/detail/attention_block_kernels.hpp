#pragma once
// The GPU-shaped attention kernels ("block" kernels, 256-thread teams; they run and are tested on
// CPU backends too). attention_common.hpp has the design; attention_kernels.hpp the launches.
#include "core/ops/detail/attention_common.hpp"

namespace joule::detail {

// ---------------------------------------------------------------------------------------------
// GPU-shaped kernels ("block" kernels). One team = one CUDA block of kBlockThreads = 256 threads
// (8 warps), seen as a 16 x 16 grid: tid = 16 ty + tx, so a warp holds two ty values (2w, 2w+1)
// and all 16 tx. Each phase between two team barriers is one TeamThreadRange over the 256 roles;
// on CUDA every thread takes exactly its own role, on a host team (one thread) the roles run one
// after the other, so the same code, in the same summation order, runs and is tested on the CPU.
// No state lives in registers across a barrier: accumulators (O, dK, dV, dQ) and softmax
// statistics stay in team scratch (shared memory), and each phase reads them into registers.
//
// Phases per tile of the other side: (load) K/V (or Q/dO) rows, a flat index over the tile, so
// consecutive threads read consecutive columns of a row (128-byte segments per warp for
// hd >= 32); (A) a register micro-tile of the score products, thread (ty, tx) owns rows
// ty + 16 r and columns tx + 16 c; (B, forward only) the online softmax of the tile's rows;
// (C) the products with V (dO, Q, K) into the accumulators, thread (ty, tx) owns rows ty + 16 r
// and head columns tx + 16 c. Every sum runs in a fixed order (over d, j or i ascending, partial
// maxima and sums over tx / part ascending): the same bits every run.
//
// Shared-memory layout (4-byte words, 32 banks; bank = word index mod 32):
//   tiles read by row in the dot loop of phase A, Q/K/V/dO [rows][hd + 1] (an odd stride):
//     the tx-indexed operand: lanes tx = 0..15 read rows tx + 16c at column d, banks
//     (tx (hd + 1) + d) mod 32, 16 distinct banks (hd + 1 is odd), each word read by the 2 lanes
//     of the same tx (a broadcast); the ty-indexed operand: 2 words per warp (rows ty, ty + 1),
//     banks one apart. Loads write a row's consecutive columns: distinct banks for hd >= 32
//     (hd = 16: a warp stores two rows, one bank taken twice, once per tile).
//   tiles read by column, rows ty + 16 r and columns tx + 16 c (O, dK, dV, dQ and the score
//     tiles P / dS of the backward pass), stride = 16 mod 32 (attention_stride16): lanes of ty
//     = 2w hit banks tx + e, those of 2w + 1 banks 16 + tx + e: 32 distinct. Phase C reads P/dS
//     rows ty, ty + 1 at one column: 2 words, 16 banks apart.
//   the forward's P^T [key][query] and partial maxima [tx][query], stride = 2 mod 32
//     (attention_stride2): phase A writes key tx + 16c, query ty + 16r: banks 2 tx + ty + e, 32
//     distinct; phase B reads 32 consecutive queries of one key: 32 consecutive banks; phase C
//     reads queries ty, ty + 1 of one key: 2 adjacent words.
//   V in phase C: row j, columns tx + 16c: 16 consecutive words, no padding needed.
// (Double uses 2 banks per word; the same patterns are at most 2-way there.)
inline constexpr int kBlockThreads = 256;
inline constexpr int kBlockGrid = 16;  // the thread grid is kBlockGrid x kBlockGrid
// Shared memory (level-0 scratch) per block for a GPU team: what Kokkos' CUDA backend grants a
// team of 256 threads, 48 KiB less its own team buffer (launch_shape.hpp), 47,088 bytes. At up
// to 46 KiB a block, 4 blocks of 8 warps share an SM (228 KB): occupancy up to 50%.
inline constexpr std::size_t kBlockScratchBytes = cuda_team_scratch_limit(kBlockThreads);
KOKKOS_INLINE_FUNCTION constexpr int attention_stride16(int w) { return w + ((16 - w % 32) + 32) % 32; }
KOKKOS_INLINE_FUNCTION constexpr int attention_stride2(int w) { return w + ((2 - w % 32) + 32) % 32; }

// A block kernel's tiles and where they live. Each layout (below) is its staged tiles (the
// team's own rows, the other side's tile, scores, softmax statistics) and its accumulators (O;
// dK and dV; dQ), in elements of T. Shared memory (level 0) holds them all where they fit;
// otherwise the accumulators, read and written once per tile of the other side, go to level-1
// scratch (global memory, L2-resident: float at head size 128 in the dK/dV kernel, double from
// head size 64); where even the staged tiles of 16 x 16 do not fit (double at head size 128, a
// test precision) everything does.
struct AttentionBlockPlan {
  int rows = 16, cols = 16;          // the team's own tile, the tile of the other side it walks
  bool accumulators_global = false;  // the accumulators in level 1
  bool staged_global = false;        // the staged tiles in level 1 too
};
// The pair (rows, cols) in {16, 32, 64}^2 with the most rows x cols whose level-0 scratch fits
// kBlockScratchBytes, the smaller scratch on a tie (more blocks per SM): first with everything in
// shared memory, then with the accumulators in level 1; else 16 x 16 all in level 1.
template <class Layout>
constexpr AttentionBlockPlan attention_block_plan() {
  using T = typename Layout::value_type;
  for (int pass = 0; pass < 2; ++pass) {
    bool const accumulators_global = pass == 1;
    AttentionBlockPlan best{0, 0, accumulators_global, false};
    std::size_t best_bytes = 0;
    for (int r = 64; r >= 16; r /= 2)
      for (int c = 64; c >= 16; c /= 2) {
        std::size_t const b =
            scratch_view_bytes<T>(Layout::staged(r, c) + (accumulators_global ? 0 : Layout::accumulators(r)));
        if (b > kBlockScratchBytes) continue;
        if (r * c > best.rows * best.cols || (r * c == best.rows * best.cols && b < best_bytes)) {
          best = AttentionBlockPlan{r, c, accumulators_global, false};
          best_bytes = b;
        }
      }
    if (best.rows > 0) return best;
  }
  return AttentionBlockPlan{16, 16, true, true};
}

// A block kernel's plan and its scratch per team: level 0 (shared memory) and level 1 (global), as
// asked of Kokkos, and the team's two buffers, staged tiles and accumulators, in their levels.
// (Device code reads only the constants: constexpr functions are host functions to nvcc.)
template <class Layout>
struct AttentionBlockScratch {
  using T = typename Layout::value_type;
  static constexpr AttentionBlockPlan kPlan = attention_block_plan<Layout>();
  static constexpr std::size_t kStaged = Layout::staged(kPlan.rows, kPlan.cols);
  static constexpr std::size_t kAccumulators = Layout::accumulators(kPlan.rows);
  static constexpr int kStagedLevel = kPlan.staged_global ? 1 : 0;
  static constexpr int kAccumulatorLevel = kPlan.accumulators_global ? 1 : 0;
  static constexpr bool kOneBuffer = kStagedLevel == kAccumulatorLevel;
  static constexpr std::size_t kFirstBuffer = kOneBuffer ? kStaged + kAccumulators : kStaged;
  static constexpr std::size_t kLevel0 = (kStagedLevel == 0 ? kStaged : 0) + (kAccumulatorLevel == 0 ? kAccumulators : 0);
  static constexpr std::size_t kLevel1 = kStaged + kAccumulators - kLevel0;
  static_assert(scratch_view_bytes<T>(kLevel0) <= kBlockScratchBytes,
                "a block kernel's shared memory must fit what Kokkos grants a team on CUDA");
  static constexpr std::size_t bytes(int level) {  // elements of the level's View, with its alignment slack
    std::size_t const n = level == 0 ? kLevel0 : kLevel1;
    return n == 0 ? 0 : scratch_view_bytes<T>(n);
  }

  template <class ExecutionSpace, class Member>
  KOKKOS_INLINE_FUNCTION static void buffers(Member const& team, T*& staged, T*& accumulators) {
    // Copies: Kokkos takes the level and the sizes by reference, and nvcc has no device-side
    // definition of a static member bound to one.
    // Level 0 is attention_shared_level's (level 1 on the host).
    int const shared = attention_shared_level<ExecutionSpace>();
    int const staged_level = kStagedLevel == 0 ? shared : 1, accumulator_level = kAccumulatorLevel == 0 ? shared : 1;
    std::size_t const first = kFirstBuffer, second = kAccumulators;
    staged = ScratchVector<T, ExecutionSpace>(team.team_scratch(staged_level), first).data();
    accumulators = kOneBuffer ? staged + kStaged
                              : ScratchVector<T, ExecutionSpace>(team.team_scratch(accumulator_level), second).data();
  }
};

// How many keys of [key0, key0 + n_keys) query `query` sees (0 for padding rows: in = false).
KOKKOS_INLINE_FUNCTION int attention_row_keys(AttentionShape const& s, int query, bool in, int key0,
                                              int n_keys) {
  int const e = in ? attention_key_end(query, s.seq, s.open_prefix) - key0 : 0;
  return e < 0 ? 0 : e < n_keys ? e : n_keys;
}

// The block kernels' shared pieces. Each is called by thread `tid` of a 256-thread team inside a
// TeamThreadRange, so a caller can stage more in the same pass before its barrier.

// Rows [0, Rows) of two HD-wide tiles staged into shared memory: element e = row * HD + d goes to
// thread e % 256, so neighbouring threads read neighbouring columns of one row (coalesced);
// rows at or past n are zero. a(row, d), b(row, d): the elements in global memory.
template <int Rows, int HD, class T, class A, class B>
KOKKOS_INLINE_FUNCTION void attention_stage_pair(int tid, int n, T* tile_a, int ld_a, A const& a, T* tile_b,
                                                 int ld_b, B const& b) {
  for (int e = tid; e < Rows * HD; e += kBlockThreads) {
    int const row = e / HD, d = e % HD;
    bool const in = row < n;
    tile_a[row * ld_a + d] = in ? a(row, d) : T(0);
    tile_b[row * ld_b + d] = in ? b(row, d) : T(0);
  }
}

template <int Rows, int HD, class T, class A>
KOKKOS_INLINE_FUNCTION void attention_stage(int tid, int n, T* tile, int ld, A const& a) {
  for (int e = tid; e < Rows * HD; e += kBlockThreads) {
    int const row = e / HD, d = e % HD;
    tile[row * ld + d] = row < n ? a(row, d) : T(0);
  }
}

// Rows [0, Rows) of an HD-wide shared tile set to zero (an accumulator's start).
template <int Rows, int HD, class T>
KOKKOS_INLINE_FUNCTION void attention_zero_tile(int tid, T* tile, int ld) {
  for (int e = tid; e < Rows * HD; e += kBlockThreads) tile[(e / HD) * ld + e % HD] = 0;
}

// The 16 x 16 thread grid's micro-tiles: thread (ty, tx) owns rows ty + 16 r and columns
// tx + 16 c of a result, so a warp (two values of ty) reads 16 consecutive rows or columns of a
// shared tile at once, spread over the banks by the tiles' odd or padded strides.

// acc[r][c] = sum_{d < HD} a[(ty + 16 r) * ld_a + d] * b[(tx + 16 c) * ld_b + d], d ascending:
// the thread's micro-tile of a product a b^T of two row-major shared tiles.
template <int R, int C, int HD, class T>
KOKKOS_INLINE_FUNCTION void attention_micro_dot(int ty, int tx, T const* a, int ld_a, T const* b, int ld_b,
                                                T (&acc)[R][C]) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = 0;
  for (int d = 0; d < HD; ++d) {
    T ar[R], bc[C];
    for (int r = 0; r < R; ++r) ar[r] = a[(ty + kBlockGrid * r) * ld_a + d];
    for (int c = 0; c < C; ++c) bc[c] = b[(tx + kBlockGrid * c) * ld_b + d];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] += ar[r] * bc[c];
  }
}

// acc[r][c] += sum_{j < n} a(ty + 16 r, j) * b[j * ld_b + tx + 16 c], j ascending, where
// a(row, j) = a[row * a_row + j * a_step] (a_step = 1: row-major, a_row = 1: transposed).
template <int R, int C, class T>
KOKKOS_INLINE_FUNCTION void attention_micro_axpy(int ty, int tx, int n, T const* a, int a_row, int a_step,
                                                 T const* b, int ld_b, T (&acc)[R][C]) {
  for (int j = 0; j < n; ++j) {
    T ar[R], bc[C];
    for (int r = 0; r < R; ++r) ar[r] = a[(ty + kBlockGrid * r) * a_row + j * a_step];
    for (int c = 0; c < C; ++c) bc[c] = b[j * ld_b + tx + kBlockGrid * c];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] += ar[r] * bc[c];
  }
}

// The micro-tile's elements of a row-major shared tile, read and written back.
template <int R, int C, class T>
KOKKOS_INLINE_FUNCTION void attention_micro_load(int ty, int tx, T const* tile, int ld, T (&acc)[R][C]) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = tile[(ty + kBlockGrid * r) * ld + tx + kBlockGrid * c];
}
template <int R, int C, class T>
KOKKOS_INLINE_FUNCTION void attention_micro_store(int ty, int tx, T const (&acc)[R][C], T* tile, int ld) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) tile[(ty + kBlockGrid * r) * ld + tx + kBlockGrid * c] = acc[r][c];
}

// What every block kernel shares: teams of 256 threads (two blocks per SM at least), the scratch
// plan of its tiles (Layout<T, HD>, below), the team's own rows, and the staging of operand rows
// into shared tiles. Args: its operands (AttentionForwardArgs / AttentionBackwardArgs).
template <class ExecutionSpace, int HD, template <class, int> class Layout, class Args>
struct AttentionBlockKernelBase : Args {
  using typename Args::S, typename Args::T;
  using Policy = Kokkos::TeamPolicy<ExecutionSpace, Kokkos::LaunchBounds<kBlockThreads, 2>>;
  using Member = typename Policy::member_type;
  using Tiles = Layout<T, HD>;
  using Scratch = AttentionBlockScratch<Tiles>;
  static constexpr AttentionBlockPlan kPlan = Scratch::kPlan;
  static constexpr int kTile = kPlan.rows;     // the team's own rows, for the launch
  static constexpr int kCD = HD / kBlockGrid;  // head columns per thread in phase C
  static_assert(HD % kBlockGrid == 0, "head columns must split over the threads");
  static constexpr int team_size() { return is_host_space<ExecutionSpace>() ? 1 : kBlockThreads; }
  static constexpr std::size_t scratch_bytes(int level) { return Scratch::bytes(level); }

  KOKKOS_INLINE_FUNCTION AttentionTeamTile team_tile(Member const& team) const {
    return AttentionTeamTile::decode<kTile, HD>(this->s, team.league_rank(), this->tiles);
  }
  // The staging of rows [row0, row0 + n) of the team's head into tiles of Rows rows (zero past
  // n), each a pass of attention_stage(_pair). K and V:
  template <int Rows>
  KOKKOS_INLINE_FUNCTION void stage_keys_values(int tid, AttentionTeamTile const& t, int row0, int n, T* sk, int ldk,
                                                T* sv, int ldv) const {
    attention_stage_pair<Rows, HD>(
        tid, n, sk, ldk, [&](int j, int d) { return widen(this->qkv(t.token0 + row0 + j, t.k_col + d)); }, sv, ldv,
        [&](int j, int d) { return widen(this->qkv(t.token0 + row0 + j, t.v_col + d)); });
  }
  // Q, pre-scaled (d score / d k = scale * q):
  template <int Rows>
  KOKKOS_INLINE_FUNCTION void stage_queries(int tid, AttentionTeamTile const& t, int row0, int n, T* sq,
                                            int ldq) const {
    attention_stage<Rows, HD>(tid, n, sq, ldq, [&](int i, int d) { return this->scale * widen(this->qkv(t.token0 + row0 + i, t.q_col + d)); });
  }
  // Backward: Q (pre-scaled) and dO; and each query's lse and delta (threads tid < Rows).
  template <int Rows>
  KOKKOS_INLINE_FUNCTION void stage_queries_grads(int tid, AttentionTeamTile const& t, int row0, int n, T* sq,
                                                  T* sdo, int ld, T* slse, T* sdel) const {
    attention_stage_pair<Rows, HD>(
        tid, n, sq, ld, [&](int i, int d) { return this->scale * widen(this->qkv(t.token0 + row0 + i, t.q_col + d)); }, sdo, ld,
        [&](int i, int d) { return widen(this->d_out(t.token0 + row0 + i, t.q_col + d)); });
    if (tid < Rows) {
      slse[tid] = tid < n ? this->lse(t.bh, row0 + tid) : T(0);
      sdel[tid] = tid < n ? this->delta(t.bh, row0 + tid) : T(0);
    }
  }
  // Backward: rows [0, n) of a shared tile, times `factor`, into d_qkv's rows from the team's
  // first, at column `col` (a flat index over the rows, coalesced).
  KOKKOS_INLINE_FUNCTION void store_grads(int tid, AttentionTeamTile const& t, int n, int col, T const* tile, int ld,
                                          T factor) const {
    for (int e = tid; e < n * HD; e += kBlockThreads) {
      int const i = e / HD, d = e % HD;
      this->d_qkv(t.token0 + t.row0 + i, col + d) = narrow<S>(factor * tile[i * ld + d]);
    }
  }
};

// Forward, GPU shape: a team owns kQ query rows and walks key tiles of kK keys.
template <class T, int HD>
struct AttentionForwardBlockLayout {
  using value_type = T;
  static constexpr int ldq = HD + 1, ldk = HD + 1, ldv = HD, ldo = attention_stride16(HD);
  // q, k, v, p^t, max parts, sum parts, m[2], l, corr
  static constexpr std::size_t staged(int q, int k) {
    return std::size_t(q) * ldq + std::size_t(k) * ldk + std::size_t(k) * ldv +
           std::size_t(k + kBlockGrid) * attention_stride2(q) + std::size_t(kBlockThreads) + 4 * std::size_t(q);
  }
  static constexpr std::size_t accumulators(int q) { return std::size_t(q) * ldo; }  // o
};

template <class ExecutionSpace, int HD, class Out, class Lse, class Qkv>
struct AttentionForwardBlockKernel
    : AttentionBlockKernelBase<ExecutionSpace, HD, AttentionForwardBlockLayout, AttentionForwardArgs<Out, Lse, Qkv>> {
  using Base = typename AttentionForwardBlockKernel::AttentionBlockKernelBase;
  using typename Base::S, typename Base::T, typename Base::Member, typename Base::Tiles;
  using Base::s, Base::out, Base::lse, Base::kPlan, Base::kCD;
  static constexpr int kQ = kPlan.rows, kK = kPlan.cols;
  static constexpr int kRQ = kQ / kBlockGrid, kCK = kK / kBlockGrid;
  static constexpr int kParts = kBlockThreads / kQ, kKeysPerPart = kK / kParts;  // phase B
  static constexpr int ldq = Tiles::ldq, ldk = Tiles::ldk, ldv = Tiles::ldv, ldo = Tiles::ldo;
  static constexpr int ldp = attention_stride2(kQ);
  static_assert(kK % kParts == 0, "block tiles must split over the threads");

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    auto const t = this->team_tile(team);
    int const bh = t.bh, row0 = t.row0, n_rows = t.n_rows, token0 = t.token0, q_col = t.q_col;
    T *sq, *so;
    Base::Scratch::template buffers<ExecutionSpace>(team, sq, so);
    T* const sk = sq + kQ * ldq;
    T* const sv = sk + kK * ldk;
    T* const spt = sv + kK * ldv;       // P^T [kK][ldp]
    T* const smax = spt + kK * ldp;     // partial row maxima [kBlockGrid][ldp]
    T* const ssum = smax + kBlockGrid * ldp;  // partial row sums [kParts][kQ]
    T* const sm = ssum + kBlockThreads;  // running max, two buffers [2][kQ]
    T* const sl = sm + 2 * kQ;
    T* const scorr = sl + kQ;

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
      this->template stage_queries<kQ>(tid, t, row0, n_rows, sq, ldq);  // rows past the end: zero, never stored
      attention_zero_tile<kQ, HD>(tid, so, ldo);
      if (tid < kQ) {
        sm[tid] = T(-1e30);
        sl[tid] = 0;
      }
    });
    int const key_limit = attention_key_end(row0 + n_rows - 1, s.seq, s.open_prefix);
    int cur = 0;  // which buffer of sm holds the running max
    for (int key0 = 0; key0 < key_limit; key0 += kK, cur ^= 1) {
      int const n_keys = key_limit - key0 < kK ? key_limit - key0 : kK;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        this->template stage_keys_values<kK>(tid, t, key0, n_keys, sk, ldk, sv, ldv);  // past the end: zero, unused
      });
      team.team_barrier();
      // (A) scores of rows ty + 16 r against keys tx + 16 c; partial maxima over those keys.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        int const ty = tid / kBlockGrid, tx = tid % kBlockGrid;
        T acc[kRQ][kCK];
        attention_micro_dot<kRQ, kCK, HD>(ty, tx, sq, ldq, sk, ldk, acc);
        for (int r = 0; r < kRQ; ++r) {
          int const i = ty + kBlockGrid * r;
          int const n_valid = attention_row_keys(s, row0 + i, i < n_rows, key0, n_keys);
          T mx = T(-1e30);
          for (int c = 0; c < kCK; ++c) {
            int const j = tx + kBlockGrid * c;
            mx = (j < n_valid && acc[r][c] > mx) ? acc[r][c] : mx;
            spt[j * ldp + i] = acc[r][c];
          }
          smax[tx * ldp + i] = mx;
        }
      });
      team.team_barrier();
      // (B) online softmax: row i = tid % kQ (a warp: 32 consecutive rows), keys part + kParts k.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        int const i = tid % kQ, part = tid / kQ;
        int const n_valid = attention_row_keys(s, row0 + i, i < n_rows, key0, n_keys);
        T const m_old = sm[cur * kQ + i];
        T mx = m_old;
        for (int x = 0; x < kBlockGrid; ++x) {
          T const v = smax[x * ldp + i];
          mx = v > mx ? v : mx;
        }
        T sum = 0;
        for (int k = 0; k < kKeysPerPart; ++k) {
          int const j = part + kParts * k;
          T const p = attention_keep(j < n_valid, exp_of<ExecutionSpace>(spt[j * ldp + i] - mx));
          spt[j * ldp + i] = p;
          sum += p;
        }
        ssum[part * kQ + i] = sum;
        if (part == 0) {
          sm[(cur ^ 1) * kQ + i] = mx;
          scorr[i] = exp_of<ExecutionSpace>(m_old - mx);
        }
      });
      team.team_barrier();
      // (C) O = O corr + P V for rows ty + 16 r, head columns tx + 16 c; l = l corr + row sum.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        int const ty = tid / kBlockGrid, tx = tid % kBlockGrid;
        T acc[kRQ][kCD];
        attention_micro_load(ty, tx, so, ldo, acc);
        for (int r = 0; r < kRQ; ++r) {
          T const corr = scorr[ty + kBlockGrid * r];
          for (int c = 0; c < kCD; ++c) acc[r][c] *= corr;
        }
        attention_micro_axpy(ty, tx, n_keys, spt, 1, ldp, sv, ldv, acc);  // P^T: row i of P at column i
        attention_micro_store(ty, tx, acc, so, ldo);
        if (tx == 0)
          for (int r = 0; r < kRQ; ++r) {
            int const i = ty + kBlockGrid * r;
            T sum = 0;
            for (int part = 0; part < kParts; ++part) sum += ssum[part * kQ + i];
            sl[i] = sl[i] * scorr[i] + sum;
          }
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
      for (int e = tid; e < n_rows * HD; e += kBlockThreads) {
        int const i = e / HD, d = e % HD;
        T const inv = T(1) / sl[i];
        out(token0 + row0 + i, q_col + d) = narrow<S>(so[i * ldo + d] * inv);
      }
      if (tid < n_rows) lse(bh, row0 + tid) = sm[cur * kQ + tid] + math::log(sl[tid]);
    });
  }
};

// Backward dK/dV, GPU shape: a team owns kK keys and walks query tiles of kQ queries.
template <class T, int HD>
struct AttentionKeyValueBlockLayout {
  using value_type = T;
  static constexpr int ld = HD + 1, lda = attention_stride16(HD);
  // rows: keys of the team, cols: queries of a tile. k, v, q, dout, p, ds, lse, delta
  static constexpr std::size_t staged(int k, int q) {
    return 2 * std::size_t(k) * ld + 2 * std::size_t(q) * ld + 2 * std::size_t(k) * attention_stride16(q) +
           2 * std::size_t(q);
  }
  static constexpr std::size_t accumulators(int k) { return 2 * std::size_t(k) * lda; }  // dk, dv
};

template <class ExecutionSpace, int HD, class DQkv, class Delta, class DOut, class Qkv, class Lse>
struct AttentionBackwardKeyValueBlockKernel
    : AttentionBlockKernelBase<ExecutionSpace, HD, AttentionKeyValueBlockLayout,
                               AttentionBackwardArgs<DQkv, Delta, DOut, Qkv, Lse>> {
  using Base = typename AttentionBackwardKeyValueBlockKernel::AttentionBlockKernelBase;
  using typename Base::T, typename Base::Member, typename Base::Tiles;
  using Base::s, Base::kPlan, Base::kCD;
  static constexpr int kK = kPlan.rows, kQ = kPlan.cols;
  static constexpr int kRK = kK / kBlockGrid, kCQ = kQ / kBlockGrid;
  static constexpr int ld = Tiles::ld, lda = Tiles::lda, ldp = attention_stride16(kQ);

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    auto const t = this->team_tile(team);
    int const key0 = t.row0, n_keys = t.n_rows;
    T *sk, *sdk;
    Base::Scratch::template buffers<ExecutionSpace>(team, sk, sdk);
    T* const sdv = sdk + kK * lda;
    T* const sv = sk + kK * ld;
    T* const sq = sv + kK * ld;
    T* const sdo = sq + kQ * ld;
    T* const sp = sdo + kQ * ld;  // [kK][ldp]
    T* const sds = sp + kK * ldp;
    T* const slse = sds + kK * ldp;
    T* const sdel = slse + kQ;

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
      // Keys past the end are zero, computed, never stored.
      this->template stage_keys_values<kK>(tid, t, key0, n_keys, sk, ld, sv, ld);
      attention_zero_tile<kK, HD>(tid, sdk, lda);
      attention_zero_tile<kK, HD>(tid, sdv, lda);
    });
    for (int query0 = attention_query_begin(key0, s.open_prefix); query0 < s.seq; query0 += kQ) {
      int const n_queries = s.seq - query0 < kQ ? s.seq - query0 : kQ;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        // Rows past the end are zero, never used.
        this->template stage_queries_grads<kQ>(tid, t, query0, n_queries, sq, sdo, ld, slse, sdel);
      });
      team.team_barrier();
      // (A) s = k q^T, dp = v dO^T for keys ty + 16 r, queries tx + 16 c; p and ds.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        int const ty = tid / kBlockGrid, tx = tid % kBlockGrid;
        T sc[kRK][kCQ], dp[kRK][kCQ];
        attention_micro_dot<kRK, kCQ, HD>(ty, tx, sk, ld, sq, ld, sc);
        attention_micro_dot<kRK, kCQ, HD>(ty, tx, sv, ld, sdo, ld, dp);
        for (int r = 0; r < kRK; ++r) {
          int const j = ty + kBlockGrid * r;
          for (int c = 0; c < kCQ; ++c) {
            int const i = tx + kBlockGrid * c;
            bool const keep = j < n_keys && i < n_queries &&
                              key0 + j < attention_key_end(query0 + i, s.seq, s.open_prefix);
            T const p = attention_keep(keep, exp_of<ExecutionSpace>(sc[r][c] - slse[i]));
            sp[j * ldp + i] = p;
            sds[j * ldp + i] = p * (dp[r][c] - sdel[i]);
          }
        }
      });
      team.team_barrier();
      // (C) dV += p dO, dK += ds q for keys ty + 16 r, head columns tx + 16 c.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        int const ty = tid / kBlockGrid, tx = tid % kBlockGrid;
        T acc[kRK][kCD];
        attention_micro_load(ty, tx, sdv, lda, acc);
        attention_micro_axpy(ty, tx, n_queries, sp, ldp, 1, sdo, ld, acc);
        attention_micro_store(ty, tx, acc, sdv, lda);
        attention_micro_load(ty, tx, sdk, lda, acc);
        attention_micro_axpy(ty, tx, n_queries, sds, ldp, 1, sq, ld, acc);
        attention_micro_store(ty, tx, acc, sdk, lda);
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
      this->store_grads(tid, t, n_keys, t.k_col, sdk, lda, T(1));
      this->store_grads(tid, t, n_keys, t.v_col, sdv, lda, T(1));
    });
  }
};

// Backward dQ, GPU shape: a team owns kQ queries and walks key tiles of kK keys.
template <class T, int HD>
struct AttentionQueryBlockLayout {
  using value_type = T;
  static constexpr int ld = HD + 1, lda = attention_stride16(HD);
  // rows: queries of the team, cols: keys of a tile. q, dout, k, v, ds, lse, delta
  static constexpr std::size_t staged(int q, int k) {
    return 2 * std::size_t(q) * ld + 2 * std::size_t(k) * ld + std::size_t(q) * attention_stride16(k) +
           2 * std::size_t(q);
  }
  static constexpr std::size_t accumulators(int q) { return std::size_t(q) * lda; }  // dq
};

template <class ExecutionSpace, int HD, class DQkv, class Delta, class DOut, class Qkv, class Lse>
struct AttentionBackwardQueryBlockKernel
    : AttentionBlockKernelBase<ExecutionSpace, HD, AttentionQueryBlockLayout,
                               AttentionBackwardArgs<DQkv, Delta, DOut, Qkv, Lse>> {
  using Base = typename AttentionBackwardQueryBlockKernel::AttentionBlockKernelBase;
  using typename Base::T, typename Base::Member, typename Base::Tiles;
  using Base::s, Base::kPlan, Base::kCD;
  static constexpr int kQ = kPlan.rows, kK = kPlan.cols;
  static constexpr int kRQ = kQ / kBlockGrid, kCK = kK / kBlockGrid;
  static constexpr int ld = Tiles::ld, lda = Tiles::lda, lds = attention_stride16(kK);

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    auto const t = this->team_tile(team);
    int const row0 = t.row0, n_rows = t.n_rows;
    T *sq, *sdq;
    Base::Scratch::template buffers<ExecutionSpace>(team, sq, sdq);
    T* const sdo = sq + kQ * ld;
    T* const sk = sdo + kQ * ld;
    T* const sv = sk + kK * ld;
    T* const sds = sv + kK * ld;  // [kQ][lds]
    T* const slse = sds + kQ * lds;
    T* const sdel = slse + kQ;

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
      // Rows past the end are zero, computed, never stored.
      this->template stage_queries_grads<kQ>(tid, t, row0, n_rows, sq, sdo, ld, slse, sdel);
      attention_zero_tile<kQ, HD>(tid, sdq, lda);
    });
    int const key_limit = attention_key_end(row0 + n_rows - 1, s.seq, s.open_prefix);
    for (int key0 = 0; key0 < key_limit; key0 += kK) {
      int const n_keys = key_limit - key0 < kK ? key_limit - key0 : kK;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        this->template stage_keys_values<kK>(tid, t, key0, n_keys, sk, ld, sv, ld);  // past the end: zero, unused
      });
      team.team_barrier();
      // (A) s = q k^T, dp = dO v^T for queries ty + 16 r, keys tx + 16 c; ds.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        int const ty = tid / kBlockGrid, tx = tid % kBlockGrid;
        T sc[kRQ][kCK], dp[kRQ][kCK];
        attention_micro_dot<kRQ, kCK, HD>(ty, tx, sq, ld, sk, ld, sc);
        attention_micro_dot<kRQ, kCK, HD>(ty, tx, sdo, ld, sv, ld, dp);
        for (int r = 0; r < kRQ; ++r) {
          int const i = ty + kBlockGrid * r;
          int const n_valid = attention_row_keys(s, row0 + i, i < n_rows, key0, n_keys);
          for (int c = 0; c < kCK; ++c) {
            int const j = tx + kBlockGrid * c;
            sds[i * lds + j] = attention_keep(j < n_valid, exp_of<ExecutionSpace>(sc[r][c] - slse[i])) *
                               (dp[r][c] - sdel[i]);
          }
        }
      });
      team.team_barrier();
      // (C) dQ += ds k for queries ty + 16 r, head columns tx + 16 c.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        int const ty = tid / kBlockGrid, tx = tid % kBlockGrid;
        T acc[kRQ][kCD];
        attention_micro_load(ty, tx, sdq, lda, acc);
        attention_micro_axpy(ty, tx, n_keys, sds, lds, 1, sk, ld, acc);
        attention_micro_store(ty, tx, acc, sdq, lda);
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
      this->store_grads(tid, t, n_rows, t.q_col, sdq, lda, this->scale);  // d score / d q = scale * k
    });
  }
};

}  // namespace joule::detail
