#pragma once
// The training loop: micro-batches with gradient accumulation, AdamW with warm-up + cosine
// learning rate and global-norm clipping, held-out evaluation (loss and exact caption accuracy
// of greedy decoding, decided from one teacher-forced pass), progress lines, checkpoints that
// resume the same trajectory, and a stop with a clear message on NaN/Inf.
#include "core/config/reconfigurable.hpp"
#include "core/data/batch_prefetcher.hpp"
#include "core/model/model.hpp"
#include "core/ops/adamw.hpp"
#include "core/train/optimizer.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule {

class TrainingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// An error another process had and reports itself (a checkpoint its writer could not write):
// this process stops too, but the job should end with the other's message, not this one's.
class ErrorOnOtherProcess : public TrainingError {
 public:
  using TrainingError::TrainingError;
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
  // Offloaded groups' host updates started before the norm was known (speculation then
  // validation, core/train/optimizer.hpp), and those run again because the step was clipped.
  int host_jobs_speculated = 0, host_jobs_rolled_back = 0;
};

struct TrainSummary {
  std::vector<StepRecord> steps;  // this run's steps (after a resume: from the resumed step on)
  std::vector<std::pair<int, EvalResult>> evals;  // (step, result)
  double seconds = 0;
  double tokens_per_second = 0;
};

// Parallelism across processes, as the caller provides it (core knows no communicator; apps/
// wires in parallel::Communicator). W = dp x P processes: P sequence shards (Ulysses, see
// core/model/sequence_shards.hpp) per data-parallel replica. An optimizer step's micro-batches are
// dealt round-robin to the replicas (each draws the same shuffled order and takes its share; the
// shards of a replica take the same ones); the partial gradients of all W processes are summed
// bucket by bucket (one bucket per parameter group, started as the backward pass finishes it, in
// region "comm") and every process then takes the same optimizer step.
struct PendingSum {
  std::function<bool()> test;  // progress; true once complete
  std::function<void()> wait;
  // Optional: makes later work on a stream (cudaStream_t) wait for the sum on the device; false
  // when it cannot (then wait()).
  std::function<bool(void* stream)> order_before;
};
struct DataParallel {
  int rank = 0, size = 1;  // this process's replica, and the number of replicas
  // Sums over all W processes, in place. Host memory unless device_pointers (NCCL).
  std::function<void(float* data, std::size_t count)> allreduce_sum;
  std::function<void(double* data, std::size_t count)> allreduce_sum_double;  // host memory
  // Optional: starts a sum and returns its completion, so gradient buckets travel while the
  // backward pass goes on. Without it, buckets are summed after the backward pass.
  // after_stream: the stream whose kernels wrote `data`, when orders_on_device; else nullptr and
  // those kernels are done.
  std::function<PendingSum(float* data, std::size_t count, void* after_stream)> start_allreduce_sum;
  bool device_pointers = false;
  bool orders_on_device = false;  // NCCL: the sums are ordered by events, nobody waits on the host
};

class Trainer;

// Watches, and may steer, the training loop (Trainer::run): the scheduler measures trials and
// records the training run through one. Called on the launching thread between optimizer steps,
// never inside one; an exception thrown here stops the run there and propagates out of run().
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  // Before optimizer step `step` (1-based): where a run's settings may change.
  virtual void before_step(Trainer& /*trainer*/, int /*step*/) {}
  // After a step (its loss is on the host), before its evaluation and checkpoint, if any
  // (Trainer::pauses_after says whether one follows).
  virtual void on_step(Trainer& /*trainer*/, StepRecord const& /*record*/) {}
  virtual void on_eval(Trainer& /*trainer*/, int /*step*/, EvalResult const& /*result*/) {}
};

class Trainer {
 public:
  // Opens and validates the dataset, builds the model and initialises it from train.seed.
  // Progress goes to `log` (nullptr: silent).
  // With sequence shards (config.train.seq_shards = shards.size > 1) the process holds its
  // share of every sequence; `shards` are the collectives over its sequence group.
  Trainer(Config const& config, std::ostream* log, DataParallel data_parallel = {}, SequenceShards shards = {});

  // Continues from a checkpoint written by save_checkpoint (same model configuration). The file is
  // opened once (io::InputFile) and read through that descriptor: in a child process first
  // (io::read_in_child), then here; one changed meanwhile is refused before anything is used.
  void resume(std::string const& checkpoint_path);
  void resume(io::InputFile const& checkpoint);
  // Writes a checkpoint from this process alone (io::commit_file: to a temporary, synced, read back,
  // renamed over path); throws io::WriteError, the previous checkpoint unchanged.
  void save_checkpoint(std::string const& path);
  // Collective over every process of the job: one process writes (replica 0's shard 0), the
  // others wait for it, and a failure is thrown on every process, not on the writer alone.
  void save_checkpoint_once(std::string const& path);
  // Text the checkpoints of this run carry for whoever drives it (e.g. the tuning log the run
  // writes to), in /notes/keys and /notes/values; read back with checkpoint_notes().
  void set_checkpoint_note(std::string const& key, std::string const& value) { notes_[key] = value; }
  // (Read as resume() reads: in a child process first, then here from the same descriptor.)
  static std::map<std::string, std::string> checkpoint_notes(std::string const& checkpoint_path);
  static std::map<std::string, std::string> checkpoint_notes(io::InputFile const& checkpoint);

