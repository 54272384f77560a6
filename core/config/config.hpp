#pragma once
// The job configuration: a JSON file with three sections, documented field by field in
// docs/configuration.md. parse_config() checks every field (type, range, consistency between
// fields) and throws ConfigError naming the field and what is allowed, before anything is
// allocated; check_config() checks the values of a configuration built in code the same way, in
// the same words (a Trainer runs it on the configuration it is given). Every read path (files, the `config` attribute of checkpoints and run logs) goes
// through check_json_limits() first, so no JSON parser ever walks a document that is too large or
// too deeply nested.
#include "core/precision/precision_kind.hpp"  // train.precision (no Kokkos here)

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace joule {

class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Text is bytes: ids 0..255 are byte values, then three specials.
inline constexpr int kTokenBos = 256;
inline constexpr int kTokenEos = 257;
inline constexpr int kTokenPad = 258;
inline constexpr int kVocabSize = 259;
// The LM head's rows and the logits' columns are padded to a multiple of this (259 -> 264): a row
// of 259 bf16 logit gradients is 518 bytes, which no 16-byte-aligned tensor-core GEMM (cuBLASLt)
// takes as a leading dimension. The padding is zero weights, masked out of the loss and of argmax.
inline constexpr int kVocabRowAlignment = 8;
inline constexpr int kVocabPadded = (kVocabSize + kVocabRowAlignment - 1) / kVocabRowAlignment * kVocabRowAlignment;

struct ModelConfig {
  int layers = 2;
  int d_model = 128;
  int heads = 4;
  int mlp_ratio = 4;
  int image_size = 32;  // square images, H = W
  int patch_size = 8;
  int channels = 3;
  int frames = 1;       // > 1: video clips
  int text_len = 36;    // tokens per caption including BOS/EOS/PAD
  bool tie_embeddings = true;

  int vocab() const { return kVocabSize; }
  int vocab_padded() const { return kVocabPadded; }
  int head_dim() const { return d_model / heads; }
  int mlp_hidden() const { return mlp_ratio * d_model; }
  int patches_per_frame() const { return (image_size / patch_size) * (image_size / patch_size); }
  int image_tokens() const { return frames * patches_per_frame(); }
  int seq_len() const { return image_tokens() + text_len; }
  int patch_features() const { return channels * patch_size * patch_size; }
};

struct DataConfig {
  std::string path;            // HDF5 dataset (see docs/datasets.md)
  double eval_fraction = 0.1;  // the last share of the samples is held out
};

struct TrainConfig {
  int batch = 32;         // samples per optimizer step
  int micro_batch = 32;   // samples per forward/backward; batch / micro_batch = accumulation
  int steps = 600;
  double lr = 3e-3;
  double min_lr = 3e-4;   // cosine decay ends here
  int warmup_steps = 50;  // linear warm-up from 0
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;  // global-norm clipping; 0 disables
  int eval_every = 200;    // 0: evaluate only at the end
  int eval_samples = 128;  // held-out samples per evaluation (at most the held-out set)
  int log_every = 20;
  std::uint64_t seed = 1;
  int recompute_depth = 0;     // first k blocks recompute their activations in the backward pass
  double offload_ratio = 0.0;  // share of parameter bytes whose optimizer state lives on the host
  int host_threads = 0;        // threads for the host optimizer; 0: all
  int seq_shards = 1;          // processes sharing each sequence (Ulysses); divides the process count
  std::string checkpoint;      // "" = no checkpoints
  int checkpoint_every = 0;    // 0: only at the end (if checkpoint is set)
  bool tf32 = false;           // CUDA: fp32 GEMMs on TF32 tensor cores (10-bit mantissa products)
  // What the kernels hold (core/precision/precision.hpp's table); master state is always fp32.
  Precision precision = Precision::fp32;
  // bf16 runs, offloaded groups: where their fp32 master weights become the bf16 copy the kernels
  // read. kDevice: the fp32 weights cross the link and the device rounds them; kHost: the host
  // cores round them and half the bytes cross. The same bits either way.
  enum class OffloadCast { device, host };
  OffloadCast offload_cast = OffloadCast::device;
  // With clipping, offloaded groups' host updates start before the gradient norm is known and are
  // run again on clipped steps (speculation then validation, core/train/optimizer.hpp); the same
  // bits either way. false waits for the norm.
  bool offload_speculation = true;
};
inline constexpr char const* kOffloadCastNames[] = {"device", "host"};  // TrainConfig::OffloadCast, in order
char const* offload_cast_name(TrainConfig::OffloadCast c);

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  std::string json;  // the configuration as given, normalised (stored in checkpoints and logs)
};

// Limits on configuration text, checked on the raw text before any JSON parser sees it:
// nlohmann-json's serialiser, comparison and copy recurse once per nesting level, so a valid but
// deeply nested document (a few hundred KB of `[`) would overflow the stack. A configuration
// needs 3 levels; 64 leaves room for any `tune` section.
inline constexpr std::size_t kConfigMaxBytes = std::size_t(16) << 20;  // 16 MiB
inline constexpr int kConfigMaxDepth = 64;
// Throws ConfigError "SOURCE: ..." naming the limit when `text` is larger than kConfigMaxBytes or
// nests arrays/objects deeper than kConfigMaxDepth (brackets inside strings do not count), and
// naming the key and its lines when an object gives a key twice (JSON does not say which counts).
void check_json_limits(std::string const& text, std::string const& source);

// The ranges of the train fields a running trainer may change (core/config/reconfigurable.hpp),
// which parse_config and with_reconfigured both check.
inline constexpr int kMaxMicroBatch = 1 << 20;
inline constexpr int kMaxSeqShards = 4096;
inline constexpr int kMaxHostThreads = 4096;
// Those fields' checks against the rest of the configuration, beyond their types: the train
// field that fails ("micro_batch") and what is wrong with it ("is 5, which does not divide batch
// = 12"); an empty field when all hold.
struct FieldProblem {
  std::string field;
  std::string what;
};
FieldProblem reconfigurable_problem(ModelConfig const& m, TrainConfig const& t);
// The model's own consistency: heads dividing d_model into a supported head size, patches tiling
// the image.
FieldProblem model_problem(ModelConfig const& m);

// A numeric field's range in words, from the table parse_config reads: "1 to 4096", "0 to
// model.layers"; "" for a field with none.
std::string field_range_text(std::string const& dotted_name);

// Every check parse_config makes on values, for a configuration built in code: each numeric
// field's range (one table, which parse_config reads too), data.path set, the model's and the
// train fields' consistency. Throws ConfigError "SOURCE: FIELD ..." naming the field and what is
// allowed, in parse_config's words.
void check_config(Config const& cfg, std::string const& source = "config");

// Checks the limits above, parses (a number beyond the range of a double, e.g. 1e999, is reported
// with the field it was given for) and validates every field. Throws only ConfigError.
Config parse_config(std::string const& json_text, std::string const& source = "config");
// The text of a configuration file, read once through one descriptor (io::InputFile): a FIFO, a
// device or a folder is refused before any read, naming it ("PATH: is a FIFO (named pipe), not a
// regular file; joule reads configurations only from regular files ..."), and at most
// kConfigMaxBytes + 1 bytes are read: a larger file is refused naming the limit (a FIFO hung train
// and data synth; /dev/zero never ends). Throws ConfigError.
std::string read_config_file(std::string const& path);
Config load_config(std::string const& path);  // read_config_file, then parse_config

}  // namespace joule
