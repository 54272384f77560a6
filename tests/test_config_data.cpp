// Bad configurations and malformed datasets are rejected with messages that name the field or
// object and what is allowed; the synthetic data is deterministic and captions round-trip.
#include "core/data/dataset.hpp"
#include "core/data/batch_prefetcher.hpp"
#include "core/data/synth.hpp"
#include "core/io/h5file.hpp"
#include "core/config/config.hpp"
#include "core/train/trainer.hpp"
#include "fuzz/hostile_files.hpp"
#include "support/test_support.hpp"
#include "support/tiny_config.hpp"
#include "support/test_paths.hpp"

#include <algorithm>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <utility>

using Catch::Matchers::Equals;
using namespace joule;
using namespace joule::test;
using nlohmann::json;

TEST_CASE("config: the tiny test configuration parses with its values", "[config]") {
  auto const cfg = parse_config(tiny_config_json("d.h5").dump());
  REQUIRE(cfg.model.layers == 3);
  REQUIRE(cfg.model.image_tokens() == 2 * 4);
  REQUIRE(cfg.model.seq_len() == 8 + 34);
  REQUIRE(cfg.train.micro_batch == 3);
  REQUIRE(cfg.data.path == "d.h5");
  REQUIRE_FALSE(cfg.train.tf32);  // absent: exact fp32 GEMMs
  auto j = tiny_config_json("d.h5");
  j["train"]["tf32"] = true;
  REQUIRE(parse_config(j.dump()).train.tf32);
}

TEST_CASE("config: bad values and missing fields are rejected before anything is allocated",
          "[config]") {
  struct Case {
    char const* what;
    std::function<void(json&)> edit;
    char const* message;
  };
  std::vector<Case> const cases = {
      {"missing field", [](json& j) { j["model"].erase("layers"); }, "model.layers missing (required)"},
      {"missing section", [](json& j) { j.erase("train"); }, "train missing section"},
      {"wrong type", [](json& j) { j["model"]["d_model"] = "128"; }, "model.d_model must be an integer in [16, 16384]"},
      {"out of range", [](json& j) { j["train"]["lr"] = -1.0; }, "train.lr is -1; allowed: (0, 10]"},
      {"zero layers", [](json& j) { j["model"]["layers"] = 0; }, "model.layers is 0; allowed: [1, 256]"},
      {"heads not dividing", [](json& j) { j["model"]["heads"] = 3; }, "does not divide d_model"},
      {"head size without kernel", [](json& j) { j["model"]["heads"] = 4; }, "allowed head sizes: 16, 32, 64, 128"},
      {"patch not dividing", [](json& j) { j["model"]["patch_size"] = 5; }, "does not divide image_size"},
      {"micro batch not dividing", [](json& j) { j["train"]["micro_batch"] = 4; }, "does not divide batch"},
      {"recompute too deep", [](json& j) { j["train"]["recompute_depth"] = 4; }, "train.recompute_depth is 4; allowed: [0, 3]"},
      {"misspelt field", [](json& j) { j["train"]["lerning_rate"] = 0.1; }, "train.lerning_rate unknown field"},
      {"unknown section", [](json& j) { j["optimizer"] = json::object(); }, "unknown section 'optimizer'"},
      {"min_lr above lr", [](json& j) { j["train"]["min_lr"] = 0.01; }, "train.min_lr must not exceed lr"},
      {"tf32 not a boolean", [](json& j) { j["train"]["tf32"] = 1; }, "train.tf32 must be true or false"},
      {"eval fraction", [](json& j) { j["data"]["eval_fraction"] = 0.0; }, "data.eval_fraction is 0; allowed: (0, 0.9]"},
  };
  for (auto const& c : cases) {
    INFO(c.what);
    auto j = tiny_config_json("d.h5");
    c.edit(j);
    REQUIRE_THROWS_WITH(parse_config(j.dump(), "cfg.json"), Contains(c.message) && StartsWith("cfg.json: "));
  }
  REQUIRE_THROWS_WITH(parse_config("{\"model\": ", "cfg.json"), Contains("not valid JSON"));
  REQUIRE_THROWS_AS(load_config("/nonexistent/config.json"), ConfigError);
}

TEST_CASE("data: synthetic data is deterministic, captions describe the image", "[data]") {
  SynthOptions o;
  o.count = 40;
  o.frames = 3;
  o.image_size = 16;
  o.text_len = 34;
  o.seed = 9;
  auto const a = make_synthetic(o), b = make_synthetic(o);
  REQUIRE(a.images == b.images);
  REQUIRE(a.tokens == b.tokens);
  o.seed = 10;
  REQUIRE(make_synthetic(o).images != a.images);
  for (std::size_t i = 0; i < a.captions.size(); ++i) {
    REQUIRE(decode_caption(&a.tokens[i * 34], 34) == a.captions[i]);
    REQUIRE(a.captions[i].find(" moving ") != std::string::npos);  // frames > 1: motion captions
  }
  // Moving shapes really move: the first and last frame differ.
  std::size_t const frame = 3 * 16 * 16;
  REQUIRE(!std::equal(a.images.begin(), a.images.begin() + frame, a.images.begin() + 2 * frame));
  REQUIRE_THROWS_WITH(encode_caption(std::string(40, 'x'), 34), Contains("more than text_len = 34"));
}

