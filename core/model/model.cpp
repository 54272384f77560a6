#include "core/model/model.hpp"

#include "core/model/block.hpp"
#include "core/ops/argmax.hpp"
#include "core/ops/cross_entropy.hpp"
#include "core/ops/embedding.hpp"
#include "core/ops/patch_embed.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace joule {

BlockShape block_shape(ModelConfig const& m, int batch) {
  BlockShape s;
  s.batch = batch;
  s.seq = m.seq_len();
  s.channels = m.d_model;
  s.heads = m.heads;
  s.mlp_hidden = m.mlp_hidden();
  s.mask = AttentionMask::prefix(m.image_tokens());
  return s;
}

namespace {
// Elements of the model's own column sums' scratch: the final LayerNorm (N rows of C), the
// position embedding (B samples of S * C) and the patch embedding's bias (B * n_img rows of C).
std::size_t model_column_sum_scratch(ModelConfig const& m, int batch, int seq_shards) {
  int const S = m.seq_len(), C = m.d_model;
  return std::max({column_sum_scratch(batch * S / seq_shards, C), column_sum_scratch(batch, S * C),
                   column_sum_scratch(batch * m.image_tokens(), C)});
}
}  // namespace

MemoryEstimate estimate_memory(ModelConfig const& m, int batch, int recompute_depth, int seq_shards) {
  std::size_t const f = sizeof(float), i32 = sizeof(int);
  std::size_t const P = seq_shards, B = batch, S = m.seq_len(), C = m.d_model, M = m.mlp_hidden(),
                    V = m.vocab(), H = m.heads / P, L = m.layers, Ni = B * m.image_tokens(),
                    Nt = B * m.text_len, N = B * S / P, Fp = m.patch_features();
  bool const sharded = P > 1;  // H: heads per rank; N: tokens held
  std::size_t const block_params = 4 * C + 3 * C * C + 3 * C + C * C + C + M * C + M + C * M + C;
  std::size_t const params = C * Fp + C + S * C + V * C + L * block_params + 2 * C +
                             (m.tie_embeddings ? 0 : V * C);
  std::size_t const per_block = N * (7 * C + 4 + 2 * M) + B * H * S +  // BlockActivations
                                (sharded ? B * S * 4 * C / P : 0);      // + qkv_heads, att_heads
  std::size_t const kept_blocks = (L - recompute_depth) + (recompute_depth > 0 ? 1 : 0);
  BlockShape sharded_shape = block_shape(m, batch);
  sharded_shape.shards = seq_shards;
  MemoryEstimate e;
  e.parameters = params * f;
  e.gradients = params * f;
  e.activations = f * (Ni * Fp + Ni * C + Nt * C + (L + 1) * N * C + kept_blocks * per_block +
                       N * C + 4 * N + N * V + (sharded ? B * S * C : 0));
  e.workspace = f * (B * m.frames * m.channels * m.image_size * m.image_size) + i32 * (Nt + N) +
                i32 * (std::size_t(detail::embedding_rank_blocks(int(Nt))) * V + 1 + 2 * Nt + V + 1) +
                f * std::size_t(detail::embedding_max_pieces(int(V), int(Nt))) * C +  // the token embedding's sort, pieces
                f * (model_column_sum_scratch(m, batch, seq_shards) +                    // column sums' block sums
                     BlockWorkspace<float, DeviceMemory>::column_sum_scratch_for(sharded_shape)) +
                i32 * (N + B) +           // captioning: every row's argmax, one result per sample
                f * (N * (6 * C + M) + B * H * S + 2 * N * C + N * C + Ni * C + Nt * C);
  if (sharded)  // d_qkv_heads, d_att_heads, d_x0, the all-to-all send and receive buffers
    e.workspace += f * (B * S * 4 * C / P + B * S * C + 2 * N * 3 * C);
  return e;
}

namespace {
template <class View, class... Extents>
View alloc(char const* name, Extents... extents) {
  return View(label(name), extents...);
}
}  // namespace

