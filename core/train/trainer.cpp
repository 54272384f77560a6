#include "core/train/trainer.hpp"
#include "common/plural.hpp"

#include "core/compat_kernels.hpp"
#include "core/detail/ordering_trace.hpp"
#include "core/train/host_cores.hpp"
#include "core/train/captioning.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <ostream>
#include <tuple>

namespace joule {

namespace {

std::vector<std::size_t> range(std::size_t begin, std::size_t end) {
  std::vector<std::size_t> v;
  for (std::size_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  return fmt::format("{}m{:02d}s", int(s) / 60, int(s) % 60);
}

}  // namespace

namespace {
OptimizerSettings optimizer_settings(TrainConfig const& t) {
  OptimizerSettings o;
  o.beta1 = t.beta1;
  o.beta2 = t.beta2;
  o.weight_decay = t.weight_decay;
  o.grad_clip = t.grad_clip;
  o.offload_ratio = t.offload_ratio;
  o.host_threads = t.host_threads;
  o.cast_on_host = t.offload_cast == TrainConfig::OffloadCast::host;
  o.speculate = t.offload_speculation;
  return o;
}
}  // namespace

std::string format_eval(EvalResult const& e) {
  return fmt::format("held-out loss {:.4f}, exact caption accuracy {:.1f}% ({})", e.loss, 100.0 * e.accuracy,
                     counted(e.samples, "sample", "samples"));
}

namespace {
// The dataset, validated whole (Dataset::open reads every sample once, in bounded chunks) and
// checked to hold enough samples, before anything is sized from it or allocated for the model.
Dataset open_training_data(Config const& config) {
  Dataset data = Dataset::open(config.data.path, &config.model);
  std::size_t const n = data.shape().count;
  if (n < 2)
    throw TrainingError(config.data.path + ": holds " + std::to_string(n) +
                        " sample; training needs at least 2 (one to train on, one held out)");
  return data;
}
}  // namespace

namespace {
// A configuration built in code is checked as a parsed one is, before anything is opened.
Config const& checked(Config const& config) {
  check_config(config, "the training configuration");
  return config;
}
}  // namespace

Trainer::Trainer(Config const& config, std::ostream* log, DataParallel data_parallel, SequenceShards shards)
    : cfg_(checked(config)),
      log_(log),
      data_(open_training_data(config)),
      train_indices_(range(0, data_.shape().count - held_out_count(data_.shape().count, config.data.eval_fraction))),
      eval_indices_(range(train_indices_.size(), data_.shape().count)),
      sampler_(train_indices_, config.train.micro_batch, config.train.seed),
      model_(std::make_unique<Model>(config.model, config.train.micro_batch, config.train.recompute_depth,
                                     std::move(shards), config.train.precision)),
      optimizer_(std::make_unique<Optimizer>(*model_, optimizer_settings(config.train))),
      dp_(std::move(data_parallel)) {
  prefetcher_ = std::make_unique<BatchPrefetcher>(data_);
  int const micro_batches = config.train.batch / config.train.micro_batch;
  if (model_->shards().size != config.train.seq_shards)
    throw TrainingError("train.seq_shards = " + std::to_string(config.train.seq_shards) + " but this process was given " +
                        std::to_string(model_->shards().size) + " sequence shard(s)");
  if (distributed() && (!dp_.allreduce_sum || !dp_.allreduce_sum_double))
    throw TrainingError("training over several processes needs their all-reduce functions");
  if (dp_.size > 1 && micro_batches % dp_.size != 0)
    throw TrainingError("data parallelism over " + std::to_string(dp_.size) + " processes: train.batch / "
                        "train.micro_batch = " + std::to_string(micro_batches) +
                        " micro-batches per step must be a multiple of the number of processes");
  // The cuBLAS handle is the process's: every trainer sets its math mode, on or off.
  bool const tf32_applies = compat::set_tf32_gemms(config.train.tf32);
  if (log_ && config.train.tf32)
    *log_ << (tf32_applies ? "fp32 GEMMs on TF32 tensor cores (train.tf32): results differ from fp32 products in their low bits\n"
                           : "train.tf32: no effect on this build (its GEMMs do not go to cuBLAS)\n");
  if (log_ && config.train.precision != Precision::fp32)
    *log_ << fmt::format("{} activations and kernel weights, fp32 master weights, moments and gradient sums; GEMMs: {}; "
                         "attention: {}\n",
                         precision_name(config.train.precision), gemm_path(config.train.precision),
                         attention_path(config.train.precision));
  model_->init_parameters(config.train.seed);
  optimizer_->sync_master_weights();
  stage_buffers();
  buckets_.reserve(optimizer_->group_names().size());
}

void Trainer::reconfigure(Reconfigurable const& next) {
  if (next.seq_shards != cfg_.train.seq_shards)
    throw TrainingError(fmt::format("train.seq_shards {} needs the processes regrouped: pass the new groups "
                                    "(Trainer::reconfigure with data_parallel and shards)", next.seq_shards));
  regroup(next, dp_, model_->shards());
}

void Trainer::reconfigure(Reconfigurable const& next, DataParallel data_parallel, SequenceShards shards) {
  if (shards.size != next.seq_shards)
    throw TrainingError(fmt::format("train.seq_shards = {} but the new groups have {} sequence shard(s)",
                                    next.seq_shards, shards.size));
  if (data_parallel.size * shards.size != dp_.size * model_->shards().size)
    throw TrainingError(fmt::format("the new groups hold {} x {} processes, the run {} x {}", data_parallel.size,
                                    shards.size, dp_.size, model_->shards().size));
  regroup(next, std::move(data_parallel), std::move(shards));
}

void Trainer::regroup(Reconfigurable const& next, DataParallel data_parallel, SequenceShards shards) {
  Config const config = with_reconfigured(cfg_, next);  // checked; the rest of the run as it was
  int const micro_batches = config.train.batch / config.train.micro_batch;
  if (data_parallel.size > 1 && micro_batches % data_parallel.size != 0)
    throw TrainingError(fmt::format("train.micro_batch {}: {} micro-batches per step cannot be dealt evenly to {} "
                                    "data-parallel replicas", config.train.micro_batch, micro_batches, data_parallel.size));
  // The state, through host memory: the old model and optimizer are released before the new
  // ones are allocated, so a switch never needs both at once.
  optimizer_->wait_all();
  auto moments = optimizer_->moments();
  std::vector<std::vector<float>> params;
  model_->params.for_each_group([&](std::string const&, auto const& storage) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), storage);
    params.emplace_back(h.data(), h.data() + h.extent(0));
  });
  // Every process holds whole parameters and moments (sequence shards split the activations
  // only), so new groups need nothing but the rebuild.
  DataParallel const old_dp = dp_;
  SequenceShards const old_shards = model_->shards();
  auto rebuild = [&](Config const& settings, DataParallel const& dp, SequenceShards const& groups) {
    optimizer_.reset();
    model_.reset();
    dp_ = dp;
    model_ = std::make_unique<Model>(settings.model, settings.train.micro_batch, settings.train.recompute_depth, groups,
                                     settings.train.precision);
    std::size_t g = 0;
    model_->params.for_each_group([&](std::string const&, auto const& storage) {
      auto h = Kokkos::create_mirror_view(storage);
      std::copy(params[g].begin(), params[g].end(), h.data());
      Kokkos::deep_copy(storage, h);
      ++g;
    });
    optimizer_ = std::make_unique<Optimizer>(*model_, optimizer_settings(settings.train));
    optimizer_->sync_master_weights();
    optimizer_->set_moments(moments);
    stage_buffers();
    sampler_.set_batch(settings.train.micro_batch);  // the same samples per step, split anew
  };
  try {
    rebuild(config, data_parallel, shards);
  } catch (...) {
    rebuild(cfg_, old_dp, old_shards);  // e.g. out of memory: back to the settings that ran, with the same state
    throw;
  }
  cfg_ = config;
}

