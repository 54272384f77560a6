#pragma once
// The training loop: micro-batches with gradient accumulation, AdamW with warm-up + cosine
// learning rate and global-norm clipping, held-out evaluation (loss and exact caption accuracy
// by greedy decoding), progress lines, checkpoints that resume the same trajectory, and a stop
// with a clear message on NaN/Inf.
#include "core/model/model.hpp"
#include "core/ops/adamw.hpp"
#include "core/train/optimizer.hpp"

#include <functional>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule {

class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EvalResult {
  double loss = 0;      // mean next-token loss on held-out text positions
  double accuracy = 0;  // share of held-out samples whose greedy caption equals the reference
  int samples = 0;
  std::vector<std::pair<std::string, std::string>> examples;  // (reference, generated)
};

struct StepRecord {
  int step = 0;  // 1-based optimizer step
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0;
};

struct TrainSummary {
  std::vector<StepRecord> steps;  // this run's steps (after a resume: from the resumed step on)
  std::vector<std::pair<int, EvalResult>> evals;  // (step, result)
  double seconds = 0;
  double tokens_per_second = 0;
};

// Data parallelism across processes, as the caller provides it (core knows no communicator;
// apps/ wires in parallel::Communicator). Every process holds the whole model; an optimizer
// step's micro-batches are dealt round-robin to the processes (each draws the same shuffled
// order and takes its share), their gradients are summed across processes group by group
// (region "comm") and every process then takes the same optimizer step.
struct DataParallel {
  int rank = 0, size = 1;
  std::function<void(float* data, std::size_t count)> allreduce_sum;    // host buffers, in place
  std::function<void(double* data, std::size_t count)> allreduce_sum_double;
};

class Trainer {
 public:
  // Opens and validates the dataset, builds the model and initialises it from train.seed.
  // Progress goes to `log` (nullptr: silent).
  Trainer(Config const& config, std::ostream* log, DataParallel data_parallel = {});

  // Continues from a checkpoint written by save_checkpoint (same model configuration).
  void resume(std::string const& checkpoint_path);
  void save_checkpoint(std::string const& path) const;

  // Trains until config.train.steps (or `max_steps` more steps, if >= 0), evaluating every
  // eval_every steps and at the end, checkpointing as configured.
  TrainSummary run(int max_steps = -1);
  EvalResult evaluate();

  int step() const { return step_; }
  Model& model() { return model_; }
  Optimizer const& optimizer() const { return optimizer_; }
  std::string offload_summary() const;  // requested and achieved ratio, groups, bytes
  std::size_t train_samples() const { return train_indices_.size(); }
  std::size_t eval_samples() const { return eval_indices_.size(); }

 private:
  StepRecord train_step();
  void allreduce_gradients();
  double learning_rate(int step) const;  // step: 0-based

  Config cfg_;
  std::ostream* log_;
  Dataset data_;
  std::vector<std::size_t> train_indices_, eval_indices_;
  BatchSampler sampler_;
  Model model_;
  ExecSpace space_;
  Optimizer optimizer_;
  DataParallel dp_;
  int step_ = 0;  // optimizer steps done
};

// One line per evaluation / summary, shared by `joule train` and tests.
std::string format_eval(EvalResult const& e);

}  // namespace joule
