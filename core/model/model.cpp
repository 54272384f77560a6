#include "core/model/model.hpp"

#include "core/model/block.hpp"
#include "core/ops/argmax.hpp"
#include "core/ops/cross_entropy.hpp"
#include "core/ops/embedding.hpp"
#include "core/ops/patch_embed.hpp"
#include "core/precision/convert.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <type_traits>

namespace joule {

std::string gemm_path(Precision precision) {
  return held_in_bf16(precision, Held::kernel_weights) ? bf16_gemm_path<ExecSpace>() : compat::fp32_gemm_path<ExecSpace>();
}

std::string attention_path(Precision precision) {
  return held_in_bf16(precision, Held::activations) ? attention_path_text<ExecSpace, bf16>() : attention_path_text<ExecSpace, float>();
}

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
// The bf16 GEMM scratch of every linear layer of the model: the blocks', the patch embedding's
// (B * n_img rows of C_in*P*P to C) and the LM head's (N rows of C to V_pad).
LinearGemmScratch model_gemm_scratch(ModelConfig const& m, int batch, int seq_shards) {
  BlockShape s = block_shape(m, batch);
  s.shards = seq_shards;
  return max_scratch({BlockWorkspace<bf16, DeviceMemory>::gemm_scratch_for(s),
                      linear_gemm_scratch(batch * m.image_tokens(), m.patch_features(), m.d_model),
                      linear_gemm_scratch(s.tokens(), m.d_model, m.vocab_padded())});
}
}  // namespace

std::vector<std::size_t> parameter_group_sizes(ModelConfig const& m) {
  EmbeddingParameters<float, Kokkos::HostSpace> embed;  // shapes only: nothing is allocated
  embed.shape = m;
  BlockParameters<float, Kokkos::HostSpace> block;
  block.shape = block_shape(m, 1);
  HeadParameters<float, Kokkos::HostSpace> head;
  head.shape = m;
  std::vector<std::size_t> sizes{group_size(embed)};
  sizes.insert(sizes.end(), std::size_t(m.layers), group_size(block));
  sizes.push_back(group_size(head));
  return sizes;
}

MemoryEstimate estimate_memory(ModelConfig const& m, int batch, int recompute_depth, int seq_shards,
                               Precision precision) {
  // a: activations and their gradients; f: fp32 (inputs, statistics, master weights, gradients)
  std::size_t const f = sizeof(float), i32 = sizeof(int), a = held_bytes(precision, Held::activations);
  std::size_t const w = held_in_bf16(precision, Held::kernel_weights) ? sizeof(bf16) : 0;  // the kernels' copy
  std::size_t const P = seq_shards, B = batch, S = m.seq_len(), C = m.d_model, M = m.mlp_hidden(),
                    V = m.vocab(), Vp = m.vocab_padded(), H = m.heads / P, L = m.layers, Ni = B * m.image_tokens(),
                    Nt = B * m.text_len, N = B * S / P, Fp = m.patch_features();
  bool const sharded = P > 1;  // H: heads per rank; N: tokens held
  std::size_t params = (Vp - V) * C;  // the LM head's padding rows, and every group's parameters
  for (std::size_t n : parameter_group_sizes(m)) params += n;
  std::size_t const kept_blocks = (L - recompute_depth) + (recompute_depth > 0 ? 1 : 0);
  BlockShape sharded_shape = block_shape(m, batch);
  sharded_shape.shards = seq_shards;
  MemoryEstimate e;
  e.parameters = params * (f + w);
  e.gradients = params * f;
  // Per block: ln1, qkv, att, x2, ln2 (7C) and fc, fc_gelu (2M) in a; four statistics and the
  // attention's log-sum-exp in fp32.
  std::size_t const per_block_a = N * (7 * C + 2 * M) + (sharded ? B * S * 4 * C / P : 0);
  std::size_t const per_block_f = N * 4 + B * H * S;
  std::size_t const l = held_bytes(precision, Held::logits);
  e.activations = a * (Ni * Fp + Ni * C + Nt * C + (L + 1) * N * C + kept_blocks * per_block_a + N * C +
                       (sharded ? B * S * C : 0)) +
                  l * N * Vp + f * (kept_blocks * per_block_f + 4 * N);
  std::size_t const stat = BlockWorkspace<float, DeviceMemory>::column_sum_scratch_for(sharded_shape);
  e.workspace = f * (B * m.frames * m.channels * m.image_size * m.image_size) + i32 * (Nt + N) +
                i32 * (std::size_t(detail::embedding_rank_blocks(int(Nt))) * V + 1 + 2 * Nt + V + 1) +
                f * std::size_t(detail::embedding_max_pieces(int(V), int(Nt))) * C +  // the token embedding's sort, pieces
                f * (model_column_sum_scratch(m, batch, seq_shards) + stat) +         // column sums' block sums
                i32 * (N + B) +           // captioning: every row's argmax, one result per sample
                a * (N * (6 * C + M) + 2 * N * C + N * C + Ni * C + Nt * C) + f * (B * H * S);  // backward scratch, delta
  if (sharded)  // d_qkv_heads, d_att_heads, d_x0, the all-to-all send and receive buffers
    e.workspace += a * (B * S * 4 * C / P + B * S * C + 2 * N * 3 * C);
  if (l != a) e.workspace += a * N * Vp;  // d_logits of their own (the same buffer when they are one type)
  if (held_in_bf16(precision, Held::activations)) {  // the bf16 GEMMs' scratch
    auto const g = model_gemm_scratch(m, batch, seq_shards);
    e.workspace += bf16_gemm_on_cublaslt<ExecSpace>() ? detail::kCublasLtWorkspaceBytes : f * (g.a + g.b + g.c);
    if (default_attention_path<ExecSpace, bf16>() == AttentionPath::gemm)  // the S x S scores of every head
      e.workspace += AttentionGemmWorkspace<DeviceMemory>::bytes_for(int(B * H), int(S), m.d_model / m.heads,
                                                                     bf16_gemm_on_cublaslt<ExecSpace>());
  }
  return e;
}