void Trainer::stage_buffers() {
  staged_.clear();
  if (distributed() && !dp_.device_pointers && !kDeviceIsHost)  // MPI without device support
    for (std::size_t g = 0; g < optimizer_->group_names().size(); ++g)
      staged_.emplace_back(label("staging.grad"), optimizer_->gradient_buffer(int(g)).extent(0));
}

std::string Trainer::offload_summary() const {
  auto const& o = *optimizer_;
  std::string groups;
  for (std::size_t i = 0; i < o.group_names().size(); ++i)
    if (o.offloaded()[i]) groups += (groups.empty() ? "" : ", ") + o.group_names()[i];
  auto const link = link_bytes_per_parameter(cfg_.train.precision, cfg_.train.offload_cast == TrainConfig::OffloadCast::host);
  return fmt::format("optimizer offload: requested ratio {:.3f}, achieved {:.3f} (whole groups{}{}); "
                     "AdamW state on the device {:.2f} MiB, on the host {:.2f} MiB, host threads {}; "
                     "{} weights, cast on the {} ({} + {} bytes per offloaded parameter over the link)",
                     cfg_.train.offload_ratio, o.achieved_ratio(), groups.empty() ? "" : ": ", groups,
                     o.device_state_bytes() / 1048576.0, o.host_state_bytes() / 1048576.0,
                     cfg_.train.host_threads > 0 ? std::to_string(cfg_.train.host_threads) : std::string("all"),
                     precision_name(cfg_.train.precision), offload_cast_name(cfg_.train.offload_cast), link.to_host,
                     link.to_device) +
         (o.speculative() ? "; with clipping, host updates start before the gradient norm and run again on a clipped "
                            "step (train.offload_speculation)"
                          : "") +
         (o.host_worker() && !host_cores_text().empty() ? "; " + host_cores_text() : "");
}

