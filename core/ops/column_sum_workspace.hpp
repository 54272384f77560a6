#pragma once
// How core/ops/detail/column_sum.hpp splits a column sum, and the scratch its two stages share,
// apart from the kernels so that the model's declarations need none of them.
//
// out[c] += sum_r f(r, c) over a [rows, cols] matrix runs as
//   stage 1: a team per (row block, tile of kColumnTile columns); the team's kColumnChunks warps
//            each sum one chunk of chunk_rows consecutive rows, in ascending order, for its lane's
//            column; the chunk sums are added in chunk order (the block's sum);
//   stage 2: (only with more than one row block) one thread per column adds the block sums in
//            block order, and the result into out.
// The split depends on rows, cols, the kind of backend (GPU or CPU) and the constants below only,
// never on the thread count: results are bitwise reproducible for a backend, and a CPU's do not
// depend on OMP_NUM_THREADS. A GPU takes chunks down to one row to fill a quarter of the device;
// a CPU keeps chunks as long as the rows allow (shorter ones cost it time and fill nothing).
#include "core/tensor.hpp"

#include <cstddef>
#include <string>

namespace joule {

namespace detail {

inline constexpr int kColumnTile = 32;    // columns per team: a warp's lanes on a GPU
inline constexpr int kColumnChunks = 8;   // row chunks per team: its warps on a GPU (256 threads)
inline constexpr int kMaxChunkRows = 32;  // rows per chunk at most
// Stage 1 takes smaller chunks (more row blocks) until it has at least this many threads on a
// GPU: a quarter of an H200's resident threads (132 SMs x 2,048).
inline constexpr long kColumnSumMinThreads = 132L * 2048 / 4;

struct ColumnSumPlan {
  int chunk_rows = 1;          // rows per chunk (a power of two, <= kMaxChunkRows)
  int row_blocks = 0;          // blocks of kColumnChunks * chunk_rows rows
  int tiles = 0;               // column tiles of kColumnTile
  std::size_t partials = 0;    // stage 2's scratch: row_blocks * cols elements (0: one block)
  long stage1_threads() const { return long(row_blocks) * tiles * kColumnChunks * kColumnTile; }
};

// gpu: the split a GPU takes (and the launch shape every backend reports); else a CPU's.
inline ColumnSumPlan column_sum_plan(int rows, int cols, bool gpu = true) {
  ColumnSumPlan p;
  if (rows <= 0 || cols <= 0) return p;
  p.tiles = (cols + kColumnTile - 1) / kColumnTile;
  // No more rows per chunk than the rows give each chunk of one block ...
  int const per_chunk = (rows + kColumnChunks - 1) / kColumnChunks;
  while (p.chunk_rows < kMaxChunkRows && p.chunk_rows < per_chunk) p.chunk_rows *= 2;
  auto const blocks = [&](int chunk) { return (rows + kColumnChunks * chunk - 1) / (kColumnChunks * chunk); };
  // ... and fewer where the launch would not fill a quarter of the GPU.
  while (gpu && p.chunk_rows > 1 && long(blocks(p.chunk_rows)) * p.tiles * kColumnChunks * kColumnTile < kColumnSumMinThreads)
    p.chunk_rows /= 2;
  p.row_blocks = blocks(p.chunk_rows);
  p.partials = p.row_blocks > 1 ? std::size_t(p.row_blocks) * std::size_t(cols) : 0;
  return p;
}

}  // namespace detail

// Elements of scratch a column sum over a [rows, cols] matrix needs on any backend (a GPU's split
// needs the most; 0: none): at most
// ceil(rows / 8) * cols (chunks of one row, small matrices), and ceil(rows / 256) * cols once the
// matrix fills a quarter of the GPU with chunks of 32 rows, e.g. 32 x 1,536 for the MLP bias at
// the medium shape (8,192 rows).
inline std::size_t column_sum_scratch(int rows, int cols) { return detail::column_sum_plan(rows, cols).partials; }

// The block sums of stage 2 (core/ops/detail/column_sum.hpp), allocated once by their owner for
// the largest column sum it runs (column_sum_scratch): a training step must not allocate. Column
// sums in order on one execution space instance may share one.
template <class T, class MemorySpace>
struct ColumnSumWorkspace {
  Kokkos::View<T*, MemorySpace> partials;
  ColumnSumWorkspace() = default;
  ColumnSumWorkspace(std::size_t elements, std::string const& name)
      : partials(Kokkos::view_alloc(Kokkos::WithoutInitializing, label((name + ".column_partials").c_str())),
                 elements) {}
};

}  // namespace joule
