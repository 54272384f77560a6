// Whole training steps of the real model and optimizer at the shapes of kStepShapes, timed as
// the trainer runs them (core/train/trainer.cpp: zero the gradients, forward, backward with the
// optimizer's per-group hook, global gradient norm, clipping scale, AdamW), with everything on
// the device (offload ratio 0, no recomputation). Next to each: the step's GEMM-bound limit, the
// step's FLOPs at the rate KokkosBlas::gemm reaches on the step's own GEMM calls (the same
// shapes, transposes, beta and views as core/ops/linear.hpp uses), timed in the same run.
#include "bench/bench_step.hpp"

#include "core/compat_kernels.hpp"
#include "core/data/dataset.hpp"
#include "core/config/config.hpp"
#include "core/model/model.hpp"
#include "core/ops/attention.hpp"
#include "core/train/optimizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace joule::apps {

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Mem = Space::memory_space;

// Batches are chosen so that a step takes roughly 0.1 to 1 s on 2 CPU cores (OpenBLAS).
// name, what, layers, d_model, heads, image_size, patch_size, text_len, batch (describe() spells it out).
constexpr StepShape kStepShapes[] = {
    {"small", "narrow and short", 4, 128, 4, 32, 8, 36, 32},
    {"medium", "the GEMM-bound goal's shape", 6, 384, 6, 64, 8, 64, 8},
    {"wide", "ViT-Base width", 2, 768, 12, 32, 8, 48, 8},
    {"tiny", "for smoke tests", 1, 64, 4, 16, 8, 12, 2},
    // apps/configs/gh200-350m.json's model at its micro-batch (tests/test_bench_step.cpp checks
    // they agree): a GPU's shape, minutes a step on a CPU.
    {"gh200", "apps/configs/gh200-350m.json (352M parameters)", 28, 1024, 16, 224, 16, 64, 64},
};
constexpr int kDefaultStepShapes = 3;  // small, medium, wide
// NVIDIA's dense bf16 tensor-core peak of an H100/H200 SXM (989.4 TFLOP/s at 1,830 MHz boost): the
// denominator of model FLOPs utilisation.
constexpr double kHopperBf16PeakFlops = 989.4e12;

// Random pixels; each caption BOS, random bytes, EOS (no padding: every text position but the
// last has a target).
HostBatch synthetic_batch(ModelConfig const& m, int batch, std::mt19937& rng) {
  HostBatch b;
  b.images.resize(std::size_t(batch) * m.frames * m.channels * m.image_size * m.image_size);
  std::uniform_int_distribution<int> pixel(0, 255), byte(0, 255);
  for (auto& p : b.images) p = static_cast<std::uint8_t>(pixel(rng));
  b.tokens.resize(std::size_t(batch) * m.text_len);
  for (int i = 0; i < batch; ++i)
    for (int j = 0; j < m.text_len; ++j)
      b.tokens[std::size_t(i) * m.text_len + j] = j == 0 ? kTokenBos : j + 1 == m.text_len ? kTokenEos : byte(rng);
  for (int i = 0; i < batch; ++i) b.samples.push_back(std::size_t(i));
  return b;
}

double median_of(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class View>
void fill_uniform(View const& v, std::mt19937& rng) {
  auto h = Kokkos::create_mirror_view(v);
  std::uniform_real_distribution<float> d(-1, 1);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = d(rng);
  Kokkos::deep_copy(v, h);
}

// Median time of one call, on views shaped as joule's: LayoutRight, A [m, k] ('N') or [k, m]
// ('T'), B [k, n] ('N') or [n, k] ('T'). Back-to-back calls per sample where one is short.
double time_gemm(GemmCall const& g, int samples, std::mt19937& rng) {
  Space space;
  Tensor2<float, Mem> a("gemm_a", g.trans_a == 'N' ? g.m : g.k, g.trans_a == 'N' ? g.k : g.m);
  Tensor2<float, Mem> b("gemm_b", g.trans_b == 'N' ? g.k : g.n, g.trans_b == 'N' ? g.n : g.k);
  Tensor2<float, Mem> c("gemm_c", g.m, g.n);
  fill_uniform(a, rng), fill_uniform(b, rng), fill_uniform(c, rng);
  char const ta[2] = {g.trans_a, 0}, tb[2] = {g.trans_b, 0};
  auto const call = [&] { compat::gemm(space, ta, tb, 1.0f, a, b, g.beta, c); };
  call();  // warm-up
  space.fence();
  Kokkos::Timer once;
  call();
  space.fence();
  int const per_sample = std::clamp(int(std::ceil(2e-3 / std::max(once.seconds(), 1e-7))), 1, 1000);
  std::vector<double> t;
  for (int r = 0; r < samples; ++r) {
    Kokkos::Timer timer;
    for (int i = 0; i < per_sample; ++i) call();
    space.fence();
    t.push_back(timer.seconds() / per_sample);
  }
  return median_of(t);
}

bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

}  // namespace