TEST_CASE("data: the prefetcher hands over exactly the batch asked for, read ahead or not; peek is next()'s "
          "future within an epoch", "[data]") {
  TempFile file(".h5");
  auto const cfg = parse_config(tiny_config_json(file.path()).dump());
  write_synthetic(file.path(), SynthOptions::for_model(cfg.model, 11, 4));
  auto const data = Dataset::open(file.path());
  BatchSampler sampler(std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 3, 5);
  BatchSampler replay = sampler;
  BatchPrefetcher prefetcher(data);
  HostBatch got;
  for (int draw = 0; draw < 8; ++draw) {  // crosses two epoch ends (11 samples, 3 per draw)
    INFO("draw " << draw);
    auto const ahead = sampler.peek(1);
    auto const samples = sampler.next();
    REQUIRE(samples == replay.next());
    prefetcher.take(samples, got);
    prefetcher.request(ahead);
    auto const expected = data.read(samples);
    REQUIRE(got.samples == expected.samples);
    REQUIRE(got.tokens == expected.tokens);
    REQUIRE(got.images == expected.images);
    BatchSampler copy = sampler;  // peek(1) before this draw: the draw after it
    if (!ahead.empty()) REQUIRE(ahead == copy.next());
  }
  // A request for other samples than the ones taken is not handed over: they are read instead.
  prefetcher.request({0, 1, 2});
  prefetcher.take({3, 4, 5}, got);
  REQUIRE(got.samples == std::vector<std::size_t>{3, 4, 5});
  REQUIRE(got.tokens == data.read({3, 4, 5}).tokens);
  auto const counts = prefetcher.counts();
  REQUIRE(counts.read_here >= 2);  // the first take, and the mismatch
  if (BatchPrefetcher::reads_ahead()) REQUIRE(counts.prefetched >= 4);
}

TEST_CASE("data: malformed dataset files are rejected with what is wrong", "[data]") {
  auto const cfg = parse_config(tiny_config_json("d.h5").dump());
  TempFile file(".h5");
  SynthOptions o;
  o.count = 6;
  o.frames = 2;
  o.image_size = 16;
  o.text_len = 34;
  auto const good = make_synthetic(o);
  auto const& s = good.shape;
  io::Dims const image_dims{s.count, 2, 3, 16, 16}, token_dims{s.count, 34};

  write_dataset(file.path(), s, good.images, good.tokens);
  auto const ds = Dataset::open(file.path(), &cfg.model);
  REQUIRE(ds.shape().count == 6);
  auto const batch = ds.read({5, 0});
  REQUIRE(std::equal(batch.tokens.begin(), batch.tokens.begin() + 34, good.tokens.begin() + 5 * 34));

  auto expect_rejected = [&](auto&& write, char const* message) {
    {
      io::H5File f(file.path(), io::H5File::Mode::truncate);
      write(f);
    }
    REQUIRE_THROWS_WITH(Dataset::open(file.path(), &cfg.model).read({0}),
                        Contains(message) && Contains(file.path()));
  };
  SECTION("missing dataset") {
    expect_rejected([&](io::H5File& f) { f.write("/images", good.images.data(), image_dims); },
                    "missing dataset /tokens");
  }
  // Another joule file given by mistake: what it is (from its root attributes) and what a dataset holds.
  SECTION("a run log, an energy profile, a checkpoint, another format: named, with what is expected") {
    struct Case {
      char const *format, *tuning, *what;
    };
    for (auto const& c : {Case{"joule-run-log-v1", nullptr, "this is a joule run log (root attribute format = "
                                                              "\"joule-run-log-v1\"; written by joule tune or joule "
                                                              "train --tune), not a dataset: read it with `joule inspect`"},
                          Case{"joule-run-log-v1", "profile", "this is a joule energy profile"},
                          Case{"joule-checkpoint-v1", nullptr, "this is a joule checkpoint (root attribute format = "
                                                               "\"joule-checkpoint-v1\"; written by joule train), not "
                                                               "a dataset: continue its run with `joule train --resume`"},
                          Case{"someone-elses-v3", nullptr, "root attribute format is \"someone-elses-v3\": not a joule "
                                                            "dataset"}}) {
      INFO(c.format << (c.tuning ? " / " : "") << (c.tuning ? c.tuning : ""));
      expect_rejected([&](io::H5File& f) {
        f.set_attribute("/", "format", std::string(c.format));
        if (c.tuning) f.set_attribute("/", "tuning", std::string(c.tuning));
      }, c.what);
      CHECK_THROWS_WITH(Dataset::open(file.path(), &cfg.model),
                        Contains("(it has no /images); joule data info and training read a captioning dataset: "
                                 "/images uint8 [N, F, C, H, W] and /tokens int32 [N, T], root attribute format = "
                                 "\"joule-captions-v1\""));
    }
  }
  SECTION("wrong element type") {
    std::vector<float> pixels(good.images.begin(), good.images.end());
    expect_rejected([&](io::H5File& f) {
      f.write("/images", pixels.data(), image_dims);
      f.write("/tokens", good.tokens.data(), token_dims);
    }, "/images has element type float32, expected uint8");
  }
  SECTION("sample counts disagree") {
    expect_rejected([&](io::H5File& f) {
      f.write("/images", good.images.data(), image_dims);
      f.write("/tokens", good.tokens.data(), {3, 68});
    }, "/images holds 6 samples but /tokens 3");
  }
  SECTION("image size differs from the model's") {
    expect_rejected([&](io::H5File& f) {
      f.write("/images", good.images.data(), {s.count, 2, 3, 32, 4});
      f.write("/tokens", good.tokens.data(), token_dims);
    }, "image height is 32 but the model's model.image_size is 16");
  }
  SECTION("token out of range") {
    auto tokens = good.tokens;
    tokens[3] = 300;
    expect_rejected([&](io::H5File& f) {
      f.write("/images", good.images.data(), image_dims);
      f.write("/tokens", tokens.data(), token_dims);
    }, "holds id 300");
  }
  SECTION("not an HDF5 file") {
    std::FILE* f = std::fopen(file.path().c_str(), "w");
    std::fputs("images,tokens\n", f);
    std::fclose(f);
    REQUIRE_THROWS_WITH(Dataset::open(file.path()), Contains("not an HDF5 file"));
  }
}

