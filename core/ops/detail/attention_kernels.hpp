#pragma once
// Kernels behind joule::attention_forward / attention_backward (see core/ops/attention.hpp).
//
// Precision: Q, K, V, O and their gradients may be stored in bf16 (or float, double); scores,
// softmax, scratch tiles and accumulators are in the compute type (compute_t: float for bf16),
// every element widened as it is staged and rounded once as it is stored; lse and delta are
// stored in the compute type.
//
// Work decomposition: one team per (batch, head, tile of rows). A tile's K/V (or Q/dO) rows are
// staged in team scratch and reused by every row of the other side. Two shapes of the same
// algorithm (launch_attention_forward / _backward pick by backend, Block = !host):
//   host kernels (CPUs): a team is one thread that walks its tile in groups of kR = 4 rows
//     (scratch is an L2-resident cache block, up to 160 KiB, so tiles are 64 rows). Tile sizes
//     are compile-time, from the head size, the scalar size and the scratch budget, so
//     per-thread arrays have static bounds. (On a GPU this shape would be one thread per row,
//     kR = 1, in <= 32 KiB: slow, kept only as the host shape.)
//   block kernels (GPUs, "GPU-shaped kernels" below): a team is a 256-thread block, tiles of
//     16-64 rows within the 48 KiB of shared memory Kokkos grants a CUDA team (launch_shape.hpp),
//     register micro-tiles per thread, padded conflict-free shared tiles; they run on host
//     backends too (the tests do).
//
// Host kernels: dot products against a tile are register-blocked micro-tiles (kR rows x a chunk
// of columns of accumulators, attention_tile_dot / attention_tile_axpy): the inner loop runs
// over a contiguous dimension with independent accumulators, so CPU compilers vectorise it
// without reassociating a reduction (no -ffast-math), and each result is summed in the same
// order on every run. Masks cost nothing outside the diagonal tiles: key (query) ranges stop at
// the tile's last visible key, and column chunks no row of a group sees are skipped.
#include "core/detail/launch_shape.hpp"
#include "core/detail/row_kernels.hpp"
#include "core/detail/vector_math.hpp"
#include "core/precision/bf16.hpp"
#include "core/tensor.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace joule::detail {

struct AttentionShape {
  int batch = 0, seq = 0, heads = 0, channels = 0, head_dim = 0;
  int open_prefix = 0;  // query i sees keys [0, min(seq, max(i + 1, open_prefix)))
};

KOKKOS_INLINE_FUNCTION int attention_key_end(int query, int seq, int open_prefix) {
  int const e = query + 1 > open_prefix ? query + 1 : open_prefix;
  return e < seq ? e : seq;
}
// The (query, key) pairs the mask lets through, over every batch and head: the products an
// attention kernel that skips masked keys computes, and the model's own FLOPs (kernel_work.hpp).
inline double attention_visible_pairs(AttentionShape const& s) {
  double per_head = 0;
  for (int i = 0; i < s.seq; ++i) per_head += attention_key_end(i, s.seq, s.open_prefix);
  return per_head * s.batch * s.heads;
}
// The model's FLOPs of attention per visible pair and head dimension: forward q k^T and p v (2
// products), backward 5 (the scores again, dp, dv, dq, dk), 2 FLOPs each.
inline constexpr double kAttentionForwardFlopsPerPair = 4, kAttentionBackwardFlopsPerPair = 10;

// What a fused attention kernel (no S x S matrix in memory) must move at least: `read` and
// `written` [B*S, C]-sized operands of `bytes` each, plus fp32 statistics per (head, query).
inline KernelWork fused_attention_work(AttentionShape const& s, double flops_per_pair, double model_flops_per_pair,
                                       int bytes, int read, int written, int stats) {
  KernelWork w;
  w.kind = WorkKind::attention;
  double const pairs = attention_visible_pairs(s), rows = double(s.batch) * s.seq;
  w.flops = pairs * s.head_dim * flops_per_pair;
  w.model_flops = pairs * s.head_dim * model_flops_per_pair;
  w.bytes = rows * s.channels * bytes * (read + written) + rows * s.heads * 4.0 * stats;
  w.bytes_in_flight = 16;
  return w;
}
// First query that sees key j (every query from there on sees it too).
KOKKOS_INLINE_FUNCTION int attention_query_begin(int key, int open_prefix) {
  return key < open_prefix ? 0 : key;
}