double Trainer::learning_rate(int step) const {
  auto const& t = cfg_.train;
  if (step < t.warmup_steps) return t.lr * double(step + 1) / t.warmup_steps;
  double const span = std::max(1, t.steps - t.warmup_steps);
  double const progress = std::min(1.0, double(step - t.warmup_steps) / span);
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));
}

void Trainer::start_gradient_sum(int group) {
  compat::ScopedRegion region("comm");
  Bucket b;
  b.group = group;
  b.grad = optimizer_->gradient_buffer(group);
  float* data = b.grad.data();
  if (!staged_.empty()) {  // MPI without device support: stage through the host (pinned)
    b.staged = staged_[group];
    Kokkos::deep_copy(space_, b.staged, b.grad);
    data = b.staged.data();
  }
  // NCCL orders the sum after the kernels that wrote the bucket by an event on the device. MPI
  // reads the buffer from this thread: those kernels (and the staging copy) must be done first,
  // a wait for the compute instance alone.
  bool const on_device = dp_.orders_on_device && staged_.empty() && dp_.start_allreduce_sum;
  if (!on_device) space_.fence();
  if (dp_.start_allreduce_sum) {
    b.pending = dp_.start_allreduce_sum(data, b.grad.extent(0), on_device ? compat::lane_of(space_).stream : nullptr);
  } else {
    dp_.allreduce_sum(data, b.grad.extent(0));
    b.pending = {[] { return true; }, [] {}, {}};
  }
  for (auto& earlier : buckets_) earlier.pending.test();  // MPI progresses only inside MPI calls
  buckets_.push_back(std::move(b));
}

void Trainer::finish_gradient_sums() {
  for (auto& b : buckets_) {
    {
      compat::ScopedRegion region("comm");
      // NCCL: the compute instance waits for the sum on the device; MPI: this thread does.
      if (!(b.pending.order_before && b.pending.order_before(compat::lane_of(space_).stream))) b.pending.wait();
      if (b.staged.data() != nullptr && b.staged.data() != b.grad.data()) Kokkos::deep_copy(space_, b.grad, b.staged);
    }
    optimizer_->gradients_ready(b.group);
  }
  buckets_.clear();
}

