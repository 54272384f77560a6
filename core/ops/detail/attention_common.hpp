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

// The scores' scale, 1/sqrt(head_dim), in double (each path rounds it once to its type).
inline double attention_scale(int head_dim) { return 1.0 / std::sqrt(double(head_dim)); }

// What the attention kernels read and write, filled by the launch: each kernel derives from one
// of these and adds its tiles, so a kernel's operands are listed once for both shapes. `tiles`
// is the number of tiles of the kernel's own rows per (batch, head); `scale` is 1/sqrt(HD),
// applied to every staged query.
template <class Storage, class Qkv>
struct AttentionArgs {
  using S = Storage;      // the results' storage (bf16, float, double)
  using T = compute_t<S>;  // arithmetic and scratch tiles
  AttentionShape s;
  Qkv qkv;
  T scale;
  int tiles;
};
template <class Out, class Lse, class Qkv>
struct AttentionForwardArgs : AttentionArgs<typename Out::non_const_value_type, Qkv> {
  Out out;
  Lse lse;
};
template <class DQkv, class Delta, class DOut, class Qkv, class Lse>
struct AttentionBackwardArgs : AttentionArgs<typename DQkv::non_const_value_type, Qkv> {
  DQkv d_qkv;
  Delta delta;
  DOut d_out;
  Lse lse;
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

// The scratch level that holds a kernel's level-0 tiles on ExecutionSpace: level 0 (shared memory)
// on GPUs; level 1 on host spaces, where both levels are the same per-thread memory and Kokkos grants
// a host team only 32 KiB of level 0 (TeamPolicy::scratch_size_max(0); Kokkos 5's OpenMP backend
// refuses more, Kokkos 3.4 did not check). attention_policy asks for the scratch accordingly.
template <class ExecutionSpace>
constexpr int attention_shared_level() {
  return is_host_space<ExecutionSpace>() ? 1 : 0;
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

}  // namespace joule::detail
