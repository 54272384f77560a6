#include "core/config/config.hpp"
#include "core/io/input_file.hpp"
#include "core/model/limits.hpp"  // generated from core/model/limits.json

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

namespace joule {

namespace {

using nlohmann::json;

// Where each number that overflows a double was given: path ("train.steps") -> its text ("1e999").
using Overflows = std::map<std::string, std::string>;

std::string number_text(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

// A key as it can be printed: control characters (a NUL would cut the message) as \u00XX.
std::string printable(std::string const& key) {
  std::string out;
  for (unsigned char c : key) {
    if (c < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", unsigned(c));
      out += code;
    } else {
      out += char(c);
    }
  }
  return out;
}

// Follows the path of the value being parsed ("train.steps", "tune.offload_ratios[2]") through
// nlohmann's SAX events; a reader acts on the numbers (on_number) and the keys (on_key), and
// stops the parse by returning false.
class JsonPaths : public nlohmann::json_sax<json> {
 public:
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value() && on_number(); }
  bool number_unsigned(number_unsigned_t) override { return value() && on_number(); }
  bool number_float(number_float_t, string_t const&) override { return value() && on_number(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(false); }
  bool key(string_t& k) override {
    auto& f = frames_.back();
    f.key = k;
    return on_key(f.keys.insert(k).second);
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, std::string const&, nlohmann::detail::exception const&) override { return false; }

 protected:
  virtual bool on_number() { return true; }
  virtual bool on_key(bool /*first_in_its_object*/) { return true; }
  // The path of the value (or key) just read.
  std::string path() const {
    std::string p;
    for (auto const& f : frames_)
      p += f.array ? "[" + std::to_string(f.current) + "]" : (p.empty() ? "" : ".") + printable(f.key);
    return p;
  }

 private:
  struct Frame {
    bool array = false;
    std::string key;             // objects: the key just read
    std::set<std::string> keys;  // objects: the keys read so far
    std::size_t next = 0, current = 0;  // arrays: the next element's index, the current one's
  };
  bool value() {
    if (!frames_.empty() && frames_.back().array) frames_.back().current = frames_.back().next++;
    return true;
  }
  bool open(bool array) {
    value();
    frames_.push_back({array, {}, {}, 0, 0});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  std::vector<Frame> frames_;
};

// Records the paths of the numbers whose positions (counted over all number tokens in text
// order) are in `wanted`.
class NumberPaths : public JsonPaths {
 public:
  NumberPaths(std::map<std::size_t, std::string> const& wanted, Overflows& found) : wanted_(wanted), found_(found) {}

 private:
  bool on_number() override {
    auto const it = wanted_.find(count_++);
    if (it != wanted_.end()) found_.emplace(path(), it->second);
    return true;
  }
  std::map<std::size_t, std::string> const& wanted_;
  Overflows& found_;
  std::size_t count_ = 0;
};

// Finds the first key given twice in one object ("train.steps"): JSON leaves which one counts to
// the reader (nlohmann keeps the last), so joule refuses the document instead of guessing.
class DuplicateKeys : public JsonPaths {
 public:
  std::string found;  // the path of the first duplicate, "" if none

 private:
  bool on_key(bool first_in_its_object) override {
    if (!first_in_its_object) found = path();
    return first_in_its_object;  // stop at the first
  }
};

void reject_duplicate_keys(std::string const& text, std::string const& source) {
  DuplicateKeys keys;
  json::sax_parse(text, &keys, json::input_format_t::json, /*strict=*/false);
  if (keys.found.empty()) return;
  // The lines where the key's text appears (the same name elsewhere in the file is listed too).
  std::string const last = keys.found.substr(keys.found.find_last_of('.') + 1);
  std::string const token = "\"" + last + "\"";
  std::vector<int> lines;
  for (std::size_t at = text.find(token); at != std::string::npos; at = text.find(token, at + 1)) {
    std::size_t after = at + token.size();
    while (after < text.size() && std::isspace(static_cast<unsigned char>(text[after]))) ++after;
    if (after < text.size() && text[after] == ':') lines.push_back(1 + int(std::count(text.begin(), text.begin() + at, '\n')));
  }
  std::string where;
  for (std::size_t i = 0; i < lines.size(); ++i)
    where += (i == 0 ? " (lines " : i + 1 == lines.size() ? " and " : ", ") + std::to_string(lines[i]);
  if (!where.empty()) where += ")";
  throw ConfigError(source + ": " + keys.found + " is given more than once" + where +
                    "; JSON does not say which one counts, so joule takes neither: keep one");
}

// nlohmann-json refuses a number beyond the range of a double ("1e999") without saying where it
// is. This finds every such number token (outside strings), parses the text with each replaced by
// a finite stand-in, and records where each was given, so the field that reads it can say so.
json parse_with_overflows(std::string const& text, std::string const& source, Overflows* overflows) {
  std::string replaced;
  replaced.reserve(text.size());
  std::map<std::size_t, std::string> wanted;  // number token index -> original text
  std::size_t numbers = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size();) {
    char const c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      replaced += c;
      ++i;
      continue;
    }
    if (c == '"') in_string = true;
    if (c != '-' && (c < '0' || c > '9')) {
      replaced += c;
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && std::string_view("0123456789+-.eE").find(text[end]) != std::string_view::npos) ++end;
    std::string const token = text.substr(i, end - i);
    double const x = std::strtod(token.c_str(), nullptr);
    if (std::isinf(x)) {
      wanted.emplace(numbers, token.size() > 40 ? token.substr(0, 37) + "..." : token);
      replaced += x > 0 ? "1e308" : "-1e308";
    } else {
      replaced += token;
    }
    ++numbers;
    i = end;
  }
  json root;
  try {
    root = json::parse(replaced);
    NumberPaths paths(wanted, *overflows);
    json::sax_parse(replaced, &paths);
  } catch (json::exception const& e) {
    throw ConfigError(source + ": not valid JSON: " + e.what());
  }
  return root;
}

// Reads fields of one section, checking type and range; remembers which it saw so that unknown
// (misspelt) fields are reported too.
// Every numeric field's range, in one place: parse_config reads each field within it, and
// check_config checks a configuration built in code against it. recompute_depth's upper end is
// model.layers (kLayersBound).
constexpr long long kLayersBound = -1;
struct IntField {
  char const* section;
  char const* key;
  int ModelConfig::*model;  // one of these two
  int TrainConfig::*train;
  long long lo, hi;
};
constexpr IntField kIntFields[] = {
    {"model", "layers", &ModelConfig::layers, nullptr, 1, 256},
    {"model", "d_model", &ModelConfig::d_model, nullptr, 16, 16384},
    {"model", "heads", &ModelConfig::heads, nullptr, 1, 256},
    {"model", "mlp_ratio", &ModelConfig::mlp_ratio, nullptr, 1, 16},
    {"model", "image_size", &ModelConfig::image_size, nullptr, limits::kImageSizeMin, limits::kImageSizeMax},
    {"model", "patch_size", &ModelConfig::patch_size, nullptr, 1, 256},
    {"model", "channels", &ModelConfig::channels, nullptr, limits::kChannelsMin, limits::kChannelsMax},
    {"model", "frames", &ModelConfig::frames, nullptr, limits::kFramesMin, limits::kFramesMax},
    {"model", "text_len", &ModelConfig::text_len, nullptr, limits::kTextLenMin, limits::kTextLenMax},
    {"train", "batch", nullptr, &TrainConfig::batch, 1, 1 << 20},
    {"train", "steps", nullptr, &TrainConfig::steps, 1, 1 << 30},
    {"train", "warmup_steps", nullptr, &TrainConfig::warmup_steps, 0, 1 << 30},
    {"train", "eval_every", nullptr, &TrainConfig::eval_every, 0, 1 << 30},
    {"train", "eval_samples", nullptr, &TrainConfig::eval_samples, 1, 1 << 24},
    {"train", "log_every", nullptr, &TrainConfig::log_every, 1, 1 << 30},
    {"train", "recompute_depth", nullptr, &TrainConfig::recompute_depth, 0, kLayersBound},
    {"train", "micro_batch", nullptr, &TrainConfig::micro_batch, 1, kMaxMicroBatch},
    {"train", "seq_shards", nullptr, &TrainConfig::seq_shards, 1, kMaxSeqShards},
    {"train", "host_threads", nullptr, &TrainConfig::host_threads, 0, kMaxHostThreads},
    {"train", "checkpoint_every", nullptr, &TrainConfig::checkpoint_every, 0, 1 << 30},
};
struct RealField {
  char const* section;
  char const* key;
  double DataConfig::*data;  // one of these two
  double TrainConfig::*train;
  double lo, hi;
  bool lo_open;
};
constexpr RealField kRealFields[] = {
    {"data", "eval_fraction", &DataConfig::eval_fraction, nullptr, limits::kEvalFractionMin, limits::kEvalFractionMax,
     limits::kEvalFractionMinOpen},
    {"train", "lr", nullptr, &TrainConfig::lr, 0.0, 10.0, true},
    {"train", "min_lr", nullptr, &TrainConfig::min_lr, 0.0, 10.0, false},
    {"train", "weight_decay", nullptr, &TrainConfig::weight_decay, 0.0, 1.0, false},
    {"train", "beta1", nullptr, &TrainConfig::beta1, 0.0, 0.999999, false},
    {"train", "beta2", nullptr, &TrainConfig::beta2, 0.0, 0.999999, false},
    {"train", "grad_clip", nullptr, &TrainConfig::grad_clip, 0.0, 1e6, false},
    {"train", "offload_ratio", nullptr, &TrainConfig::offload_ratio, 0.0, 1.0, false},
};
// The row of section.key in one of the tables above.
template <class Field, std::size_t N>
Field const& field_in(Field const (&table)[N], std::string const& section, char const* key) {
  for (auto const& f : table)
    if (section == f.section && std::strcmp(key, f.key) == 0) return f;
  throw std::logic_error("no range for " + section + "." + key);
}
IntField const& int_field(std::string const& section, char const* key) { return field_in(kIntFields, section, key); }
RealField const& real_field(std::string const& section, char const* key) { return field_in(kRealFields, section, key); }
std::string range_text(double lo, double hi, bool lo_open) {
  std::ostringstream range;
  range << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
  return range.str();
}

class Section {
 public:
  Section(json const& root, std::string name, std::string const& source, Overflows const& overflows)
      : name_(std::move(name)), source_(source), overflows_(overflows) {
    if (!root.contains(name_)) fail_at(name_, "missing section (required: model, data, train)");
    node_ = &root.at(name_);
    if (!node_->is_object()) fail_at(name_, "must be an object");
  }

