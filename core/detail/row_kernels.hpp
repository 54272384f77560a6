#pragma once
// Row-wise kernels on [N, C] matrices (LayerNorm, cross-entropy, GELU, residual, embeddings),
// written hierarchically so that one source maps well onto both kinds of backend:
//
//             GPU (CUDA)                              CPU (OpenMP)
//   team      a thread block: kDeviceRowsPerTeam rows  one OpenMP thread: a block of rows
//   thread    one warp per row (TeamThreadRange)      the block's rows in turn
//   vector    the warp's 32 lanes over the columns    SIMD lanes over the columns
//             (neighbouring lanes, neighbouring       (the column loop is vectorised)
//              addresses: coalesced)
//
// Row reductions (sum, max) on CPUs keep kHostLanes independent partial results, combined
// pairwise at the end, so that the compiler vectorises them without reassociating anything
// (no -ffast-math); on GPUs they are the vector range's own reduction. Either way the order of
// operations is fixed for a backend: results are bitwise reproducible run to run.
// exp inside a row: exp_of<Space>() (vector_math.hpp).
#include "core/detail/launch_shape.hpp"
#include "core/detail/vector_math.hpp"
#include "core/tensor.hpp"

#include <algorithm>

namespace joule::detail {

inline constexpr int kHostLanes = 16;          // partial sums per row reduction on CPUs
inline constexpr int kDeviceRowsPerTeam = 4;   // warps per thread block on GPUs
inline constexpr int kDeviceVectorLength = 32; // lanes per row on GPUs
inline constexpr int kHostTeamsPerThread = 8;  // row blocks per OpenMP thread (load balance)

template <class ExecutionSpace>
using RowMember = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;

// f(team, r) for every row r in [0, rows); f runs the columns of its row with the vector
// helpers below (vector_for, vector_sum, ...). work: what the whole launch reads, writes and
// computes (kernel_work.hpp), for the roofline model.
template <class ExecutionSpace, class F>
void for_each_row(ExecutionSpace const& space, char const* name, KernelWork const& work, int rows, F const& f) {
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Member = typename Policy::member_type;
  if (rows <= 0) return;
  // On CUDA: one block of kDeviceRowsPerTeam warps per kDeviceRowsPerTeam rows (the else branch).
  note_launch(name, work, long((rows + kDeviceRowsPerTeam - 1) / kDeviceRowsPerTeam) * kDeviceRowsPerTeam * kDeviceVectorLength,
              kDeviceRowsPerTeam * kDeviceVectorLength, 0, kDeviceRowsPerTeam);
  if constexpr (is_host_space<ExecutionSpace>()) {
    int const teams_wanted = kHostTeamsPerThread * std::max(1, int(space.concurrency()));
    int const per_team = std::max(1, (rows + teams_wanted - 1) / teams_wanted);
    int const league = (rows + per_team - 1) / per_team;
    Kokkos::parallel_for(
        label(name), Policy(space, league, 1, 1), KOKKOS_LAMBDA(Member const& team) {
          int const r0 = team.league_rank() * per_team;
          int const r1 = r0 + per_team < rows ? r0 + per_team : rows;
          for (int r = r0; r < r1; ++r) f(team, r);
        });
  } else {
    int const league = (rows + kDeviceRowsPerTeam - 1) / kDeviceRowsPerTeam;
    Kokkos::parallel_for(
        label(name), Policy(space, league, kDeviceRowsPerTeam, kDeviceVectorLength),
        KOKKOS_LAMBDA(Member const& team) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kDeviceRowsPerTeam), [&](int k) {
            int const r = team.league_rank() * kDeviceRowsPerTeam + k;
            if (r < rows) f(team, r);
          });
        });
  }
}

// f(i) for i in [0, n), over the vector lanes of the calling thread.
template <class Member, class F>
KOKKOS_INLINE_FUNCTION void vector_for(Member const& team, int n, F const& f) {
  Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), f);
}

// Once per row (one lane on GPUs).
template <class Member, class F>
KOKKOS_INLINE_FUNCTION void once_per_row(Member const& team, F const& f) {
  Kokkos::single(Kokkos::PerThread(team), f);
}

