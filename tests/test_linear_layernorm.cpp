// Gradient checks (central finite differences, double precision, random data, awkward sizes)
// for Linear and LayerNorm, on every enabled backend.
#include "core/ops/layernorm.hpp"
#include "core/ops/linear.hpp"
#include "support/test_support.hpp"

#include <cstring>

using namespace joule;
using namespace joule::test;

TEMPLATE_TEST_CASE("linear: forward matches a naive product, backward matches finite differences",
                   "[ops][linear][gradcheck]", JOULE_TEST_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  Rng rng(11);
  int const n = 37, n_in = 23, n_out = 19;
  Tensor2<double, Mem> in("in", n, n_in), w("w", n_out, n_in), out("out", n, n_out);
  Tensor1<double, Mem> b("b", n_out);
  fill_uniform(in, rng);
  fill_uniform(w, rng);
  fill_uniform(b, rng);
  std::vector<double> r(n * n_out);
  for (auto& v : r) v = std::uniform_real_distribution<double>(-1, 1)(rng);

  linear_forward(space, out, in, w, b);
  auto const hin = to_vector(in), hw = to_vector(w), hb = to_vector(b);
  std::vector<double> naive(n * n_out);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < n_out; ++o) {
      double s = hb[o];
      for (int k = 0; k < n_in; ++k) s += hin[i * n_in + k] * hw[o * n_in + k];
      naive[i * n_out + o] = s;
    }
  JOULE_REQUIRE_CLOSE("linear forward", to_vector(out), naive, 1e-12, 1e-12);

  Tensor2<double, Mem> d_out("d_out", n, n_out), d_in("d_in", n, n_in), d_w("d_w", n_out, n_in);
  Tensor1<double, Mem> d_b("d_b", n_out);
  from_vector(d_out, r);
  // Parameter gradients accumulate: start from a known non-zero value and subtract it.
  Kokkos::deep_copy(d_w, 0.5);
  Kokkos::deep_copy(d_b, -0.25);
  linear_backward(space, d_in, d_w, d_b, d_out, in, w);
  auto gw = to_vector(d_w), gb = to_vector(d_b);
  for (auto& v : gw) v -= 0.5;
  for (auto& v : gb) v += 0.25;

  auto loss = [&] {
    linear_forward(space, out, in, w, b);
    return dot(to_vector(out), r);
  };
  JOULE_REQUIRE_GRADIENT("d_in", in, to_vector(d_in), loss, rng);
  JOULE_REQUIRE_GRADIENT("d_weight", w, gw, loss, rng);
  JOULE_REQUIRE_GRADIENT("d_bias", b, gb, loss, rng);
}

TEMPLATE_TEST_CASE("layernorm: forward statistics and backward against finite differences",
                   "[ops][layernorm][gradcheck]", JOULE_TEST_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  Rng rng(12);
  int const n = 13, c = 45;
  Tensor2<double, Mem> x("x", n, c), out("out", n, c);
  Tensor1<double, Mem> w("w", c), b("b", c), mean("mean", n), rstd("rstd", n);
  fill_uniform(x, rng, -2, 3);
  fill_uniform(w, rng, 0.5, 1.5);
  fill_uniform(b, rng);
  std::vector<double> r(n * c);
  for (auto& v : r) v = std::uniform_real_distribution<double>(-1, 1)(rng);

  layernorm_forward(space, out, mean, rstd, x, w, b);
  // The saved statistics are the row mean and 1/sqrt(var + eps), recomputed here naively.
  auto const hx = to_vector(x), hm = to_vector(mean), hr = to_vector(rstd);
  for (int i = 0; i < n; ++i) {
    double mu = 0, var = 0;
    for (int k = 0; k < c; ++k) mu += hx[i * c + k] / c;
    for (int k = 0; k < c; ++k) var += (hx[i * c + k] - mu) * (hx[i * c + k] - mu) / c;
    REQUIRE(hm[i] == Approx(mu).epsilon(1e-12));
    REQUIRE(hr[i] == Approx(1.0 / std::sqrt(var + 1e-5)).epsilon(1e-12));
  }

  Tensor2<double, Mem> d_out("d_out", n, c), d_x("d_x", n, c);
  Tensor1<double, Mem> d_w("d_w", c), d_b("d_b", c);
  from_vector(d_out, r);
  layernorm_backward(space, d_x, d_w, d_b, d_out, x, w, mean, rstd);
  auto loss = [&] {
    layernorm_forward(space, out, mean, rstd, x, w, b);
    return dot(to_vector(out), r);
  };
  auto const gx = to_vector(d_x), gw = to_vector(d_w), gb = to_vector(d_b);
  JOULE_REQUIRE_GRADIENT("d_x", x, gx, loss, rng);
  JOULE_REQUIRE_GRADIENT("d_weight", w, gw, loss, rng);
  JOULE_REQUIRE_GRADIENT("d_bias", b, gb, loss, rng);
}

