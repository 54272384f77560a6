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
