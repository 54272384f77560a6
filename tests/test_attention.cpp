// Flash-style attention against a naive reference that materialises the softmax, for all three
// masks, head sizes 16/32/64, sequence lengths from 1 to a few hundred (odd ones and tile
// boundaries included); plus finite differences on small cases.
#include "core/ops/attention.hpp"
#include "support/naive_attention.hpp"
#include "support/test_support.hpp"

#include <cstring>
#include <type_traits>

using namespace joule;
using namespace joule::test;

namespace {

// Block: run the GPU-shaped kernels (256-thread blocks, see attention_block_kernels.hpp) whatever the
// backend; else the backend's own (the host kernels on CPUs).
template <class T, class Space, bool Block = detail::attention_block_default<Space>()>
void compare_with_naive(Space const& space, int batch, int seq, int heads, int hd,
                        AttentionMask const& mask, Rng& rng, double rtol, double atol) {
  using Mem = typename Space::memory_space;
  int const c = heads * hd, n = batch * seq;
  Tensor2<T, Mem> qkv("qkv", n, 3 * c), out("out", n, c), d_out("d_out", n, c), d_qkv("d_qkv", n, 3 * c);
  Tensor2<T, Mem> lse("lse", batch * heads, seq), delta("delta", batch * heads, seq);
  fill_uniform(qkv, rng, -2, 2);  // wide enough that softmax rows are far from uniform
  fill_uniform(d_out, rng);
  detail::attention_forward_as<Block>(space, out, lse, qkv, batch, heads, mask);
  detail::attention_backward_as<Block>(space, d_qkv, delta, d_out, qkv, out, lse, batch, heads, mask);
  auto const ref = naive_attention(to_vector(qkv), to_vector(d_out), batch, seq, heads, hd,
                                   mask.open_prefix(seq));
  INFO("mask " << mask.name() << ", seq " << seq << ", head size " << hd << ", "
               << (sizeof(T) == 4 ? "float" : "double") << (Block ? ", block kernels" : ", host kernels"));
  JOULE_REQUIRE_CLOSE("attention out", to_vector(out), ref.out, rtol, atol);
  JOULE_REQUIRE_CLOSE("attention lse", to_vector(lse), ref.lse, rtol, atol);
  JOULE_REQUIRE_CLOSE("attention d_qkv", to_vector(d_qkv), ref.d_qkv, rtol, atol);
}

}  // namespace

TEMPLATE_TEST_CASE("attention: forward and backward equal a naive softmax reference",
                   "[ops][attention]", JOULE_TEST_SPACES) {
  TestType space;
  Rng rng(41);
  auto const hd = GENERATE(16, 32, 64);
  auto const seq = GENERATE(1, 2, 7, 16, 17, 31, 64, 65, 129, 203);
  int const prefix = seq > 2 ? int(seq / 3) + 1 : 1;
  for (auto const& mask : {AttentionMask::none(), AttentionMask::causal(), AttentionMask::prefix(prefix)}) {
    compare_with_naive<double>(space, 2, seq, 2, hd, mask, rng, 1e-10, 1e-12);
  }
}

TEMPLATE_TEST_CASE("attention: float kernels (other tile sizes) agree with the double reference",
                   "[ops][attention]", JOULE_TEST_SPACES) {
  TestType space;
  Rng rng(42);
  auto const hd = GENERATE(16, 64);
  auto const seq = GENERATE(33, 97, 130);
  for (auto const& mask : {AttentionMask::none(), AttentionMask::causal(), AttentionMask::prefix(40)}) {
    compare_with_naive<float>(space, 1, seq, 3, hd, mask, rng, 2e-4, 2e-5);
  }
}

TEMPLATE_TEST_CASE("attention: awkward sizes for the CPU tiling (64-row tiles, 4-row groups)",
                   "[ops][attention]", JOULE_TEST_SPACES) {
  // Sequences that end mid-tile and mid row group, prefixes that end inside a tile and inside a
  // row group, and head size 128 (whose backward tiles are narrower than the forward's).
  TestType space;
  Rng rng(45);
  auto const hd = GENERATE(32, 128);
  auto const seq = GENERATE(5, 63, 66, 150);
  for (auto const& mask : {AttentionMask::causal(), AttentionMask::prefix(seq / 2 + 3),
                           AttentionMask::prefix(seq - 1)}) {
    compare_with_naive<double>(space, 2, seq, 1, hd, mask, rng, 1e-10, 1e-12);
    compare_with_naive<float>(space, 1, seq, 2, hd, mask, rng, 2e-4, 2e-5);
  }
}

TEMPLATE_TEST_CASE("attention: the GPU-shaped block kernels, run on any backend, equal the reference",
                   "[ops][attention]", JOULE_TEST_SPACES) {
  // The 256-thread block kernels run here as they do on a GPU, their roles one after the other:
  // sequences that end inside the 16/32/64-row tiles and the 16-row thread grid, prefixes that
  // end inside a tile, tiles of 16 to 64 rows, float and double, and each of the three places a
  // plan puts its tiles in (attention_block_plan: what Kokkos grants a CUDA team decides):
  // everything in shared memory (level 0), the accumulators in level 1 (float dK/dV at head size
  // 128, double dK/dV at 64), everything in level 1 (double at 128). A prefix mask has an open
  // block and a causal part.
  using detail::AttentionBlockScratch;
  STATIC_REQUIRE(AttentionBlockScratch<detail::AttentionForwardBlockLayout<float, 16>>::kPlan.rows == 64);
  STATIC_REQUIRE(!AttentionBlockScratch<detail::AttentionForwardBlockLayout<float, 64>>::kPlan.accumulators_global);
  STATIC_REQUIRE(AttentionBlockScratch<detail::AttentionKeyValueBlockLayout<float, 128>>::kPlan.accumulators_global);
  STATIC_REQUIRE(!AttentionBlockScratch<detail::AttentionKeyValueBlockLayout<float, 128>>::kPlan.staged_global);
  STATIC_REQUIRE(AttentionBlockScratch<detail::AttentionKeyValueBlockLayout<double, 64>>::kPlan.accumulators_global);
  STATIC_REQUIRE(AttentionBlockScratch<detail::AttentionQueryBlockLayout<double, 128>>::kPlan.staged_global);
  TestType space;
  Rng rng(46);
  auto const hd = GENERATE(16, 64, 128);
  auto const seq = GENERATE(1, 47, 131);
  compare_with_naive<double, TestType, true>(space, 1, seq, 1, hd, AttentionMask::prefix(seq / 2 + 3), rng, 1e-10,
                                             1e-12);
  if (seq > 1)
    compare_with_naive<float, TestType, true>(space, 2, seq, 1, hd, AttentionMask::causal(), rng, 2e-4, 2e-5);
}