// ---- hostile input (issue 15): nothing crashes, every error names its subject ----------------

namespace {
// The tiny configuration's text with one field's value replaced by raw JSON text (numbers such
// as 1e999 cannot be held by a json value).
std::string with_raw_value(std::string const& field, std::string const& raw) {
  auto j = tiny_config_json("d.h5");
  auto const dot = field.find('.');
  j[field.substr(0, dot)][field.substr(dot + 1)] = "@@RAW@@";
  std::string text = j.dump();
  text.replace(text.find("\"@@RAW@@\""), 9, raw);
  return text;
}
}  // namespace

TEST_CASE("config: text nested too deeply or too large is refused before any parser walks it", "[config][hostile]") {
  // A few hundred KB of '[' used to overflow the stack inside nlohmann-json (exit 139).
  REQUIRE_THROWS_WITH(parse_config(std::string(300000, '['), "deep.json"),
                      StartsWith("deep.json: nested deeper than 64 levels") && Contains("the limit for a configuration"));
  // Valid JSON, deeply nested where training does not look (the tune section is dumped into cfg.json).
  auto j = tiny_config_json("d.h5");
  std::string text = j.dump();
  std::string const deep = std::string(100000, '[') + std::string(100000, ']');
  text.insert(text.size() - 1, ",\"tune\":" + deep);
  REQUIRE_THROWS_WITH(parse_config(text, "cfg.json"), Contains("cfg.json: nested deeper than 64 levels"));
  // 64 levels are allowed, 65 are not; brackets inside strings do not count.
  auto nested = [](int levels) { return std::string(levels - 1, '[') + std::string(levels - 1, ']'); };
  std::string ok = j.dump();
  ok.insert(ok.size() - 1, ",\"tune\":" + nested(64));
  REQUIRE_NOTHROW(check_json_limits(ok, "cfg.json"));
  std::string too_deep = j.dump();
  too_deep.insert(too_deep.size() - 1, ",\"tune\":" + nested(65));
  REQUIRE_THROWS_WITH(check_json_limits(too_deep, "cfg.json"), Contains("nested deeper than 64"));
  j["data"]["path"] = std::string(1000, '[') + "\\\"{";
  REQUIRE(parse_config(j.dump(), "cfg.json").data.path.size() == 1003);
  // Size: more than 16 MiB of text, or of file (/dev/zero never ends).
  std::string big = tiny_config_json("d.h5").dump();
  big.append(kConfigMaxBytes, ' ');
  REQUIRE_THROWS_WITH(parse_config(big, "big.json"), Contains("big.json: 16777") && Contains("more than the 16777216 bytes (16 MiB)"));
  // A file larger than that is refused after 16 MiB + 1 bytes are read (a sparse file of 1 GiB here);
  // a device that never ends (/dev/zero) or a FIFO (whose reader waits for a writer) before any read.
  TempFile large(".json");
  {
    std::FILE* f = std::fopen(large.path().c_str(), "w");
    REQUIRE(f);
    REQUIRE(::ftruncate(fileno(f), off_t(1) << 30) == 0);
    std::fclose(f);
  }
  REQUIRE_THROWS_WITH(load_config(large.path()), Equals(large.path() + ": larger than the 16777216 bytes (16 MiB) a "
                                                                       "configuration may have"));
  REQUIRE_THROWS_WITH(load_config("/dev/zero"),
                      Equals("/dev/zero: is a character device, not a regular file; joule reads configurations only "
                             "from regular files (nothing of it was read)"));
  REQUIRE_THROWS_WITH(load_config("/nonexistent/joule.json"),
                      Equals("/nonexistent/joule.json: cannot open the configuration file (No such file or directory)"));
}

