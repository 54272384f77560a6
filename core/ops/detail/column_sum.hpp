#pragma once
// Column sums of a row-major matrix, added into a vector. Used for every parameter gradient that
// sums over tokens (biases, LayerNorm weights, position embeddings). Two stages (the split, which
// depends on the shape and on whether the backend is a GPU: core/ops/column_sum_workspace.hpp):
//   stage 1  a team per (row block, tile of 32 columns). Each of its 8 chunks of chunk_rows rows
//            is summed in ascending row order, per column, then the 8 chunk sums in chunk order:
//            the block's sum. With one row block it goes into out; else into the workspace.
//   stage 2  (several row blocks) one thread per column adds the block sums in block order and
//            the result into out.
// No atomics: every sum has one owner and a fixed order, the same for every thread count, so
// results are bitwise reproducible (and the same on every CPU backend).
//
// On GPUs a team is a thread block of 8 warps, a warp per chunk, a lane per column (neighbouring
// lanes read neighbouring columns: coalesced); the chunk sums meet in shared memory (warp w, lane
// l at [w * 32 + l]: no bank conflicts). On CPUs a team is one task that walks its rows with the
// 32 columns of its tile in the inner loop (contiguous, vectorised) in the same order.
#include "core/detail/launch_shape.hpp"
#include "core/ops/column_sum_workspace.hpp"
#include "core/precision/bf16.hpp"
#include "core/tensor.hpp"

#include <string>

namespace joule::detail {

// Loads a GPU thread of a column sum keeps in flight: a lane that adds one 2-byte element at a
// time keeps 2 bytes outstanding, and a wave of them reaches about a fifth of HBM's bandwidth
// (Little's law, docs/roofline.md); the second stage, a few thousand threads, would wait a
// memory latency per block sum.
inline constexpr int kColumnLoadsInFlight = 8;

// total + value(i) for i in [begin, end), added one at a time in ascending order: the plain loop's
// bits. The values are loaded kColumnLoadsInFlight at a time before they are added, so that the
// loads are independent of the additions and of one another.
template <class T, class F>
KOKKOS_INLINE_FUNCTION T add_in_order(T total, int begin, int end, F const& value) {
  int i = begin;
  for (; i + kColumnLoadsInFlight <= end; i += kColumnLoadsInFlight) {
    T v[kColumnLoadsInFlight];
    for (int k = 0; k < kColumnLoadsInFlight; ++k) v[k] = value(i + k);
    for (int k = 0; k < kColumnLoadsInFlight; ++k) total += v[k];
  }
  for (; i < end; ++i) total += value(i);
  return total;
}

// add(c, sum_r f(r, c)) for c in [0, cols), rows summed as described above. f reads `read` bytes of
// memory per element (what the roofline model counts; its loads are independent).
template <class ExecutionSpace, class T, class MemorySpace, class F, class Add>
void column_sums(ExecutionSpace const& space, char const* name, int read, int rows, int cols, F const& f,
                 Add const& add, ColumnSumWorkspace<T, MemorySpace> const& work) {
  constexpr bool host = Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;
  ColumnSumPlan const plan = column_sum_plan(rows, cols, !host);
  if (plan.row_blocks == 0) return;
  require(work.partials.extent(0) >= plan.partials, name,
          "column sum workspace " + shape_of(work.partials) + " for " + std::to_string(rows) + " rows of " +
              std::to_string(cols) + " columns (needs " + std::to_string(plan.partials) + ")");
  constexpr int W = kColumnTile, K = kColumnChunks;
  int const chunk = plan.chunk_rows, tiles = plan.tiles, blocks = plan.row_blocks;
  bool const direct = blocks == 1;
  auto const partials = work.partials;
  int const league = blocks * tiles;
  ColumnSumPlan const gpu_plan = column_sum_plan(rows, cols, true);  // what a GPU would launch
  double const stage1_out = double(cols) * sizeof(T) * (gpu_plan.row_blocks > 1 ? gpu_plan.row_blocks : 2);
  KernelWork stage1 = streaming_work(double(rows) * cols, read, 0, 2, kColumnLoadsInFlight * read);
  stage1.bytes += stage1_out;  // the block sums, or out read and written
  note_launch(name, stage1, gpu_plan.stage1_threads(), K * W, scratch_view_bytes<T>(K * W), K);  // the chunk sums
  if constexpr (host) {
    Kokkos::parallel_for(
        label(name), Kokkos::RangePolicy<ExecutionSpace>(space, 0, league), KOKKOS_LAMBDA(int team) {
          int const block = team / tiles, c0 = (team % tiles) * W;
          int const width = cols - c0 < W ? cols - c0 : W;
          T total[W] = {};
          for (int k = 0; k < K; ++k) {
            int const r0 = (block * K + k) * chunk;
            int const r1 = r0 + chunk < rows ? r0 + chunk : rows;
            T sum[W] = {};
            for (int r = r0; r < r1; ++r)
              for (int j = 0; j < width; ++j) sum[j] += f(r, c0 + j);
            for (int j = 0; j < width; ++j) total[j] = k == 0 ? sum[j] : total[j] + sum[j];
          }
          for (int j = 0; j < width; ++j) {
            if (direct)
              add(c0 + j, total[j]);
            else
              partials(std::size_t(block) * cols + c0 + j) = total[j];
          }
        });
  } else {
    using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
    using Member = typename Policy::member_type;
    using Shared = Kokkos::View<T*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
    auto const policy = Policy(space, league, K, W).set_scratch_size(0, Kokkos::PerTeam(Shared::shmem_size(K * W)));
    Kokkos::parallel_for(
        label(name), policy, KOKKOS_LAMBDA(Member const& team) {
          int const block = team.league_rank() / tiles, c0 = (team.league_rank() % tiles) * W;
          int const k = team.team_rank();
          Shared chunk_sums(team.team_scratch(0), K * W);
          int const r0 = (block * K + k) * chunk;
          int const r1 = r0 + chunk < rows ? r0 + chunk : rows;
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, W), [&](int j) {
            T sum = 0;
            if (c0 + j < cols) sum = add_in_order(sum, r0, r1, [&](int r) { return T(f(r, c0 + j)); });
            chunk_sums(k * W + j) = sum;
          });
          team.team_barrier();
          if (k == 0)
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, W), [&](int j) {
              if (c0 + j >= cols) return;
              T total = chunk_sums(j);
              for (int i = 1; i < K; ++i) total += chunk_sums(i * W + j);
              if (direct)
                add(c0 + j, total);
              else
                partials(std::size_t(block) * cols + c0 + j) = total;
            });
        });
  }
  std::string const final_name = std::string(name) + "_blocks";
  if (gpu_plan.row_blocks > 1)
    note_launch(final_name.c_str(),
                streaming_work(cols, (gpu_plan.row_blocks + 1) * sizeof(T), sizeof(T), gpu_plan.row_blocks,
                               kColumnLoadsInFlight * sizeof(T)),
                cols, 0);
  if (direct) return;
  // Stage 2: a short fixed-order pass, `blocks` (<= 32 at the medium shape) loads per column.
  Kokkos::parallel_for(
      label(final_name.c_str()), Kokkos::RangePolicy<ExecutionSpace>(space, 0, cols), KOKKOS_LAMBDA(int c) {
        T const total = add_in_order(T(partials(c)), 1, blocks, [&](int b) { return partials(std::size_t(b) * cols + c); });
        add(c, total);
      });
}