  // Integers arrive as nlohmann's signed or unsigned 64-bit values, or as a double when the text
  // has a fraction or exponent (1e20) or does not fit 64 bits; each case is compared as itself,
  // so nothing wraps around on the way to the range check.
  int integer(char const* key, long long lo, long long hi) {
    json const& v = field(key);
    std::string const range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    check_overflow(key, range);
    if (v.is_number_unsigned()) {
      std::uint64_t const x = v.get<std::uint64_t>();
      if (x > std::uint64_t(hi) || (lo > 0 && x < std::uint64_t(lo)))
        fail(key, "is " + std::to_string(x) + "; allowed: " + range);
      return int(x);
    }
    if (v.is_number_integer()) {
      long long const x = v.get<long long>();
      if (x < lo || x > hi) fail(key, "is " + std::to_string(x) + "; allowed: " + range);
      return int(x);
    }
    if (v.is_number_float()) {  // 2e0 and 2.0 are the number 2 (JSON has one kind of number); 2.5 is not whole
      double const x = v.get<double>();
      if (x < double(lo) || x > double(hi)) fail(key, "is " + number_text(x) + ", out of range " + range);
      if (x != std::floor(x)) fail(key, "is " + number_text(x) + ", not a whole number; allowed: integers in " + range);
      return int(x);
    }
    fail(key, "must be an integer in " + range);
  }
  std::uint64_t unsigned_integer(char const* key) {
    json const& v = field(key);
    std::string const range = "[0, " + std::to_string(std::numeric_limits<std::uint64_t>::max()) + "]";
    check_overflow(key, range);
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    if (v.is_number_integer()) fail(key, "is " + std::to_string(v.get<long long>()) + ", out of range " + range);
    if (v.is_number_float()) {
      double const x = v.get<double>();
      if (x < 0 || x >= 18446744073709551616.0) fail(key, "is " + number_text(x) + ", out of range " + range);
      if (x != std::floor(x)) fail(key, "is " + number_text(x) + ", not a whole number; allowed: integers in " + range);
      return std::uint64_t(x);
    }
    fail(key, "must be an integer >= 0");
  }
  double number(char const* key, double lo, double hi, bool lo_open = false) {
    json const& v = field(key);
    std::string const range = range_text(lo, hi, lo_open);
    check_overflow(key, range);
    if (!v.is_number()) fail(key, "must be a number in " + range);
    double const x = v.get<double>();
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
      std::ostringstream msg;
      msg << "is " << x << "; allowed: " << range;
      fail(key, msg.str());
    }
    return x;
  }
  // The field's range from the tables above (upper ends that depend on the model given).
  int integer(char const* key, int layers = 0) {
    auto const& f = int_field(name_, key);
    return integer(key, f.lo, f.hi == kLayersBound ? layers : f.hi);
  }
  double number(char const* key) {
    auto const& f = real_field(name_, key);
    return number(key, f.lo, f.hi, f.lo_open);
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
        fail_at(name_ + "." + printable(item.key()), "unknown field (allowed in " + name_ + ": " + allowed + ")");
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
  void check_overflow(char const* key, std::string const& range) const {
    auto const it = overflows_.find(name_ + "." + key);
    if (it != overflows_.end()) fail(key, "is " + it->second + ", out of range " + range + " (beyond any double)");
  }

  json const* node_ = nullptr;
  std::string name_, source_;
  Overflows const& overflows_;
  std::set<std::string> seen_;
};

}  // namespace

void check_json_limits(std::string const& text, std::string const& source) {
  if (text.size() > kConfigMaxBytes)
    throw ConfigError(source + ": " + std::to_string(text.size()) + " bytes, more than the " +
                      std::to_string(kConfigMaxBytes) + " bytes (16 MiB) a configuration may have");
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char const c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kConfigMaxDepth)
        throw ConfigError(source + ": nested deeper than " + std::to_string(kConfigMaxDepth) +
                          " levels of arrays/objects (at byte " + std::to_string(i) +
                          "), the limit for a configuration");
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is left to the parser to report
    }
  }
  reject_duplicate_keys(text, source);  // within the depth limit now; invalid text is the parser's to report
}