TEMPLATE_TEST_CASE("attention: both kernel shapes give the same bits on every run",
                   "[ops][attention]", JOULE_TEST_SPACES) {
  // Every reduction runs in a fixed order (no atomics, no order left to the scheduler): two runs
  // of the same inputs agree bit for bit, host and block kernels alike.
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(47);
  int const batch = 2, seq = 77, heads = 2, hd = 32, c = heads * hd, n = batch * seq;
  Tensor2<float, Mem> qkv("qkv", n, 3 * c), d_out("d_out", n, c);
  fill_uniform(qkv, rng, -2, 2);
  fill_uniform(d_out, rng);
  auto const run = [&](auto block) {
    constexpr bool kBlock = decltype(block)::value;
    Tensor2<float, Mem> out("out", n, c), d_qkv("d_qkv", n, 3 * c);
    Tensor2<float, Mem> lse("lse", batch * heads, seq), delta("delta", batch * heads, seq);
    auto const mask = AttentionMask::prefix(30);
    detail::attention_forward_as<kBlock>(space, out, lse, qkv, batch, heads, mask);
    detail::attention_backward_as<kBlock>(space, d_qkv, delta, d_out, qkv, out, lse, batch, heads, mask);
    auto r = to_vector(out);
    for (auto x : to_vector(lse)) r.push_back(x);
    for (auto x : to_vector(d_qkv)) r.push_back(x);
    return r;
  };
  for (int shape = 0; shape < 2; ++shape) {
    INFO((shape ? "block kernels" : "host kernels"));
    auto const a = shape ? run(std::true_type{}) : run(std::false_type{});
    auto const b = shape ? run(std::true_type{}) : run(std::false_type{});
    REQUIRE(a.size() == b.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    REQUIRE(differ == 0);
  }
}

TEMPLATE_TEST_CASE("attention: backward against finite differences of the forward pass",
                   "[ops][attention][gradcheck]", JOULE_TEST_SPACES) {
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(43);
  int const batch = 2, seq = 11, heads = 2, hd = 16, c = heads * hd, n = batch * seq;
  for (auto const& mask : {AttentionMask::none(), AttentionMask::causal(), AttentionMask::prefix(4)}) {
    INFO("mask " << mask.name());
    Tensor2<double, Mem> qkv("qkv", n, 3 * c), out("out", n, c), d_out("d_out", n, c),
        d_qkv("d_qkv", n, 3 * c);
    Tensor2<double, Mem> lse("lse", batch * heads, seq), delta("delta", batch * heads, seq);
    fill_uniform(qkv, rng, -1.5, 1.5);
    fill_uniform(d_out, rng);
    auto const r = to_vector(d_out);
    attention_forward(space, out, lse, qkv, batch, heads, mask);
    attention_backward(space, d_qkv, delta, d_out, qkv, out, lse, batch, heads, mask);
    auto loss = [&] {
      attention_forward(space, out, lse, qkv, batch, heads, mask);
      return dot(to_vector(out), r);
    };
    JOULE_REQUIRE_GRADIENT("attention d_qkv", qkv, to_vector(d_qkv), loss, rng);
  }
}

TEMPLATE_TEST_CASE("attention: masks restrict what each query sees", "[ops][attention]",
                   JOULE_TEST_SPACES) {
  // Changing a key/value a query must not see leaves that query's output unchanged.
  using Mem = typename TestType::memory_space;
  TestType space;
  Rng rng(44);
  int const seq = 12, heads = 1, hd = 16, c = hd, prefix = 5;
  Tensor2<double, Mem> qkv("qkv", seq, 3 * c), out("out", seq, c), lse("lse", 1, seq);
  fill_uniform(qkv, rng);
  attention_forward(space, out, lse, qkv, 1, heads, AttentionMask::prefix(prefix));
  auto const before = to_vector(out);
  auto h = to_vector(qkv);
  for (int d = 0; d < 2 * c; ++d) h[7 * 3 * c + c + d] += 1.0;  // key/value of token 7 (text)
  from_vector(qkv, h);
  attention_forward(space, out, lse, qkv, 1, heads, AttentionMask::prefix(prefix));
  auto const after = to_vector(out);
  for (int i = 0; i < seq; ++i) {
    bool const sees_token_7 = i >= 7;  // image tokens never see text; text sees only the past
    double diff = 0;
    for (int d = 0; d < c; ++d) diff += std::abs(after[i * c + d] - before[i * c + d]);
    INFO("query " << i);
    REQUIRE((diff > 1e-6) == sees_token_7);
  }
  REQUIRE_THROWS_WITH(attention_forward(space, out, lse, Tensor2<double, Mem>("bad", seq, 3 * 24), 1,
                                        1, AttentionMask::causal()),
                      Contains("head size 24 has no kernel"));
}