StepRecord Trainer::train_step() {
  compat::ScopedRegion region(space_, "step");
  auto const t0 = std::chrono::steady_clock::now();
  int const accumulation = cfg_.train.batch / cfg_.train.micro_batch;
  double const lr = learning_rate(step_);
  // The loss stays on the device until the gradient norm is read (one shard: the sequence-
  // parallel loss needs its all-reduce on the host at once).
  bool const deferred_loss = model_->shards().size == 1;
  if (int(micro_losses_.extent(0)) < accumulation) {
    micro_losses_ = Kokkos::View<double*, DeviceMemory>(label("train.micro_losses"), accumulation);
    micro_losses_host_ = decltype(micro_losses_host_)(label("train.micro_losses_host"), accumulation);
  }
  micro_counted_.assign(std::size_t(accumulation), -1);
  optimizer_->begin_step(lr, step_ + 1);
  auto const jobs_before = optimizer_->offload_times();
  model_->zero_gradients(space_);
  if (ordering::trace())
    for (int g = 0; g < int(optimizer_->group_names().size()); ++g)
      ordering::on_stream(ordering::Lane::compute, "zero_gradients", {}, {{"grad", g}});
  double loss = 0;
  // On the last micro-batch each group is handed on as soon as the backward pass has finished it:
  // on a single process to the optimizer, with several to the all-reduce of its bucket first.
  std::function<void(int)> const group_ready = [this](int group) {
    if (distributed())
      start_gradient_sum(group);
    else
      optimizer_->gradients_ready(group);
  };
  int const last_mine = accumulation - dp_.size + dp_.rank;
  for (int micro = 0; micro < accumulation; ++micro) {
    auto const samples = sampler_.next();  // every process draws every batch: the same order
    if (micro % dp_.size != dp_.rank) continue;
    prefetcher_->take(samples, train_batch_);
    // Every process draws every batch: this process's next one is dp_.size - 1 draws on (in this
    // step or the next; the micro-batch count is a multiple of dp_.size). Empty at an epoch's end.
    prefetcher_->request(sampler_.peek(dp_.size - 1));
    model_->set_batch(space_, train_batch_, cfg_.train.micro_batch);
    // Each group's weights are waited for just before their first use (the optimizer's host
    // jobs of the last step may still be running for later layers).
    auto const hook = [this](int group) {
      optimizer_->wait_for_group(group);
      ordering::on_stream(ordering::Lane::compute, "forward", {{"param", group}}, {});
    };
    auto const result = model_->forward(space_, hook, deferred_loss ? Model::LossSlot{micro_losses_, micro}
                                                                     : Model::LossSlot{});
    if (deferred_loss)
      micro_counted_[std::size_t(micro)] = result.counted_rows;
    else
      loss += result.loss / accumulation;
    model_->backward(space_, 1.0 / accumulation, micro == last_mine ? group_ready : std::function<void(int)>());
  }
  // The micro-batches' means, in micro-batch order (the same sum as the loss read one by one).
  auto const add_deferred_loss = [&] {
    for (int micro = 0; micro < accumulation; ++micro) {
      int const counted = micro_counted_[std::size_t(micro)];
      if (counted < 0) continue;
      double const mean = counted ? micro_losses_host_(micro) / counted : 0.0;
      loss += mean / accumulation;
    }
  };
  if (deferred_loss) Kokkos::deep_copy(space_, micro_losses_host_, micro_losses_);  // lands by the next wait
  if (distributed()) {
    finish_gradient_sums();
    if (deferred_loss) {
      space_.fence();
      add_deferred_loss();
    }
    loss /= model_->shards().size;  // every shard of a replica holds the same (whole-sequence) loss
    dp_.allreduce_sum_double(&loss, 1);
  }
  double const norm = optimizer_->gradient_norm();  // the launching thread's wait of the step
  if (deferred_loss && !distributed()) {
    space_.fence();  // the same instance as the norm's: already done
    add_deferred_loss();
  }
  // A step that stops the run is not finished: speculative host updates are dropped (STV).
  if (!std::isfinite(loss) || !std::isfinite(norm)) optimizer_->abandon_step();
  if (!std::isfinite(loss))
    throw TrainingError(fmt::format("step {}: the loss is {} — stopping (lower train.lr or raise "
                                    "train.warmup_steps)", step_ + 1, loss));
  if (!std::isfinite(norm))
    throw TrainingError(fmt::format("step {}: the gradient norm is {} — stopping", step_ + 1, norm));
  double const clip = cfg_.train.grad_clip;
  double const scale = (clip > 0 && norm > clip) ? clip / norm : 1.0;
  optimizer_->finish_step(scale);
  ++step_;
  StepRecord r;
  r.step = step_;
  r.loss = loss;
  r.lr = lr;
  r.grad_norm = norm;
  auto const jobs = optimizer_->offload_times();
  r.host_jobs_speculated = int(jobs.speculated - jobs_before.speculated);
  r.host_jobs_rolled_back = int(jobs.rolled_back - jobs_before.rolled_back);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

EvalResult Trainer::evaluate() {
  optimizer_->wait_all();  // evaluation reads every group's new weights
  compat::ScopedRegion region(space_, "evaluate");
  int const B = cfg_.train.micro_batch, T_ = cfg_.model.text_len;
  std::size_t const n = std::min<std::size_t>(eval_indices_.size(), cfg_.train.eval_samples);
  EvalResult r;
  double loss_sum = 0;
  long long counted = 0;
  int correct = 0;
  // One teacher-forced forward pass per micro-batch gives the loss and, on the device, whether each
  // greedy caption would equal its reference (Model::caption_misses); only the printed examples
  // are decoded token by token.
  for (std::size_t first = 0; first < n; first += B) {
    int const valid = int(std::min<std::size_t>(B, n - first));
    eval_ids_.resize(B);
    for (int i = 0; i < B; ++i) eval_ids_[i] = eval_indices_[first + std::min(i, valid - 1)];
    data_.read(eval_ids_, eval_batch_);
    model_->set_batch(space_, eval_batch_, valid);
    auto const l = model_->forward(space_);
    loss_sum += l.loss * l.counted_rows;
    counted += l.counted_rows;
    auto const& misses = model_->caption_misses(space_);
    for (int b = 0; b < valid; ++b) correct += misses(b) == 0;
    if (r.examples.size() < kEvalExamples) {
      greedy_captions(space_, *model_, eval_batch_, eval_tokens_, eval_done_);
      for (int b = 0; b < valid && r.examples.size() < kEvalExamples; ++b)
        r.examples.emplace_back(decode_caption(&eval_batch_.tokens[std::size_t(b) * T_], T_),
                                decode_caption(&eval_tokens_[std::size_t(b) * T_], T_));
    }
  }
  r.samples = int(n);
  r.loss = counted ? loss_sum / counted : 0;
  r.accuracy = n ? double(correct) / n : 0;
  return r;
}

namespace {
bool evaluates_after(TrainConfig const& t, int step) { return (t.eval_every > 0 && step % t.eval_every == 0) || step == t.steps; }
bool checkpoints_after(TrainConfig const& t, int step) {
  return !t.checkpoint.empty() && ((t.checkpoint_every > 0 && step % t.checkpoint_every == 0) || step == t.steps);
}
}  // namespace

bool Trainer::pauses_after(int step) const { return evaluates_after(cfg_.train, step) || checkpoints_after(cfg_.train, step); }

TrainSummary Trainer::run(int max_steps, TrainObserver* observer) {
  auto const& t = cfg_.train;
  int const last = max_steps >= 0 ? std::min(t.steps, step_ + max_steps) : t.steps;
  TrainSummary summary;
  auto const start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  long long const tokens_per_step = (long long)t.batch * cfg_.model.seq_len();
  int const first = step_;
  if (log_ && !announced_)
    *log_ << fmt::format("training: {} parameters, {} train / {} held-out samples, {} steps of {} "
                         "samples ({} x {}), recompute depth {}, on {}\n",
                         model_->params.count(), train_indices_.size(), eval_indices_.size(), t.steps,
                         t.batch, t.batch / t.micro_batch, t.micro_batch, t.recompute_depth,
                         ExecSpace::name())
          << offload_summary() << "\n";
  if (!announced_) progress_since_ = {std::chrono::steady_clock::now(), step_};
  announced_ = true;
  while (step_ < last) {
    if (observer) observer->before_step(*this, step_ + 1);
    StepRecord const r = train_step();
    summary.steps.push_back(r);
    if (observer) observer->on_step(*this, r);
    clipped_rollbacks_ += r.host_jobs_rolled_back > 0;
    if (log_ && (step_ % t.log_every == 0 || step_ == t.steps)) {
      // Since the first step this trainer ran (a run driven a few steps at a time, by the
      // scheduler, reports the same as one driven whole), ETA to the last step.
      double const secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - progress_since_.first).count();
      double const rate = (step_ - progress_since_.second) / secs;
      // Speculative host updates run again (clipped steps) since the last line: what they cost.
      std::string const rolled = clipped_rollbacks_ == 0 ? std::string()
                                 : fmt::format("  (clipped: host updates run again on {} step{})", clipped_rollbacks_,
                                               clipped_rollbacks_ == 1 ? "" : "s");
      clipped_rollbacks_ = 0;
      *log_ << fmt::format("step {:>5}/{}  loss {:.4f}  lr {:.2e}  grad-norm {:.3f}  {:.1f}k tok/s  ETA {}{}\n",
                           step_, t.steps, r.loss, r.lr, r.grad_norm,
                           tokens_per_step * rate / 1000.0, duration((t.steps - step_) / rate), rolled)
            << std::flush;
    }
    if (evaluates_after(t, step_)) {
      summary.evals.emplace_back(step_, evaluate());
      if (observer) observer->on_eval(*this, step_, summary.evals.back().second);
      if (log_)
        *log_ << fmt::format("eval at step {}: {}\n", step_, format_eval(summary.evals.back().second))
              << std::flush;
    }
    if (checkpoints_after(t, step_)) save_checkpoint_once(t.checkpoint);
  }
  // At the end of training every update is complete; a partial run (max_steps) may leave host
  // jobs in flight for the next step's forward pass to wait for (wait_all() completes them).
  if (step_ >= t.steps) optimizer_->wait_all();
  summary.seconds = elapsed();
  summary.tokens_per_second = summary.seconds > 0 ? tokens_per_step * (step_ - first) / summary.seconds : 0;
  return summary;
}

}  // namespace joule
