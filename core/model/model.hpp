#pragma once
// The multimodal captioning transformer (prefix vision-language model):
//   images [B*F, C, H, W] -> P x P patches -> patch embedding   = n_image tokens per sample
//   text [B, T] (bytes + BOS/EOS/PAD)       -> token embedding   = T tokens per sample
//   x0 = concat(image tokens, text tokens) + learned position embedding        [B*S, C]
//   L pre-LN blocks with the prefix(n_image) mask -> final LayerNorm -> LM head (optionally tied
//   to the token embedding) -> cross-entropy on text positions (targets: the next text token).
// On Kokkos' default execution space, in fp32 or bf16 (train.precision; what each kind of tensor is
// held in is core/precision/precision.hpp's table). Parameters, gradients and activations are
// named tensors grouped by layer (embed, block.0..L-1, head), each group one contiguous buffer, so
// that groups can be placed and moved independently.
#include "core/data/host_batch.hpp"
#include "core/model/block_tensors.hpp"
#include "core/detail/stream_event.hpp"
#include "core/config/config.hpp"
#include "core/model/sequence_shards.hpp"
#include "core/ops/cross_entropy_result.hpp"
#include "core/ops/column_sum_workspace.hpp"
#include "core/ops/embedding_workspace.hpp"
#include "core/precision/precision.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace joule {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using DeviceMemory = ExecSpace::memory_space;
// A CPU-only build: "device" memory is host memory and kernels are complete when launched.
inline constexpr bool kDeviceIsHost = Kokkos::SpaceAccessibility<Kokkos::HostSpace, DeviceMemory>::accessible;
// Host buffers that cross the link (batch staging, the offloaded optimizer's state): pinned on
// CUDA, where a copy from pageable memory is staged by the driver and does not overlap.
#if defined(KOKKOS_ENABLE_CUDA)
using PinnedHostMemory = Kokkos::CudaHostPinnedSpace;
#else
using PinnedHostMemory = Kokkos::HostSpace;
#endif
template <class View>
using PinnedMirror = Kokkos::View<typename View::data_type, typename View::array_layout, PinnedHostMemory>;

template <class T, class MemorySpace>
struct EmbeddingParameters {  // group "embed"
  Tensor2<T, MemorySpace> patch_weight;  // [C, C_in*P*P]
  Tensor1<T, MemorySpace> patch_bias;    // [C]
  Tensor2<T, MemorySpace> wpe;           // [S, C]
  Tensor2<T, MemorySpace> wte;           // [V, C]
  Tensor1<T, MemorySpace> storage;
  ModelConfig shape;

  template <class Self, class F>
  static void layout(Self& self, F&& f) {
    using R = ParamRole;
    auto const& m = self.shape;
    f("patch_embed.weight", R::matrix, self.patch_weight, m.d_model, m.patch_features());
    f("patch_embed.bias", R::bias, self.patch_bias, m.d_model, 0);
    f("wpe", R::embedding, self.wpe, m.seq_len(), m.d_model);
    f("wte", R::embedding, self.wte, m.vocab(), m.d_model);
  }
};

template <class T, class MemorySpace>
struct HeadParameters {  // group "head"
  Tensor1<T, MemorySpace> lnf_weight, lnf_bias;  // [C]
  Tensor2<T, MemorySpace> lm_head;               // [V, C]; with tied embeddings it is wte
  Tensor1<T, MemorySpace> storage;
  ModelConfig shape;

  template <class Self, class F>
  static void layout(Self& self, F&& f) {
    using R = ParamRole;
    f("lnf.weight", R::norm_scale, self.lnf_weight, self.shape.d_model, 0);
    f("lnf.bias", R::norm_shift, self.lnf_bias, self.shape.d_model, 0);
    // Untied, the LM head is a matrix of its own (tied, it is wte: an embedding, in group embed).
    if (!self.shape.tie_embeddings) f("lm_head", R::matrix, self.lm_head, self.shape.vocab(), self.shape.d_model);
  }
};