TEST_CASE("config: numbers beyond a field's range name the field, whatever their size", "[config][hostile]") {
  struct Case {
    char const* field;
    char const* raw;
    char const* message;
  };
  std::string const long_number(400, '7');
  std::vector<Case> const cases = {
      {"train.steps", "1e999", "cfg.json: train.steps is 1e999, out of range [1, 1073741824] (beyond any double)"},
      {"train.lr", "-1e999", "cfg.json: train.lr is -1e999, out of range (0, 10] (beyond any double)"},
      {"train.steps", "1e20", "cfg.json: train.steps is 1e+20, out of range [1, 1073741824]"},
      {"train.steps", "3000000000", "cfg.json: train.steps is 3000000000; allowed: [1, 1073741824]"},
      {"model.layers", "18446744073709551615", "cfg.json: model.layers is 18446744073709551615; allowed: [1, 256]"},
      {"model.layers", "-9223372036854775808", "cfg.json: model.layers is -9223372036854775808; allowed: [1, 256]"},
      {"model.layers", "99999999999999999999999", "cfg.json: model.layers is 1e+23, out of range [1, 256]"},
      {"model.layers", "2.5", "cfg.json: model.layers is 2.5, not a whole number; allowed: integers in [1, 256]"},
      {"train.seed", "2.5", "cfg.json: train.seed is 2.5, not a whole number"},
      {"train.batch", long_number.c_str(), "cfg.json: train.batch is 7777777777777777777777777777777777777..., out of range"},
      {"train.seed", "-1", "cfg.json: train.seed is -1, out of range [0, 18446744073709551615]"},
      {"train.seed", "1e30", "cfg.json: train.seed is 1e+30, out of range [0, 18446744073709551615]"},
  };
  for (auto const& c : cases) {
    INFO(c.field << " = " << c.raw);
    REQUIRE_THROWS_WITH(parse_config(with_raw_value(c.field, c.raw), "cfg.json"), Contains(c.message));
  }
  // JSON has one kind of number: 2e0 and 2.0 are the integer 2 (they were refused as "2, not an integer").
  REQUIRE(parse_config(with_raw_value("model.layers", "2e0"), "cfg.json").model.layers == 2);
  REQUIRE(parse_config(with_raw_value("train.steps", "3.0"), "cfg.json").train.steps == 3);
  REQUIRE(parse_config(with_raw_value("train.seed", "1e3"), "cfg.json").train.seed == 1000u);
  // The largest seed is a valid seed.
  REQUIRE(parse_config(with_raw_value("train.seed", "18446744073709551615"), "cfg.json").train.seed ==
          18446744073709551615ull);
  // Beyond a double where training does not read it is still an error, with its place.
  std::string text = tiny_config_json("d.h5").dump();
  text.insert(text.size() - 1, ",\"tune\":{\"offload_ratios\":[0, 1e400]}");
  REQUIRE_THROWS_WITH(parse_config(text, "cfg.json"),
                      Contains("cfg.json: tune.offload_ratios[1] is 1e400, beyond the range of any double"));
  // Only ConfigError escapes: other nlohmann errors (invalid UTF-8, bad escapes) are wrapped.
  REQUIRE_THROWS_AS(parse_config("{\"model\": \"\xff\"}", "cfg.json"), ConfigError);
  REQUIRE_THROWS_AS(parse_config("{\"model\": \"\\ud800\"}", "cfg.json"), ConfigError);
}

TEST_CASE("config: a key given twice is refused with its lines; control characters in keys are printed escaped",
          "[config][hostile]") {
  // JSON does not say which of two equal keys counts; nlohmann kept the last one without a word.
  std::string const base = tiny_config_json("d.h5").dump(1);
  std::string twice = base;
  twice.insert(twice.find("\"steps\""), "\"steps\": 7,\n ");
  auto const line_of = [&](std::size_t at) { return 1 + std::count(twice.begin(), twice.begin() + std::ptrdiff_t(at), '\n'); };
  std::size_t const first = twice.find("\"steps\""), second = twice.find("\"steps\"", first + 1);
  REQUIRE_THROWS_WITH(parse_config(twice, "cfg.json"),
                      Contains("cfg.json: train.steps is given more than once (lines " + std::to_string(line_of(first)) +
                               " and " + std::to_string(line_of(second)) + "); JSON does not say which one counts"));
  std::string section = base;
  section.insert(section.size() - 1, ",\"train\": {\"steps\": 5}");
  REQUIRE_THROWS_WITH(parse_config(section, "cfg.json"), Contains("cfg.json: train is given more than once"));
  // Keys inside arrays of objects are their own objects: equal keys in two elements are fine.
  std::string arrays = base;
  arrays.insert(arrays.size() - 1, ",\"parallel\": {\"x\": [{\"a\": 1}, {\"a\": 2}]}");
  REQUIRE_NOTHROW(parse_config(arrays, "cfg.json"));  // (parallel is read by the process set-up, not here)
  // The path counts every element of an array, scalars too: the duplicate is in element 2.
  std::string in_array = base;
  in_array.insert(in_array.size() - 1, ",\"parallel\": {\"x\": [7, \"y\", {\"a\": 1, \"a\": 2}]}");
  REQUIRE_THROWS_WITH(parse_config(in_array, "cfg.json"), Contains("cfg.json: parallel.x[2].a is given more than once"));
  // A NUL in a key no longer cuts the message short.
  std::string nul = base;
  nul.insert(nul.find("\"steps\""), "\"st\\u0000x\": 1, ");
  REQUIRE_THROWS_WITH(parse_config(nul, "cfg.json"), Contains("train.st\\u0000x unknown field (allowed in train: "));
}

namespace {
// A valid dataset of `count` samples shaped for the tiny test model (2 frames of 3x16x16, 34 tokens).
SynthData tiny_data(std::size_t count) {
  SynthOptions o;
  o.count = count;
  o.frames = 2;
  o.image_size = 16;
  o.text_len = 34;
  return make_synthetic(o);
}
}  // namespace

