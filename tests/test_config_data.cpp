// Bad configurations and malformed datasets are rejected with messages that name the field or
// object and what is allowed; the synthetic data is deterministic and captions round-trip.
#include "core/data/dataset.hpp"
#include "core/data/synth.hpp"
#include "core/io/h5file.hpp"
#include "core/model/config.hpp"
#include "support/test_support.hpp"
#include "support/tiny_config.hpp"

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
