// Gradient checks for GELU, the residual add, token/position embeddings and patch embedding.
#include "core/ops/elementwise.hpp"
#include "core/ops/embedding.hpp"
#include "core/ops/patch_embed.hpp"
#include "support/test_support.hpp"

using namespace joule;
using namespace joule::test;

namespace {
std::vector<double> random_vector(std::size_t n, Rng& rng) {
  std::vector<double> r(n);
  for (auto& v : r) v = std::uniform_real_distribution<double>(-1, 1)(rng);
  return r;
}
}  // namespace

TEMPLATE_TEST_CASE("gelu: tanh form value and backward", "[ops][gelu][gradcheck]",
                   JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(21);
  int const n = 7, c = 33;
  Tensor2<double, Mem> x("x", n, c), y("y", n, c), d_y("d_y", n, c), d_x("d_x", n, c);
  fill_uniform(x, rng, -4, 4);
  auto const r = random_vector(n * c, rng);
  gelu_forward(space, y, x);
  auto const hx = to_vector(x);
  std::vector<double> expected(hx.size());
  for (std::size_t i = 0; i < hx.size(); ++i) {
    double const v = hx[i];
    expected[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  JOULE_REQUIRE_CLOSE("gelu forward", to_vector(y), expected, 1e-13, 1e-15);

  from_vector(d_y, r);
  gelu_backward(space, d_x, d_y, x);
  auto loss = [&] {
    gelu_forward(space, y, x);
    return dot(to_vector(y), r);
  };
  JOULE_REQUIRE_GRADIENT("gelu d_x", x, to_vector(d_x), loss, rng);
}

TEMPLATE_TEST_CASE("residual: forward sums, backward accumulates into the skip path",
                   "[ops][residual][gradcheck]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(22);
  int const n = 5, c = 19;
  Tensor2<double, Mem> a("a", n, c), b("b", n, c), y("y", n, c), d_y("d_y", n, c), d_a("d_a", n, c);
  fill_uniform(a, rng);
  fill_uniform(b, rng);
  auto const r = random_vector(n * c, rng);
  from_vector(d_y, r);
  // d_a already holds the branch's gradient; the skip path adds d_y to it.
  auto const branch = random_vector(n * c, rng);
  from_vector(d_a, branch);
  residual_backward(space, d_a, d_y);
  auto ga = to_vector(d_a);
  for (std::size_t i = 0; i < ga.size(); ++i) ga[i] -= branch[i];
  auto loss = [&] {
    residual_forward(space, y, a, b);
    return dot(to_vector(y), r);
  };
  JOULE_REQUIRE_GRADIENT("residual d_a", a, ga, loss, rng);
  JOULE_REQUIRE_GRADIENT("residual d_b", b, r, loss, rng);
}

TEMPLATE_TEST_CASE("embedding: token gather plus position, race-free scatter-add backward",
                   "[ops][embedding][gradcheck]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(23);
  int const vocab = 11, c = 9, batch = 3, seq = 17, n = batch * seq;
  Tensor2<double, Mem> wte("wte", vocab, c), wpe("wpe", seq + 4, c), y("y", n, c);
  Tensor2<double, Mem> d_y("d_y", n, c), d_wte("d_wte", vocab, c), d_wpe("d_wpe", seq + 4, c);
  Kokkos::View<int*, Mem> tokens("tokens", n);
  fill_uniform(wte, rng);
  fill_uniform(wpe, rng);
  {
    // Skewed token distribution: token 3 appears often (a long bucket), token 10 never.
    auto h = Kokkos::create_mirror_view(tokens);
    std::uniform_int_distribution<int> pick(0, vocab - 2);
    for (int i = 0; i < n; ++i) h(i) = (i % 3 == 0) ? 3 : pick(rng);
    Kokkos::deep_copy(tokens, h);
  }
  auto const r = random_vector(n * c, rng);
  from_vector(d_y, r);
  embedding_backward(space, d_wte, d_wpe, d_y, tokens, seq);
  auto loss = [&] {
    embedding_forward(space, y, tokens, wte, wpe, seq);
    return dot(to_vector(y), r);
  };
  auto const g_wte = to_vector(d_wte);
  JOULE_REQUIRE_GRADIENT("d_wte", wte, g_wte, loss, rng);
  JOULE_REQUIRE_GRADIENT("d_wpe", wpe, to_vector(d_wpe), loss, rng);
  for (int i = 0; i < c; ++i) REQUIRE(g_wte[10 * c + i] == 0.0);  // unused token: no gradient

  // Same bits on a second run: no float atomics anywhere in the scatter-add.
  Kokkos::deep_copy(d_wte, 0.0);
  Kokkos::deep_copy(d_wpe, 0.0);
  embedding_backward(space, d_wte, d_wpe, d_y, tokens, seq);
  REQUIRE(to_vector(d_wte) == g_wte);

  // A token outside the vocabulary is rejected with a clear error, not read out of bounds.
  set_element(tokens, 5, vocab);
  REQUIRE_THROWS_WITH(embedding_forward(space, y, tokens, wte, wpe, seq),
                      Contains("outside the vocabulary"));
}

namespace {
// d_wte + the token embedding's backward in float in the order token_embedding_backward documents:
// each token's rows in ascending order, in pieces of kEmbeddingPiece summed from zero, the pieces
// added in order, the result added to d_wte.
std::vector<double> documented_wte_gradient(std::vector<double> const& d_out, std::vector<int> const& tokens,
                                            int vocab, int c, std::vector<double> const& d_wte) {
  std::vector<double> result(d_wte);
  int const n = int(tokens.size()), P = detail::kEmbeddingPiece;
  for (int v = 0; v < vocab; ++v) {
    std::vector<int> rows;
    for (int r = 0; r < n; ++r)
      if (tokens[r] == v) rows.push_back(r);
    if (rows.empty()) continue;
    for (int i = 0; i < c; ++i) {
      float total = 0;
      for (std::size_t k0 = 0; k0 < rows.size(); k0 += P) {
        float piece = 0;
        for (std::size_t k = k0; k < std::min(rows.size(), k0 + P); ++k) piece += float(d_out[std::size_t(rows[k]) * c + i]);
        total = k0 == 0 ? piece : total + piece;
      }
      result[std::size_t(v) * c + i] = double(float(d_wte[std::size_t(v) * c + i]) + total);
    }
  }
  return result;
}
}  // namespace

TEMPLATE_TEST_CASE("token embedding backward: a PAD-like bucket, empty tokens, awkward sizes, in the documented "
                   "order bit for bit", "[ops][embedding]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(25);
  struct Case {
    int vocab, n, c;
    char const* what;
  };
  // 389 rows: 3 ranking blocks of 128 and a partial one, not a multiple of a piece; vocabulary 37
  // (not a power of two) with tokens 20..35 unused; token 36 (PAD) on 3 rows of 5: 237 rows, 14
  // pieces and a partial one. Then every row one token, and a vocabulary larger than N.
  Case const cases[] = {{37, 389, 45, "PAD-heavy"}, {3, 300, 33, "one token"}, {300, 50, 7, "vocab > N"}};
  for (auto const& k : cases) {
    INFO(k.what);
    Tensor2<float, Mem> d_out("d_out", k.n, k.c), d_wte("d_wte", k.vocab, k.c);
    Kokkos::View<int*, Mem> tokens("tokens", k.n);
    fill_uniform(d_out, rng);
    fill_uniform(d_wte, rng);  // accumulated into
    std::vector<int> ht(k.n);
    std::uniform_int_distribution<int> pick(0, std::min(19, k.vocab - 1));
    for (int r = 0; r < k.n; ++r) ht[r] = k.vocab == 3 ? 1 : (k.vocab == 37 && r % 5 < 3) ? 36 : pick(rng);
    if (k.vocab == 37) REQUIRE(std::count(ht.begin(), ht.end(), 36) % detail::kEmbeddingPiece != 0);
    {
      auto h = Kokkos::create_mirror_view(tokens);
      for (int r = 0; r < k.n; ++r) h(r) = ht[r];
      Kokkos::deep_copy(tokens, h);
    }
    auto const hd = to_vector(d_out), before = to_vector(d_wte);
    std::vector<double> naive(before);
    for (int r = 0; r < k.n; ++r)
      for (int i = 0; i < k.c; ++i) naive[std::size_t(ht[r]) * k.c + i] += hd[std::size_t(r) * k.c + i];
    auto const want = documented_wte_gradient(hd, ht, k.vocab, k.c, before);

    EmbeddingBackwardWorkspace<Mem, float> const work(k.vocab, k.n, k.c, "test");
    token_embedding_backward(space, d_wte, d_out, tokens, work);
    auto const got = to_vector(d_wte);
    JOULE_REQUIRE_CLOSE("d_wte", got, naive, 1e-5, 1e-4);
    REQUIRE(got == want);  // unused tokens keep their value exactly
    // Again with the same workspace (its counts are stale): the same bits. And with one of its own.
    from_vector(d_wte, before);
    token_embedding_backward(space, d_wte, d_out, tokens, work);
    REQUIRE(to_vector(d_wte) == want);
    from_vector(d_wte, before);
    token_embedding_backward(space, d_wte, d_out, tokens);
    REQUIRE(to_vector(d_wte) == want);
  }
  // A workspace for another shape is refused by name.
  Tensor2<float, Mem> d_out("d_out", 40, 8), d_wte("d_wte", 11, 8);
  Kokkos::View<int*, Mem> tokens("tokens", 40);
  EmbeddingBackwardWorkspace<Mem, float> const other(11, 39, 8, "other");
  REQUIRE_THROWS_WITH(token_embedding_backward(space, d_wte, d_out, tokens, other),
                      Contains("token_embedding_backward") && Contains("workspace"));
}

TEMPLATE_TEST_CASE("position embedding backward: samples summed per position, in the column sums' order",
                   "[ops][embedding]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(26);
  // 70 samples of 13 positions x 11 channels (a GPU: chunks of one sample, 9 blocks, the last
  // partial; a CPU: one block of chunks of 16); d_wpe longer than the sequence (its last rows
  // untouched).
  int const batch = 70, seq = 13, c = 11;
  Tensor2<float, Mem> d_out("d_out", batch * seq, c), d_wpe("d_wpe", seq + 3, c);
  fill_uniform(d_out, rng);
  fill_uniform(d_wpe, rng);
  auto const hd = to_vector(d_out), before = to_vector(d_wpe);
  auto const plan = detail::column_sum_plan(batch, seq * c, !Kokkos::SpaceAccessibility<TestType, Kokkos::HostSpace>::accessible);
  std::vector<double> naive(before), want(before);
  for (int j = 0; j < seq * c; ++j) {
    int const t = j / c, i = j % c;
    float all = 0;
    for (int b = 0; b < plan.row_blocks; ++b) {
      float block = 0;
      for (int k = 0; k < detail::kColumnChunks; ++k) {
        float chunk = 0;
        int const s0 = (b * detail::kColumnChunks + k) * plan.chunk_rows;
        for (int s = s0; s < std::min(s0 + plan.chunk_rows, batch); ++s) {
          chunk += float(hd[std::size_t(s * seq + t) * c + i]);
          naive[j] += hd[std::size_t(s * seq + t) * c + i];
        }
        block = k == 0 ? chunk : block + chunk;
      }
      all = b == 0 ? block : all + block;
    }
    want[j] = double(float(before[j]) + all);
  }
  ColumnSumWorkspace<float, Mem> const work(column_sum_scratch(batch, seq * c), "test");
  position_embedding_backward(space, d_wpe, d_out, seq, work);
  auto const got = to_vector(d_wpe);
  JOULE_REQUIRE_CLOSE("d_wpe", got, naive, 1e-5, 1e-4);
  REQUIRE(got == want);
  // A strided d_out (every other column of a wider tensor) takes the general path: the same bits.
  REQUIRE(plan.row_blocks == (Kokkos::SpaceAccessibility<TestType, Kokkos::HostSpace>::accessible ? 1 : 9));
  Tensor2<float, Mem> wide("wide", batch * seq, 2 * c);
  {
    auto h = Kokkos::create_mirror_view(wide);
    for (int r = 0; r < batch * seq; ++r)
      for (int i = 0; i < c; ++i) h(r, 2 * i) = float(hd[std::size_t(r) * c + i]), h(r, 2 * i + 1) = 1e6f;
    Kokkos::deep_copy(wide, h);
  }
  Kokkos::View<float**, Kokkos::LayoutStride, Mem> every_other(
      wide.data(), Kokkos::LayoutStride(batch * seq, 2 * c, c, 2));
  from_vector(d_wpe, before);
  position_embedding_backward(space, d_wpe, every_other, seq);
  REQUIRE(to_vector(d_wpe) == want);
}

TEMPLATE_TEST_CASE("patch embedding: video frames, weights, bias and pixels against finite differences",
                   "[ops][patch_embed][gradcheck]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(24);
  // 2 clips x 3 frames of 3-channel 12x8 images, patch 4: 6 patches per frame, 48 features.
  int const frames = 2 * 3, cin = 3, h = 12, w = 8, patch = 4, c = 10;
  int const rows = frames * (h / patch) * (w / patch), feat = cin * patch * patch;
  Tensor4<double, Mem> images("images", frames, cin, h, w), d_images("d_images", frames, cin, h, w);
  Tensor2<double, Mem> patches("patches", rows, feat), d_patches("d_patches", rows, feat);
  Tensor2<double, Mem> weight("weight", c, feat), y("y", rows, c), d_y("d_y", rows, c);
  Tensor2<double, Mem> d_weight("d_weight", c, feat);
  Tensor1<double, Mem> bias("bias", c), d_bias("d_bias", c);
  fill_uniform(images, rng, 0, 1);
  fill_uniform(weight, rng);
  fill_uniform(bias, rng);

  // patchify against a direct index computation: frame 4, patch (row 1, col 1), channel 2, (3, 0)
  patchify(space, patches, images, patch);
  auto const hp = to_vector(patches), hi = to_vector(images);
  int const patch_row = 4 * 6 + 1 * 2 + 1, feature = 2 * 16 + 3 * 4 + 0;
  int const pixel = ((4 * cin + 2) * h + (1 * patch + 3)) * w + (1 * patch + 0);
  REQUIRE(hp[patch_row * feat + feature] == hi[pixel]);

  auto const r = random_vector(rows * c, rng);
  from_vector(d_y, r);
  patch_embed_forward(space, y, patches, images, weight, bias, patch);
  patch_embed_backward(space, d_images, d_patches, d_weight, d_bias, d_y, patches, weight, patch);
  auto loss = [&] {
    patch_embed_forward(space, y, patches, images, weight, bias, patch);
    return dot(to_vector(y), r);
  };
  JOULE_REQUIRE_GRADIENT("d_images", images, to_vector(d_images), loss, rng);
  JOULE_REQUIRE_GRADIENT("d_weight", weight, to_vector(d_weight), loss, rng);
  JOULE_REQUIRE_GRADIENT("d_bias", bias, to_vector(d_bias), loss, rng);

  REQUIRE_THROWS_WITH(patchify(space, Tensor2<double, Mem>("p", 1, 1),
                               Tensor4<double, Mem>("im", 1, 1, 10, 8), patch),
                      Contains("not divisible by patch size"));
}