  // Between steps (e.g. from TrainObserver::before_step): goes on with the settings `next`
  // (core/config/reconfigurable.hpp): offload ratio, cast placement, recompute depth and host
  // threads (bitwise the same arithmetic) and micro-batch (each step still takes the same samples,
  // split anew: the same mathematics up to summation order); nothing else of the run can change.
  // Throws ConfigError naming a value the configuration would refuse. Parameters, AdamW moments,
  // the step and the data order are kept: the state goes through host memory, the model and
  // optimizer are rebuilt for the new settings (one allocation per switch, none per step). If that
  // fails (out of memory), the trainer is rebuilt as it was, with the same state, and the error
  // propagates.
  void reconfigure(Reconfigurable const& next);
  // The same with new process groups (the job's layout re-formed between steps, e.g. by
  // apps::Processes::relayout): seq_shards may change too, to shards.size; the replicas and shards
  // must hold as many processes as before, and every process must call it.
  void reconfigure(Reconfigurable const& next, DataParallel data_parallel, SequenceShards shards);

  // Trains until config.train.steps (or `max_steps` more steps, if >= 0), evaluating every
  // eval_every steps and at the end, checkpointing as configured; `observer` (optional) is told
  // of every step and evaluation.
  TrainSummary run(int max_steps = -1, TrainObserver* observer = nullptr);
  EvalResult evaluate();

  int step() const { return step_; }
  // Whether an evaluation or a checkpoint follows optimizer step `step` (1-based).
  bool pauses_after(int step) const;
  Model& model() { return *model_; }
  Optimizer const& optimizer() const { return *optimizer_; }
  Optimizer& optimizer() { return *optimizer_; }
  Config const& config() const { return cfg_; }
  std::string offload_summary() const;  // requested and achieved ratio, groups, bytes
  BatchPrefetcher const& prefetcher() const { return *prefetcher_; }
  std::size_t train_samples() const { return train_indices_.size(); }
  std::size_t eval_samples() const { return eval_indices_.size(); }

 private:
  StepRecord train_step();
  bool distributed() const { return dp_.size * model_->shards().size > 1; }
  void start_gradient_sum(int group);  // bucket `group` is final on this process
  void finish_gradient_sums();         // waits for every bucket and hands it to the optimizer
  void stage_buffers();                // the host copies MPI sums, when it cannot read device memory
  void regroup(Reconfigurable const& next, DataParallel data_parallel, SequenceShards shards);  // reconfigure's work
  double learning_rate(int step) const;  // step: 0-based

  Config cfg_;
  std::ostream* log_;
  Dataset data_;
  std::vector<std::size_t> train_indices_, eval_indices_;
  // Evaluation's buffers, kept between evaluations (it allocates nothing once they have grown).
  static constexpr std::size_t kEvalExamples = 4;
  std::vector<std::size_t> eval_ids_;
  HostBatch eval_batch_;
  std::vector<std::int32_t> eval_tokens_;
  std::vector<char> eval_done_;
  BatchSampler sampler_;
  // The next micro-batch of this process, read on a thread while this one is queued (after data_:
  // it reads from it and goes first), and the buffer the current one is read into.
  std::unique_ptr<BatchPrefetcher> prefetcher_;
  HostBatch train_batch_;
  std::unique_ptr<Model> model_;  // rebuilt by reconfigure()
  ExecSpace space_;
  std::unique_ptr<Optimizer> optimizer_;
  DataParallel dp_;
  struct Bucket {
    int group;
    Tensor1<float, DeviceMemory> grad;
    PinnedMirror<Tensor1<float, DeviceMemory>> staged;  // host copy, when MPI needs one
    PendingSum pending;
  };
  std::vector<Bucket> buckets_;  // this step's, in the order the backward pass finished them
  // Per group, the host copy MPI sums when it cannot read device memory (allocated once).
  std::vector<PinnedMirror<Tensor1<float, DeviceMemory>>> staged_;
  // The step's loss: per micro-batch the sum of its rows' losses, left on the device by forward()
  // and brought to the host with the gradient norm (the step's one wait), and its counted rows
  // (-1: another replica's micro-batch). Grown when the micro-batch count grows, not per step.
  Kokkos::View<double*, DeviceMemory> micro_losses_;
  PinnedMirror<Kokkos::View<double*, DeviceMemory>> micro_losses_host_;
  std::vector<int> micro_counted_;
  int step_ = 0;  // optimizer steps done
  bool announced_ = false;  // the "training: ..." line is printed once per trainer
  int clipped_rollbacks_ = 0;  // steps whose speculative host updates ran again, since the last log line
  std::pair<std::chrono::steady_clock::time_point, int> progress_since_;  // (time, step) of the first run()
  std::map<std::string, std::string> notes_;
};

// Bytes a checkpoint of this configuration takes, at most: checked against the free space before
// a run starts and before every checkpoint is written.
std::uint64_t checkpoint_bytes(Config const& cfg);

// A checkpoint read for inference (`joule caption`): the configuration it was trained with, and
// its parameters loaded into a model built for that configuration (every tensor checked first,
// the file read in a child process first, as Trainer::resume does). Given one io::InputFile, both
// read the one file opened, whatever is renamed over its path in between.
Config checkpoint_config(std::string const& path);
Config checkpoint_config(io::InputFile const& checkpoint);
void load_checkpoint_parameters(std::string const& path, Model& model);
void load_checkpoint_parameters(io::InputFile const& checkpoint, Model& model);

// One line per evaluation / summary, shared by `joule train` and tests.
std::string format_eval(EvalResult const& e);

}  // namespace joule