TEST_CASE("data: opening checks every sample before any batch is read", "[data][hostile]") {
  auto const cfg = parse_config(tiny_config_json("d.h5").dump());
  TempFile file(".h5");
  auto d = tiny_data(300);
  d.tokens[250 * 34 + 7] = 4096;  // one bad id, in one sample, far from the first batches
  write_dataset(file.path(), d.shape, d.images, d.tokens);
  REQUIRE_THROWS_WITH(Dataset::open(file.path(), &cfg.model),
                      StartsWith(file.path() + ": /tokens[250][7] (sample 250, position 7) holds id 4096; allowed: "
                                               "0..255 bytes, 256 BOS, 257 EOS, 258 PAD"));
  d.tokens[250 * 34 + 7] = -1;
  write_dataset(file.path(), d.shape, d.images, d.tokens);
  REQUIRE_THROWS_WITH(Dataset::open(file.path()), Contains("/tokens[250][7]") && Contains("holds id -1"));
  // Every id in the vocabulary, but rows that are not captions (they trained without a word):
  // [BOS, bytes..., EOS, PAD...] is the only shape a row may have.
  auto const good = tiny_data(300).tokens;
  struct Row {
    std::size_t position;
    std::int32_t id;
    char const* says;
  };
  std::size_t eos = 1;
  while (good[250 * 34 + eos] != kTokenEos) ++eos;
  for (auto const& r : {Row{7, kTokenPad, "holds PAD before its EOS at position 7"},
                        Row{0, 'a', "does not start with BOS (256): id 97 at position 0"},
                        Row{eos, 'a', "has no EOS (257): the caption fills the row"},
                        Row{33, 'z', "holds id 122 at position 33 after its EOS, where only PAD (258) may follow"}}) {
    INFO(r.says);
    d.tokens = good;
    d.tokens[250 * 34 + r.position] = r.id;
    if (r.position == eos)  // no EOS: bytes to the end of the row
      for (std::size_t q = eos; q < 34; ++q) d.tokens[250 * 34 + q] = 'a';
    write_dataset(file.path(), d.shape, d.images, d.tokens);
    REQUIRE_THROWS_WITH(Dataset::open(file.path(), &cfg.model),
                        StartsWith(file.path() + ": /tokens[250] (sample 250) " + r.says) &&
                            Contains("a caption is [BOS, bytes..., EOS, PAD...]"));
  }
  d.tokens = good;
  write_dataset(file.path(), d.shape, d.images, d.tokens);
  REQUIRE(Dataset::open(file.path(), &cfg.model).shape().count == 300);
  // Root attributes that contradict the datasets.
  {
    io::H5File f(file.path(), io::H5File::Mode::read_write);
    f.set_attribute("/", "count", 299LL);
  }
  REQUIRE_THROWS_WITH(Dataset::open(file.path()),
                      Contains("root attribute 'count' is 299 but /images and /tokens hold 300"));
  // A truncated file is found when opened, not at the step that would read its end.
  write_dataset(file.path(), d.shape, d.images, d.tokens);
  REQUIRE(truncate(file.path().c_str(), 200000) == 0);
  REQUIRE_THROWS_WITH(Dataset::open(file.path()), StartsWith(file.path() + ": "));
}

TEST_CASE("data: a sparse or forged file cannot claim samples it does not store", "[data][hostile]") {
  TempFile file(".h5");
  auto const d = tiny_data(4);
  write_dataset(file.path(), d.shape, d.images, d.tokens);
  hsize_t const huge = hsize_t(1) << 40;
  SECTION("2^40 samples, none stored (used to be std::bad_alloc, or hours of reading fill values)") {
    hostile::sparse_dataset(file.path(), "/images", H5T_NATIVE_UINT8, {huge, 2, 3, 16, 16});
    hostile::sparse_dataset(file.path(), "/tokens", H5T_NATIVE_INT32, {huge, 34});
    REQUIRE_THROWS_WITH(Dataset::open(file.path()),
                        Equals(file.path() + ": /images and /tokens claim 1099511627776 samples; joule reads at "
                                             "most 2147483647"));
    hostile::sparse_dataset(file.path(), "/images", H5T_NATIVE_UINT8, {1u << 30, 2, 3, 16, 16});
    hostile::sparse_dataset(file.path(), "/tokens", H5T_NATIVE_INT32, {1u << 30, 34});
    REQUIRE_THROWS_WITH(Dataset::open(file.path()),
                        Equals(file.path() + ": dataset /images claims [1073741824, 2, 3, 16, 16] values (1.5 TiB) "
                                             "but stores none of them (a sparse or forged file)"));
  }
  SECTION("only some samples stored") {
    hostile::sparse_dataset(file.path(), "/tokens", H5T_NATIVE_INT32, {4, 34}, 2);
    REQUIRE_THROWS_WITH(Dataset::open(file.path()),
                        Contains("dataset /tokens claims [4, 34] values (544 bytes) but stores only part of them"));
  }
  SECTION("data kept in another file") {
    hostile::external_dataset(file.path(), "/tokens", H5T_NATIVE_INT32, {4, 34}, "/etc/passwd");
    REQUIRE_THROWS_WITH(Dataset::open(file.path()),
                        Contains("dataset /tokens keeps its data in external files; joule reads only data stored "
                                 "in the file itself"));
  }
  SECTION("a link that leads out of the file (issue 64: HDF5 would open its target by name)") {
    std::string const fifo = file.path() + ".fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    hostile::external_link(file.path(), "/extra", fifo, "/images");
    REQUIRE_THROWS_WITH(Dataset::open(file.path()),
                        Equals(file.path() + ": /extra is an external link (to an object of another file); joule "
                                             "reads only objects stored in the file itself, and nothing of it was "
                                             "used"));
    REQUIRE_THROWS_WITH(io::H5File(file.path(), io::H5File::Mode::read), Contains("/extra is an external link"));
    std::remove(fifo.c_str());
  }
  SECTION("strings that all name one large stored string (issue 64: a small file asking for GBs)") {
    hostile::repeated_string_dataset(file.path(), "/names", 400, std::size_t(1) << 20);  // 400 MiB asked
    io::H5File f(file.path(), io::H5File::Mode::read);
    REQUIRE_THROWS_WITH(f.read_strings("/names"), Contains("dataset /names of 400 strings holds more than 256.0 MiB "
                                                           "of text"));
  }
  SECTION("per-sample shapes no configuration allows") {
    std::vector<std::uint8_t> pixels(4 * 300);
    {
      io::H5File f(file.path(), io::H5File::Mode::read_write);
      f.write("/images", pixels.data(), {4, 300, 1, 1, 1});
    }
    REQUIRE_THROWS_WITH(Dataset::open(file.path()),
                        Contains("/images has shape [4, 300, 1, 1, 1]: frames per sample 300 is outside 1..256 "
                                 "(the range of model.frames)"));
  }
  SECTION("an attribute holding several values where one is expected") {
    hostile::string_array_attribute(file.path(), "/", "format", {"joule-captions-v1", "x"});
    REQUIRE_THROWS_WITH(Dataset::open(file.path()),
                        Equals(file.path() + ": attribute 'format' on / holds 2 values, expected one"));
    hostile::int_array_attribute(file.path(), "/", "format", {});
    REQUIRE_THROWS_WITH(Dataset::open(file.path()), Contains("attribute 'format' on / holds 0 values"));
  }
}