namespace {
template <class View, class... Extents>
View alloc(char const* name, Extents... extents) {
  return View(label(name), extents...);
}
}  // namespace

namespace detail {

// Everything of the forward and backward passes whose type depends on the precision, with the
// types of core/precision/precision.hpp's table: activations and their gradients in A, the kernel
// weights in A too (the operators take one type for both), statistics and the sums of parameter
// gradients in fp32.
template <Precision P>
struct ModelPass {
  using A = held_t<P, Held::activations>;
  using R = held_t<P, Held::statistics>;
  using L = held_t<P, Held::logits>;
  static_assert(std::is_same_v<A, held_t<P, Held::activation_gradients>> && std::is_same_v<A, held_t<P, Held::kernel_weights>>,
                "the operators take activations, their gradients and the weights in one type");
  static_assert(std::is_same_v<R, compute_t<A>>, "statistics are what the kernels compute in");
  static_assert(std::is_same_v<held_t<P, Held::parameter_gradients>, float>, "Model::grads are fp32");

  Tensor2<A, DeviceMemory> patches, image_emb, text_emb;  // [B*n_img, Fp], [B*n_img, C], [B*T, C]
  Tensor2<A, DeviceMemory> x0;                            // [B*S, C] embedded sequences (all shards)
  std::vector<Tensor2<A, DeviceMemory>> residual;         // L+1 x [B*S/P, C]: input of each block
  std::vector<BlockActivations<A, DeviceMemory>> block_acts;  // blocks k..L-1 (+ one shared for 0..k-1)
  Tensor2<A, DeviceMemory> lnf;                           // [B*S/P, C]
  Tensor1<R, DeviceMemory> lnf_mean, lnf_rstd, ce_lse, ce_losses;  // [B*S/P]
  Tensor2<L, DeviceMemory> logits;    // [B*S/P, V_pad]: V classes, then padding (ModelConfig::vocab_padded)
  Tensor2<A, DeviceMemory> d_logits;  // [B*S/P, V_pad]; logits themselves when L is A (in place)
  // Backward workspace (block_work.gemm: the bf16 GEMMs' scratch, shared by every linear layer).
  BlockWorkspace<A, DeviceMemory> block_work;
  Tensor2<A, DeviceMemory> d_residual[2], d_lnf, d_image_emb, d_text_emb;
  Tensor2<A, DeviceMemory> d_x0;  // [B*S, C] (P > 1: zero outside this rank's rows)
  SequenceExchange<A, DeviceMemory> exchange;  // used when P > 1
  EmbeddingBackwardWorkspace<DeviceMemory, R> embedding_work;  // the token embedding's sort and pieces
  ColumnSumWorkspace<R, DeviceMemory> column_sum_work;  // the head's and the embeddings' column sums
  int recompute_depth = 0, shards = 1;