BlockShape block_shape(ModelConfig const& m, int batch);

// Every group's parameter count, in for_each_group order (embed, the blocks, head), from the
// layouts (group_size, parameter_group.hpp, on shapes alone: nothing is allocated): what the
// optimizer, the offload split and the memory model count.
std::vector<std::size_t> parameter_group_sizes(ModelConfig const& m);

template <class T, class MemorySpace>
struct ModelParameters {
  EmbeddingParameters<T, MemorySpace> embed;
  std::vector<BlockParameters<T, MemorySpace>> blocks;
  HeadParameters<T, MemorySpace> head;
  // [V_pad, C] (ModelConfig::vocab_padded): head.lm_head, then V_pad - V rows of zeros past its
  // group's storage. The LM head's GEMMs use it, so that the logits' rows are aligned. Only the
  // gradients' padding is ever written: += the zero gradient of the padding logits.
  Tensor2<T, MemorySpace> lm_head_padded;

  ModelParameters() = default;
  ModelParameters(std::string const& prefix, ModelConfig const& m) {
    std::size_t const padding = std::size_t(m.vocab_padded() - m.vocab()) * std::size_t(m.d_model);
    embed.shape = m;
    allocate_group(embed, prefix + "embed", m.tie_embeddings ? padding : 0);
    for (int l = 0; l < m.layers; ++l)
      blocks.emplace_back(prefix + "block." + std::to_string(l), block_shape(m, 1));
    head.shape = m;
    allocate_group(head, prefix + "head", m.tie_embeddings ? 0 : padding);
    if (m.tie_embeddings) head.lm_head = embed.wte;
    auto const& group = m.tie_embeddings ? embed.storage : head.storage;
    require(head.lm_head.data() + head.lm_head.span() == group.data() + group.extent(0), "ModelParameters",
            "the LM head must be the last tensor of its group: its padding rows follow the group's storage");
    lm_head_padded = Tensor2<T, MemorySpace>(head.lm_head.data(), std::size_t(m.vocab_padded()), std::size_t(m.d_model));
  }

  // f(group_name, storage) for every group, in order.
  template <class F>
  void for_each_group(F&& f) const {
    f(std::string("embed"), embed.storage);
    for (std::size_t l = 0; l < blocks.size(); ++l) f("block." + std::to_string(l), blocks[l].storage);
    f(std::string("head"), head.storage);
  }
  // f(qualified_name, role, tensor) for every tensor, in storage order.
  template <class F>
  void for_each_tensor(F&& f) const {
    auto visit = [&](std::string const& group, auto const& g) {
      std::decay_t<decltype(g)>::layout(g, [&](char const* name, ParamRole role, auto const& view, int, int) {
        f(group + "." + name, role, view);
      });
    };
    visit("embed", embed);
    for (std::size_t l = 0; l < blocks.size(); ++l) visit("block." + std::to_string(l), blocks[l]);
    visit("head", head);
  }
  int group_count() const { return int(blocks.size()) + 2; }
  // The storage of group g (for_each_group order: 0 embed, 1 + l block l, L + 1 head).
  Tensor1<T, MemorySpace> const& group_storage(int g) const {
    if (g == 0) return embed.storage;
    if (g <= int(blocks.size())) return blocks[std::size_t(g) - 1].storage;
    return head.storage;
  }
  std::size_t count() const {
    std::size_t n = 0;
    for_each_group([&](std::string const&, auto const& s) { n += s.extent(0); });
    return n;
  }
};