FieldProblem model_problem(ModelConfig const& m) {
  if (m.heads < 1 || m.d_model % m.heads != 0)
    return {"heads", "is " + std::to_string(m.heads) + ", which does not divide d_model = " + std::to_string(m.d_model)};
  int const hd = m.head_dim();
  if (hd != 16 && hd != 32 && hd != 64 && hd != 128)
    return {"heads", "gives head size d_model/heads = " + std::to_string(hd) + "; allowed head sizes: 16, 32, 64, 128"};
  if (m.patch_size < 1 || m.image_size % m.patch_size != 0)
    return {"patch_size", "is " + std::to_string(m.patch_size) + ", which does not divide image_size = " +
                              std::to_string(m.image_size)};
  return {};
}

std::string field_range_text(std::string const& dotted_name) {
  auto const dot = dotted_name.find('.');
  std::string const section = dotted_name.substr(0, dot), key = dotted_name.substr(dot + 1);
  for (auto const& f : kIntFields)
    if (section == f.section && key == f.key)
      return std::to_string(f.lo) + " to " + (f.hi == kLayersBound ? std::string("model.layers") : std::to_string(f.hi));
  for (auto const& f : kRealFields)
    if (section == f.section && key == f.key) {
      std::ostringstream text;
      text << (f.lo_open ? "above " : "") << f.lo << " to " << f.hi;
      return text.str();
    }
  return "";
}