ModelConfig model_config(StepShape const& s) {
  ModelConfig m;
  m.layers = s.layers;
  m.d_model = s.d_model;
  m.heads = s.heads;
  m.mlp_ratio = 4;
  m.image_size = s.image_size;
  m.patch_size = s.patch_size;
  m.channels = 3;
  m.frames = 1;
  m.text_len = s.text_len;
  m.tie_embeddings = true;
  return m;
}

std::vector<StepShape> const& step_shapes() {
  static std::vector<StepShape> const all(std::begin(kStepShapes), std::end(kStepShapes));
  return all;
}

std::string describe(StepShape const& s) {
  return fmt::format("{}: {} layer{}, C={}, {} heads, {} image tokens ({}x{}, patch {}) + {} text = {} tokens, "
                     "B={}",
                     s.what, s.layers, s.layers == 1 ? "" : "s", s.d_model, s.heads, s.image_tokens(),
                     s.image_size, s.image_size, s.patch_size, s.text_len, s.seq(), s.batch);
}

std::vector<std::string> default_step_shape_names() {
  std::vector<std::string> names;
  for (int i = 0; i < kDefaultStepShapes; ++i) names.emplace_back(kStepShapes[i].name);
  return names;
}

StepShape const& step_shape(std::string_view name) {
  std::string allowed;
  for (auto const& s : kStepShapes) {
    if (name == s.name) return s;
    allowed += (allowed.empty() ? "" : ", ") + std::string(s.name);
  }
  throw std::invalid_argument("unknown step shape '" + std::string(name) + "' (allowed: " + allowed + ")");
}

std::vector<GemmCall> step_gemms(StepShape const& s) {
  int const n = s.tokens(), c = s.d_model, m = s.mlp(), v = kVocabSize, L = s.layers;
  int const n_image = s.batch * s.image_tokens(), fp = s.patch_features();
  // linear_forward: out[N, O] = in[N, I] · W[O, I]ᵀ (+ bias: beta 1 after the bias is written);
  // linear_backward: d_in[N, I] = d_out[N, O] · W[O, I] (beta 0), d_W[O, I] += d_out[N, O]ᵀ · in[N, I].
  std::vector<GemmCall> calls;
  auto const linear = [&](std::string const& what, int rows, int in, int out, bool bias, bool d_in, int count) {
    calls.push_back({what + " forward", 'N', 'T', rows, out, in, bias ? 1.0f : 0.0f, count});
    if (d_in) calls.push_back({what + " d_in", 'N', 'N', rows, in, out, 0.0f, count});
    calls.push_back({what + " d_weight", 'T', 'N', out, in, rows, 1.0f, count});
  };
  linear("patch_embed", n_image, fp, c, true, false, 1);
  linear("block qkv", n, c, 3 * c, true, true, L);
  linear("block proj", n, c, c, true, true, L);
  linear("block fc", n, c, m, true, true, L);
  linear("block fc_proj", n, m, c, true, true, L);
  linear("lm_head", n, c, v, false, true, 1);
  return calls;
}

