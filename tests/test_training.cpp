// The training loop: a checkpointed and resumed run continues the uninterrupted loss trajectory,
// training drives the loss down, and a non-finite loss stops with a clear message.
#include "core/data/synth.hpp"
#include "core/train/trainer.hpp"
#include "support/test_support.hpp"
#include "support/tiny_config.hpp"

#include <sstream>

using namespace joule;
using namespace joule::test;

namespace {
Config write_data_and_config(std::string const& data_path, std::size_t count = 40) {
  auto const cfg = parse_config(tiny_config_json(data_path).dump(), "test config");
  SynthOptions o;
  o.count = count;
  o.frames = cfg.model.frames;
  o.image_size = cfg.model.image_size;
  o.text_len = cfg.model.text_len;
  o.seed = 3;
  write_synthetic(data_path, o);
  return cfg;
}
std::vector<double> losses(TrainSummary const& s) {
  std::vector<double> out;
  for (auto const& r : s.steps) out.push_back(r.loss);
  return out;
}
}  // namespace

TEST_CASE("training: resuming from a checkpoint continues the uninterrupted loss trajectory",
          "[train][checkpoint]") {
  TempFile data(".h5"), checkpoint(".ckpt.h5");
  auto const cfg = write_data_and_config(data.path());  // 12 steps, 2 micro-batches each

  Trainer uninterrupted(cfg, nullptr);
  auto const full = losses(uninterrupted.run());
  REQUIRE(full.size() == 12);

  {
    Trainer first(cfg, nullptr);
    auto const head = losses(first.run(5));
    REQUIRE(head == std::vector<double>(full.begin(), full.begin() + 5));
    first.save_checkpoint(checkpoint.path());
  }
  Trainer resumed(cfg, nullptr);
  resumed.resume(checkpoint.path());
  REQUIRE(resumed.step() == 5);
  auto const tail = losses(resumed.run());
  REQUIRE(tail.size() == 7);
  for (std::size_t i = 0; i < tail.size(); ++i) {
    INFO("step " << 6 + i);
    REQUIRE(tail[i] == Approx(full[5 + i]).epsilon(1e-6));
  }

  // A checkpoint of another model is refused.
  auto other = tiny_config_json(data.path());
  other["model"]["layers"] = 2;
  other["train"]["recompute_depth"] = 0;
  Trainer different(parse_config(other.dump()), nullptr);
  REQUIRE_THROWS_WITH(different.resume(checkpoint.path()), Catch::Contains("different model configuration"));
  REQUIRE_THROWS_WITH(different.resume(data.path()), Catch::Contains("not a joule checkpoint"));
}

TEST_CASE("training: the loss goes down and evaluation decodes captions", "[train]") {
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path(), 64);
  cfg.train.steps = 40;
  cfg.train.lr = 0.01;
  cfg.train.min_lr = 0.001;
  std::ostringstream log;
  Trainer trainer(cfg, &log);
  auto const summary = trainer.run();
  auto const l = losses(summary);
  REQUIRE(l.front() > 4.5);              // ~ln(259) at the start
  REQUIRE(l.back() < 0.5 * l.front());   // and less than half of that after 40 steps
  REQUIRE(summary.evals.size() == 1);    // eval_every = 0: once, at the end
  auto const& e = summary.evals.back().second;
  REQUIRE(e.samples == 5);
  REQUIRE(e.loss > 0);
  REQUIRE(!e.examples.empty());
  REQUIRE(log.str().find("step    40/40") != std::string::npos);
  REQUIRE(log.str().find("ETA") != std::string::npos);
}

TEST_CASE("training: a non-finite loss stops the run with a clear message", "[train]") {
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  Trainer trainer(cfg, nullptr);
  // Poison one parameter: the next forward pass produces NaN.
  auto const& w = trainer.model().params.embed.patch_bias;
  Kokkos::deep_copy(Kokkos::subview(w, 0), std::numeric_limits<float>::quiet_NaN());
  REQUIRE_THROWS_WITH(trainer.run(), Catch::Contains("step 1: the loss is nan"));
}