Model::Model(ModelConfig const& config, int batch, int recompute_depth, SequenceShards shards)
    : params("param.", config),
      grads("grad.", config),
      cfg_(config),
      batch_(batch),
      recompute_depth_(recompute_depth),
      shape_(block_shape(config, batch)),
      shards_(std::move(shards)) {
  require(batch >= 1, "Model", "batch must be >= 1");
  int const P = shards_.size;
  require(P >= 1 && shards_.rank >= 0 && shards_.rank < P, "Model", "sequence shard rank outside the group");
  require(config.heads % P == 0 && config.seq_len() % P == 0, "Model",
          std::to_string(P) + " sequence shards must divide the heads (" + std::to_string(config.heads) +
              ") and the sequence length (" + std::to_string(config.seq_len()) + ")");
  require(P == 1 || bool(shards_.allreduce_sum), "Model", "sequence shards need an all-reduce function");
  shape_.shards = P;
  require(recompute_depth >= 0 && recompute_depth <= config.layers, "Model",
          "recompute_depth " + std::to_string(recompute_depth) + " outside [0, " +
              std::to_string(config.layers) + "]");
  if (config.tie_embeddings) grads.head.lm_head = grads.embed.wte;
  int const B = batch, S = cfg_.seq_len(), C = cfg_.d_model, Ni = B * cfg_.image_tokens(),
            Nt = B * cfg_.text_len, N = B * S / P;
  images_ = Tensor4<T, DeviceMemory>(label("work.images"), B * cfg_.frames, cfg_.channels,
                                     cfg_.image_size, cfg_.image_size);
  tokens_ = Kokkos::View<int*, DeviceMemory>(label("work.tokens"), Nt);
  targets_ = Kokkos::View<int*, DeviceMemory>(label("work.targets"), N);
  images_host_ = decltype(images_host_)(label("staging.images"), images_.extent(0), images_.extent(1),
                                        images_.extent(2), images_.extent(3));
  tokens_host_ = decltype(tokens_host_)(label("staging.tokens"), tokens_.extent(0));
  targets_host_ = decltype(targets_host_)(label("staging.targets"), targets_.extent(0));

  patches_ = alloc<Tensor2<T, DeviceMemory>>("act.patches", Ni, cfg_.patch_features());
  image_emb_ = alloc<Tensor2<T, DeviceMemory>>("act.image_emb", Ni, C);
  text_emb_ = alloc<Tensor2<T, DeviceMemory>>("act.text_emb", Nt, C);
  for (int l = 0; l <= cfg_.layers; ++l) residual_.push_back(alloc<Tensor2<T, DeviceMemory>>("act.residual", N, C));
  x0_ = P > 1 ? alloc<Tensor2<T, DeviceMemory>>("act.x0", B * S, C) : residual_[0];
  int const kept = (cfg_.layers - recompute_depth) + (recompute_depth > 0 ? 1 : 0);
  for (int k = 0; k < kept; ++k) block_acts_.emplace_back(shape_, "act.block");
  lnf_ = alloc<Tensor2<T, DeviceMemory>>("act.lnf", N, C);
  lnf_mean_ = alloc<Tensor1<T, DeviceMemory>>("act.lnf_mean", N);
  lnf_rstd_ = alloc<Tensor1<T, DeviceMemory>>("act.lnf_rstd", N);
  ce_lse_ = alloc<Tensor1<T, DeviceMemory>>("act.ce_lse", N);
  ce_losses_ = alloc<Tensor1<T, DeviceMemory>>("act.ce_losses", N);
  logits_ = alloc<Tensor2<T, DeviceMemory>>("act.logits", N, cfg_.vocab());

  block_work_ = BlockWorkspace<T, DeviceMemory>(shape_, "work.block");
  d_residual_[0] = alloc<Tensor2<T, DeviceMemory>>("work.d_residual", N, C);
  d_residual_[1] = alloc<Tensor2<T, DeviceMemory>>("work.d_residual", N, C);
  d_lnf_ = alloc<Tensor2<T, DeviceMemory>>("work.d_lnf", N, C);
  d_image_emb_ = alloc<Tensor2<T, DeviceMemory>>("work.d_image_emb", Ni, C);
  d_text_emb_ = alloc<Tensor2<T, DeviceMemory>>("work.d_text_emb", Nt, C);
  d_x0_ = P > 1 ? alloc<Tensor2<T, DeviceMemory>>("work.d_x0", B * S, C) : d_residual_[0];
  if (P > 1) exchange_ = SequenceExchange<T, DeviceMemory>(shards_, B, S / P, C);
  embedding_work_ = EmbeddingBackwardWorkspace<DeviceMemory, T>(cfg_.vocab(), Nt, C, "work.embedding");
  column_sum_work_ = ColumnSumWorkspace<T, DeviceMemory>(model_column_sum_scratch(cfg_, B, P), "work.model");
  picks_ = Kokkos::View<int*, DeviceMemory>(label("work.picks"), N);
  sample_result_ = Kokkos::View<int*, DeviceMemory>(label("work.sample_result"), B);
  sample_result_host_ = Kokkos::create_mirror_view(sample_result_);
  shard_sum_.resize(std::size_t(B));
}