void check_config(Config const& cfg, std::string const& source) {
  auto const fail = [&](std::string const& field, std::string const& what) { throw ConfigError(source + ": " + field + " " + what); };
  for (auto const& f : kIntFields) {
    long long const v = f.model ? cfg.model.*f.model : cfg.train.*f.train;
    long long const hi = f.hi == kLayersBound ? cfg.model.layers : f.hi;
    if (v < f.lo || v > hi)
      fail(std::string(f.section) + "." + f.key, "is " + std::to_string(v) + "; allowed: [" + std::to_string(f.lo) + ", " +
                                                    std::to_string(hi) + "]");
  }
  for (auto const& f : kRealFields) {
    double const v = f.data ? cfg.data.*f.data : cfg.train.*f.train;
    if (!(f.lo_open ? v > f.lo : v >= f.lo) || !(v <= f.hi)) {
      std::ostringstream msg;
      msg << "is " << v << "; allowed: " << range_text(f.lo, f.hi, f.lo_open);
      fail(std::string(f.section) + "." + f.key, msg.str());
    }
  }
  if (cfg.data.path.empty()) fail("data.path", "must not be empty");
  if (cfg.train.precision != Precision::fp32 && cfg.train.precision != Precision::bf16)
    fail("train.precision", "is not one of \"fp32\", \"bf16\"");
  if (auto const problem = model_problem(cfg.model); !problem.field.empty()) fail("model." + problem.field, problem.what);
  if (auto const problem = reconfigurable_problem(cfg.model, cfg.train); !problem.field.empty())
    fail("train." + problem.field, problem.what);
  if (cfg.train.min_lr > cfg.train.lr) fail("train.min_lr", "must not exceed lr");
}