namespace {
// out[c] + sum_r x[r, c] in float, in the order core/ops/column_sum_workspace.hpp documents: each
// chunk of chunk_rows rows in ascending order, a block's chunks in order, the blocks in order.
std::vector<double> documented_column_sums(std::vector<double> const& x, int rows, int cols,
                                           std::vector<double> const& out, bool gpu) {
  auto const plan = detail::column_sum_plan(rows, cols, gpu);
  std::vector<double> result(out);
  for (int c = 0; c < cols; ++c) {
    float all = 0;
    for (int b = 0; b < plan.row_blocks; ++b) {
      float block = 0;
      for (int k = 0; k < detail::kColumnChunks; ++k) {
        int const r0 = (b * detail::kColumnChunks + k) * plan.chunk_rows;
        float chunk = 0;
        for (int r = r0; r < std::min(r0 + plan.chunk_rows, rows); ++r) chunk += float(x[std::size_t(r) * cols + c]);
        block = k == 0 ? chunk : block + chunk;
      }
      all = b == 0 ? block : all + block;
    }
    result[c] = double(float(out[c]) + all);
  }
  return result;
}
}  // namespace

TEST_CASE("column sums: the split fills a quarter of an H200 at the medium shape and depends on the shape only",
          "[ops][column_sum]") {
  using detail::column_sum_plan;
  // Every bias / LayerNorm gradient of the medium config: 8,192 rows of C, 3C, M.
  for (int cols : {384, 3 * 384, 1536}) {
    auto const p = column_sum_plan(8192, cols);
    INFO(cols << " columns");
    REQUIRE(p.chunk_rows == detail::kMaxChunkRows);
    REQUIRE(p.row_blocks == 32);
    REQUIRE(p.stage1_threads() >= detail::kColumnSumMinThreads);
    REQUIRE(p.partials == std::size_t(32) * cols);
  }
  // The patch embedding's bias (4,096 image rows): smaller chunks keep the launch wide.
  REQUIRE(column_sum_plan(4096, 384).chunk_rows == 16);
  REQUIRE(column_sum_plan(4096, 384).stage1_threads() >= detail::kColumnSumMinThreads);
  // The position embedding: 64 samples of 128 x 384, one block of eight chunks of 8 rows.
  REQUIRE(column_sum_plan(64, 128 * 384).chunk_rows == 8);
  REQUIRE(column_sum_plan(64, 128 * 384).partials == 0);
  REQUIRE(column_sum_plan(0, 7).row_blocks == 0);
  // A CPU keeps chunks of 32 rows where the rows allow: 1,024 rows of 384, 4 blocks (a GPU: 32
  // blocks of chunks of 4 rows); its scratch fits in the GPU's.
  REQUIRE(column_sum_plan(1024, 384, false).chunk_rows == 32);
  REQUIRE(column_sum_plan(1024, 384, false).row_blocks == 4);
  REQUIRE(column_sum_plan(1024, 384).chunk_rows == 4);
  REQUIRE(column_sum_plan(1024, 384, false).partials <= column_sum_scratch(1024, 384));
  REQUIRE(column_sum_plan(45, 83, false).chunk_rows == 8);
  REQUIRE(column_sum_scratch(1, 1) == 0);
}