TEST_CASE("io: reading a file that crashes the HDF5 library is an error naming the file", "[data][hostile]") {
  // The child process is where the library may crash; here it "crashes" on purpose.
  TempFile file(".h5");
  std::fclose(std::fopen(file.path().c_str(), "w"));
  io::InputFile const in = io::open_input(file.path());
  std::string const& f = file.path();
  REQUIRE_THROWS_WITH(io::read_in_child(in, [] { std::raise(SIGSEGV); }, 60),
                      Equals(f + ": reading this file crashed the HDF5 library (signal 11, Segmentation fault): "
                             "the file is damaged or forged, and nothing of it was used"));
  REQUIRE_THROWS_WITH(io::read_in_child(in, [] { sleep(600); }, 0.2),
                      StartsWith(f + ": reading this file did not finish within 0.2 s (the HDF5 library hangs on it)"));
  auto const threw = io::read_in_child(in, [] { throw DatasetError("f.h5: bad"); }, 60);
  REQUIRE((threw.ran && threw.threw && threw.message == "f.h5: bad"));
  auto const fine = io::read_in_child(in, [] {}, 60);
  REQUIRE((fine.ran && !fine.threw));
  // A file found by fuzzing: a variable-length string attribute whose global-heap object claims
  // 2^49 bytes; HDF5 1.10.8 copied that many (a segmentation fault in joule data info / train).
  // A library that checks the size (HDF5 2.x) refuses the attribute instead: either way an error
  // naming the file, and nothing of it used.
  std::string const input = joule::test::source_path("tests/fuzz/corpus/dataset/heap-object-size-overflow.h5");
  REQUIRE_THROWS_WITH(Dataset::open(input),
                      StartsWith(input + ": reading this file crashed the HDF5 library") ||
                          StartsWith(input + ": cannot read attribute 'format' on /"));
}

namespace {
// Issue 64, "checked in a child, then used by name": a file that crashes HDF5 1.10.8 (a variable-
// length string attribute whose global-heap object claims 2^49 bytes; HDF5 2.x refuses it), put in
// place by the file's owner after the guard's child checked the file and before joule reads it
// itself (io::testing::after_guard_child, the parent's side of that moment).
std::string crashing_file() { return joule::test::source_path("tests/fuzz/corpus/dataset/heap-object-size-overflow.h5"); }

struct SwapAfterGuard {
  static std::function<void()>& swap() {
    static std::function<void()> f;
    return f;
  }
  explicit SwapAfterGuard(std::function<void()> f) {
    swap() = std::move(f);
    io::testing::after_guard_child = [](io::InputFile const&) {
      if (auto once = std::exchange(swap(), nullptr)) once();  // the first guarded read only
    };
  }
  ~SwapAfterGuard() {
    io::testing::after_guard_child = nullptr;
    swap() = nullptr;
  }
};

// A folder of its own under /tmp, removed at the end.
struct TempFolder {
  std::string path;
  TempFolder() {
    char name[] = "/tmp/joule-inputs-XXXXXX";
    REQUIRE(::mkdtemp(name));
    path = name;
  }
  ~TempFolder() { std::system(("rm -rf '" + path + "'").c_str()); }
};

void copy_file(std::string const& from, std::string const& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
  REQUIRE(out.good());
}

void write_small_dataset(std::string const& path, std::size_t count = 12) {
  SynthOptions o;
  o.count = count;
  o.image_size = 8;
  o.text_len = 36;
  write_synthetic(path, o);
}

// Returns once the kernel's coarse clock, which stamps a file's status-change time, is past the
// file's: any change made after this gets a later ctime (io::InputFile waits so too at its open).
void wait_until_clock_passes(std::string const& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  for (int i = 0; i < 1000; ++i) {
    timespec now{};
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (now.tv_sec > st.st_ctim.tv_sec || (now.tv_sec == st.st_ctim.tv_sec && now.tv_nsec > st.st_ctim.tv_nsec)) return;
    usleep(1000);
  }
}
}  // namespace