  ModelPass(ModelConfig const& cfg, int batch, int recompute, BlockShape const& shape, SequenceShards const& s,
            std::optional<AttentionPath> attention)
      : recompute_depth(recompute), shards(s.size) {
    int const B = batch, S = cfg.seq_len(), C = cfg.d_model, Ni = B * cfg.image_tokens(), Nt = B * cfg.text_len,
              N = B * S / shards;
    patches = alloc<Tensor2<A, DeviceMemory>>("act.patches", Ni, cfg.patch_features());
    image_emb = alloc<Tensor2<A, DeviceMemory>>("act.image_emb", Ni, C);
    text_emb = alloc<Tensor2<A, DeviceMemory>>("act.text_emb", Nt, C);
    for (int l = 0; l <= cfg.layers; ++l) residual.push_back(alloc<Tensor2<A, DeviceMemory>>("act.residual", N, C));
    x0 = shards > 1 ? alloc<Tensor2<A, DeviceMemory>>("act.x0", B * S, C) : residual[0];
    int const kept = (cfg.layers - recompute) + (recompute > 0 ? 1 : 0);
    for (int k = 0; k < kept; ++k) block_acts.emplace_back(shape, "act.block");
    lnf = alloc<Tensor2<A, DeviceMemory>>("act.lnf", N, C);
    lnf_mean = alloc<Tensor1<R, DeviceMemory>>("act.lnf_mean", N);
    lnf_rstd = alloc<Tensor1<R, DeviceMemory>>("act.lnf_rstd", N);
    ce_lse = alloc<Tensor1<R, DeviceMemory>>("act.ce_lse", N);
    ce_losses = alloc<Tensor1<R, DeviceMemory>>("act.ce_losses", N);
    logits = alloc<Tensor2<L, DeviceMemory>>("act.logits", N, cfg.vocab_padded());
    if constexpr (std::is_same_v<L, A>)
      d_logits = logits;
    else
      d_logits = alloc<Tensor2<A, DeviceMemory>>("work.d_logits", N, cfg.vocab_padded());
    Bf16GemmWorkspace<DeviceMemory> gemm;
    if constexpr (std::is_same_v<A, bf16>) {
      auto const g = model_gemm_scratch(cfg, B, shards);
      gemm = Bf16GemmWorkspace<DeviceMemory>::for_space<ExecSpace>(g.a, g.b, g.c, "work.gemm");
    }
    block_work = BlockWorkspace<A, DeviceMemory>(shape, "work.block", gemm,
                                                 attention.value_or(default_attention_path<ExecSpace, A>()));
    d_residual[0] = alloc<Tensor2<A, DeviceMemory>>("work.d_residual", N, C);
    d_residual[1] = alloc<Tensor2<A, DeviceMemory>>("work.d_residual", N, C);
    d_lnf = alloc<Tensor2<A, DeviceMemory>>("work.d_lnf", N, C);
    d_image_emb = alloc<Tensor2<A, DeviceMemory>>("work.d_image_emb", Ni, C);
    d_text_emb = alloc<Tensor2<A, DeviceMemory>>("work.d_text_emb", Nt, C);
    d_x0 = shards > 1 ? alloc<Tensor2<A, DeviceMemory>>("work.d_x0", B * S, C) : d_residual[0];
    if (shards > 1) exchange = SequenceExchange<A, DeviceMemory>(s, B, S / shards, C);
    embedding_work = EmbeddingBackwardWorkspace<DeviceMemory, R>(cfg.vocab(), Nt, C, "work.embedding");
    column_sum_work = ColumnSumWorkspace<R, DeviceMemory>(model_column_sum_scratch(cfg, B, shards), "work.model");
  }

  BlockActivations<A, DeviceMemory> const& acts_for(int layer) const {
    // Recomputed blocks share slot 0; block l >= k owns slot l - k (+1 if a shared slot exists).
    int const k = recompute_depth;
    if (layer < k) return block_acts[0];
    return block_acts[layer - k + (k > 0 ? 1 : 0)];
  }
  SequenceExchange<A, DeviceMemory> const* exchanger() const { return shards > 1 ? &exchange : nullptr; }
  Bf16GemmWorkspace<DeviceMemory> const& gemm() const { return block_work.gemm; }
};

}  // namespace detail

