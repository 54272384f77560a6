#include "core/train/trainer.hpp"

#include "core/io/h5file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ostream>

namespace joule {

namespace {

constexpr char const* kCheckpointFormat = "joule-checkpoint-v1";

std::vector<std::size_t> range(std::size_t begin, std::size_t end) {
  std::vector<std::size_t> v;
  for (std::size_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

std::size_t held_out_count(std::size_t n, double fraction) {
  auto const k = std::size_t(std::llround(double(n) * fraction));
  return std::clamp<std::size_t>(k, 1, n > 1 ? n - 1 : 1);
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
  return o;
}
}  // namespace

std::string format_eval(EvalResult const& e) {
  return fmt::format("held-out loss {:.4f}, exact caption accuracy {:.1f}% ({} samples)", e.loss,
                     100.0 * e.accuracy, e.samples);
}

Trainer::Trainer(Config const& config, std::ostream* log, DataParallel data_parallel, SequenceShards shards)
    : cfg_(config),
      log_(log),
      data_(Dataset::open(config.data.path, &config.model)),
      train_indices_(range(0, data_.shape().count - held_out_count(data_.shape().count, config.data.eval_fraction))),
      eval_indices_(range(train_indices_.size(), data_.shape().count)),
      sampler_(train_indices_, config.train.micro_batch, config.train.seed),
      model_(config.model, config.train.micro_batch, config.train.recompute_depth, std::move(shards)),
      optimizer_(model_, optimizer_settings(config.train)),
      dp_(std::move(data_parallel)) {
  int const micro_batches = config.train.batch / config.train.micro_batch;
  if (model_.shards().size != config.train.seq_shards)
    throw TrainingError("train.seq_shards = " + std::to_string(config.train.seq_shards) + " but this process was given " +
                        std::to_string(model_.shards().size) + " sequence shard(s)");
  if (distributed() && (!dp_.allreduce_sum || !dp_.allreduce_sum_double))
    throw TrainingError("training over several processes needs their all-reduce functions");
  if (dp_.size > 1 && micro_batches % dp_.size != 0)
    throw TrainingError("data parallelism over " + std::to_string(dp_.size) + " processes: train.batch / "
                        "train.micro_batch = " + std::to_string(micro_batches) +
                        " micro-batches per step must be a multiple of the number of processes");
  if (data_.shape().count < 2)
    throw TrainingError(config.data.path + ": needs at least 2 samples (one to train on, one held out)");
  model_.init_parameters(config.train.seed);
  optimizer_.sync_master_weights();
  if (distributed() && !dp_.device_pointers && !kDeviceIsHost)  // MPI without device support
    for (std::size_t g = 0; g < optimizer_.group_names().size(); ++g)
      staged_.push_back(Kokkos::create_mirror_view(optimizer_.gradient_buffer(int(g))));
  buckets_.reserve(optimizer_.group_names().size());
}

std::string Trainer::offload_summary() const {
  auto const& o = optimizer_;
  std::string groups;
  for (std::size_t i = 0; i < o.group_names().size(); ++i)
    if (o.offloaded()[i]) groups += (groups.empty() ? "" : ", ") + o.group_names()[i];
  return fmt::format("optimizer offload: requested ratio {:.3f}, achieved {:.3f} (whole groups{}{}); "
                     "AdamW state on the device {:.2f} MiB, on the host {:.2f} MiB, host threads {}",
                     cfg_.train.offload_ratio, o.achieved_ratio(), groups.empty() ? "" : ": ", groups,
                     o.device_state_bytes() / 1048576.0, o.host_state_bytes() / 1048576.0,
                     cfg_.train.host_threads > 0 ? std::to_string(cfg_.train.host_threads) : std::string("all"));
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
  b.grad = optimizer_.gradient_buffer(group);
  space_.fence();  // the backward kernels that wrote this group are done
  float* data = b.grad.data();
  if (!staged_.empty()) {  // MPI without device support: stage through the host
    b.staged = staged_[group];
    Kokkos::deep_copy(b.staged, b.grad);
    data = b.staged.data();
  }
  if (dp_.start_allreduce_sum) {
    b.pending = dp_.start_allreduce_sum(data, b.grad.extent(0));
  } else {
    dp_.allreduce_sum(data, b.grad.extent(0));
    b.pending = {[] { return true; }, [] {}};
  }
  for (auto& earlier : buckets_) earlier.pending.test();  // MPI progresses only inside MPI calls
  buckets_.push_back(std::move(b));
}

void Trainer::finish_gradient_sums() {
  for (auto& b : buckets_) {
    {
      compat::ScopedRegion region("comm");
      b.pending.wait();
      if (b.staged.data() != nullptr && b.staged.data() != b.grad.data()) Kokkos::deep_copy(b.grad, b.staged);
    }
    optimizer_.gradients_ready(b.group);
  }
  buckets_.clear();
}

StepRecord Trainer::train_step() {
  compat::ScopedRegion region(space_, "step");
  auto const t0 = std::chrono::steady_clock::now();
  int const accumulation = cfg_.train.batch / cfg_.train.micro_batch;
  double const lr = learning_rate(step_);
  optimizer_.begin_step(lr, step_ + 1);
  model_.zero_gradients(space_);
  double loss = 0;
  // On the last micro-batch each group is handed on as soon as the backward pass has finished it:
  // on a single process to the optimizer, with several to the all-reduce of its bucket first.
  std::function<void(int)> const group_ready = [this](int group) {
    if (distributed())
      start_gradient_sum(group);
    else
      optimizer_.gradients_ready(group);
  };
  int const last_mine = accumulation - dp_.size + dp_.rank;
  for (int micro = 0; micro < accumulation; ++micro) {
    auto const samples = sampler_.next();  // every process draws every batch: the same order
    if (micro % dp_.size != dp_.rank) continue;
    auto const batch = data_.read(samples);
    model_.set_batch(space_, batch, cfg_.train.micro_batch);
    // Each group's weights are waited for just before their first use (the optimizer's host
    // jobs of the last step may still be running for later layers).
    loss += model_.forward(space_, [this](int group) { optimizer_.wait_for_group(group); }).loss / accumulation;
    model_.backward(space_, 1.0 / accumulation, micro == last_mine ? group_ready : std::function<void(int)>());
  }
  if (distributed()) {
    finish_gradient_sums();
    loss /= model_.shards().size;  // every shard of a replica holds the same (whole-sequence) loss
    dp_.allreduce_sum_double(&loss, 1);
  }
  if (!std::isfinite(loss))
    throw TrainingError(fmt::format("step {}: the loss is {} — stopping (lower train.lr or raise "
                                    "train.warmup_steps)", step_ + 1, loss));
  double const norm = optimizer_.gradient_norm();
  if (!std::isfinite(norm))
    throw TrainingError(fmt::format("step {}: the gradient norm is {} — stopping", step_ + 1, norm));
  double const clip = cfg_.train.grad_clip;
  double const scale = (clip > 0 && norm > clip) ? clip / norm : 1.0;
  optimizer_.finish_step(scale);
  ++step_;
  StepRecord r;
  r.step = step_;
  r.loss = loss;
  r.lr = lr;
  r.grad_norm = norm;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

EvalResult Trainer::evaluate() {
  optimizer_.wait_all();  // evaluation reads every group's new weights
  compat::ScopedRegion region(space_, "evaluate");
  int const B = cfg_.train.micro_batch, T_ = cfg_.model.text_len, V = cfg_.model.vocab(),
            n_img = cfg_.model.image_tokens();
  std::size_t const n = std::min<std::size_t>(eval_indices_.size(), cfg_.train.eval_samples);
  EvalResult r;
  double loss_sum = 0;
  long long counted = 0;
  int correct = 0;
  for (std::size_t first = 0; first < n; first += B) {
    int const valid = int(std::min<std::size_t>(B, n - first));
    std::vector<std::size_t> ids;
    for (int i = 0; i < B; ++i) ids.push_back(eval_indices_[first + std::min(i, valid - 1)]);
    HostBatch batch = data_.read(ids);
    model_.set_batch(space_, batch, valid);
    auto const l = model_.forward(space_);
    loss_sum += l.loss * l.counted_rows;
    counted += l.counted_rows;

    // Greedy decoding: start from BOS, feed back the most likely next byte until EOS.
    HostBatch gen = batch;
    std::fill(gen.tokens.begin(), gen.tokens.end(), kTokenPad);
    std::vector<bool> done(B, false);
    for (int b = 0; b < B; ++b) gen.tokens[b * T_] = kTokenBos;
    auto logits = Kokkos::create_mirror_view(model_.logits());
    for (int j = 0; j + 1 < T_; ++j) {
      model_.set_batch(space_, gen, 0);
      model_.forward(space_);
      Kokkos::deep_copy(logits, model_.logits());
      // The shard holding position n_img + j picks the next token; with several shards the others
      // contribute 0 to the sum that tells everybody.
      std::vector<double> picks(B, 0.0);
      for (int b = 0; b < B; ++b) {
        int const row = model_.logits_row(b, n_img + j);
        if (done[b] || row < 0) continue;
        int best = 0;
        for (int v = 1; v < V; ++v)
          if (logits(row, v) > logits(row, best)) best = v;
        picks[b] = best;
      }
      if (model_.shards().active()) model_.shards().allreduce_sum(picks.data(), picks.size());
      bool all_done = true;
      for (int b = 0; b < B; ++b) {
        if (done[b]) continue;
        int const best = int(picks[b]);
        gen.tokens[b * T_ + j + 1] = best;
        if (best == kTokenEos || best == kTokenPad) done[b] = true;
        all_done = all_done && done[b];
      }
      if (all_done) break;
    }
    for (int b = 0; b < valid; ++b) {
      std::string const ref = decode_caption(&batch.tokens[b * T_], T_);
      std::string const out = decode_caption(&gen.tokens[b * T_], T_);
      correct += ref == out;
      if (r.examples.size() < 4) r.examples.emplace_back(ref, out);
    }
  }
  r.samples = int(n);
  r.loss = counted ? loss_sum / counted : 0;
  r.accuracy = n ? double(correct) / n : 0;
  return r;
}

TrainSummary Trainer::run(int max_steps) {
  auto const& t = cfg_.train;
  int const last = max_steps >= 0 ? std::min(t.steps, step_ + max_steps) : t.steps;
  TrainSummary summary;
  auto const start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  long long const tokens_per_step = (long long)t.batch * cfg_.model.seq_len();
  int const first = step_;
  if (log_)
    *log_ << fmt::format("training: {} parameters, {} train / {} held-out samples, {} steps of {} "
                         "samples ({} x {}), recompute depth {}, on {}\n",
                         model_.params.count(), train_indices_.size(), eval_indices_.size(), t.steps,
                         t.batch, t.batch / t.micro_batch, t.micro_batch, t.recompute_depth,
                         ExecSpace::name())
          << offload_summary() << "\n";
  while (step_ < last) {
    StepRecord const r = train_step();
    summary.steps.push_back(r);
    if (log_ && (step_ % t.log_every == 0 || step_ == last)) {
      double const secs = elapsed();
      double const rate = (step_ - first) / secs;
      *log_ << fmt::format("step {:>5}/{}  loss {:.4f}  lr {:.2e}  grad-norm {:.3f}  {:.1f}k tok/s  ETA {}\n",
                           step_, t.steps, r.loss, r.lr, r.grad_norm,
                           tokens_per_step * rate / 1000.0, duration((last - step_) / rate))
            << std::flush;
    }
    bool const eval_now = (t.eval_every > 0 && step_ % t.eval_every == 0) || step_ == t.steps;
    if (eval_now) {
      summary.evals.emplace_back(step_, evaluate());
      if (log_)
        *log_ << fmt::format("eval at step {}: {}\n", step_, format_eval(summary.evals.back().second))
              << std::flush;
    }
    bool const save_now = !t.checkpoint.empty() && dp_.rank == 0 &&
                          ((t.checkpoint_every > 0 && step_ % t.checkpoint_every == 0) || step_ == t.steps);
    if (save_now) save_checkpoint(t.checkpoint);
  }
  // At the end of training every update is complete; a partial run (max_steps) may leave host
  // jobs in flight for the next step's forward pass to wait for (wait_all() completes them).
  if (step_ >= t.steps) optimizer_.wait_all();
  summary.seconds = elapsed();
  summary.tokens_per_second = summary.seconds > 0 ? tokens_per_step * (step_ - first) / summary.seconds : 0;
  return summary;
}

void Trainer::save_checkpoint(std::string const& path) {
  optimizer_.wait_all();
  // Written to a temporary name and renamed, so a crash mid-write never destroys the last one.
  std::string const tmp = path + ".tmp";
  {
    io::H5File f(tmp, io::H5File::Mode::truncate);
    f.set_attribute("/", "format", kCheckpointFormat);
    f.set_attribute("/", "step", (long long)step_);
    f.set_attribute("/", "sampler_epoch", sampler_.epoch());
    f.set_attribute("/", "sampler_cursor", sampler_.cursor());
    f.set_attribute("/", "seed", (long long)cfg_.train.seed);
    f.set_attribute("/", "config", cfg_.json);
    auto save = [&](char const* group, ModelParameters<float, DeviceMemory> const& p) {
      p.for_each_group([&](std::string const& name, auto const& storage) {
        auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), storage);
        f.write(std::string("/") + group + "/" + name, h.data(), {h.extent(0)});
      });
    };
    save("params", model_.params);
    optimizer_.save(f);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw TrainingError("cannot move checkpoint " + tmp + " to " + path);
}

void Trainer::resume(std::string const& path) {
  optimizer_.wait_all();
  try {
    io::H5File f(path, io::H5File::Mode::read);
    if (!f.has_attribute("/", "format") || f.attribute_string("/", "format") != kCheckpointFormat)
      throw TrainingError(path + ": not a joule checkpoint (no format = " + kCheckpointFormat + ")");
    auto const saved = nlohmann::json::parse(f.attribute_string("/", "config"));
    auto const current = nlohmann::json::parse(cfg_.json);
    if (saved.at("model") != current.at("model"))
      throw TrainingError(path + ": saved with a different model configuration: " + saved.at("model").dump() +
                          " vs now " + current.at("model").dump());
    auto load = [&](char const* group, ModelParameters<float, DeviceMemory>& p) {
      p.for_each_group([&](std::string const& name, auto const& storage) {
        io::Dims dims;
        auto const values = f.read<float>(std::string("/") + group + "/" + name, &dims);
        if (dims.size() != 1 || dims[0] != storage.extent(0))
          throw TrainingError(path + ": /" + group + "/" + name + " has the wrong size");
        auto h = Kokkos::create_mirror_view(storage);
        std::copy(values.begin(), values.end(), h.data());
        Kokkos::deep_copy(storage, h);
      });
    };
    load("params", model_.params);
    optimizer_.sync_master_weights();
    optimizer_.load(f);
    step_ = int(f.attribute_int("/", "step"));
    sampler_.restore(f.attribute_int("/", "sampler_epoch"), f.attribute_int("/", "sampler_cursor"));
  } catch (io::H5Error const& e) {
    throw TrainingError(std::string("cannot resume: ") + e.what());
  }
  if (log_) *log_ << fmt::format("resumed from {} at step {}\n", path, step_);
}

}  // namespace joule