TEST_CASE("inputs: a dataset whose folder is swapped after the guard's check is read from the file checked",
          "[data][inputs]") {
  // data/data.h5 is checked in the child; then data/ is renamed away and a new data/ holding the
  // crashing file under the same name put in its place. The file joule checked is untouched (its
  // inode, its ctime): joule reads it through its descriptor, never the crashing file by name.
  TempFolder dir;
  std::string const folder = dir.path + "/data", path = folder + "/data.h5";
  REQUIRE(::mkdir(folder.c_str(), 0700) == 0);
  write_small_dataset(path);
  {
    SwapAfterGuard const swap([&] {
      REQUIRE(::rename(folder.c_str(), (folder + ".old").c_str()) == 0);
      REQUIRE(::mkdir(folder.c_str(), 0700) == 0);
      copy_file(crashing_file(), path);
    });
    Dataset const ds = Dataset::open(path);  // before issue 64: SIGSEGV here, in the test process
    REQUIRE(ds.shape().count == 12);
    REQUIRE(ds.shape().height == 8);
    // Every batch read checks the name too: another file is there now (docs/outputs.md).
    REQUIRE_THROWS_WITH(ds.read({0}), Contains(path + ": the dataset changed while this run was reading it (another "
                                                      "file is now at this path)"));
  }
  // The same for the structure check a job makes before it writes anything.
  std::string const other = dir.path + "/other", other_path = other + "/data.h5";
  REQUIRE(::mkdir(other.c_str(), 0700) == 0);
  write_small_dataset(other_path);
  SwapAfterGuard const swap([&] {
    REQUIRE(::rename(other.c_str(), (other + ".old").c_str()) == 0);
    REQUIRE(::mkdir(other.c_str(), 0700) == 0);
    copy_file(crashing_file(), other_path);
  });
  auto model = parse_config(tiny_config_json(other_path).dump()).model;
  model.image_size = 8;
  model.patch_size = 4;
  model.frames = 1;
  model.text_len = 36;
  REQUIRE_NOTHROW(Dataset::check_shape(other_path, model));
}

TEST_CASE("inputs: a crashing file renamed over a dataset after the guard's check is refused, not read",
          "[data][inputs]") {
  TempFolder dir;
  std::string const path = dir.path + "/data.h5", swapped = dir.path + "/swap.h5";
  write_small_dataset(path);
  copy_file(crashing_file(), swapped);
  SwapAfterGuard const swap([&] { REQUIRE(::rename(swapped.c_str(), path.c_str()) == 0); });
  // The file checked is still what joule reads (its descriptor); its status changed (unlinked by the
  // rename), so nothing of it is used either. Either way: no crash, and nothing of the new file read.
  try {
    Dataset const ds = Dataset::open(path);
    REQUIRE(ds.shape().count == 12);
  } catch (DatasetError const& e) {
    REQUIRE_THAT(e.what(), StartsWith(path + ": the file changed while joule read it (") &&
                               Contains("nothing of it was used"));
  }
}