Model::Model(ModelConfig const& config, int batch, int recompute_depth, SequenceShards shards, Precision precision,
             std::optional<AttentionPath> attention)
    : params("param.", config),
      grads("grad.", config),
      cfg_(config),
      batch_(batch),
      recompute_depth_(recompute_depth),
      shape_(block_shape(config, batch)),
      shards_(std::move(shards)),
      precision_(precision) {
  require(batch >= 1, "Model", "batch must be >= 1");
  int const P = shards_.size;
  require(P >= 1 && shards_.rank >= 0 && shards_.rank < P, "Model", "sequence shard rank outside the group");
  require(config.heads % P == 0 && config.seq_len() % P == 0, "Model",
          std::to_string(P) + " sequence shards must divide the heads (" + std::to_string(config.heads) +
              ") and the sequence length (" + std::to_string(config.seq_len()) + ")");
  require(P == 1 || bool(shards_.allreduce_sum), "Model", "sequence shards need an all-reduce function");
  require(P == 1 || precision != Precision::bf16 || bool(shards_.alltoall_bf16), "Model",
          "bf16 sequence shards need a bf16 all-to-all function");
  shape_.shards = P;
  require(recompute_depth >= 0 && recompute_depth <= config.layers, "Model",
          "recompute_depth " + std::to_string(recompute_depth) + " outside [0, " +
              std::to_string(config.layers) + "]");
  int const B = batch, Nt = B * cfg_.text_len, N = B * cfg_.seq_len() / P;
  images_ = Tensor4<T, DeviceMemory>(label("work.images"), B * cfg_.frames, cfg_.channels,
                                     cfg_.image_size, cfg_.image_size);
  tokens_ = Kokkos::View<int*, DeviceMemory>(label("work.tokens"), Nt);
  targets_ = Kokkos::View<int*, DeviceMemory>(label("work.targets"), N);
  images_host_ = decltype(images_host_)(label("staging.images"), images_.extent(0), images_.extent(1),
                                        images_.extent(2), images_.extent(3));
  tokens_host_ = decltype(tokens_host_)(label("staging.tokens"), tokens_.extent(0));
  targets_host_ = decltype(targets_host_)(label("staging.targets"), targets_.extent(0));
  if (held_in_bf16(precision, Held::kernel_weights)) {
    kernel_weights = ModelParameters<bf16, DeviceMemory>("weight_bf16.", config);
    bf16_ = std::make_unique<detail::ModelPass<Precision::bf16>>(cfg_, B, recompute_depth, shape_, shards_, attention);
  } else {
    fp32_ = std::make_unique<detail::ModelPass<Precision::fp32>>(cfg_, B, recompute_depth, shape_, shards_, attention);
  }
  picks_ = Kokkos::View<int*, DeviceMemory>(label("work.picks"), N);
  sample_result_ = Kokkos::View<int*, DeviceMemory>(label("work.sample_result"), B);
  sample_result_host_ = Kokkos::create_mirror_view(sample_result_);
  shard_sum_.resize(std::size_t(B));
}

Model::~Model() = default;

void Model::update_kernel_weights(ExecSpace const& space, int group) {
  if (!bf16_) return;
  for (int g = 0; g < params.group_count(); ++g)
    if (group < 0 || group == g) convert_precision(space, kernel_weights.group_storage(g), params.group_storage(g));
}

Tensor2<float, DeviceMemory> const& Model::logits_view() const {
  static_assert(std::is_same_v<held_t<Precision::fp32, Held::logits>, float> &&
                    std::is_same_v<held_t<Precision::bf16, Held::logits>, float>,
                "fp32 logits in every precision (captioning's argmax reads them)");
  return fp32_ ? fp32_->logits : bf16_->logits;
}

Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> Model::logits_to_host(ExecSpace const& space) const {
  auto const& logits = logits_view();
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> out("logits_host", logits.extent(0), cfg_.vocab());
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), logits);
  space.fence();
  for (std::size_t r = 0; r < out.extent(0); ++r)
    for (std::size_t v = 0; v < out.extent(1); ++v) out(r, v) = h(r, v);
  return out;
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
  ExecSpace const space;
  update_kernel_weights(space);
  space.fence();
}