// Bytes the model allocates on its device, by category, from the configuration alone.
struct MemoryEstimate {
  std::size_t parameters = 0, gradients = 0;  // parameters: fp32 master weights + the kernels' copy (bf16)
  std::size_t activations = 0;  // kept from forward to backward (depends on recompute depth)
  std::size_t workspace = 0;    // inputs, backward scratch
  std::size_t total() const { return parameters + gradients + activations + workspace; }
};
// seq_shards > 1: what each of the ranks sharing a sequence allocates (Ulysses, see
// sequence_shards.hpp).
// precision: the run's (bf16 adds the kernels' 2-byte weight copy and halves the activations).
MemoryEstimate estimate_memory(ModelConfig const& m, int batch, int recompute_depth, int seq_shards = 1,
                               Precision precision = Precision::fp32);

// Which path this build's GEMMs take on ExecSpace in a precision, in words (joule info, the run log).
std::string gemm_path(Precision precision);
// Which attention this build's model runs on ExecSpace in a precision, in words (the same places).
std::string attention_path(Precision precision);

// Where Model::forward leaves a loss on the device (see there).
struct DeviceLossSlot {
  Kokkos::View<double*, DeviceMemory> sums;
  int index = 0;
};

namespace detail {
template <Precision P>
struct ModelPass;  // the forward and backward passes' tensors in one precision (model.cpp)
}

class Model {
 public:
  using T = float;  // master weights and parameter gradients
  // batch: samples per forward/backward (the micro-batch). Allocates everything up front.
  // With shards.size = P > 1 this rank holds tokens [r*S/P, (r+1)*S/P) of every sample (Ulysses
  // sequence parallelism); every rank of the group is given the same batch, and forward() and
  // backward() are collective over the group.
  // attention: a bf16 model's attention path (default: the backend's, default_attention_path).
  Model(ModelConfig const& config, int batch, int recompute_depth, SequenceShards shards = {},
        Precision precision = Precision::fp32, std::optional<AttentionPath> attention = std::nullopt);
  ~Model();
  Model(Model const&) = delete;
  Model& operator=(Model const&) = delete;

  ModelConfig const& config() const { return cfg_; }
  int batch() const { return batch_; }
  int recompute_depth() const { return recompute_depth_; }
  SequenceShards const& shards() const { return shards_; }
  int tokens_held() const { return shape_.tokens(); }  // B*S/P rows of every activation
  Precision precision() const { return precision_; }

  // GPT-2-style initialisation, deterministic for a seed (kernel weights updated).
  void init_parameters(std::uint64_t seed);
  // After params changed (loaded, updated, restored): the kernels' bf16 copy of group g (-1: all),
  // rounded from params on `space`. Nothing to do in fp32, where the kernels read params.
  void update_kernel_weights(ExecSpace const& space, int group = -1);
  void zero_gradients(ExecSpace const& space);

  // Copies a host batch (exactly batch() samples) to the device: pixels scaled to [-1, 1];
  // targets = next text token, ignored at image positions and where the next token is PAD.
  // Samples at index >= n_valid get all targets ignored (padding of a last, short batch).
  void set_batch(ExecSpace const& space, HostBatch const& batch, int n_valid);
  // The loss is the mean over the text positions of the whole sequences (all shards).
  // before_group(g), if given, is called just before the first kernel that reads the weights of
  // parameter group g is queued (an optimizer may still be writing them).
  // With a LossSlot (and one shard) the loss is not brought to the host: the sum of the rows'
  // losses is queued into slot.sums(slot.index) on the device, and the result carries the
  // counted rows and a NaN loss; the mean is sums(index) / counted_rows.
  using LossSlot = DeviceLossSlot;
  CrossEntropyResult forward(ExecSpace const& space, std::function<void(int group)> const& before_group = {},
                             LossSlot const& deferred = {});
  // Backward of d_loss * loss; accumulates into gradients. Needs the preceding forward().
  // group_ready(g), if given, is called as soon as the gradients of parameter group g
  // (for_each_group order: 0 embed, 1 + l block l, L + 1 head) are complete — kernels enqueued
  // on `space`, not necessarily finished — so an optimizer can start on them while the backward
  // pass goes on with earlier layers.
  void backward(ExecSpace const& space, double d_loss,
                std::function<void(int group)> const& group_ready = {});
  // [B*S/P, V] logits of the last forward() (fp32 runs: overwritten by backward()), this rank's
  // tokens, on the host. Waits for `space`.
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> logits_to_host(ExecSpace const& space) const;
  // The row of logits() for sample b, sequence position `position`; -1 if another shard has it.
  int logits_row(int b, int position) const;
  // Sets text token `position` of every sample (for greedy decoding).
  Kokkos::View<int*, DeviceMemory> const& tokens() const { return tokens_; }