BlockActivations<Model::T, DeviceMemory> const& Model::acts_for(int layer) const {
  // Recomputed blocks share slot 0; block l >= k owns slot l - k (+1 if a shared slot exists).
  int const k = recompute_depth_;
  if (layer < k) return block_acts_[0];
  return block_acts_[layer - k + (k > 0 ? 1 : 0)];
}

void Model::init_parameters(std::uint64_t seed) {
  // GPT-2's scheme, by role: matrices and tables N(0, 0.02), projections into the residual stream
  // N(0, 0.02 / sqrt(2 L)), biases and LayerNorm shifts 0, LayerNorm scales 1.
  std::mt19937_64 rng(seed);
  double const proj_std = 0.02 / std::sqrt(2.0 * cfg_.layers);
  params.for_each_tensor([&](std::string const&, ParamRole role, auto const& view) {
    auto h = Kokkos::create_mirror_view(view);
    std::normal_distribution<double> normal(0.0, role == ParamRole::residual_projection ? proj_std : 0.02);
    for (std::size_t i = 0; i < h.span(); ++i) {
      switch (role) {
        case ParamRole::bias:
        case ParamRole::norm_shift: h.data()[i] = 0.0f; break;
        case ParamRole::norm_scale: h.data()[i] = 1.0f; break;
        default: h.data()[i] = float(normal(rng));
      }
    }
    Kokkos::deep_copy(view, h);
  });
}

void Model::zero_gradients(ExecSpace const& space) {
  grads.for_each_group([&](std::string const&, auto const& storage) { Kokkos::deep_copy(space, storage, 0.0f); });
}

void Model::set_batch(ExecSpace const& space, HostBatch const& batch, int n_valid) {
  int const B = batch_, T_ = cfg_.text_len, S = cfg_.seq_len(), n_img = cfg_.image_tokens();
  require(int(batch.samples.size()) == B, "Model::set_batch",
          "got " + std::to_string(batch.samples.size()) + " samples, the model runs " + std::to_string(B));
  auto const& h_images = images_host_;
  require(batch.images.size() == h_images.span(), "Model::set_batch", "image buffer size mismatch");
  // Before refilling the staging, the previous batch's copies must have read it: a wait for those
  // copies alone, not for the kernels queued after them.
  staged_.synchronize();
  for (std::size_t i = 0; i < h_images.span(); ++i) h_images.data()[i] = batch.images[i] * (2.0f / 255.0f) - 1.0f;
  auto const& h_tokens = tokens_host_;
  auto const& h_targets = targets_host_;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < S; ++t) {
      int const row = logits_row(b, t);
      if (row >= 0) h_targets(row) = kIgnoreIndex;
    }
  require_tokens_in_vocabulary("Model::set_batch", batch.tokens.data(), std::size_t(B) * T_);
  for (int b = 0; b < B; ++b) {
    for (int j = 0; j < T_; ++j) {
      h_tokens(b * T_ + j) = batch.tokens[b * T_ + j];
      bool const has_next = j + 1 < T_ && batch.tokens[b * T_ + j + 1] != kTokenPad;
      int const row = logits_row(b, n_img + j);
      if (b < n_valid && has_next && row >= 0) h_targets(row) = batch.tokens[b * T_ + j + 1];
    }
  }
  // The rows that count, from the host copy: a deferred loss (forward() with a LossSlot) needs no
  // device read for them. Tokens are in the vocabulary (the dataset checks every sample).
  batch_counted_rows_ = 0;
  for (std::size_t r = 0; r < h_targets.extent(0); ++r) batch_counted_rows_ += h_targets(r) != kIgnoreIndex;
  Kokkos::deep_copy(space, images_, h_images);
  Kokkos::deep_copy(space, tokens_, h_tokens);
  Kokkos::deep_copy(space, targets_, h_targets);
  staged_.record(space);
}

void Model::require_tokens_in_vocabulary(char const* op, std::int32_t const* tokens, std::size_t n) const {
  // On the host, where the batch is staged: the forward pass needs no device read to check them.
  int const vocab = cfg_.vocab();
  std::size_t bad = 0, first = 0;
  for (std::size_t i = n; i-- > 0;)
    if (tokens[i] < 0 || tokens[i] >= vocab) ++bad, first = i;
  require(bad == 0, op, std::to_string(bad) + " token(s) outside the vocabulary [0, " + std::to_string(vocab) +
                            "), the first at position " + std::to_string(first) + ": " +
                            std::to_string(bad ? tokens[first] : 0));
}