TEMPLATE_TEST_CASE("column sums: awkward sizes against a naive sum, in the documented order bit for bit",
                   "[ops][column_sum]", JOULE_TEST_SPACES) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  Rng rng(13);
  // One row; fewer columns than a tile; chunks of one row; a partial last block of chunks of 16
  // and of 32 rows (4,100 and 8,269 rows of 384: 17 and 33 blocks); wide and short.
  std::pair<int, int> const shapes[] = {{1, 5}, {45, 83}, {1000, 70}, {4100, 384}, {8269, 384}, {3, 1000}};
  for (auto [rows, cols] : shapes) {
    INFO(rows << " x " << cols);
    Tensor2<float, Mem> x("x", rows, cols);
    Tensor1<float, Mem> out("out", cols);
    fill_uniform(x, rng);
    fill_uniform(out, rng);  // accumulated into
    auto const hx = to_vector(x), before = to_vector(out);
    std::vector<double> naive(before);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) naive[c] += hx[std::size_t(r) * cols + c];
    bool const gpu = !Kokkos::SpaceAccessibility<Space, Kokkos::HostSpace>::accessible;
    auto const want = documented_column_sums(hx, rows, cols, before, gpu);

    ColumnSumWorkspace<float, Mem> const work(column_sum_scratch(rows, cols), "test");
    detail::accumulate_column_sums(space, "test_column_sum", out, x, work);
    auto const got = to_vector(out);
    JOULE_REQUIRE_CLOSE("column sums", got, naive, 1e-5, 1e-4 * std::sqrt(double(rows)));
    // Same bits as the documented order on every backend: so also whatever the thread count
    // (Serial is one thread, OpenMP the pool) and run to run.
    REQUIRE(got == want);
    // Without a workspace (allocates its own): the same bits.
    from_vector(out, before);
    detail::accumulate_column_sums(space, "test_column_sum", out, x);
    REQUIRE(to_vector(out) == want);
    // A workspace too small for this backend's two stages is refused by name, before anything runs.
    if (std::size_t const need = detail::column_sum_plan(rows, cols, gpu).partials; need > 0) {
      ColumnSumWorkspace<float, Mem> const small(need - 1, "small");
      REQUIRE_THROWS_WITH(detail::accumulate_column_sums(space, "test_column_sum", out, x, small),
                          Contains("test_column_sum") && Contains("column sum workspace"));
    }
  }
}

TEST_CASE("column sums: values loaded eight at a time are added in the plain loop's order, bit for bit",
          "[ops][column_sum]") {
  Rng rng(17);
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  std::vector<float> v(100);
  for (auto& x : v) x = dist(rng) * (rng() % 2 ? 1e-6f : 1.0f);  // mixed magnitudes: the order shows in the bits
  for (int begin : {0, 1, 3})
    for (int end = begin; end <= 41; ++end) {
      float plain = 0.5f;
      for (int i = begin; i < end; ++i) plain += v[i];
      float const got = detail::add_in_order(0.5f, begin, end, [&](int i) { return v[i]; });
      INFO("[" << begin << ", " << end << ")");
      REQUIRE(std::memcmp(&got, &plain, sizeof(float)) == 0);
    }
  // The order shows in the bits: in float, 1e8 + 1 is 1e8, so seven 1s added after 1e8, then -1e8
  // and a last 1, leave 1; with -1e8 second the eight 1s all count.
  float const ordered[] = {1e8f, 1, 1, 1, 1, 1, 1, 1, -1e8f, 1};
  CHECK(detail::add_in_order(0.0f, 0, 10, [&](int i) { return ordered[i]; }) == 1.0f);
  float const reordered[] = {1e8f, -1e8f, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(detail::add_in_order(0.0f, 0, 10, [&](int i) { return reordered[i]; }) == 8.0f);
}