FieldProblem reconfigurable_problem(ModelConfig const& m, TrainConfig const& t) {
  auto const range = [](auto lo, auto hi) { return "; allowed: [" + number_text(lo) + ", " + number_text(hi) + "]"; };
  if (!(t.offload_ratio >= 0.0 && t.offload_ratio <= 1.0))
    return {"offload_ratio", "is " + number_text(t.offload_ratio) + range(0, 1)};
  if (t.recompute_depth < 0 || t.recompute_depth > m.layers)
    return {"recompute_depth", "is " + std::to_string(t.recompute_depth) + range(0, m.layers) + " (model.layers)"};
  if (t.host_threads < 0 || t.host_threads > kMaxHostThreads)
    return {"host_threads", "is " + std::to_string(t.host_threads) + range(0, kMaxHostThreads)};
  if (t.micro_batch < 1 || t.micro_batch > kMaxMicroBatch)
    return {"micro_batch", "is " + std::to_string(t.micro_batch) + range(1, kMaxMicroBatch)};
  if (t.batch % t.micro_batch != 0)
    return {"micro_batch", "is " + std::to_string(t.micro_batch) + ", which does not divide batch = " + std::to_string(t.batch)};
  if (t.seq_shards < 1 || t.seq_shards > kMaxSeqShards)
    return {"seq_shards", "is " + std::to_string(t.seq_shards) + range(1, kMaxSeqShards)};
  if (m.heads % t.seq_shards != 0 || m.seq_len() % t.seq_shards != 0)
    return {"seq_shards", "is " + std::to_string(t.seq_shards) + ", which must divide model.heads (" +
                              std::to_string(m.heads) + ") and the sequence length (" + std::to_string(m.seq_len()) +
                              " = image tokens + text_len)"};
  if (t.offload_cast != TrainConfig::OffloadCast::device && t.offload_cast != TrainConfig::OffloadCast::host)
    return {"offload_cast", "is not one of \"device\", \"host\""};
  return {};
}