int Model::logits_row(int b, int position) const {
  int const held = cfg_.seq_len() / shards_.size, shard = position / held;
  return shard == shards_.rank ? b * held + position % held : -1;
}

void Model::set_tokens(ExecSpace const& space, std::int32_t const* tokens) {
  staged_.synchronize();  // the previous copy has read the staging
  require_tokens_in_vocabulary("Model::set_tokens", tokens, tokens_host_.span());
  auto const& h_tokens = tokens_host_;
  for (std::size_t i = 0; i < h_tokens.span(); ++i) h_tokens.data()[i] = tokens[i];
  Kokkos::deep_copy(space, tokens_, h_tokens);
  staged_.record(space);
}

Model::HostInts const& Model::caption_misses(ExecSpace const& space) {
  row_argmax(space, picks_, logits_);
  Kokkos::deep_copy(space, sample_result_, 0);
  auto const picks = picks_, targets = targets_, misses = sample_result_;  // by value into the kernel
  int const held = cfg_.seq_len() / shards_.size;
  detail::note_launch("caption_misses", picks.extent(0));
  Kokkos::parallel_for(
      label("caption_misses"), Kokkos::RangePolicy<ExecSpace>(space, 0, int(picks.extent(0))), KOKKOS_LAMBDA(int r) {
        int const t = targets(r), p = picks(r);
        bool const miss = t != kIgnoreIndex && p != t && !(t == kTokenEos && p == kTokenPad);
        if (miss) Kokkos::atomic_add(&misses(r / held), 1);
      });
  return sample_result_to_host(space);
}

Model::HostInts const& Model::next_tokens(ExecSpace const& space, int position) {
  require(position >= 0 && position < cfg_.text_len, "Model::next_tokens",
          "text position " + std::to_string(position) + " outside [0, " + std::to_string(cfg_.text_len) + ")");
  int const held = cfg_.seq_len() / shards_.size, at = cfg_.image_tokens() + position;
  bool const here = at / held == shards_.rank;  // the shard holding the position picks; the others add 0
  auto const logits = logits_;
  auto const picks = sample_result_;
  detail::note_launch("next_tokens", batch_);
  Kokkos::parallel_for(
      label("next_tokens"), Kokkos::RangePolicy<ExecSpace>(space, 0, batch_),
      KOKKOS_LAMBDA(int b) { picks(b) = here ? argmax_of_row(logits, b * held + at % held) : 0; });
  return sample_result_to_host(space);
}

Model::HostInts const& Model::sample_result_to_host(ExecSpace const& space) {
  Kokkos::deep_copy(space, sample_result_host_, sample_result_);
  space.fence();  // the host reads batch() ints: the one wait of a captioning step
  if (shards_.size > 1) {
    for (int b = 0; b < batch_; ++b) shard_sum_[b] = sample_result_host_(b);
    shards_.allreduce_sum(shard_sum_.data(), shard_sum_.size());
    for (int b = 0; b < batch_; ++b) sample_result_host_(b) = int(std::llround(shard_sum_[b]));
  }
  return sample_result_host_;
}

namespace detail {
// rows [b*S/P + t] of local <-> rows [b*S + r*S/P + t] of whole (this shard's part of each sequence)
template <class Local, class Whole>
void copy_shard_rows(ExecSpace const& space, Local const& local, Whole const& whole, int seq, int shards,
                     int rank, bool to_local) {
  int const held = seq / shards, c = local.extent(1), rows = local.extent(0);
  detail::note_launch("sequence_shard_rows", long(rows) * c);
  Kokkos::parallel_for(
      label("sequence_shard_rows"),
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(space, {0, 0}, {rows, c}), KOKKOS_LAMBDA(int r, int i) {
        int const w = (r / held) * seq + rank * held + r % held;
        if (to_local)
          local(r, i) = whole(w, i);
        else
          whole(w, i) = local(r, i);
      });
}
}  // namespace detail