StepFlops step_flops(StepShape const& s) {
  StepFlops f;
  for (auto const& g : step_gemms(s)) f.gemm += g.flops();
  // Visible (query, key) pairs under the model's prefix(image tokens) mask (as bench_ops.cpp):
  // forward 2 matmuls, backward 5 (scores recomputed), 2 FLOPs each.
  int const seq = s.seq(), p = AttentionMask::prefix(s.image_tokens()).open_prefix(seq);
  double pairs = 0;
  for (int i = 0; i < seq; ++i) pairs += std::min(seq, std::max(i + 1, p));
  f.attention = 14.0 * s.batch * s.heads * pairs * (s.d_model / s.heads) * s.layers;
  return f;
}

StepRuns run_training_steps(ModelConfig const& config, int batch, int recompute_depth, int steps,
                            std::function<void(int)> const& before_step, Precision precision,
                            std::optional<AttentionPath> attention) {
  Space space;
  Model model(config, batch, recompute_depth, {}, precision, attention);
  model.init_parameters(/*seed=*/1);
  OptimizerSettings settings;
  settings.beta1 = kStepBeta1, settings.beta2 = kStepBeta2, settings.eps = kStepEps;
  settings.weight_decay = kStepWeightDecay, settings.grad_clip = kStepGradClip;
  settings.offload_ratio = 0.0;
  Optimizer optimizer(model, settings);
  optimizer.sync_master_weights();
  std::mt19937 rng(11);
  model.set_batch(space, synthetic_batch(config, batch, rng), batch);  // once: not timed
  StepRuns runs;
  for (long step = 1; step <= steps; ++step) {  // as Trainer::train_step, one micro-batch
    if (before_step) before_step(int(step - 1));
    Kokkos::Timer timer;
    optimizer.begin_step(kStepLearningRate, step);
    model.zero_gradients(space);
    double const loss = model.forward(space, [&](int group) { optimizer.wait_for_group(group); }).loss;
    model.backward(space, 1.0, [&](int group) { optimizer.gradients_ready(group); });
    double const norm = optimizer.gradient_norm();
    optimizer.finish_step(norm > kStepGradClip ? kStepGradClip / norm : 1.0);
    optimizer.wait_all();
    space.fence();
    runs.seconds.push_back(timer.seconds());
    runs.losses.push_back(loss);
  }
  return runs;
}

StepMeasurement measure_step(StepShape const& s, int repeats, Precision precision) {
  if (repeats < 1) throw std::invalid_argument("repeats must be >= 1");
  ModelConfig const config = model_config(s);
  StepMeasurement out;
  out.flops = step_flops(s);
  {
    StepRuns const runs = run_training_steps(config, s.batch, /*recompute_depth=*/0, repeats + 1, {}, precision);
    out.first_loss = runs.losses[0];  // warm-up: first touch, OpenBLAS buffers
    std::vector<double> const t(runs.seconds.begin() + 1, runs.seconds.end());
    out.median_s = median_of(t);
    out.min_s = *std::min_element(t.begin(), t.end());
  }  // the model's memory is released before the GEMMs are timed
  std::mt19937 rng(13);
  int const samples = std::max(5, repeats);  // GEMM calls are short: a few more samples
  for (auto const& g : step_gemms(s)) {
    out.gemm_call_seconds.push_back(time_gemm(g, samples, rng));
    out.gemm_seconds += out.gemm_call_seconds.back() * g.count;
  }
  return out;
}

