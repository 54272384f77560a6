#include "core/model/config.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>
#include <sstream>

namespace joule {

namespace {

using nlohmann::json;

// Reads fields of one section, checking type and range; remembers which it saw so that unknown
// (misspelt) fields are reported too.
class Section {
 public:
  Section(json const& root, std::string name, std::string const& source)
      : name_(std::move(name)), source_(source) {
    if (!root.contains(name_)) fail_at(name_, "missing section (required: model, data, train)");
    node_ = &root.at(name_);
    if (!node_->is_object()) fail_at(name_, "must be an object");
  }

  int integer(char const* key, long long lo, long long hi) {
    json const& v = field(key);
    if (!v.is_number_integer())
      fail(key, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    long long const x = v.get<long long>();
    if (x < lo || x > hi)
      fail(key, "is " + std::to_string(x) + "; allowed: [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
    return int(x);
  }
  std::uint64_t unsigned_integer(char const* key) {
    json const& v = field(key);
    if (!v.is_number_integer() || v.get<long long>() < 0) fail(key, "must be an integer >= 0");
    return v.get<std::uint64_t>();
  }
  double number(char const* key, double lo, double hi, bool lo_open = false) {
    json const& v = field(key);
    std::ostringstream range;
    range << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
    if (!v.is_number()) fail(key, "must be a number in " + range.str());
    double const x = v.get<double>();
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
      std::ostringstream msg;
      msg << "is " << x << "; allowed: " << range.str();
      fail(key, msg.str());
    }
    return x;
  }
  bool boolean(char const* key) {
    json const& v = field(key);
    if (!v.is_boolean()) fail(key, "must be true or false");
    return v.get<bool>();
  }
  std::string string(char const* key, bool allow_empty) {
    json const& v = field(key);
    if (!v.is_string()) fail(key, "must be a string");
    if (!allow_empty && v.get<std::string>().empty()) fail(key, "must not be empty");
    return v.get<std::string>();
  }
  bool has(char const* key) const { return node_->contains(key); }

  void reject_unknown() const {
    for (auto const& item : node_->items())
      if (!seen_.count(item.key())) {
        std::string allowed;
        for (auto const& k : seen_) allowed += (allowed.empty() ? "" : ", ") + k;
        fail_at(name_ + "." + item.key(), "unknown field (allowed in " + name_ + ": " + allowed + ")");
      }
  }
  void mark_known(char const* key) { seen_.insert(key); }

  [[noreturn]] void fail(std::string const& key, std::string const& what) const {
    fail_at(name_ + "." + key, what);
  }

 private:
  json const& field(char const* key) {
    seen_.insert(key);
    if (!node_->contains(key)) fail(key, "missing (required)");
    return node_->at(key);
  }
  [[noreturn]] void fail_at(std::string const& where, std::string const& what) const {
    throw ConfigError(source_ + ": " + where + " " + what);
  }

  json const* node_ = nullptr;
  std::string name_, source_;
  std::set<std::string> seen_;
};

}  // namespace

Config parse_config(std::string const& json_text, std::string const& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (json::parse_error const& e) {
    throw ConfigError(source + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw ConfigError(source + ": must be a JSON object with model, data, train");
  for (auto const& item : root.items())
    // "tune" belongs to the scheduler (`joule tune` reads and checks it) and "parallel" to the
    // process set-up (parallel/backend_choice.hpp); training ignores them.
    if (item.key() != "model" && item.key() != "data" && item.key() != "train" && item.key() != "tune" &&
        item.key() != "parallel")
      throw ConfigError(source + ": unknown section '" + item.key() + "' (allowed: model, data, train, tune, parallel)");

  Config cfg;
  {
    Section s(root, "model", source);
    ModelConfig& m = cfg.model;
    m.layers = s.integer("layers", 1, 256);
    m.d_model = s.integer("d_model", 16, 16384);
    m.heads = s.integer("heads", 1, 256);
    m.mlp_ratio = s.integer("mlp_ratio", 1, 16);
    m.image_size = s.integer("image_size", 1, 4096);
    m.patch_size = s.integer("patch_size", 1, 256);
    m.channels = s.integer("channels", 1, 4);
    m.frames = s.integer("frames", 1, 256);
    m.text_len = s.integer("text_len", 3, 4096);
    m.tie_embeddings = s.boolean("tie_embeddings");
    s.reject_unknown();
    if (m.d_model % m.heads != 0)
      s.fail("heads", "is " + std::to_string(m.heads) + ", which does not divide d_model = " +
                          std::to_string(m.d_model));
    int const hd = m.head_dim();
    if (hd != 16 && hd != 32 && hd != 64 && hd != 128)
      s.fail("heads", "gives head size d_model/heads = " + std::to_string(hd) +
                          "; allowed head sizes: 16, 32, 64, 128");
    if (m.image_size % m.patch_size != 0)
      s.fail("patch_size", "is " + std::to_string(m.patch_size) +
                               ", which does not divide image_size = " + std::to_string(m.image_size));
  }
  {
    Section s(root, "data", source);
    cfg.data.path = s.string("path", false);
    cfg.data.eval_fraction = s.number("eval_fraction", 0.0, 0.9, /*lo_open=*/true);
    s.reject_unknown();
  }
  {
    Section s(root, "train", source);
    TrainConfig& t = cfg.train;
    t.batch = s.integer("batch", 1, 1 << 20);
    t.micro_batch = s.integer("micro_batch", 1, 1 << 20);
    t.steps = s.integer("steps", 1, 1 << 30);
    t.lr = s.number("lr", 0.0, 10.0, true);
    t.min_lr = s.number("min_lr", 0.0, 10.0);
    t.warmup_steps = s.integer("warmup_steps", 0, 1 << 30);
    t.weight_decay = s.number("weight_decay", 0.0, 1.0);
    t.beta1 = s.number("beta1", 0.0, 0.999999);
    t.beta2 = s.number("beta2", 0.0, 0.999999);
    t.grad_clip = s.number("grad_clip", 0.0, 1e6);
    t.eval_every = s.integer("eval_every", 0, 1 << 30);
    t.eval_samples = s.integer("eval_samples", 1, 1 << 24);
    t.log_every = s.integer("log_every", 1, 1 << 30);
    t.seed = s.unsigned_integer("seed");
    t.recompute_depth = s.integer("recompute_depth", 0, cfg.model.layers);
    // Optional fields.
    s.mark_known("checkpoint");
    s.mark_known("checkpoint_every");
    s.mark_known("offload_ratio");
    s.mark_known("host_threads");
    s.mark_known("seq_shards");
    if (s.has("seq_shards")) {
      t.seq_shards = s.integer("seq_shards", 1, 4096);
      if (cfg.model.heads % t.seq_shards != 0 || cfg.model.seq_len() % t.seq_shards != 0)
        s.fail("seq_shards", "is " + std::to_string(t.seq_shards) + ", which must divide model.heads (" +
                                 std::to_string(cfg.model.heads) + ") and the sequence length (" +
                                 std::to_string(cfg.model.seq_len()) + " = image tokens + text_len)");
    }
    if (s.has("offload_ratio")) t.offload_ratio = s.number("offload_ratio", 0.0, 1.0);
    if (s.has("host_threads")) t.host_threads = s.integer("host_threads", 0, 4096);
    if (s.has("checkpoint")) t.checkpoint = s.string("checkpoint", true);
    if (s.has("checkpoint_every")) t.checkpoint_every = s.integer("checkpoint_every", 0, 1 << 30);
    s.reject_unknown();
    if (t.batch % t.micro_batch != 0)
      s.fail("micro_batch", "is " + std::to_string(t.micro_batch) + ", which does not divide batch = " +
                                std::to_string(t.batch));
    if (t.min_lr > t.lr) s.fail("min_lr", "must not exceed lr");
  }
  cfg.json = root.dump(2);
  return cfg;
}

Config load_config(std::string const& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError(path + ": cannot open the configuration file");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config(ss.str(), path);
}

}  // namespace joule
