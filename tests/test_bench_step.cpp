// The whole-step benchmark (apps/bench/bench_step.hpp): its FLOP count against a hand
// computation, its GEMM list against the closed form of the model's GEMM FLOPs, and a measured
// tiny step whose figures are finite, positive and consistent.
#include "bench/bench_step.hpp"
#include "core/config/config.hpp"

#include "support/catch.hpp"
#include "support/test_paths.hpp"

#include <cmath>

using joule::apps::StepShape;
using joule::test::Approx;

TEST_CASE("bench step: FLOPs of a step by hand", "[bench][step]") {
  // 1 layer, C = 8, 2 heads (hd 4), 8x8 images in 4x4 patches (4 image tokens, 48 features),
  // 4 text tokens: S = 8, B = 1, N = 8.
  StepShape const s{"hand", "", 1, 8, 2, 8, 4, 4, 1};
  auto const f = joule::apps::step_flops(s);
  // Blocks 6 N 12 C^2 = 36864; LM head (all rows, forward + d_in + d_W) 6 N C V = 6*8*8*259 =
  // 99456; patch embedding (forward + d_W, pixels take no gradient) 4 * 4 * 48 * 8 = 6144.
  CHECK(f.gemm == 36864.0 + 99456.0 + 6144.0);
  // prefix(4) over 8 positions: rows 0-3 see 4 keys, rows 4..7 see 5..8: 42 pairs;
  // 14 * B * H * pairs * hd = 14 * 1 * 2 * 42 * 4.
  CHECK(f.attention == 4704.0);
  CHECK(f.total() == 147168.0);
}

TEST_CASE("bench step: the GEMM list adds up to the model's GEMM FLOPs", "[bench][step]") {
  for (auto const& s : joule::apps::step_shapes()) {
    double const n = s.tokens(), c = s.d_model, m = s.mlp(), v = joule::kVocabSize;
    double const expected = 6.0 * n * (3 * c * c + c * c + 2 * c * m) * s.layers + 6.0 * n * c * v +
                            4.0 * s.batch * s.image_tokens() * s.patch_features() * c;
    CAPTURE(s.name);
    CHECK(joule::apps::step_flops(s).gemm == Approx(expected).epsilon(1e-12));
    // 4 linears per block with d_in, the LM head with d_in, the patch embedding without.
    CHECK(joule::apps::step_gemms(s).size() == 4 * 3 + 3 + 2);
  }
}

TEST_CASE("bench step: a tiny measured step has finite, positive, consistent figures", "[bench][step]") {
  auto const& s = joule::apps::step_shape("tiny");
  auto const r = joule::apps::measure_step(s, 1);
  CHECK(std::isfinite(r.median_s));
  CHECK(r.median_s > 0);
  CHECK(r.min_s <= r.median_s);
  // At initialisation the byte-level LM predicts nearly uniformly: loss ~ ln 259 = 5.56.
  CHECK(r.first_loss == Approx(std::log(259.0)).margin(0.2));
  REQUIRE(r.gemm_call_seconds.size() == joule::apps::step_gemms(s).size());
  for (double t : r.gemm_call_seconds) CHECK(t > 0);
  CHECK(r.gemm_rate() > 0);
  CHECK(std::isfinite(r.limit_seconds()));
  CHECK(r.limit_seconds() > r.gemm_seconds);  // attention FLOPs add to the GEMMs'
  CHECK(r.limit_fraction() > 0);
  CHECK_THROWS_AS(joule::apps::step_shape("huge"), std::invalid_argument);
}

TEST_CASE("bench step: the gh200 shape is apps/configs/gh200-350m.json's model at its micro-batch", "[bench][step]") {
  auto const cfg = joule::load_config(joule::test::source_path("apps/configs/gh200-350m.json"));
  auto const& s = joule::apps::step_shape("gh200");
  auto const& m = cfg.model;
  CHECK(s.layers == m.layers);
  CHECK(s.d_model == m.d_model);
  CHECK(s.heads == m.heads);
  CHECK(s.mlp() == m.mlp_hidden());
  CHECK(s.image_size == m.image_size);
  CHECK(s.patch_size == m.patch_size);
  CHECK(m.channels == 3);
  CHECK(m.frames == 1);
  CHECK(m.tie_embeddings);
  CHECK(s.text_len == m.text_len);
  CHECK(s.batch == cfg.train.micro_batch);
  CHECK(cfg.train.precision == joule::Precision::bf16);
}