// For a group of kR query rows starting at `query0` (`rows_left` of them exist) and the key tile
// [key0, key0 + n_keys): how many of the tile's keys each row sees (n_valid), and the most any
// row of the group sees (returned; the products stop there).
template <int kR>
KOKKOS_INLINE_FUNCTION int attention_group_keys(AttentionShape const& s, int query0, int rows_left,
                                                int key0, int n_keys, int (&n_valid)[kR]) {
  int n_used = 0;
  for (int r = 0; r < kR; ++r) {
    int const end = r < rows_left ? attention_key_end(query0 + r, s.seq, s.open_prefix) - key0 : 0;
    n_valid[r] = end < 0 ? 0 : end < n_keys ? end : n_keys;
    n_used = n_valid[r] > n_used ? n_valid[r] : n_used;
  }
  return n_used;
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

// Rows per tile so that `NTiles` tiles of [tile, HD] scalars fit in `Bytes`, between 4 and 64.
template <class T, int HD, int NTiles, std::size_t Bytes = 32768>
constexpr int attention_tile() {
  int t = 64;
  while (t > 4 && std::size_t(NTiles) * t * HD * sizeof(T) > Bytes) t /= 2;
  return t;
}

// Team scratch per kernel: GPUs keep it within 32 KiB of shared memory; on CPUs scratch is
// ordinary memory that stays in L2 (a team is one thread), and larger tiles load each K/V (or
// Q/dO) tile fewer times, so the budget there is 160 KiB (64-row tiles up to hd = 64).
template <class ExecutionSpace>
constexpr std::size_t attention_scratch_budget() {
  return is_host_space<ExecutionSpace>() ? 163840 : 32768;
}

template <class T, class ExecutionSpace>
using ScratchMatrix = Kokkos::View<T**, Kokkos::LayoutRight,
                                   typename ExecutionSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T, class ExecutionSpace>
using ScratchVector = Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Rows of a tile that one thread owns: on CPUs a team is one thread, and a block of 4 rows lets
// every key (or query) row loaded from the tile serve 4 dot products from registers; on GPUs a
// thread owns one row (a team has one thread per row).
template <class ExecutionSpace>
constexpr int attention_rows_per_thread() {
  return is_host_space<ExecutionSpace>() ? 4 : 1;
}

// keep ? x : 0, written so that a loop over a score row vectorises on CPUs without
// -ffast-math: GCC (with the default -ftrapping-math) may not if-convert a float select, so on
// the host the bit pattern is masked as an integer. (exp: exp_of, vector_math.hpp.) Double, and
// every device, use a plain select.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || defined(__SYCL_DEVICE_ONLY__)
#define JOULE_ATTENTION_DEVICE_PASS 1
#else
#define JOULE_ATTENTION_DEVICE_PASS 0
#endif

template <class T>
KOKKOS_INLINE_FUNCTION T attention_keep(bool keep, T x) {
#if JOULE_ATTENTION_DEVICE_PASS
  return keep ? x : T(0);
#else
  if constexpr (!std::is_same_v<T, float>) {
    return keep ? x : T(0);
  } else {
    std::int32_t b;
    std::memcpy(&b, &x, sizeof b);
    b &= -std::int32_t(keep);
    std::memcpy(&x, &b, sizeof x);
    return x;
  }
#endif
}

// Keeps GCC from unrolling the innermost loop of a micro-tile before vectorising it: unrolled,
// the loop over the head dimension becomes the innermost one and is vectorised (strided, with
// shuffles) instead of the contiguous loop over columns. Only where GCC compiles host code.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && !defined(__INTEL_LLVM_COMPILER)
#define JOULE_ATTENTION_VECTOR_LOOP _Pragma("GCC unroll 0")
#else
#define JOULE_ATTENTION_VECTOR_LOOP
#endif

// Chunk of a micro-tile's columns kept in registers, per row: two vectors of the host's SIMD
// width where it has 256-bit or wider vectors (16 floats: 4 rows x 16 = 8 AVX registers or 4
// AVX-512 ones), else two SSE/NEON vectors (8 floats); fewer when the tile is narrower. Each
// result still sums over the head dimension in order: the chunk changes no result of a product.
#if defined(__AVX2__) || defined(__AVX512F__)
inline constexpr int kAttentionChunkBytes = 64;
#else
inline constexpr int kAttentionChunkBytes = 32;
#endif
template <class T, int N>
KOKKOS_INLINE_FUNCTION constexpr int attention_chunk() {
  int const c = kAttentionChunkBytes / int(sizeof(T));
  return N < c ? N : c;
}

// s[r][j] = sum_d a[r*HD + d] * bt[d*N + j] for R rows of a (row-major, HD columns) against a
// transposed tile bt [HD, N]. Register-blocked: R x C accumulators, independent along j, so
// the inner loop vectorises without reassociating any sum (no -ffast-math needed). Only chunks
// of C columns that meet [j_begin, j_end) are computed; the others are set to 0 (masked tiles).
template <int R, int N, int HD, class T>
KOKKOS_INLINE_FUNCTION void attention_tile_dot(T const* a, T const* bt, T (&s)[R][N],
                                               int j_begin = 0, int j_end = N) {
  constexpr int C = attention_chunk<T, N>();
  static_assert(N % C == 0, "tile width must be a multiple of the register chunk");
  for (int j0 = 0; j0 < N; j0 += C) {
    T acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < C; ++j) acc[r][j] = 0;
    if (j0 + C > j_begin && j0 < j_end) {
      for (int d = 0; d < HD; ++d) {
        T const* b = bt + d * N + j0;
        for (int r = 0; r < R; ++r) {
          T const ar = a[r * HD + d];
          JOULE_ATTENTION_VECTOR_LOOP
          for (int j = 0; j < C; ++j) acc[r][j] += ar * b[j];
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < C; ++j) s[r][j0 + j] = acc[r][j];
  }
}

// o[r*HD + d] = o[r*HD + d] * scale[r] + sum_{j0 <= j < n} p[r][j] * b[j*HD + d] for R rows
// of o (row-major, HD columns) and a row-major tile b [N, HD]; R x C accumulators as above.
template <int R, int N, int HD, class T>
KOKKOS_INLINE_FUNCTION void attention_tile_axpy_from(T const (&p)[R][N], int j_begin, int n,
                                                     T const* b, T* o, T const (&scale)[R]) {
  constexpr int C = attention_chunk<T, HD>();
  for (int d0 = 0; d0 < HD; d0 += C) {
    T acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int d = 0; d < C; ++d) acc[r][d] = o[r * HD + d0 + d] * scale[r];
    for (int j = j_begin; j < n; ++j) {
      T const* bj = b + j * HD + d0;
      for (int r = 0; r < R; ++r) {
        T const pr = p[r][j];
        JOULE_ATTENTION_VECTOR_LOOP
        for (int d = 0; d < C; ++d) acc[r][d] += pr * bj[d];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int d = 0; d < C; ++d) o[r * HD + d0 + d] = acc[r][d];
  }
}
template <int R, int N, int HD, class T>
KOKKOS_INLINE_FUNCTION void attention_tile_axpy(T const (&p)[R][N], int n, T const* b, T* o,
                                                T const (&scale)[R]) {
  attention_tile_axpy_from<R, N, HD>(p, 0, n, b, o, scale);
}

// Max and sum over a row in a fixed order of C partial lanes (vectorisable, same bits on every
// run); entries at j >= n are left out of the max.
template <int N, class T>
KOKKOS_INLINE_FUNCTION T attention_row_max(T const (&s)[N], int n, T init) {
  constexpr int C = attention_chunk<T, N>();
  T part[C];
  for (int c = 0; c < C; ++c) part[c] = init;
  for (int j0 = 0; j0 < N; j0 += C)
    for (int c = 0; c < C; ++c) {
      T const x = s[j0 + c];
      part[c] = (j0 + c < n && x > part[c]) ? x : part[c];
    }
  T m = part[0];
  for (int c = 1; c < C; ++c) m = part[c] > m ? part[c] : m;
  return m;
}
template <int N, class T>
KOKKOS_INLINE_FUNCTION T attention_row_sum(T const (&s)[N]) {
  constexpr int C = attention_chunk<T, N>();
  T part[C];
  for (int c = 0; c < C; ++c) part[c] = 0;
  for (int j0 = 0; j0 < N; j0 += C)
    for (int c = 0; c < C; ++c) part[c] += s[j0 + c];
  T sum = 0;
  for (int c = 0; c < C; ++c) sum += part[c];
  return sum;
}

// Forward: one team per (batch, head, tile of kTile query rows); each thread owns kR rows and
// walks the key tiles (K transposed and V staged in scratch) with an online softmax.
template <class ExecutionSpace, int HD, class Out, class Lse, class Qkv>
struct AttentionForwardKernel {
  using S = typename Out::non_const_value_type;  // storage (bf16, float, double)
  using T = compute_t<S>;                         // arithmetic and scratch tiles
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Member = typename Policy::member_type;
  using Tile2 = ScratchMatrix<T, ExecutionSpace>;
  using Tile1 = ScratchVector<T, ExecutionSpace>;
  static constexpr int kTile = attention_tile<T, HD, 4, attention_scratch_budget<ExecutionSpace>()>();
  static constexpr int kR = attention_rows_per_thread<ExecutionSpace>();
  static_assert(kTile % kR == 0, "tile rows must split evenly over threads");
  // GPUs: one thread per kR rows; CPUs: a team is one thread that walks the tile.
  static constexpr int team_size() { return is_host_space<ExecutionSpace>() ? 1 : kTile / kR; }

  AttentionShape s;
  Out out;
  Lse lse;
  Qkv qkv;
  T scale;
  int row_tiles;

  static std::size_t scratch_bytes(int level) {  // q, o, kt, v; m, l
    return level == 0 ? 4 * Tile2::shmem_size(kTile, HD) + 2 * Tile1::shmem_size(kTile) : 0;
  }

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    // (Plain locals, not a structured binding: lambdas may capture those only from C++20 on.)
    auto const t = AttentionTeamTile::decode<kTile, HD>(s, team.league_rank(), row_tiles);
    int const bh = t.bh, row0 = t.row0, n_rows = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;

    Tile2 q(team.team_scratch(0), kTile, HD), o(team.team_scratch(0), kTile, HD);
    Tile2 kt(team.team_scratch(0), HD, kTile), v(team.team_scratch(0), kTile, HD);
    Tile1 m(team.team_scratch(0), kTile), l(team.team_scratch(0), kTile);

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
    int const staged_level = kStagedLevel, accumulator_level = kAccumulatorLevel;
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
struct AttentionForwardBlockKernel {
  using S = typename Out::non_const_value_type;  // storage (bf16, float, double)
  using T = compute_t<S>;                         // arithmetic and scratch tiles
  using Policy = Kokkos::TeamPolicy<ExecutionSpace, Kokkos::LaunchBounds<kBlockThreads, 2>>;
  using Member = typename Policy::member_type;
  using Layout = AttentionForwardBlockLayout<T, HD>;
  using Scratch = AttentionBlockScratch<Layout>;
  static constexpr AttentionBlockPlan kPlan = Scratch::kPlan;
  static constexpr int kQ = kPlan.rows, kK = kPlan.cols;
  static constexpr int kTile = kQ;  // rows per team, for the launch
  static constexpr int kRQ = kQ / kBlockGrid, kCK = kK / kBlockGrid, kCD = HD / kBlockGrid;
  static constexpr int kParts = kBlockThreads / kQ, kKeysPerPart = kK / kParts;  // phase B
  static constexpr int ldq = Layout::ldq, ldk = Layout::ldk, ldv = Layout::ldv, ldo = Layout::ldo;
  static constexpr int ldp = attention_stride2(kQ);
  static_assert(kK % kParts == 0 && HD % kBlockGrid == 0, "block tiles must split over the threads");
  static constexpr int team_size() { return is_host_space<ExecutionSpace>() ? 1 : kBlockThreads; }

  AttentionShape s;
  Out out;
  Lse lse;
  Qkv qkv;
  T scale;
  int row_tiles;

  static constexpr std::size_t scratch_bytes(int level) { return Scratch::bytes(level); }

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    auto const t = AttentionTeamTile::decode<kQ, HD>(s, team.league_rank(), row_tiles);
    int const bh = t.bh, row0 = t.row0, n_rows = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;
    T *sq, *so;
    Scratch::template buffers<ExecutionSpace>(team, sq, so);
    T* const sk = sq + kQ * ldq;
    T* const sv = sk + kK * ldk;
    T* const spt = sv + kK * ldv;       // P^T [kK][ldp]
    T* const smax = spt + kK * ldp;     // partial row maxima [kBlockGrid][ldp]
    T* const ssum = smax + kBlockGrid * ldp;  // partial row sums [kParts][kQ]
    T* const sm = ssum + kBlockThreads;  // running max, two buffers [2][kQ]
    T* const sl = sm + 2 * kQ;
    T* const scorr = sl + kQ;

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
      // Rows past the end are zero, computed, never stored.
      attention_stage<kQ, HD>(tid, n_rows, sq, ldq, [&](int i, int d) { return scale * widen(qkv(token0 + row0 + i, q_col + d)); });
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
        attention_stage_pair<kK, HD>(  // keys past the end are zero, never used
            tid, n_keys, sk, ldk, [&](int j, int d) { return widen(qkv(token0 + key0 + j, k_col + d)); }, sv, ldv,
            [&](int j, int d) { return widen(qkv(token0 + key0 + j, v_col + d)); });
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
struct AttentionBackwardKeyValueBlockKernel {
  using S = typename DQkv::non_const_value_type;  // storage (bf16, float, double)
  using T = compute_t<S>;                          // arithmetic and scratch tiles
  using Policy = Kokkos::TeamPolicy<ExecutionSpace, Kokkos::LaunchBounds<kBlockThreads, 2>>;
  using Member = typename Policy::member_type;
  using Layout = AttentionKeyValueBlockLayout<T, HD>;
  using Scratch = AttentionBlockScratch<Layout>;
  static constexpr AttentionBlockPlan kPlan = Scratch::kPlan;
  static constexpr int kK = kPlan.rows, kQ = kPlan.cols;
  static constexpr int kTile = kK;
  static constexpr int kRK = kK / kBlockGrid, kCQ = kQ / kBlockGrid, kCD = HD / kBlockGrid;
  static constexpr int ld = Layout::ld, lda = Layout::lda, ldp = attention_stride16(kQ);
  static_assert(HD % kBlockGrid == 0, "head columns must split over the threads");
  static constexpr int team_size() { return is_host_space<ExecutionSpace>() ? 1 : kBlockThreads; }

  AttentionShape s;
  DQkv d_qkv;
  Delta delta;
  DOut d_out;
  Qkv qkv;
  Lse lse;
  T scale;
  int key_tiles;

  static constexpr std::size_t scratch_bytes(int level) { return Scratch::bytes(level); }

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    auto const t = AttentionTeamTile::decode<kK, HD>(s, team.league_rank(), key_tiles);
    int const bh = t.bh, key0 = t.row0, n_keys = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;
    T *sk, *sdk;
    Scratch::template buffers<ExecutionSpace>(team, sk, sdk);
    T* const sdv = sdk + kK * lda;
    T* const sv = sk + kK * ld;
    T* const sq = sv + kK * ld;
    T* const sdo = sq + kQ * ld;
    T* const sp = sdo + kQ * ld;  // [kK][ldp]
    T* const sds = sp + kK * ldp;
    T* const slse = sds + kK * ldp;
    T* const sdel = slse + kQ;

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
      attention_stage_pair<kK, HD>(  // keys past the end are zero, computed, never stored
          tid, n_keys, sk, ld, [&](int j, int d) { return widen(qkv(token0 + key0 + j, k_col + d)); }, sv, ld,
          [&](int j, int d) { return widen(qkv(token0 + key0 + j, v_col + d)); });
      attention_zero_tile<kK, HD>(tid, sdk, lda);
      attention_zero_tile<kK, HD>(tid, sdv, lda);
    });
    for (int query0 = attention_query_begin(key0, s.open_prefix); query0 < s.seq; query0 += kQ) {
      int const n_queries = s.seq - query0 < kQ ? s.seq - query0 : kQ;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        attention_stage_pair<kQ, HD>(  // rows past the end are zero, never used; q pre-scaled
            tid, n_queries, sq, ld, [&](int i, int d) { return scale * widen(qkv(token0 + query0 + i, q_col + d)); },
            sdo, ld, [&](int i, int d) { return widen(d_out(token0 + query0 + i, q_col + d)); });
        if (tid < kQ) {
          slse[tid] = tid < n_queries ? lse(bh, query0 + tid) : T(0);
          sdel[tid] = tid < n_queries ? delta(bh, query0 + tid) : T(0);
        }
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
      for (int e = tid; e < n_keys * HD; e += kBlockThreads) {
        int const j = e / HD, d = e % HD;
        d_qkv(token0 + key0 + j, k_col + d) = narrow<S>(sdk[j * lda + d]);
        d_qkv(token0 + key0 + j, v_col + d) = narrow<S>(sdv[j * lda + d]);
      }
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
struct AttentionBackwardQueryBlockKernel {
  using S = typename DQkv::non_const_value_type;  // storage (bf16, float, double)
  using T = compute_t<S>;                          // arithmetic and scratch tiles
  using Policy = Kokkos::TeamPolicy<ExecutionSpace, Kokkos::LaunchBounds<kBlockThreads, 2>>;
  using Member = typename Policy::member_type;
  using Layout = AttentionQueryBlockLayout<T, HD>;
  using Scratch = AttentionBlockScratch<Layout>;
  static constexpr AttentionBlockPlan kPlan = Scratch::kPlan;
  static constexpr int kQ = kPlan.rows, kK = kPlan.cols;
  static constexpr int kTile = kQ;
  static constexpr int kRQ = kQ / kBlockGrid, kCK = kK / kBlockGrid, kCD = HD / kBlockGrid;
  static constexpr int ld = Layout::ld, lda = Layout::lda, lds = attention_stride16(kK);
  static_assert(HD % kBlockGrid == 0, "head columns must split over the threads");
  static constexpr int team_size() { return is_host_space<ExecutionSpace>() ? 1 : kBlockThreads; }

  AttentionShape s;
  DQkv d_qkv;
  Delta delta;
  DOut d_out;
  Qkv qkv;
  Lse lse;
  T scale;
  int row_tiles;

  static constexpr std::size_t scratch_bytes(int level) { return Scratch::bytes(level); }

  KOKKOS_FUNCTION void operator()(Member const& team) const {
    auto const t = AttentionTeamTile::decode<kQ, HD>(s, team.league_rank(), row_tiles);
    int const bh = t.bh, row0 = t.row0, n_rows = t.n_rows, token0 = t.token0;
    int const q_col = t.q_col, k_col = t.k_col, v_col = t.v_col;
    T *sq, *sdq;
    Scratch::template buffers<ExecutionSpace>(team, sq, sdq);
    T* const sdo = sq + kQ * ld;
    T* const sk = sdo + kQ * ld;
    T* const sv = sk + kK * ld;
    T* const sds = sv + kK * ld;  // [kQ][lds]
    T* const slse = sds + kQ * lds;
    T* const sdel = slse + kQ;

    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
      attention_stage_pair<kQ, HD>(  // rows past the end are zero, computed, never stored
          tid, n_rows, sq, ld, [&](int i, int d) { return scale * widen(qkv(token0 + row0 + i, q_col + d)); }, sdo, ld,
          [&](int i, int d) { return widen(d_out(token0 + row0 + i, q_col + d)); });
      attention_zero_tile<kQ, HD>(tid, sdq, lda);
      if (tid < kQ) {
        slse[tid] = tid < n_rows ? lse(bh, row0 + tid) : T(0);
        sdel[tid] = tid < n_rows ? delta(bh, row0 + tid) : T(0);
      }
    });
    int const key_limit = attention_key_end(row0 + n_rows - 1, s.seq, s.open_prefix);
    for (int key0 = 0; key0 < key_limit; key0 += kK) {
      int const n_keys = key_limit - key0 < kK ? key_limit - key0 : kK;
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kBlockThreads), [&](int tid) {
        attention_stage_pair<kK, HD>(  // keys past the end are zero, never used
            tid, n_keys, sk, ld, [&](int j, int d) { return widen(qkv(token0 + key0 + j, k_col + d)); }, sv, ld,
            [&](int j, int d) { return widen(qkv(token0 + key0 + j, v_col + d)); });
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
      for (int e = tid; e < n_rows * HD; e += kBlockThreads) {
        int const i = e / HD, d = e % HD;
        d_qkv(token0 + row0 + i, q_col + d) = narrow<S>(scale * sdq[i * lda + d]);
      }
    });
  }
};

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

// One team per (batch, head, key tile): accumulates dK and dV of its keys over all queries.
// Each thread owns kR keys. Per query tile: s = k q^T and dp = v dO^T against transposed Q and
// dO tiles, p = exp(s - lse), ds = p (dp - delta), then dV += p dO and dK += ds Q against the
// row-major tiles (register-blocked micro-tiles, see attention_tile_dot / attention_tile_axpy).
template <class ExecutionSpace, int HD, class DQkv, class Delta, class DOut, class Qkv, class Lse>
struct AttentionBackwardKeyValueKernel {
  using S = typename DQkv::non_const_value_type;  // storage (bf16, float, double)
  using T = compute_t<S>;                          // arithmetic and scratch tiles
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Member = typename Policy::member_type;
  using Tile2 = ScratchMatrix<T, ExecutionSpace>;
  using Tile1 = ScratchVector<T, ExecutionSpace>;
  static constexpr int kTile = attention_tile<T, HD, 8, attention_scratch_budget<ExecutionSpace>()>();
  static constexpr int kR = attention_rows_per_thread<ExecutionSpace>();
  static_assert(kTile % kR == 0, "tile rows must split evenly over threads");
  static constexpr int team_size() { return is_host_space<ExecutionSpace>() ? 1 : kTile / kR; }

  AttentionShape s;
  DQkv d_qkv;
  Delta delta;
  DOut d_out;
  Qkv qkv;
  Lse lse;
  T scale;
  int key_tiles;

  static std::size_t scratch_bytes(int level) {  // k, v, dk, dv, q, qt, dout, doutt; lse, delta
    return level == 0 ? 8 * Tile2::shmem_size(kTile, HD) + 2 * Tile1::shmem_size(kTile) : 0;
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
struct AttentionBackwardQueryKernel {
  using S = typename DQkv::non_const_value_type;  // storage (bf16, float, double)
  using T = compute_t<S>;                          // arithmetic and scratch tiles
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Member = typename Policy::member_type;
  using Tile2 = ScratchMatrix<T, ExecutionSpace>;
  using Tile1 = ScratchVector<T, ExecutionSpace>;
  static constexpr int kTile = attention_tile<T, HD, 6, attention_scratch_budget<ExecutionSpace>()>();
  static constexpr int kR = attention_rows_per_thread<ExecutionSpace>();
  static_assert(kTile % kR == 0, "tile rows must split evenly over threads");
  static constexpr int team_size() { return is_host_space<ExecutionSpace>() ? 1 : kTile / kR; }

  AttentionShape s;
  DQkv d_qkv;
  Delta delta;
  DOut d_out;
  Qkv qkv;
  Lse lse;
  T scale;
  int row_tiles;

  static std::size_t scratch_bytes(int level) {  // q, dout, dq, k, kt, vt; lse, delta
    return level == 0 ? 6 * Tile2::shmem_size(kTile, HD) + 2 * Tile1::shmem_size(kTile) : 0;
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