Config parse_config(std::string const& json_text, std::string const& source) {
  check_json_limits(json_text, source);  // before anything walks the document
  json root;
  Overflows overflows;
  try {
    root = json::parse(json_text);
  } catch (json::out_of_range const& e) {
    if (e.id != 406) throw ConfigError(source + ": not valid JSON: " + e.what());
    root = parse_with_overflows(json_text, source, &overflows);  // "number overflow parsing '1e999'"
  } catch (json::exception const& e) {
    throw ConfigError(source + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw ConfigError(source + ": must be a JSON object with model, data, train");
  for (auto const& item : root.items())
    // "tune" belongs to the scheduler (`joule tune` reads and checks it) and "parallel" to the
    // process set-up (parallel/backend_choice.hpp); training ignores them.
    if (item.key() != "model" && item.key() != "data" && item.key() != "train" && item.key() != "tune" &&
        item.key() != "parallel")
      throw ConfigError(source + ": unknown section '" + printable(item.key()) +
                        "' (allowed: model, data, train, tune, parallel)");

  Config cfg;
  {
    Section s(root, "model", source, overflows);
    ModelConfig& m = cfg.model;
    m.layers = s.integer("layers");
    m.d_model = s.integer("d_model");
    m.heads = s.integer("heads");
    m.mlp_ratio = s.integer("mlp_ratio");
    m.image_size = s.integer("image_size");
    m.patch_size = s.integer("patch_size");
    m.channels = s.integer("channels");
    m.frames = s.integer("frames");
    m.text_len = s.integer("text_len");
    m.tie_embeddings = s.boolean("tie_embeddings");
    s.reject_unknown();
    if (auto const problem = model_problem(m); !problem.field.empty()) s.fail(problem.field, problem.what);
  }
  {
    Section s(root, "data", source, overflows);
    cfg.data.path = s.string("path", false);
    cfg.data.eval_fraction = s.number("eval_fraction");
    s.reject_unknown();
  }
  {
    Section s(root, "train", source, overflows);
    TrainConfig& t = cfg.train;
    t.batch = s.integer("batch");
    t.steps = s.integer("steps");
    t.lr = s.number("lr");
    t.min_lr = s.number("min_lr");
    t.warmup_steps = s.integer("warmup_steps");
    t.weight_decay = s.number("weight_decay");
    t.beta1 = s.number("beta1");
    t.beta2 = s.number("beta2");
    t.grad_clip = s.number("grad_clip");
    t.eval_every = s.integer("eval_every");
    t.eval_samples = s.integer("eval_samples");
    t.log_every = s.integer("log_every");
    t.seed = s.unsigned_integer("seed");
    t.recompute_depth = s.integer("recompute_depth", cfg.model.layers);
    // Optional fields.
    s.mark_known("checkpoint");
    s.mark_known("checkpoint_every");
    s.mark_known("offload_ratio");
    s.mark_known("host_threads");
    s.mark_known("seq_shards");
    s.mark_known("micro_batch");
    s.mark_known("tf32");
    s.mark_known("precision");
    s.mark_known("offload_cast");
    s.mark_known("offload_speculation");
    // Absent: the whole batch in one pass (under mpirun, joule train deals it to the replicas).
    t.micro_batch = s.has("micro_batch") ? s.integer("micro_batch") : t.batch;
    if (s.has("seq_shards")) t.seq_shards = s.integer("seq_shards");
    if (s.has("offload_ratio")) t.offload_ratio = s.number("offload_ratio");
    if (s.has("host_threads")) t.host_threads = s.integer("host_threads");
    if (s.has("checkpoint")) t.checkpoint = s.string("checkpoint", true);
    if (s.has("checkpoint_every")) t.checkpoint_every = s.integer("checkpoint_every");
    if (s.has("tf32")) t.tf32 = s.boolean("tf32");
    if (s.has("offload_speculation")) t.offload_speculation = s.boolean("offload_speculation");
    if (s.has("precision")) {
      std::string const p = s.string("precision", false);
      if (p != "fp32" && p != "bf16") s.fail("precision", "is \"" + p + "\"; allowed are \"fp32\" and \"bf16\"");
      t.precision = parse_precision(p);
    }
    if (s.has("offload_cast")) {
      std::string const c = s.string("offload_cast", false);
      if (c != "device" && c != "host") s.fail("offload_cast", "is \"" + c + "\"; allowed are \"device\" and \"host\"");
      t.offload_cast = c == "host" ? TrainConfig::OffloadCast::host : TrainConfig::OffloadCast::device;
    }
    s.reject_unknown();
    if (auto const problem = reconfigurable_problem(cfg.model, t); !problem.field.empty()) s.fail(problem.field, problem.what);
    if (t.min_lr > t.lr) s.fail("min_lr", "must not exceed lr");
  }
  // A number beyond any double in a part training does not read (tune, parallel) is still an
  // error here: its stand-in must not travel on in cfg.json.
  if (!overflows.empty())
    throw ConfigError(source + ": " + overflows.begin()->first + " is " + overflows.begin()->second +
                      ", beyond the range of any double");
  check_config(cfg, source);  // what the sections above checked, as one built in code is checked
  try {
    cfg.json = root.dump(2);
  } catch (json::exception const& e) {
    throw ConfigError(source + ": cannot be written back as JSON: " + e.what());
  }
  return cfg;
}

char const* offload_cast_name(TrainConfig::OffloadCast c) {
  return kOffloadCastNames[static_cast<int>(c)];
}

std::string read_config_file(std::string const& path) {
  try {
    io::InputFile const in(path, "configurations");
    std::string text = in.read_at_most(kConfigMaxBytes);
    if (text.size() > kConfigMaxBytes)
      throw ConfigError(path + ": larger than the " + std::to_string(kConfigMaxBytes) +
                        " bytes (16 MiB) a configuration may have");
    return text;
  } catch (io::InputError const& e) {
    if (e.system_error() != 0 && std::string(e.what()).find(": cannot open it") != std::string::npos)
      throw ConfigError(path + ": cannot open the configuration file (" + std::strerror(e.system_error()) + ")");
    throw ConfigError(e.what());
  }
}

Config load_config(std::string const& path) { return parse_config(read_config_file(path), path); }

}  // namespace joule