// The same with a workspace of its own, allocated here where the sum needs one (tests,
// benchmarks; a training step passes its own). T: the type of the sums.
template <class T, class ExecutionSpace, class F, class Add>
void column_sums(ExecutionSpace const& space, char const* name, int read, int rows, int cols, F const& f,
                 Add const& add) {
  ColumnSumWorkspace<T, typename ExecutionSpace::memory_space> const work(column_sum_scratch(rows, cols), name);
  column_sums(space, name, read, rows, cols, f, add, work);
}

// out[c] += sum_r f(r, c)   (f reads `read` bytes per element)
template <class ExecutionSpace, class Out, class F, class T, class MemorySpace>
void accumulate_column_sums_of(ExecutionSpace const& space, char const* name, Out const& out, int read,
                               int rows, F const& f, ColumnSumWorkspace<T, MemorySpace> const& work) {
  column_sums(space, name, read, rows, int(out.extent(0)), f, KOKKOS_LAMBDA(int c, T v) { out(c) += v; }, work);
}

// The same with a workspace of its own, allocated here where the sum needs one (tests,
// benchmarks; a training step passes its own).
template <class ExecutionSpace, class Out, class F>
void accumulate_column_sums_of(ExecutionSpace const& space, char const* name, Out const& out, int read,
                               int rows, F const& f) {
  ColumnSumWorkspace<typename Out::non_const_value_type, typename ExecutionSpace::memory_space> const work(
      column_sum_scratch(rows, int(out.extent(0))), name);
  accumulate_column_sums_of(space, name, out, read, rows, f, work);
}

// out[c] += sum_r in[r, c]  (in may be stored narrower than out: bf16 activations, fp32 sums)
template <class ExecutionSpace, class Out, class In, class... Work>
void accumulate_column_sums(ExecutionSpace const& space, char const* name, Out const& out,
                            In const& in, Work const&... work) {
  require(out.extent(0) == in.extent(1), name,
          "column sum of " + shape_of(in) + " into " + shape_of(out));
  accumulate_column_sums_of(space, name, out, int(sizeof(typename In::value_type)), int(in.extent(0)),
                            KOKKOS_LAMBDA(int r, int c) { return widen(in(r, c)); }, work...);
}

}  // namespace joule::detail
