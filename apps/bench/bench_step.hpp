#pragma once
// `joule bench --suite step`: whole training steps of the real model (joule::Model forward and
// backward, then joule::Optimizer: global-norm clipping and AdamW) at named shapes, next to the
// step's GEMM-bound limit: the step's FLOPs divided by the rate KokkosBlas::gemm reaches at the
// step's own GEMM shapes, measured in the same run. apps/scripts/bench_torch.py runs the same
// shapes (read from the JSON) through PyTorch.
#include "core/config/config.hpp"
#include "core/ops/attention_gemm_workspace.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>

#include <string>
#include <string_view>
#include <vector>

namespace joule::apps {

// One step shape: the model (pre-LN blocks, MLP 4 C, tied byte-vocabulary LM head, 3-channel
// square images, one frame) and the samples per step.
struct StepShape {
  char const* name;
  char const* what;
  int layers, d_model, heads, image_size, patch_size, text_len, batch;

  int image_tokens() const { return (image_size / patch_size) * (image_size / patch_size); }
  int seq() const { return image_tokens() + text_len; }
  int tokens() const { return batch * seq(); }
  int mlp() const { return 4 * d_model; }
  int patch_features() const { return 3 * patch_size * patch_size; }
};

// The shapes `--step-shapes` accepts, in table order; the default set is the first three.
std::vector<StepShape> const& step_shapes();
std::vector<std::string> default_step_shape_names();
StepShape const& step_shape(std::string_view name);  // throws std::invalid_argument
// "what: L layers, C=.., H heads, image tokens (HxW, patch P) + text = S tokens, B=.."
std::string describe(StepShape const& s);

// One KokkosBlas::gemm call of a step, as joule issues it: C[m, n] = op(A) · op(B) + beta C
// with op = transpose where the flag is 'T' (A is [m, k] or [k, m], B is [k, n] or [n, k]),
// `count` times per step.
struct GemmCall {
  std::string what;  // "block fc forward", ...
  char trans_a, trans_b;
  int m, n, k;
  float beta;
  int count;
  double flops() const { return 2.0 * m * n * k * count; }
};
// Every GEMM of one training step, from core/ops/linear.hpp, core/model/block.hpp and
// core/model/model.cpp: per block forward qkv, proj, fc, fc_proj (in · Wᵀ) and backward
// d_in = d_out · W, d_W += d_outᵀ · in; the patch embedding (forward, d_W only: pixels take no
// gradient) and the LM head over all B·S rows (forward, d_in, d_W).
std::vector<GemmCall> step_gemms(StepShape const& s);

struct StepFlops {
  double gemm = 0;       // the sum over step_gemms()
  double attention = 0;  // 14 · B · H · visible (query, key) pairs · head dim, per layer
  double total() const { return gemm + attention; }
};
StepFlops step_flops(StepShape const& s);

struct StepMeasurement {
  double median_s = 0, min_s = 0;
  double first_loss = 0;         // the loss of the first (warm-up) step: at initialisation
  double gemm_seconds = 0;       // sum over the step's GEMMs of median time per call x count
  std::vector<double> gemm_call_seconds;  // per step_gemms() entry, median time of one call
  StepFlops flops;
  double gemm_rate() const { return flops.gemm / gemm_seconds; }            // FLOP/s
  double limit_seconds() const { return flops.total() / gemm_rate(); }      // the GEMM-bound limit
  double limit_fraction() const { return limit_seconds() / median_s; }      // 1: at the limit
};
// `steps` fenced training steps of `config` at `batch` samples, as Trainer::train_step runs them
// with one micro-batch (zero the gradients, forward, backward with the optimizer's per-group hook,
// global norm, clipping, AdamW; everything on the device, synthetic data): each step's seconds
// and loss. before_step(i) runs before step i (0-based), untimed.
struct StepRuns {
  std::vector<double> seconds, losses;
};
// attention: a bf16 model's attention path (default: the backend's; the launch tools record CUDA's).
StepRuns run_training_steps(ModelConfig const& config, int batch, int recompute_depth, int steps,
                            std::function<void(int)> const& before_step = {}, Precision precision = Precision::fp32,
                            std::optional<AttentionPath> attention = std::nullopt);
ModelConfig model_config(StepShape const& s);

// Times warm-up + `repeats` fenced training steps of the shape (median), then its GEMMs.
StepMeasurement measure_step(StepShape const& s, int repeats, Precision precision = Precision::fp32);

// Runs, prints and adds report["steps"] (one entry per shape, every figure bench_torch.py needs).
// Throws std::runtime_error if a figure is not finite and positive.
void run_step_bench(std::vector<std::string> const& shape_names, int repeats, nlohmann::json& report,
                    Precision precision = Precision::fp32);

// The learning rate and optimizer settings of the benchmark step (also written to the JSON).
inline constexpr double kStepLearningRate = 1e-3;
inline constexpr double kStepWeightDecay = 0.01;
inline constexpr double kStepBeta1 = 0.9, kStepBeta2 = 0.95, kStepEps = 1e-8;
inline constexpr double kStepGradClip = 1.0;

}  // namespace joule::apps