// f(r, c) for every element of a [rows, cols] matrix: rows over teams and threads, columns over
// vector lanes.
template <class ExecutionSpace, class F>
void for_each_element(ExecutionSpace const& space, char const* name, KernelWork const& work, int rows, int cols,
                      F const& f) {
  for_each_row(space, name, work, rows, KOKKOS_LAMBDA(RowMember<ExecutionSpace> const& team, int r) {
    vector_for(team, cols, [&](int c) { f(r, c); });
  });
}

// sum_i f(i), i in [0, n)
template <class ExecutionSpace, class T, class Member, class F>
KOKKOS_INLINE_FUNCTION T vector_sum(Member const& team, int n, F const& f) {
  if constexpr (is_host_space<ExecutionSpace>()) {
    T part[kHostLanes] = {};
    int i = 0;
    for (; i + kHostLanes <= n; i += kHostLanes)
      for (int l = 0; l < kHostLanes; ++l) part[l] += f(i + l);
    for (int l = 0; i + l < n; ++l) part[l] += f(i + l);
    for (int w = kHostLanes / 2; w > 0; w /= 2)
      for (int l = 0; l < w; ++l) part[l] += part[l + w];
    return part[0];
  } else {
    T s = 0;
    Kokkos::parallel_reduce(Kokkos::ThreadVectorRange(team, n), [&](int i, T& a) { a += f(i); }, s);
    return s;
  }
}

// (sum_i f(i).first, sum_i f(i).second) in one sweep over the row on CPUs; f(i, a, b) adds its
// two terms to a and b. (GPUs: two reductions; the row stays in L1.)
template <class ExecutionSpace, class T, class Member, class F>
KOKKOS_INLINE_FUNCTION void vector_sum2(Member const& team, int n, F const& f, T& sum_a, T& sum_b) {
  if constexpr (is_host_space<ExecutionSpace>()) {
    T a[kHostLanes] = {}, b[kHostLanes] = {};
    int i = 0;
    for (; i + kHostLanes <= n; i += kHostLanes)
      for (int l = 0; l < kHostLanes; ++l) f(i + l, a[l], b[l]);
    for (int l = 0; i + l < n; ++l) f(i + l, a[l], b[l]);
    for (int w = kHostLanes / 2; w > 0; w /= 2)
      for (int l = 0; l < w; ++l) a[l] += a[l + w], b[l] += b[l + w];
    sum_a = a[0], sum_b = b[0];
  } else {
    sum_a = vector_sum<ExecutionSpace, T>(team, n, [&](int i) {
      T x = 0, y = 0;
      f(i, x, y);
      return x;
    });
    sum_b = vector_sum<ExecutionSpace, T>(team, n, [&](int i) {
      T x = 0, y = 0;
      f(i, x, y);
      return y;
    });
  }
}

// max_i f(i), i in [0, n), n >= 1
template <class ExecutionSpace, class T, class Member, class F>
KOKKOS_INLINE_FUNCTION T vector_max(Member const& team, int n, F const& f) {
  if constexpr (is_host_space<ExecutionSpace>()) {
    T part[kHostLanes];
    for (int l = 0; l < kHostLanes; ++l) part[l] = f(0);
    int i = 0;
    for (; i + kHostLanes <= n; i += kHostLanes)
      for (int l = 0; l < kHostLanes; ++l) {
        T const v = f(i + l);
        part[l] = v > part[l] ? v : part[l];
      }
    for (int l = 0; i + l < n; ++l) {
      T const v = f(i + l);
      part[l] = v > part[l] ? v : part[l];
    }
    for (int w = kHostLanes / 2; w > 0; w /= 2)
      for (int l = 0; l < w; ++l) part[l] = part[l + w] > part[l] ? part[l + w] : part[l];
    return part[0];
  } else {
    T m = f(0);
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, n),
        [&](int i, T& a) {
          T const v = f(i);
          a = v > a ? v : a;
        },
        Kokkos::Max<T>(m));
    return m;
  }
}

}  // namespace joule::detail