void Model::zero_gradients(ExecSpace const& space) {
  int group = 0;
  grads.for_each_group([&](std::string const&, auto const& storage) {
    detail::note_segment(detail::StepPart::step, group++);
    // Kokkos' own fill (cudaMemsetAsync for zeros from Kokkos 4): noted as a library launch, like
    // the GEMMs, so the launch audit does not gate Kokkos' kernel
    detail::note_library_launch("zero_gradients",
                                detail::streaming_work(double(storage.span()), 0, 4, 0, 16, detail::WorkKind::optimizer));
    Kokkos::deep_copy(space, storage, 0.0f);
  });
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
  row_argmax(space, picks_, logits_view(), cfg_.vocab());
  Kokkos::deep_copy(space, sample_result_, 0);
  auto const picks = picks_, targets = targets_, misses = sample_result_;  // by value into the kernel
  int const held = cfg_.seq_len() / shards_.size;
  detail::note_launch("caption_misses", detail::streaming_work(double(picks.extent(0)), 8, 0, 1, 4), picks.extent(0));
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
  auto const picks = sample_result_;
  detail::note_launch("next_tokens", detail::streaming_work(double(batch_) * cfg_.vocab(), 4, 0, 1, 4), batch_);
  auto const logits = logits_view();  // (no device lambda inside a generic one: nvcc allows none)
  int const classes = cfg_.vocab();
  Kokkos::parallel_for(
      label("next_tokens"), Kokkos::RangePolicy<ExecSpace>(space, 0, batch_),
      KOKKOS_LAMBDA(int b) { picks(b) = here ? argmax_of_row(logits, b * held + at % held, classes) : 0; });
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
  int const bytes = sizeof(typename Local::value_type);
  detail::note_launch("sequence_shard_rows", detail::streaming_work(double(rows) * c, bytes, bytes, 0, bytes, WorkKind::copy),
                      long(rows) * c);
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
  if (fp32_) return forward_pass(*fp32_, space, before_group, deferred);
  return forward_pass(*bf16_, space, before_group, deferred);
}

void Model::backward(ExecSpace const& space, double d_loss, std::function<void(int)> const& group_ready) {
  if (fp32_) return backward_pass(*fp32_, space, d_loss, group_ready);
  backward_pass(*bf16_, space, d_loss, group_ready);
}

namespace {
// The weights the kernels of a pass read: the fp32 master weights themselves, or their bf16 copy.
template <Precision P>
auto const& weights_for(ModelParameters<float, DeviceMemory> const& params,
                        ModelParameters<bf16, DeviceMemory> const& kernel_weights) {
  if constexpr (held_in_bf16(P, Held::kernel_weights))
    return kernel_weights;
  else
    return params;
}
}  // namespace

template <Precision P>
CrossEntropyResult Model::forward_pass(detail::ModelPass<P>& pass, ExecSpace const& space,
                                       std::function<void(int)> const& before_group, LossSlot const& deferred) {
  using A = typename detail::ModelPass<P>::A;
  auto before = [&](int group) {
    if (before_group) before_group(group);
    detail::note_segment(detail::StepPart::forward, group);
  };
  compat::ScopedRegion region(space, "forward");
  auto const& weights = weights_for<P>(params, kernel_weights);
  auto const& e = weights.embed;
  auto const& gemm = pass.gemm();
  before(0);
  int const n_img = cfg_.image_tokens();
  patch_embed_forward(space, pass.image_emb, pass.patches, images_, e.patch_weight, e.patch_bias, cfg_.patch_size, gemm);
  token_embedding_forward(space, pass.text_emb, tokens_, e.wte, TokenCheck::by_caller);  // set_batch/set_tokens did
  // Every shard embeds whole sequences (cheap next to the blocks) and keeps its rows.
  sequence_concat_forward(space, pass.x0, pass.image_emb, pass.text_emb, e.wpe, n_img, cfg_.text_len);
  if (shards_.size > 1)
    detail::copy_shard_rows(space, pass.residual[0], pass.x0, cfg_.seq_len(), shards_.size, shards_.rank, true);
  for (int l = 0; l < cfg_.layers; ++l) {
    before(1 + l);
    block_forward(space, shape_, pass.residual[l + 1], pass.acts_for(l), weights.blocks[l], pass.residual[l],
                  pass.block_work, pass.exchanger());
  }
  before(cfg_.layers + 1);
  auto const& h = weights.head;
  layernorm_forward(space, pass.lnf, pass.lnf_mean, pass.lnf_rstd, pass.residual[cfg_.layers], h.lnf_weight, h.lnf_bias);
  {
    detail::ModelShare const vocabulary(double(cfg_.vocab()) / cfg_.vocab_padded());  // the padding's products are not the model's
    linear_forward(space, pass.logits, pass.lnf, weights.lm_head_padded, Tensor1<A, DeviceMemory>(), gemm);
  }
  if (deferred.sums.data() != nullptr && shards_.size == 1) {
    // The loss stays on the device: no wait for the launching thread here (Trainer reads the
    // step's sums with the gradient norm, its one wait per step).
    cross_entropy_rows(space, pass.ce_lse, pass.ce_losses, pass.logits, targets_, kIgnoreIndex, cfg_.vocab());
    cross_entropy_forward_sum(space, Kokkos::subview(deferred.sums, deferred.index), pass.ce_losses);
    counted_rows_ = batch_counted_rows_;
    return {std::numeric_limits<double>::quiet_NaN(), counted_rows_};
  }
  auto result = cross_entropy_forward(space, pass.ce_lse, pass.ce_losses, pass.logits, targets_, kIgnoreIndex, cfg_.vocab());
  if (shards_.size > 1) {  // the mean over every shard's text positions
    double sums[2] = {result.loss * result.counted_rows, double(result.counted_rows)};
    shards_.allreduce_sum(sums, 2);
    result.counted_rows = int(std::llround(sums[1]));
    result.loss = result.counted_rows ? sums[0] / sums[1] : 0.0;
  }
  counted_rows_ = result.counted_rows;
  return result;
}