CrossEntropyResult Model::forward(ExecSpace const& space, std::function<void(int)> const& before_group,
                                  LossSlot const& deferred) {
  auto before = [&](int group) {
    if (before_group) before_group(group);
  };
  compat::ScopedRegion region(space, "forward");
  auto const& e = params.embed;
  before(0);
  int const n_img = cfg_.image_tokens();
  patch_embed_forward(space, image_emb_, patches_, images_, e.patch_weight, e.patch_bias, cfg_.patch_size);
  token_embedding_forward(space, text_emb_, tokens_, e.wte, TokenCheck::by_caller);  // set_batch/set_tokens did
  // Every shard embeds whole sequences (cheap next to the blocks) and keeps its rows.
  sequence_concat_forward(space, x0_, image_emb_, text_emb_, e.wpe, n_img, cfg_.text_len);
  if (shards_.size > 1)
    detail::copy_shard_rows(space, residual_[0], x0_, cfg_.seq_len(), shards_.size, shards_.rank, true);
  for (int l = 0; l < cfg_.layers; ++l) {
    before(1 + l);
    block_forward(space, shape_, residual_[l + 1], acts_for(l), params.blocks[l], residual_[l], exchange());
  }
  before(cfg_.layers + 1);
  auto const& h = params.head;
  layernorm_forward(space, lnf_, lnf_mean_, lnf_rstd_, residual_[cfg_.layers], h.lnf_weight, h.lnf_bias);
  linear_forward(space, logits_, lnf_, h.lm_head, Tensor1<T, DeviceMemory>());
  if (deferred.sums.data() != nullptr && shards_.size == 1) {
    // The loss stays on the device: no wait for the launching thread here (Trainer reads the
    // step's sums with the gradient norm, its one wait per step).
    cross_entropy_rows(space, ce_lse_, ce_losses_, logits_, targets_);
    cross_entropy_forward_sum(space, Kokkos::subview(deferred.sums, deferred.index), ce_losses_);
    counted_rows_ = batch_counted_rows_;
    return {std::numeric_limits<double>::quiet_NaN(), counted_rows_};
  }
  auto result = cross_entropy_forward(space, ce_lse_, ce_losses_, logits_, targets_);
  if (shards_.size > 1) {  // the mean over every shard's text positions
    double sums[2] = {result.loss * result.counted_rows, double(result.counted_rows)};
    shards_.allreduce_sum(sums, 2);
    result.counted_rows = int(std::llround(sums[1]));
    result.loss = result.counted_rows ? sums[0] / sums[1] : 0.0;
  }
  counted_rows_ = result.counted_rows;
  return result;
}

void Model::backward(ExecSpace const& space, double d_loss, std::function<void(int)> const& group_ready) {
  auto ready = [&](int group) {
    if (group_ready) group_ready(group);
  };
  compat::ScopedRegion region(space, "backward");
  int const L = cfg_.layers, n_img = cfg_.image_tokens();
  Tensor1<T, DeviceMemory> const no_bias;
  cross_entropy_backward(space, logits_, logits_, ce_lse_, targets_, counted_rows_, d_loss);
  linear_backward(space, d_lnf_, grads.head.lm_head, no_bias, logits_, lnf_, params.head.lm_head);
  layernorm_backward(space, d_residual_[L % 2], grads.head.lnf_weight, grads.head.lnf_bias, d_lnf_,
                     residual_[L], params.head.lnf_weight, lnf_mean_, lnf_rstd_, column_sum_work_);
  ready(L + 1);  // head (with tied embeddings its LM-head gradient goes to embed, finished last)
  for (int l = L - 1; l >= 0; --l) {
    auto const& acts = acts_for(l);
    if (l < recompute_depth_)  // same kernels, same inputs: the same activations, bit for bit
      block_forward(space, shape_, residual_[l + 1], acts, params.blocks[l], residual_[l], exchange());
    block_backward(space, shape_, d_residual_[l % 2], grads.blocks[l], block_work_,
                   d_residual_[(l + 1) % 2], residual_[l], acts, params.blocks[l], exchange());
    ready(1 + l);
  }
  auto const& g = grads.embed;
  if (shards_.size > 1) {  // the other shards' rows contribute through their own gradients
    Kokkos::deep_copy(space, d_x0_, T(0));
    detail::copy_shard_rows(space, d_residual_[0], d_x0_, cfg_.seq_len(), shards_.size, shards_.rank, false);
  }
  sequence_concat_backward(space, d_image_emb_, d_text_emb_, g.wpe, d_x0_, n_img, cfg_.text_len,
                           column_sum_work_);
  token_embedding_backward(space, g.wte, d_text_emb_, tokens_, embedding_work_);
  Tensor4<T, DeviceMemory> const no_pixels;
  patch_embed_backward(space, no_pixels, Tensor2<T, DeviceMemory>(), g.patch_weight, g.patch_bias,
                       d_image_emb_, patches_, params.embed.patch_weight, cfg_.patch_size, column_sum_work_);
  ready(0);
}

}  // namespace joule