void run_step_bench(std::vector<std::string> const& shape_names, int repeats, nlohmann::json& report,
                    Precision precision) {
  if (repeats < 1) throw std::invalid_argument("--repeats must be >= 1");
  fmt::print("joule bench --suite step: whole training steps (forward, backward, clip, AdamW), {} {} thread{}, "
             "{} (GEMMs: {}; attention: {}), median of {} after a warm-up step\n",
             Space::name(), Space().concurrency(), Space().concurrency() == 1 ? "" : "s", precision_name(precision), gemm_path(precision),
             attention_path(precision), repeats);
  fmt::print("{:<8} {:>12} {:>7} {:>8} {:>10} {:>11} {:>9} {:>9} | {:>12} {:>10} {:>11}\n", "shape",
             "B x S", "layers", "C/heads", "GFLOP", "median ms", "GFLOP/s", "loss@1", "gemm GFLOP/s",
             "limit ms", "limit/step");
  for (auto const& name : shape_names) {
    StepShape const& s = step_shape(name);
    StepMeasurement const r = measure_step(s, repeats, precision);
    for (double x : {r.median_s, r.first_loss, r.gemm_seconds, r.limit_seconds(), r.limit_fraction()})
      if (!finite_positive(x))
        throw std::runtime_error(
            fmt::format("step shape {}: a figure is not finite and positive ({})", s.name, x));
    fmt::print("{:<8} {:>12} {:>7} {:>8} {:>10.2f} {:>11.1f} {:>9.1f} {:>9.4f} | {:>12.1f} {:>10.1f} {:>10.1f}%\n",
               s.name, fmt::format("{} x {}", s.batch, s.seq()), s.layers,
               fmt::format("{}/{}", s.d_model, s.heads), r.flops.total() * 1e-9, r.median_s * 1e3,
               r.flops.total() * 1e-9 / r.median_s, r.first_loss, r.gemm_rate() * 1e-9,
               r.limit_seconds() * 1e3, r.limit_fraction() * 100);
    nlohmann::json calls = nlohmann::json::array();
    auto const gemms = step_gemms(s);
    for (std::size_t i = 0; i < gemms.size(); ++i) {
      auto const& g = gemms[i];
      calls.push_back({{"what", g.what}, {"trans_a", std::string(1, g.trans_a)},
                       {"trans_b", std::string(1, g.trans_b)}, {"m", g.m}, {"n", g.n}, {"k", g.k},
                       {"beta", g.beta}, {"count", g.count}, {"median_s", r.gemm_call_seconds[i]},
                       {"gflops", 2.0 * g.m * g.n * g.k * 1e-9 / r.gemm_call_seconds[i]}});
    }
    report["steps"].push_back({
        {"name", s.name},
        {"what", describe(s)},
        {"model", {{"layers", s.layers}, {"d_model", s.d_model}, {"heads", s.heads}, {"mlp", s.mlp()},
                   {"image_size", s.image_size}, {"patch_size", s.patch_size}, {"channels", 3},
                   {"image_tokens", s.image_tokens()}, {"text_len", s.text_len}, {"seq", s.seq()},
                   {"vocab", kVocabSize}, {"tie_embeddings", true}}},
        {"batch", s.batch},
        {"precision", precision_name(precision)},
        {"gemm_path", gemm_path(precision)},
        {"attention_path", attention_path(precision)},
        {"optimizer", {{"lr", kStepLearningRate}, {"beta1", kStepBeta1}, {"beta2", kStepBeta2},
                       {"eps", kStepEps}, {"weight_decay", kStepWeightDecay}, {"grad_clip", kStepGradClip}}},
        {"median_s", r.median_s},
        {"min_s", r.min_s},
        {"loss_step1", r.first_loss},
        {"flops", {{"gemm", r.flops.gemm}, {"attention", r.flops.attention}, {"total", r.flops.total()}}},
        {"gflops", r.flops.total() * 1e-9 / r.median_s},
        {"gemm", {{"seconds", r.gemm_seconds}, {"rate_gflops", r.gemm_rate() * 1e-9}, {"calls", calls}}},
        {"limit_s", r.limit_seconds()},
        {"limit_fraction", r.limit_fraction()},
    });
  }
  if (bf16_gemm_on_cublaslt<Space>() && held_in_bf16(precision, Held::kernel_weights))
    for (auto const& r : report["steps"])
      if (r.value("precision", "") == precision_name(precision))
        fmt::print("{}: {:.1f} TFLOP/s, {:.1f}% of the {:.0f} TFLOP/s of dense bf16 on an H100/H200 SXM (model FLOPs "
                   "utilisation)\n",
                   r["name"].get<std::string>(), r["gflops"].get<double>() * 1e-3,
                   100 * r["gflops"].get<double>() * 1e9 / kHopperBf16PeakFlops, kHopperBf16PeakFlops * 1e-12);
  fmt::print("limit ms: the step's FLOPs (GEMMs + attention) at the KokkosBlas::gemm rate of the step's own GEMM "
             "calls (timed here); limit/step = limit ms / median ms\n");
}

}  // namespace joule::apps