template <Precision P>
void Model::backward_pass(detail::ModelPass<P>& pass, ExecSpace const& space, double d_loss,
                          std::function<void(int)> const& group_ready) {
  using A = typename detail::ModelPass<P>::A;
  // Each group's kernels, then the work on its finished gradients (the hook), then the next group's.
  auto ready = [&](int group) {
    detail::note_segment(detail::StepPart::gradients, group);
    if (group_ready) group_ready(group);
    detail::note_segment(detail::StepPart::backward, group == cfg_.layers + 1 ? cfg_.layers : group - 1);
  };
  compat::ScopedRegion region(space, "backward");
  auto const& weights = weights_for<P>(params, kernel_weights);
  auto const& gemm = pass.gemm();
  int const L = cfg_.layers, n_img = cfg_.image_tokens();
  detail::note_segment(detail::StepPart::backward, L + 1);
  Tensor1<T, DeviceMemory> const no_bias;
  cross_entropy_backward(space, pass.d_logits, pass.logits, pass.ce_lse, targets_, counted_rows_, d_loss, kIgnoreIndex,
                         cfg_.vocab());  // the padding columns' gradient is 0: their weights' stays 0
  {
    detail::ModelShare const vocabulary(double(cfg_.vocab()) / cfg_.vocab_padded());
    linear_backward(space, pass.d_lnf, grads.lm_head_padded, no_bias, pass.d_logits, pass.lnf, weights.lm_head_padded,
                    gemm);
  }
  layernorm_backward(space, pass.d_residual[L % 2], grads.head.lnf_weight, grads.head.lnf_bias, pass.d_lnf,
                     pass.residual[L], weights.head.lnf_weight, pass.lnf_mean, pass.lnf_rstd, pass.column_sum_work);
  ready(L + 1);  // head (with tied embeddings its LM-head gradient goes to embed, finished last)
  for (int l = L - 1; l >= 0; --l) {
    auto const& acts = pass.acts_for(l);
    if (l < recompute_depth_) {  // same kernels, same inputs: the same activations, bit for bit
      detail::Recomputing const again;
      block_forward(space, shape_, pass.residual[l + 1], acts, weights.blocks[l], pass.residual[l], pass.block_work,
                    pass.exchanger());
    }
    block_backward(space, shape_, pass.d_residual[l % 2], grads.blocks[l], pass.block_work,
                   pass.d_residual[(l + 1) % 2], pass.residual[l], acts, weights.blocks[l], pass.exchanger());
    ready(1 + l);
  }
  auto const& g = grads.embed;
  if (shards_.size > 1) {  // the other shards' rows contribute through their own gradients
    Kokkos::deep_copy(space, pass.d_x0, A(0.0f));
    detail::copy_shard_rows(space, pass.d_residual[0], pass.d_x0, cfg_.seq_len(), shards_.size, shards_.rank, false);
  }
  sequence_concat_backward(space, pass.d_image_emb, pass.d_text_emb, g.wpe, pass.d_x0, n_img, cfg_.text_len,
                           pass.column_sum_work);
  token_embedding_backward(space, g.wte, pass.d_text_emb, tokens_, pass.embedding_work);
  Tensor4<A, DeviceMemory> const no_pixels;
  patch_embed_backward(space, no_pixels, Tensor2<A, DeviceMemory>(), g.patch_weight, g.patch_bias, pass.d_image_emb,
                       pass.patches, weights.embed.patch_weight, cfg_.patch_size, pass.column_sum_work, gemm);
  ready(0);
}

}  // namespace joule