TEST_CASE("inputs: a dataset rewritten in place with its size and modification time put back is refused",
          "[data][inputs]") {
  // The owner of a dataset writes into it under a running job and sets its modification time back
  // (utimensat): size and mtime are as they were, but not its status-change time, which no owner
  // can set.
  TempFolder dir;
  std::string const path = dir.path + "/data.h5";
  write_small_dataset(path);
  Dataset const ds = Dataset::open(path);
  REQUIRE(ds.read({0, 1}).samples.size() == 2);
  struct stat before {};
  REQUIRE(::stat(path.c_str(), &before) == 0);
  wait_until_clock_passes(path);
  int const fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  unsigned char byte = 0;
  REQUIRE(::pread(fd, &byte, 1, off_t(before.st_size - 1)) == 1);
  REQUIRE(::pwrite(fd, &byte, 1, off_t(before.st_size - 1)) == 1);  // the same byte: any write counts
  ::close(fd);
  timespec const times[2] = {before.st_atim, before.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  struct stat after {};
  REQUIRE(::stat(path.c_str(), &after) == 0);
  REQUIRE(after.st_size == before.st_size);
  REQUIRE(after.st_mtim.tv_sec == before.st_mtim.tv_sec);
  REQUIRE(after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
  REQUIRE(after.st_ino == before.st_ino);
  REQUIRE_THROWS_WITH(ds.read({0}), StartsWith(path + ": the dataset changed while this run was reading it (it was "
                                               "rewritten in place, or its status changed: its status-change time "
                                               "(ctime) went from "));
}

TEST_CASE("inputs: a checkpoint swapped after the guard's check is read from the file checked, or refused",
          "[data][inputs]") {
  // checkpoint_config (joule caption): the configuration a checkpoint stores, in a file made here.
  TempFolder dir;
  std::string const folder = dir.path + "/run", path = folder + "/ck.h5";
  REQUIRE(::mkdir(folder.c_str(), 0700) == 0);
  {
    io::H5File f(path, io::H5File::Mode::truncate);
    f.set_attribute("/", "format", "joule-checkpoint-v1");
    f.set_attribute("/", "config", tiny_config_json("d.h5").dump());
    f.close();
  }
  {
    SwapAfterGuard const swap([&] {
      REQUIRE(::rename(folder.c_str(), (folder + ".old").c_str()) == 0);
      REQUIRE(::mkdir(folder.c_str(), 0700) == 0);
      copy_file(crashing_file(), path);
    });
    REQUIRE(checkpoint_config(path).model.layers == 3);  // before issue 64: SIGSEGV
  }
  // A crashing file renamed over the checkpoint itself.
  REQUIRE(::rename((folder + ".old/ck.h5").c_str(), path.c_str()) == 0);
  std::string const swapped = dir.path + "/swap.h5";
  copy_file(crashing_file(), swapped);
  SwapAfterGuard const swap([&] { REQUIRE(::rename(swapped.c_str(), path.c_str()) == 0); });
  try {
    int const layers = checkpoint_config(path).model.layers;
    REQUIRE(layers == 3);
  } catch (TrainingError const& e) {
    REQUIRE_THAT(e.what(), Contains(path + ": the file changed while joule read it (") &&
                               Contains("nothing of it was used"));
  }
}

TEST_CASE("inputs: an HDF5 input that is not a regular file is refused at its open, naming what it is",
          "[data][inputs]") {
  TempFolder dir;
  std::string const fifo = dir.path + "/pipe.h5";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE_THROWS_WITH(Dataset::open(fifo), Equals(fifo + ": is a FIFO (named pipe), not a regular file; joule reads "
                                                         "HDF5 files only from regular files (nothing of it was read)"));
  REQUIRE_THROWS_WITH(checkpoint_config(dir.path), Contains(dir.path + ": is a folder, not a regular file"));
}

// Not part of the suite (hidden tag): how long opening, i.e. validating, a 1 GB dataset takes.
// test_config_data "[.validation-time]" writes ~1 GB of synthetic samples under /tmp, drops the
// file from the page cache (posix_fadvise), opens it twice (the second time from the page cache),
// prints both times and deletes the file.
TEST_CASE("data: time to validate a 1 GB dataset", "[.validation-time]") {
  TempFile file(".h5");
  SynthOptions o;  // 32x32x3 images, 36 tokens: 3216 bytes a sample
  o.count = 333000;
  write_synthetic(file.path(), o);
  struct stat st {};
  REQUIRE(stat(file.path().c_str(), &st) == 0);
  int const fd = ::open(file.path().c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  for (char const* when : {"first open (from disk)", "second open (page cache)"}) {
    auto const t0 = std::chrono::steady_clock::now();
    auto const ds = Dataset::open(file.path());
    double const s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: validated %zu samples, %.2f GB, in %.2f s (%.2f GB/s)\n", when, ds.shape().count,
                st.st_size / 1e9, s, st.st_size / 1e9 / s);
  }
}

TEST_CASE("config: a configuration built in code is refused as the same one parsed from text, in the same words",
          "[config]") {
  auto const base = parse_config(tiny_config_json("d.h5").dump(), "cfg.json");
  REQUIRE_NOTHROW(check_config(base, "cfg.json"));
  struct Change {
    char const* section;
    char const* key;
    json value;
    void (*apply)(Config&);
  };
  // One out of range or inconsistent value per field kind: model and train integers, reals with
  // open and closed ends, the layers-dependent range, and each cross-field rule.
  Change const changes[] = {
      {"model", "layers", 0, [](Config& c) { c.model.layers = 0; }},
      {"model", "heads", 3, [](Config& c) { c.model.heads = 3; }},
      {"model", "patch_size", 7, [](Config& c) { c.model.patch_size = 7; }},
      {"model", "text_len", 2, [](Config& c) { c.model.text_len = 2; }},
      {"data", "eval_fraction", 0.0, [](Config& c) { c.data.eval_fraction = 0.0; }},
      {"data", "path", "", [](Config& c) { c.data.path.clear(); }},
      {"train", "lr", 0.0, [](Config& c) { c.train.lr = 0.0; }},
      {"train", "beta2", 1.0, [](Config& c) { c.train.beta2 = 1.0; }},
      {"train", "grad_clip", 1e9, [](Config& c) { c.train.grad_clip = 1e9; }},
      {"train", "steps", 0, [](Config& c) { c.train.steps = 0; }},
      {"train", "recompute_depth", 99, [](Config& c) { c.train.recompute_depth = 99; }},
      {"train", "micro_batch", 5, [](Config& c) { c.train.micro_batch = 5; }},
      {"train", "seq_shards", 5, [](Config& c) { c.train.seq_shards = 5; }},
      {"train", "min_lr", 9.0, [](Config& c) { c.train.min_lr = 9.0; }},
  };
  for (auto const& change : changes) {
    INFO(change.section << "." << change.key);
    auto text = json::parse(base.json);
    text[change.section][change.key] = change.value;
    std::string parsed, built;
    try {
      parse_config(text.dump(), "cfg.json");
    } catch (ConfigError const& e) {
      parsed = e.what();
    }
    Config in_code = base;
    change.apply(in_code);
    try {
      check_config(in_code, "cfg.json");
    } catch (ConfigError const& e) {
      built = e.what();
    }
    REQUIRE_FALSE(parsed.empty());
    REQUIRE(built == parsed);
  }
}