  // Captioning (evaluation, `joule caption`). Each reads the logits of the last forward() on the
  // device and brings batch() integers to the host; all shards return the same values.
  using HostInts = compat::host_mirror_t<Kokkos::View<int*, DeviceMemory>>;
  // Per sample: the text positions whose most likely next token is not the target set by
  // set_batch() (a predicted PAD counts as the EOS it would stop on). 0 means greedy decoding
  // reproduces the reference token for token: text attention is causal, so teacher forcing feeds
  // exactly greedy decoding's own prefix for as long as that prefix is right.
  HostInts const& caption_misses(ExecSpace const& space);
  // Per sample: the most likely token after text position `position`.
  HostInts const& next_tokens(ExecSpace const& space, int position);
  // Replaces the text tokens of every sample ([B*T] host ints), keeping images and targets: the
  // steps of greedy decoding change nothing else.
  void set_tokens(ExecSpace const& space, std::int32_t const* tokens);

  // params: fp32 master weights (what AdamW updates and checkpoints hold); grads: fp32 parameter
  // gradients. kernel_weights: in bf16 runs the copy the kernels read (update_kernel_weights);
  // empty in fp32 runs.
  ModelParameters<T, DeviceMemory> params, grads;
  ModelParameters<bf16, DeviceMemory> kernel_weights;

 private:
  ModelConfig cfg_;
  int batch_, recompute_depth_;
  BlockShape shape_;
  SequenceShards shards_;
  // Inputs, and their host staging (allocated once: a step allocates nothing).
  Tensor4<T, DeviceMemory> images_;           // [B*F, C_in, H, W]
  Kokkos::View<int*, DeviceMemory> tokens_;   // [B*T]
  Kokkos::View<int*, DeviceMemory> targets_;  // [B*S/P]  this rank's positions
  PinnedMirror<Tensor4<T, DeviceMemory>> images_host_;  // pinned: the copies are asynchronous
  PinnedMirror<Kokkos::View<int*, DeviceMemory>> tokens_host_, targets_host_;
  int batch_counted_rows_ = 0;  // targets of the staged batch that count (set_batch, on the host)
  detail::StreamEvent staged_;  // the last batch's copies have read the host staging
  Precision precision_;
  // Activations, their gradients and the passes' scratch: one of the two, by precision.
  std::unique_ptr<detail::ModelPass<Precision::fp32>> fp32_;
  std::unique_ptr<detail::ModelPass<Precision::bf16>> bf16_;
  int counted_rows_ = 0;
  // Captioning: the argmax of every logits row, and batch() results with their host copy.
  Kokkos::View<int*, DeviceMemory> picks_, sample_result_;
  HostInts sample_result_host_;
  std::vector<double> shard_sum_;  // batch() values summed over the shards

  HostInts const& sample_result_to_host(ExecSpace const& space);
  void require_tokens_in_vocabulary(char const* op, std::int32_t const* tokens, std::size_t n) const;

  Tensor2<float, DeviceMemory> const& logits_view() const;  // [B*S/P, V_pad], fp32 in every precision
  template <Precision P>
  CrossEntropyResult forward_pass(detail::ModelPass<P>& pass, ExecSpace const& space,
                                  std::function<void(int group)> const& before_group, LossSlot const& deferred);
  template <Precision P>
  void backward_pass(detail::ModelPass<P>& pass, ExecSpace const& space, double d_loss,
                     std::function<void(int group)> const& group_ready);
};

}  // namespace joule
