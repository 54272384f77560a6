// The training loop: a checkpointed and resumed run continues the uninterrupted loss trajectory,
// training drives the loss down, and a non-finite loss stops with a clear message.
#include "core/data/synth.hpp"
#include "core/detail/ordering_trace.hpp"
#include "core/train/host_cores.hpp"
#include "core/train/memory_check.hpp"
#include "core/io/h5file.hpp"
#include "core/train/trainer.hpp"
#include "fuzz/hostile_files.hpp"
#include "support/test_support.hpp"
#include "support/tiny_config.hpp"
#include "support/trainer_parameters.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <set>
#include <sstream>

using Catch::Matchers::Equals;
using namespace joule;
using namespace joule::test;

namespace {
Config write_data_and_config(std::string const& data_path, std::size_t count = 40) {
  auto const cfg = parse_config(tiny_config_json(data_path).dump(), "test config");
  write_synthetic(data_path, SynthOptions::for_model(cfg.model, count, 3));
  return cfg;
}
std::vector<double> losses(TrainSummary const& s) {
  std::vector<double> out;
  for (auto const& r : s.steps) out.push_back(r.loss);
  return out;
}
}  // namespace

TEST_CASE("training: resuming from a checkpoint continues the uninterrupted loss trajectory",
          "[train][checkpoint][offload]") {
  TempFile data(".h5"), checkpoint(".ckpt.h5");
  auto cfg = write_data_and_config(data.path());  // 12 steps, 2 micro-batches each
  SECTION("all optimizer state on the device") { cfg.train.offload_ratio = 0.0; }
  SECTION("half of it on the host") { cfg.train.offload_ratio = 0.5; }
  SECTION("bf16, half of the state on the host, its weights rounded there") {
    cfg.train.precision = Precision::bf16;
    cfg.train.offload_ratio = 0.5;
    cfg.train.offload_cast = TrainConfig::OffloadCast::host;
  }

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
  REQUIRE_THROWS_WITH(different.resume(checkpoint.path()), Contains("different model configuration"));
  REQUIRE_THROWS_WITH(different.resume(data.path()), Contains("not a joule checkpoint"));
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
  REQUIRE_THROWS_WITH(trainer.run(), Contains("step 1: the loss is nan"));
}

namespace {
std::vector<float> final_parameters(Config cfg, double ratio, int steps) {
  cfg.train.offload_ratio = ratio;
  cfg.train.steps = steps;
  Trainer t(cfg, nullptr);
  t.run();
  return parameters_of(t);
}
}  // namespace

TEST_CASE("offload: every offload ratio trains to the same parameters as none", "[train][offload][long]") {
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  // Groups: embed, block.0..2, head. 0.3 falls between group boundaries.
  auto const sizes = parameter_group_sizes(cfg.model);
  REQUIRE(sizes.size() == 5);
  SECTION("with gradient clipping: host updates after the backward pass") { cfg.train.grad_clip = 1.0; }
  SECTION("without clipping: host updates during the backward pass, on one host thread") {
    cfg.train.grad_clip = 0.0;
    cfg.train.host_threads = 1;
  }
  auto const reference = final_parameters(cfg, 0.0, 6);
  for (double const ratio : {0.25, 0.3, 0.5, 1.0}) {
    INFO("offload ratio " << ratio);
    auto const p = final_parameters(cfg, ratio, 6);
    REQUIRE(p.size() == reference.size());
    // Host and device AdamW round alike (core/ops/adamw.hpp), and the clipping norm is summed
    // from the device's gradient buffers whatever the placement: the same bits on every build.
    REQUIRE(std::memcmp(p.data(), reference.data(), p.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("offload: speculation then validation gives the bits of waiting for the norm, clipped or not, in fp32 "
          "and bf16, both casts, recompute depths 0-2", "[train][offload]") {
  // With a worker (ctest offload_host_worker: JOULE_HOST_CORES=1) the host jobs start before the
  // norm is known and are run again on clipped steps; without one they wait for it. Both must give
  // ratio 0's bits, with a threshold that clips some steps and not others.
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  int const steps = 6;
  cfg.train.steps = steps;
  struct Variant {
    Precision precision;
    TrainConfig::OffloadCast cast;
    int recompute_depth;
  };
  // (Three variants, ratio 0.5 in the first only: the test runs under qemu in CI's aarch64 phase.)
  bool first = true;
  for (auto const v : {Variant{Precision::fp32, TrainConfig::OffloadCast::device, 0},
                       Variant{Precision::bf16, TrainConfig::OffloadCast::device, 2},
                       Variant{Precision::bf16, TrainConfig::OffloadCast::host, 1}}) {
    INFO(precision_name(v.precision) << ", cast on the " << offload_cast_name(v.cast) << ", recompute depth "
                                     << v.recompute_depth);
    cfg.train.precision = v.precision;
    cfg.train.offload_cast = v.cast;
    cfg.train.recompute_depth = v.recompute_depth;
    cfg.train.offload_ratio = 0.0;
    cfg.train.grad_clip = 1e6;  // clipping on (its largest value), never applied: the norms of the run
    std::vector<double> norms;
    {
      Trainer t(cfg, nullptr);
      for (auto const& r : t.run().steps) norms.push_back(r.grad_norm);
    }
    std::sort(norms.begin(), norms.end());
    cfg.train.grad_clip = 0.5 * (norms[steps / 2 - 1] + norms[steps / 2]);  // a median: clips about half
    auto run = [&](double ratio, int* clipped) {
      cfg.train.offload_ratio = ratio;
      Trainer t(cfg, nullptr);
      auto const summary = t.run();
      // A step speculates unless the one before it was clipped; it rolls back if it is clipped.
      int n = 0, speculated = 0, rolled_back = 0;
      bool last_clipped = false;
      for (auto const& r : summary.steps) {
        bool const clip = r.grad_norm > cfg.train.grad_clip;
        n += clip;
        speculated += !last_clipped;
        rolled_back += !last_clipped && clip;
        last_clipped = clip;
      }
      if (clipped) *clipped = n;
      auto& opt = t.optimizer();
      opt.wait_all();
      long long offloaded = 0;
      for (bool o : opt.offloaded()) offloaded += o;
      // Every offloaded group but the embeddings (group 0, whose gradient lands last) speculates.
      long long const speculating = offloaded - (opt.offloaded()[kLastReadyGroup] ? 1 : 0);
      auto const times = opt.offload_times();
      CHECK(opt.speculative() == (offloaded > 0 && offload_on_worker()));
      CHECK(times.speculated == (opt.speculative() ? speculated * speculating : 0));
      CHECK(times.rolled_back == (opt.speculative() ? rolled_back * speculating : 0));
      return parameters_of(t);
    };
    int clipped = 0;
    auto const reference = run(0.0, &clipped);
    INFO("clipped " << clipped << " of " << steps << " steps at grad_clip " << cfg.train.grad_clip);
    REQUIRE(clipped > 0);
    REQUIRE(clipped < steps);
    for (double const ratio : {0.5, 1.0}) {
      if (ratio != 1.0 && !first) continue;
      INFO("offload ratio " << ratio);
      auto const p = run(ratio, nullptr);
      REQUIRE(p.size() == reference.size());
      REQUIRE(std::memcmp(p.data(), reference.data(), p.size() * sizeof(float)) == 0);
    }
    first = false;
  }
}

TEST_CASE("offload: a step stopped by a non-finite loss changes neither weights nor moments, speculating or not",
          "[train][offload]") {
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  cfg.train.offload_ratio = 1.0;
  cfg.train.grad_clip = 1e6;  // clipping on (its largest value), no step clipped: the stopped step speculates (on a worker)
  Trainer t(cfg, nullptr);
  t.run(2);
  auto& opt = t.optimizer();
  opt.wait_all();
  auto const before = parameters_of(t);
  auto const moments = opt.moments();
  // NaN in the device's copy of one weight: the step's loss and every gradient are NaN. The
  // speculative jobs (every group but the embeddings) write NaN weights to the device, which gets
  // the live ones back; the embeddings' job waits for the norm and never runs: only the poisoned
  // weight differs.
  Kokkos::deep_copy(Kokkos::subview(t.model().params.embed.patch_bias, 0), std::numeric_limits<float>::quiet_NaN());
  REQUIRE_THROWS_WITH(t.run(1), Contains("the loss is nan"));
  opt.wait_all();
  auto const after = parameters_of(t);
  REQUIRE((opt.offload_times().speculated > 0) == opt.speculative());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < after.size(); ++i) differ += std::memcmp(&after[i], &before[i], sizeof(float)) != 0;
  REQUIRE(differ == 1);
  auto const moments_after = opt.moments();
  for (std::size_t g = 0; g < moments.m.size(); ++g) {
    REQUIRE(moments_after.m[g] == moments.m[g]);
    REQUIRE(moments_after.v[g] == moments.v[g]);
  }
}

TEST_CASE("offload: in bf16 every ratio and both cast placements train to the same parameters; the host "
          "cast moves half the weight bytes",
          "[train][offload][bf16]") {
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  cfg.train.precision = Precision::bf16;
  cfg.train.steps = 5;
  std::size_t total = 0;
  for (auto n : parameter_group_sizes(cfg.model)) total += n;
  auto run = [&](double ratio, TrainConfig::OffloadCast cast) {
    cfg.train.offload_ratio = ratio;
    cfg.train.offload_cast = cast;
    Trainer t(cfg, nullptr);
    auto const summary = t.run();
    auto const times = t.optimizer().offload_times();
    if (ratio == 1.0) {  // every parameter's gradient down and its weights up, once a step
      double const steps = cfg.train.steps;
      // (and up again on a step whose speculative jobs were run again: every group but the
      // embeddings, group 0, which never speculates)
      double const groups = double(t.optimizer().offloaded().size());
      double const again = double(times.rolled_back) / (groups - 1);  // steps run again
      double const speculating = double(total - parameter_group_sizes(cfg.model)[kLastReadyGroup]);
      CHECK(times.bytes_to_host == steps * total * sizeof(float));
      CHECK(times.bytes_to_device == (steps * total + again * speculating) *
                                         (cast == TrainConfig::OffloadCast::host ? sizeof(bf16) : sizeof(float)));
      auto const e = estimate_optimizer_memory(cfg.model, ratio, Precision::bf16, cast == TrainConfig::OffloadCast::host,
                                               offload_speculates(cfg.train.grad_clip));
      CHECK(t.optimizer().host_state_bytes() == e.host);
    }
    if (ratio == 0.0) CHECK(times.bytes_to_host + times.bytes_to_device == 0);
    REQUIRE(summary.steps.back().loss < summary.steps.front().loss);  // it trains
    return parameters_of(t);
  };
  auto const reference = run(0.0, TrainConfig::OffloadCast::device);
  for (double const ratio : {0.5, 1.0})
    for (auto const cast : {TrainConfig::OffloadCast::device, TrainConfig::OffloadCast::host}) {
      INFO("offload ratio " << ratio << ", cast on the " << offload_cast_name(cast));
      auto const p = run(ratio, cast);
      REQUIRE(p.size() == reference.size());
      REQUIRE(std::memcmp(p.data(), reference.data(), p.size() * sizeof(float)) == 0);
    }
  // And the master weights are not the bf16 run's rounded copy: fp32 state was updated in fp32.
  std::size_t not_bf16 = 0;
  for (float x : reference) not_bf16 += float(bf16(x)) != x;
  REQUIRE(not_bf16 > reference.size() / 2);
}

namespace {
// How far `chosen` groups' share lands from p/q of them all, in parameters, times q: a whole
// number, so ties are exact (the double p/q is rounded, and choose_offloaded_groups' arithmetic
// with it decides only what is a tie in these).
std::size_t distance(std::vector<std::size_t> const& sizes, std::vector<bool> const& chosen, std::size_t p,
                     std::size_t q) {
  std::size_t total = 0, host = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) total += sizes[i], host += chosen[i] ? sizes[i] : 0;
  return q * host > p * total ? q * host - p * total : p * total - q * host;
}
}  // namespace

TEST_CASE("offload: no other choice of whole groups is closer to the ratio, and of one size the earliest ready go",
          "[train][offload]") {
  std::mt19937 rng(67);
  std::vector<std::vector<std::size_t>> cases = {
      {5, 5, 6},                // adding groups one by one, last first, stops at 11 of 16 for 10: 5 + 5 is 10
      {25, 10, 10, 10, 10, 1},  // a model's shape (embed, four blocks, head): for 25 of 66, embed alone
      {7},
      {0, 3, 0},
      {1, 1, 1, 1}};
  for (int n = 1; n <= 8; ++n)
    for (int draw = 0; draw < 40; ++draw) {  // a few sizes, so that some repeat
      std::vector<std::size_t> sizes(std::size_t(n), 0);
      for (auto& s : sizes) s = std::uniform_int_distribution<std::size_t>(0, draw % 2 ? 6 : 1000)(rng);
      cases.push_back(sizes);
    }
  for (auto const& sizes : cases) {
    std::size_t total = 0;
    for (auto s : sizes) total += s;
    // Ratios p/q: every twentieth, and where the total is small every whole share and the ratios
    // halfway between, where ties fall.
    std::vector<std::pair<std::size_t, std::size_t>> ratios = {{3, 10}};
    for (std::size_t p = 0; p <= 20; ++p) ratios.push_back({p, 20});
    for (std::size_t p = 0; p <= 2 * total && total > 0 && total <= 100; ++p) ratios.push_back({p, 2 * total});
    for (auto const& [p, q] : ratios) {
      INFO("sizes " << Catch::Detail::stringify(sizes) << ", ratio " << p << "/" << q);
      auto const chosen = choose_offloaded_groups(sizes, double(p) / double(q));
      REQUIRE(chosen.size() == sizes.size());
      std::size_t closest = SIZE_MAX;
      for (unsigned mask = 0; mask < (1u << sizes.size()); ++mask) {
        std::vector<bool> other(sizes.size());
        for (std::size_t i = 0; i < sizes.size(); ++i) other[i] = mask & (1u << i);
        closest = std::min(closest, distance(sizes, other, p, q));
      }
      REQUIRE(distance(sizes, chosen, p, q) == closest);  // a tie with another choice is as good
      // Of groups of one size, a later one (finished earlier by the backward pass) goes first.
      for (std::size_t i = 0; i < sizes.size(); ++i)
        for (std::size_t j = i + 1; j < sizes.size(); ++j)
          if (sizes[i] == sizes[j] && chosen[i]) REQUIRE(chosen[j]);
    }
  }
}

TEST_CASE("offload: the achieved ratio is rounded to whole groups and the state goes where predicted",
          "[train][offload]") {
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  auto const sizes = parameter_group_sizes(cfg.model);
  std::size_t total = 0;
  for (auto s : sizes) total += s;
  for (double const ratio : {0.0, 0.3, 0.5, 1.0}) {
    INFO("ratio " << ratio);
    cfg.train.offload_ratio = ratio;
    Trainer t(cfg, nullptr);
    auto const& o = t.optimizer();
    auto const e = estimate_optimizer_memory(cfg.model, ratio, Precision::fp32, false,
                                             offload_speculates(cfg.train.grad_clip));
    REQUIRE(o.achieved_ratio() == Approx(e.achieved_ratio));
    REQUIRE(o.device_state_bytes() == e.device);
    REQUIRE(o.host_state_bytes() == e.host);
    REQUIRE(o.offloaded() == choose_offloaded_groups(sizes, ratio));  // the choice tested above
    // Moments are somewhere, once (the host keeps master weights, gradient and moments: 4 floats
    // per parameter, and 3 more for each group that speculates: all but kLastReadyGroup).
    std::size_t on_host = 0, second_set = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i)
      if (o.offloaded()[i]) {
        on_host += sizes[i];
        if (o.speculative() && int(i) != kLastReadyGroup) second_set += sizes[i];
      }
    REQUIRE(e.device == 2 * (total - on_host) * sizeof(float));
    REQUIRE(e.host == (4 * on_host + 3 * second_set) * sizeof(float));
    if (ratio == 1.0) REQUIRE(o.device_state_bytes() == 0);
  }
  cfg.train.offload_ratio = 0.5;
  auto bad = tiny_config_json(data.path());
  bad["train"]["offload_ratio"] = 1.5;
  REQUIRE_THROWS_WITH(parse_config(bad.dump(), "cfg"), Contains("train.offload_ratio is 1.5; allowed: [0, 1]"));
}

TEST_CASE("optimizer: weight decay goes by role: every matrix, the untied LM head included, and nothing else",
          "[train][offload]") {
  // With zero gradients AdamW's step is decay alone (m = v = 0): a decayed tensor is multiplied by
  // 1 - lr * weight_decay, any other stays as it is. The expected set is stated independently of
  // the role table: the 2-D tensors that are not lookup tables (wte, wpe).
  double const lr = 0.5, wd = 0.1;
  for (bool const tied : {true, false}) {
    for (double const ratio : {0.0, 1.0}) {
      INFO("tie_embeddings " << tied << ", offload ratio " << ratio);
      auto j = tiny_config_json("unused.h5");
      j["model"]["tie_embeddings"] = tied;
      auto const cfg = parse_config(j.dump(), "test config");
      Model model(cfg.model, 2, 0);
      model.init_parameters(3);
      OptimizerSettings settings;
      settings.weight_decay = wd;
      settings.offload_ratio = ratio;
      Optimizer opt(model, settings);
      opt.sync_master_weights();
      std::map<std::string, std::vector<double>> before;
      std::set<std::string> expected;
      model.params.for_each_tensor([&](std::string const& name, ParamRole, auto const& view) {
        before[name] = to_vector(view);
        bool const table = name == "embed.wte" || name == "embed.wpe";
        if (unsigned(std::decay_t<decltype(view)>::rank) == 2 && !table) expected.insert(name);
      });
      REQUIRE(expected.count("head.lm_head") == (tied ? 0u : 1u));
      ExecSpace space;
      model.zero_gradients(space);
      opt.begin_step(lr, 1);
      REQUIRE(opt.gradient_norm() == 0.0);
      opt.finish_step(1.0);
      opt.wait_all();
      std::set<std::string> decayed;
      model.params.for_each_tensor([&](std::string const& name, ParamRole, auto const& view) {
        auto const after = to_vector(view);
        auto const& b = before[name];
        bool all_scaled = true, all_same = true;
        for (std::size_t i = 0; i < b.size(); ++i) {
          all_scaled = all_scaled && float(after[i]) == float(b[i] * double(float(1.0 - lr * wd)));
          all_same = all_same && after[i] == b[i];
        }
        INFO(name);
        REQUIRE((all_scaled || all_same));
        if (!all_same) decayed.insert(name);
      });
      CHECK(decayed == expected);
      std::set<std::string> const reported(opt.decayed_tensors().begin(), opt.decayed_tensors().end());
      CHECK(reported == expected);
    }
  }
}

TEST_CASE("training: the LM head's padding rows stay zero in the weights, their bf16 copy and the gradients",
          "[train][offload]") {
  // The LM head's GEMMs run over ModelConfig::vocab_padded() rows (aligned logits); the rows past
  // the vocabulary lie outside every group's storage, so no optimizer, offload copy or cast may
  // write them, and the loss must give them a zero gradient.
  TempFile data(".h5");
  auto const base = write_data_and_config(data.path());
  int const V = base.model.vocab(), Vp = base.model.vocab_padded(), C = base.model.d_model;
  REQUIRE(Vp % kVocabRowAlignment == 0);
  REQUIRE((Vp > V && Vp - V < kVocabRowAlignment));
  REQUIRE(std::size_t(Vp) * sizeof(bf16) % 16 == 0);  // a row of bf16 logit gradients: a 16-byte leading dimension
  auto padding_of = [&](auto const& padded) {  // rows V..V_pad-1, widened
    auto const h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), padded);
    REQUIRE(h.span() == std::size_t(Vp) * C);
    std::vector<double> out;
    for (std::size_t i = std::size_t(V) * C; i < h.span(); ++i) out.push_back(double(widen(h.data()[i])));
    return out;
  };
  std::vector<double> const zeros(std::size_t(Vp - V) * C, 0.0);
  struct Case {
    bool tied;
    Precision precision;
    double ratio;
  };
  // Each tying with each precision and each placement of the LM head's group's state.
  for (auto const& c : {Case{true, Precision::fp32, 0.0}, Case{true, Precision::bf16, 1.0},
                        Case{false, Precision::fp32, 1.0}, Case{false, Precision::bf16, 0.0}}) {
    bool const tied = c.tied;
    Precision const precision = c.precision;
    double const ratio = c.ratio;
    INFO("tie_embeddings " << tied << ", " << precision_name(precision) << ", offload ratio " << ratio);
    Config cfg = base;
    cfg.model.tie_embeddings = tied;
    cfg.train.precision = precision;
    cfg.train.offload_ratio = ratio;
    cfg.train.steps = 2;
    Trainer t(cfg, nullptr);
    auto const& m = t.model();
    REQUIRE(m.params.lm_head_padded.data() == m.params.head.lm_head.data());
    REQUIRE(m.params.lm_head_padded.extent(0) == std::size_t(Vp));
    auto const before = parameters_of(t);
    t.run();
    auto const after = parameters_of(t);
    REQUIRE(after.size() == before.size());
    REQUIRE(after != before);  // it trained
    REQUIRE(padding_of(m.params.lm_head_padded) == zeros);
    REQUIRE(padding_of(m.grads.lm_head_padded) == zeros);
    if (precision == Precision::bf16) REQUIRE(padding_of(m.kernel_weights.lm_head_padded) == zeros);
  }
}

namespace {
std::vector<std::string>* g_step_allocations = nullptr;
void record_allocation(Kokkos::Profiling::SpaceHandle space, char const* name, void const*, std::uint64_t bytes) {
  if (g_step_allocations)
    g_step_allocations->push_back(std::string(space.name) + " " + name + " (" + std::to_string(bytes) + " bytes)");
}
}  // namespace

TEST_CASE("training: a steady-state step allocates nothing in any memory space", "[train][offload]") {
  // Freeing device memory synchronises the whole device (and stalls the copy stream and the
  // collectives in flight), so after the first steps nothing may be allocated: Kokkos' allocation
  // callback sees every allocation in every memory space over steps 3-6.
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  for (double const ratio : {0.0, 0.5}) {
    for (int const depth : {0, 1}) {
      // bf16 (its host cast) once: the kernel weights' copies and the GEMM scratch are made up front too
      bool const bf16_run = ratio == 0.5 && depth == 1;
      INFO("offload ratio " << ratio << ", recompute depth " << depth << (bf16_run ? ", bf16" : ""));
      cfg.train.offload_ratio = ratio;
      cfg.train.recompute_depth = depth;
      cfg.train.precision = bf16_run ? Precision::bf16 : Precision::fp32;
      cfg.train.offload_cast = bf16_run ? TrainConfig::OffloadCast::host : TrainConfig::OffloadCast::device;
      Trainer t(cfg, nullptr);
      t.run(2);
      std::vector<std::string> allocations;
      g_step_allocations = &allocations;
      Kokkos::Tools::Experimental::set_allocate_data_callback(record_allocation);
      t.run(4);
      Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
      g_step_allocations = nullptr;
      std::string listed;
      for (auto const& a : allocations) listed += "\n  " + a;
      INFO("allocated during steps 3-6:" << listed);
      REQUIRE(allocations.empty());
      REQUIRE(t.step() == 6);
    }
  }
}

TEST_CASE("offload: with cores set aside, the host updates run on the worker, on those cores, off the "
          "launching thread", "[.worker]") {
  // Run with JOULE_HOST_CORES (ctest: offload_host_worker). The overlap this allows is measured by
  // `joule bench --suite offload` (a benchmark: time is not asserted in tests).
  auto const& cores = host_cores();
  REQUIRE_FALSE(cores.optimizer.empty());
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  for (double const clip : {0.0, 1.0}) {
    INFO("grad_clip " << clip);
    cfg.train.grad_clip = clip;
    cfg.train.offload_ratio = 0.5;
    Trainer t(cfg, nullptr);
    auto& opt = t.optimizer();
    REQUIRE(opt.host_worker() != nullptr);
    REQUIRE(opt.host_worker()->thread_id() != std::this_thread::get_id());
    long long offloaded = 0;
    for (bool o : opt.offloaded()) offloaded += o;
    REQUIRE(offloaded > 0);
    t.run(3);
    opt.wait_all();
    auto const times = opt.offload_times();
    REQUIRE(times.on_worker);
    REQUIRE(times.jobs == 3 * offloaded + times.rolled_back);  // a clipped step's speculative job runs again
    REQUIRE(times.host_seconds > 0);
    for (std::size_t g = 0; g < opt.offloaded().size(); ++g) {
      if (!opt.offloaded()[g]) continue;
      int const cpu = opt.host_worker()->last_span(int(g)).cpu;
      INFO("group " << g << " ran on CPU " << cpu);
      REQUIRE(std::find(cores.optimizer.begin(), cores.optimizer.end(), cpu) != cores.optimizer.end());
    }
  }
}

// ---- ordering between instances, checked as a GPU would run it (issue 28) ------------------

TEST_CASE("ordering trace: an access pair no event orders is reported, an event-ordered one is not", "[ordering]") {
  using ordering::Lane;
  ordering::Trace t;
  int e1 = 0, e2 = 0;
  // d2h reads grad[0] on the copy stream after an event from compute: ordered.
  t.on_stream(Lane::launcher, Lane::compute, "backward", {}, {{"grad", 0}});
  t.event_recorded(Lane::launcher, &e1, Lane::compute);
  t.stream_waits(Lane::launcher, Lane::copies, &e1);
  t.on_stream(Lane::launcher, Lane::copies, "d2h", {{"grad", 0}}, {{"host_grad", 0}});
  t.event_recorded(Lane::launcher, &e2, Lane::copies);
  REQUIRE(t.violations().empty());
  // A host thread reads what the copy wrote only after waiting for its event.
  t.host_waits(Lane::worker, &e2);
  t.on_host(Lane::worker, "adamw", {{"host_grad", 0}}, {});
  REQUIRE(t.violations().empty());
  // The next memset on compute, with nothing ordering it after the copy's read: a race.
  t.on_stream(Lane::launcher, Lane::compute, "zero_gradients", {}, {{"grad", 0}});
  auto const v = t.violations();
  REQUIRE(v.size() == 1);
  CHECK(v[0].buffer == "grad[0]");
  CHECK_THAT(v[0].first, Contains("d2h on copies"));
  CHECK_THAT(v[0].second, Contains("zero_gradients on compute"));
  // Fencing the copy stream from the launching thread orders what it queues afterwards.
  t.fence(Lane::launcher, Lane::copies);
  t.on_stream(Lane::launcher, Lane::compute, "zero_gradients", {}, {{"grad", 0}});
  REQUIRE(t.violations().size() == 1);
}

TEST_CASE("offload ordering: every buffer one instance writes and another reads is ordered by an event, "
          "a fence or a hand-over, as a GPU would run the steps", "[.worker][ordering]") {
  // Run with JOULE_HOST_CORES (ctest: offload_host_worker): with the jobs on the worker, nothing
  // but the data path's events orders the copies with the next step's kernels.
  REQUIRE_FALSE(host_cores().optimizer.empty());
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  for (double const ratio : {0.5, 1.0})
    for (double const clip : {0.0, 1.0}) {
      // bf16 with the host cast (its bf16 copy goes up instead of the fp32 weights) once
      bool const bf16_run = ratio == 1.0 && clip == 1.0;
      INFO("offload ratio " << ratio << ", grad_clip " << clip << (bf16_run ? ", bf16 cast on the host" : ""));
      cfg.train.offload_ratio = ratio;
      cfg.train.grad_clip = clip;
      cfg.train.precision = bf16_run ? Precision::bf16 : Precision::fp32;
      cfg.train.offload_cast = bf16_run ? TrainConfig::OffloadCast::host : TrainConfig::OffloadCast::device;
      ordering::Trace trace;
      ordering::installed_trace() = &trace;
      struct Uninstall {
        ~Uninstall() { ordering::installed_trace() = nullptr; }
      } uninstall;
      Trainer t(cfg, nullptr);
      REQUIRE(t.optimizer().host_worker() != nullptr);
      t.run(3);
      t.optimizer().wait_all();
      REQUIRE(trace.accesses("host_grad") > 0);  // the trace saw the copies
      REQUIRE(trace.accesses("param") > 0);
      for (auto const& v : trace.violations()) UNSCOPED_INFO(v.buffer << ": " << v.first << ", then " << v.second);
      REQUIRE(trace.violations().empty());
    }
}

// ---- hostile checkpoints and datasets (issue 15) --------------------------------------------

namespace {
// Rewrites one float of a checkpoint tensor (a 1-D float32 dataset).
void poke(std::string const& path, std::string const& object, std::size_t i, float value) {
  io::H5File f(path, io::H5File::Mode::read_write);
  auto values = f.read<float>(object);
  values.at(i) = value;
  f.write(object, values.data(), {values.size()});
}
}  // namespace

TEST_CASE("training: a damaged checkpoint is refused with the file and the object at fault, and changes nothing",
          "[train][checkpoint][hostile]") {
  TempFile data(".h5"), checkpoint(".ckpt.h5");
  auto const cfg = write_data_and_config(data.path());  // 40 samples: 30 to train on
  {
    Trainer first(cfg, nullptr);
    first.run(2);
    first.save_checkpoint(checkpoint.path());
  }
  std::string const& ckpt = checkpoint.path();
  Trainer trainer(cfg, nullptr);
  auto const before = to_vector(trainer.model().params.blocks[1].storage);
  auto expect_refused = [&](auto const& message) {
    REQUIRE_THROWS_WITH(trainer.resume(ckpt), message);
    REQUIRE(trainer.step() == 0);  // nothing was taken from it
    REQUIRE(to_vector(trainer.model().params.blocks[1].storage) == before);
  };
  SECTION("NaN parameters are the checkpoint's fault, not the learning rate's") {
    // Block 1 holds (in storage order) ln1.weight [32], ln1.bias [32], then attn.qkv.weight.
    poke(ckpt, "/params/block.1", 64 + 5, std::numeric_limits<float>::quiet_NaN());
    expect_refused(Equals(ckpt + ": /params/block.1 holds nan at block.1.attn.qkv.weight[5]: the checkpoint is "
                                 "damaged (non-finite parameter); it cannot be resumed"));
  }
  SECTION("infinite optimizer state") {
    poke(ckpt, "/adam_m/embed", 3, std::numeric_limits<float>::infinity());
    expect_refused(Contains(ckpt + ": /adam_m/embed holds inf at embed.") && Contains("(non-finite optimizer state)"));
  }
  SECTION("a negative second moment") {
    poke(ckpt, "/adam_v/head", 0, -1.0f);
    expect_refused(Contains(ckpt + ": /adam_v/head holds -1 at head.") &&
                   Contains("AdamW's second moment cannot be negative"));
  }
  SECTION("a tensor of the wrong size") {
    std::vector<float> small(5, 0.0f);
    io::H5File(ckpt, io::H5File::Mode::read_write).write("/params/head", small.data(), {5});
    expect_refused(Contains(ckpt + ": /params/head has shape [5], expected [") && Contains("for this model"));
  }
  SECTION("an impossible sampler position") {
    io::H5File(ckpt, io::H5File::Mode::read_write).set_attribute("/", "sampler_cursor", 1000000LL);
    expect_refused(Equals(ckpt + ": attribute 'sampler_cursor' on / is 1000000; allowed: 0..30 (an impossible "
                                 "sampler position: the training part of " + data.path() + " holds 30 samples)"));
  }
  SECTION("a negative epoch and step") {
    io::H5File(ckpt, io::H5File::Mode::read_write).set_attribute("/", "sampler_epoch", -1LL);
    expect_refused(Contains(ckpt + ": attribute 'sampler_epoch' on / is -1; allowed: 0..") &&
                   Contains("an impossible sampler position"));
    io::H5File(ckpt, io::H5File::Mode::read_write).set_attribute("/", "step", -5LL);
    expect_refused(Contains(ckpt + ": attribute 'step' on / is -5; allowed: 0..2147483647"));
  }
  SECTION("a config attribute nested too deeply (used to crash in nlohmann-json)") {
    io::H5File(ckpt, io::H5File::Mode::read_write).set_attribute("/", "config", std::string(200000, '['));
    expect_refused(StartsWith(ckpt + ": attribute 'config' on /: nested deeper than 64 levels") &&
                   Contains("(a damaged checkpoint)"));
  }
  SECTION("a config attribute that is not JSON, or has no model") {
    io::H5File(ckpt, io::H5File::Mode::read_write).set_attribute("/", "config", "{\"model\": ");
    expect_refused(StartsWith(ckpt + ": attribute 'config' on / is not valid JSON (a damaged checkpoint): "));
    io::H5File(ckpt, io::H5File::Mode::read_write).set_attribute("/", "config", "[1, 2]");
    expect_refused(Equals(ckpt + ": attribute 'config' on / has no model section (a damaged checkpoint)"));
    io::H5File(ckpt, io::H5File::Mode::read_write).set_attribute("/", "config", 3LL);
    expect_refused(Contains("cannot resume: " + ckpt + ": attribute 'config' on / is int64, expected a string"));
  }
  SECTION("a missing tensor") {
    io::H5File(ckpt, io::H5File::Mode::read_write).remove("/adam_v/block.2");
    expect_refused(Equals(ckpt + ": missing /adam_v/block.2 (a checkpoint of this model holds it)"));
  }
  SECTION("a tensor that claims more than the file stores") {
    hostile::sparse_dataset(ckpt, "/params/block.0", H5T_NATIVE_FLOAT, {hsize_t(1) << 40});
    expect_refused(Contains(ckpt + ": /params/block.0 has shape [1099511627776], expected ["));
  }
  // An undamaged checkpoint still resumes.
  SECTION("the checkpoint as written") {
    trainer.resume(ckpt);
    REQUIRE(trainer.step() == 2);
  }
}

TEST_CASE("training: a dataset with too few samples is refused naming the file", "[train][hostile]") {
  TempFile data(".h5");
  auto const cfg = write_data_and_config(data.path(), 1);  // used to fail as "BatchSampler: no samples to draw from"
  REQUIRE_THROWS_WITH(Trainer(cfg, nullptr),
                      Equals(data.path() + ": holds 1 sample; training needs at least 2 (one to train on, one held out)"));
}

TEST_CASE("training: a bad token id anywhere stops the run before its first step", "[train][hostile]") {
  TempFile data(".h5");
  auto const cfg = parse_config(tiny_config_json(data.path()).dump(), "test config");
  auto d = make_synthetic(SynthOptions::for_model(cfg.model, 40, 3));
  d.tokens[37 * 34 + 20] = 259;  // the last training sample but 2, read late in the first epoch
  write_dataset(data.path(), d.shape, d.images, d.tokens);
  REQUIRE_THROWS_WITH(Trainer(cfg, nullptr), StartsWith(data.path() + ": /tokens[37][20] (sample 37, position 20) holds id 259"));
}

// --- The memory check before a run (core/train/memory_check.hpp) ---------------------------------

namespace {
std::size_t g_live = 0, g_peak = 0;
void count_live(Kokkos::Profiling::SpaceHandle, char const*, void const*, std::uint64_t bytes) {
  g_live += bytes;
  g_peak = std::max(g_peak, g_live);
}
void count_freed(Kokkos::Profiling::SpaceHandle, char const*, void const*, std::uint64_t bytes) { g_live -= bytes; }

void write_text(std::filesystem::path const& p, std::string const& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}
}  // namespace

TEST_CASE("memory check: a trainer's peak allocation is what memory_need predicts", "[train][memory]") {
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  cfg.train.batch = 16;  // both micro-batches divide it (a trainer checks its configuration)
  for (double const ratio : {0.0, 0.5})
    for (int const depth : {0, 2})
      for (int const micro : {16, 8}) {
        INFO("offload " << ratio << ", recompute " << depth << ", micro-batch " << micro);
        cfg.train.offload_ratio = ratio, cfg.train.recompute_depth = depth, cfg.train.micro_batch = micro;
        g_live = g_peak = 0;
        Kokkos::Tools::Experimental::set_allocate_data_callback(count_live);
        Kokkos::Tools::Experimental::set_deallocate_data_callback(count_freed);
        {
          Trainer t(cfg, nullptr);
          t.run(2);
        }
        Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
        Kokkos::Tools::Experimental::set_deallocate_data_callback(nullptr);
        auto const need = memory_need(cfg.model, cfg.train);
        // Every memory space together (on a host build device and host memory are one).
        double const predicted = double(need.device_bytes() + need.host_bytes());
        CHECK(std::abs(predicted - double(g_peak)) <= 0.10 * double(g_peak));
      }
}

TEST_CASE("memory check: the host memory free is MemAvailable, lowered by a cgroup limit", "[train][memory]") {
  namespace fs = std::filesystem;
  TempFile dir("");
  fs::path const root(dir.path());
  write_text(root / "meminfo", "MemTotal:       24683652 kB\nMemFree:  1000 kB\nMemAvailable:   20000000 kB\n");
  write_text(root / "self-v2", "0::/jobs/42\n");
  write_text(root / "self-v1", "4:memory:/slurm/7\n1:cpu:/\n");
  std::string source;
  auto host = [&](char const* self) {
    return available_host_memory(&source, (root / "meminfo").string(), (root / "cg").string(), (root / self).string());
  };
  // No cgroup files: MemAvailable.
  REQUIRE(host("self-v2") == 20000000.0 * 1024);
  REQUIRE_THAT(source, Contains("MemAvailable in"));
  // cgroup v2: memory.max - memory.current, when lower; "max" is no limit.
  write_text(root / "cg/jobs/42/memory.max", "8589934592\n");
  write_text(root / "cg/jobs/42/memory.current", "1073741824\n");
  REQUIRE(host("self-v2") == 7516192768.0);
  REQUIRE_THAT(source, Contains("jobs/42/memory.max"));
  write_text(root / "cg/jobs/42/memory.max", "max\n");
  REQUIRE(host("self-v2") == 20000000.0 * 1024);
  // cgroup v1: limit_in_bytes - usage_in_bytes; v1's "no limit" (about 2^63) is ignored.
  write_text(root / "cg/memory/slurm/7/memory.limit_in_bytes", "4294967296\n");
  write_text(root / "cg/memory/slurm/7/memory.usage_in_bytes", "294967296\n");
  REQUIRE(host("self-v1") == 4000000000.0);
  write_text(root / "cg/memory/slurm/7/memory.limit_in_bytes", "9223372036854771712\n");
  REQUIRE(host("self-v1") == 20000000.0 * 1024);
  // A limit above MemAvailable changes nothing.
  write_text(root / "cg/jobs/42/memory.max", "99999999999999\n");
  REQUIRE(host("self-v2") == 20000000.0 * 1024);
  // No meminfo: the physical memory, said so.
  REQUIRE(available_host_memory(&source, (root / "none").string(), (root / "cg").string(), (root / "x").string()) > 0);
  REQUIRE_THAT(source, Contains("physical memory"));
  fs::remove_all(root);
  // This machine: something free, no more than it has.
  auto const here = available_memory();
  REQUIRE(here.host_bytes > 0);
  REQUIRE(here.device_bytes > 0);
  REQUIRE_FALSE(here.host_identity.empty());
}

TEST_CASE("memory check: an address-space limit (ulimit -v) leaves what is not mapped yet, less the BLAS's buffers",
          "[train][memory]") {
  namespace fs = std::filesystem;
  TempFile dir("");
  fs::path const root(dir.path());
  fs::create_directories(root);
  write_text(root / "status", "Name:\tjoule\nVmPeak:\t  999999 kB\nVmSize:\t  409600 kB\nVmRSS:\t  1000 kB\n");
  std::string why;
  double const limit = 1024.0 * 1048576;
  double const room = address_space_room(limit, (root / "status").string(), 2, &why);
  double const blas = kDeviceIsHost ? 2 * kBlasBufferBytesPerThread + kMallocArenaBytes : 0;
  REQUIRE(room > 0);
  CHECK(room == limit - 400.0 * 1048576 - blas);
  CHECK_THAT(why, Contains("address-space limit (ulimit -v 1.0 GiB: 400.0 MiB mapped now"));
  // A limit that what is mapped and the buffers already exceed leaves nothing, not a negative figure.
  CHECK(address_space_room(450.0 * 1048576, (root / "status").string(), 2, &why) == (kDeviceIsHost ? 0.0 : 50.0 * 1048576));
  CHECK(std::isinf(address_space_room(-1, (root / "status").string(), 2, &why)));
  fs::remove_all(root);
}

TEST_CASE("memory check: a configuration that does not fit is refused with the figures and the nearest that fits",
          "[train][memory]") {
  auto cfg = parse_config(tiny_config_json("unused.h5").dump(), "test config");
  cfg.train.batch = cfg.train.micro_batch = 64;
  auto const need = memory_need(cfg.model, cfg.train);
  MemoryAvailable a;
  a.device_source = "test device", a.host_source = "test host";
  a.host_bytes = a.device_bytes = double(need.device_bytes() + need.host_bytes());
  // Exactly enough fits; one byte less does not, and the message says where, what and how much.
  REQUIRE(memory_shortfall(cfg.model, cfg.train, a, {}).empty());
  a.device_bytes = double(need.device_bytes()) - 1;
  auto const text = memory_shortfall(cfg.model, cfg.train, a, {});
  REQUIRE_THAT(text, StartsWith("the model does not fit in"));
  REQUIRE_THAT(text, Contains("per process (parameters") && Contains("(test device)") &&
                         Contains("train.micro_batch 64, train.recompute_depth 0"));
  // Two processes on one device need twice as much.
  a.device_bytes = 1.5 * double(need.device_bytes());
  REQUIRE(memory_shortfall(cfg.model, cfg.train, a, {1, 1}).empty());
  REQUIRE_THAT(memory_shortfall(cfg.model, cfg.train, a, {2, 2}), Contains("x 2 processes sharing it"));
  // The suggestion is the least recomputation that fits with a 10% margin, and it does fit.
  auto const full = memory_need(cfg.model, 64, cfg.model.layers, 1, 0.0).device_bytes();
  a.device_bytes = a.host_bytes = double(full) / 0.9 + 1;
  auto const suggested = memory_shortfall(cfg.model, cfg.train, a, {});
  INFO(suggested);
  int depth = -1;
  for (int k = 0; k <= cfg.model.layers && depth < 0; ++k)
    if (memory_need(cfg.model, 64, k, 1, 0.0).device_bytes() <= 0.9 * a.device_bytes) depth = k;
  REQUIRE(depth > 0);
  REQUIRE_THAT(suggested, Contains("; train.micro_batch 64, train.recompute_depth " + std::to_string(depth)));
  // Nothing fits: said so, with the least this memory model allows.
  a.device_bytes = a.host_bytes = 1024;
  REQUIRE_THAT(memory_shortfall(cfg.model, cfg.train, a, {}), 
              Contains("; even train.micro_batch 1, train.recompute_depth " + std::to_string(cfg.model.layers)));
}

TEST_CASE("training: an observer sees every step and evaluation in order, and can stop the run between steps",
          "[train][observer]") {
  TempFile data(".h5");
  auto cfg = write_data_and_config(data.path());
  cfg.train.steps = 7;
  cfg.train.eval_every = 3;
  cfg.train.eval_samples = 4;
  struct Log : TrainObserver {
    std::vector<std::string> events;
    int stop_before = -1;
    void before_step(Trainer& t, int step) override {
      REQUIRE(t.step() == step - 1);  // between steps: the previous one is done
      if (step == stop_before) throw std::runtime_error("stop");
      events.push_back("before " + std::to_string(step));
    }
    void on_step(Trainer& t, StepRecord const& r) override {
      REQUIRE(t.step() == r.step);
      events.push_back("step " + std::to_string(r.step));
    }
    void on_eval(Trainer&, int step, EvalResult const& e) override {
      REQUIRE(e.samples == 4);
      events.push_back("eval " + std::to_string(step));
    }
  };
  Log log;
  Trainer t(cfg, nullptr);
  auto const summary = t.run(-1, &log);
  std::vector<std::string> expected;
  for (int s = 1; s <= 7; ++s) {
    expected.push_back("before " + std::to_string(s));
    expected.push_back("step " + std::to_string(s));
    if (s % 3 == 0 || s == 7) expected.push_back("eval " + std::to_string(s));
  }
  REQUIRE(log.events == expected);
  REQUIRE(summary.steps.size() == 7);

  // An exception before step 3 leaves the trainer after step 2, and propagates.
  Log stopping;
  stopping.stop_before = 3;
  Trainer u(cfg, nullptr);
  REQUIRE_THROWS_WITH(u.run(-1, &stopping), "stop");
  REQUIRE(u.step() == 2);
  REQUIRE(stopping.events == std::vector<std::string>{"before 1", "step 1", "before 2", "step 2"});
}

namespace {
// `cfg` with train fields changed through its JSON text, as the scheduler makes its configurations.
Config with_train(Config const& cfg, nlohmann::json const& changes) {
  auto j = nlohmann::json::parse(cfg.json);
  for (auto const& [name, value] : changes.items()) j["train"][name] = value;
  return parse_config(j.dump(), "test config");
}
// `base`'s trainer settings with `change` made, as the scheduler sets a running trainer.
template <class Change>
Reconfigurable settings(Config const& base, Change change) {
  auto r = reconfigurable_of(base.train);
  change(r);
  return r;
}
}  // namespace

TEST_CASE("training: switching micro-batch between steps takes the same samples per step: the same losses up to "
          "summation order", "[train][reconfigure]") {
  TempFile data(".h5");
  auto const base = with_train(write_data_and_config(data.path()),
                               {{"steps", 16}, {"batch", 12}, {"micro_batch", 12}, {"eval_every", 0}, {"eval_samples", 4}});
  Trainer reference(base, nullptr);
  auto const want = losses(reference.run());
  auto const expected = parameters_of(reference);
  struct Switcher : TrainObserver {
    Config const& base;
    explicit Switcher(Config const& b) : base(b) {}
    void before_step(Trainer& t, int step) override {
      // 1, 2, 3, 4, 6 and 12 micro-batches per step, some with the other knobs too.
      if (step == 3) t.reconfigure(settings(base, [](Reconfigurable& r) { r.micro_batch = 3; }));
      if (step == 5) t.reconfigure(settings(base, [](Reconfigurable& r) { r.micro_batch = 4, r.offload_ratio = 0.5; }));
      if (step == 8) t.reconfigure(settings(base, [](Reconfigurable& r) { r.micro_batch = 1, r.recompute_depth = 1; }));
      if (step == 11) t.reconfigure(settings(base, [](Reconfigurable& r) { r.micro_batch = 6; }));
      if (step == 13) t.reconfigure(settings(base, [](Reconfigurable& r) { r.micro_batch = 2; }));
    }
  } switcher(base);
  Trainer switched(base, nullptr);
  auto const got = losses(switched.run(-1, &switcher));
  REQUIRE(switched.config().train.micro_batch == 2);
  REQUIRE(got.size() == want.size());
  // Steps 1-2 are the same computation; later ones differ in float summation order only.
  REQUIRE(got[0] == want[0]);
  REQUIRE(got[1] == want[1]);
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  INFO("largest relative loss difference " << worst);
  REQUIRE(worst < 1e-3);  // float32 sums in another order, amplified a little by AdamW's normalisation
  REQUIRE(worst > 0);     // the split did change (else the switches were not applied)
  auto const params = parameters_of(switched);
  double diff2 = 0, norm2 = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    diff2 += double(params[i] - expected[i]) * double(params[i] - expected[i]);
    norm2 += double(expected[i]) * double(expected[i]);
  }
  INFO("relative parameter difference (2-norm) " << std::sqrt(diff2 / norm2));
  REQUIRE(std::sqrt(diff2 / norm2) < 1e-2);  // 1.2e-3 measured: AdamW turns tiny gradients into whole steps
}

TEST_CASE("training: switching offload, recompute depth and host threads between steps gives the same bits",
          "[train][reconfigure]") {
  TempFile data(".h5");
  auto base = with_train(write_data_and_config(data.path()), {{"steps", 9}, {"eval_every", 0}, {"eval_samples", 4}});
  SECTION("with gradient clipping: host updates after the backward pass") {}
  SECTION("without clipping: host updates during the backward pass") { base = with_train(base, {{"grad_clip", 0.0}}); }
  bool bf16_run = false;
  SECTION("bf16, the cast placement switching too") {
    base = with_train(base, {{"precision", "bf16"}});
    bf16_run = true;
  }
  Trainer reference(base, nullptr);
  auto const reference_summary = reference.run();
  auto const expected = parameters_of(reference);

  // Steps 1-2 as configured, then three other placements, each for a few steps.
  auto const cast1 = bf16_run ? TrainConfig::OffloadCast::host : TrainConfig::OffloadCast::device;
  std::vector<Reconfigurable> const plan{
      settings(base, [&](Reconfigurable& r) { r.offload_ratio = 0.5, r.recompute_depth = 2, r.host_threads = 1, r.offload_cast = cast1; }),
      settings(base, [](Reconfigurable& r) { r.offload_ratio = 1.0, r.recompute_depth = 1; }),
      settings(base, [&](Reconfigurable& r) { r.offload_ratio = 0.25, r.recompute_depth = 3, r.host_threads = 0, r.offload_cast = cast1; })};
  struct Switcher : TrainObserver {
    std::vector<Reconfigurable> const& plan;
    explicit Switcher(std::vector<Reconfigurable> const& p) : plan(p) {}
    void before_step(Trainer& t, int step) override {
      if (step == 3) t.reconfigure(plan[0]);
      if (step == 5) t.reconfigure(plan[1]);
      if (step == 8) t.reconfigure(plan[2]);
    }
  } switcher(plan);
  Trainer switched(base, nullptr);
  auto const summary = switched.run(-1, &switcher);
  REQUIRE(switched.config().train.offload_ratio == 0.25);
  REQUIRE(switched.optimizer().achieved_ratio() > 0);
  REQUIRE(summary.steps.size() == reference_summary.steps.size());
  for (std::size_t i = 0; i < summary.steps.size(); ++i) REQUIRE(summary.steps[i].loss == reference_summary.steps[i].loss);
  auto const got = parameters_of(switched);
  REQUIRE(got.size() == expected.size());
  REQUIRE(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);

  // Nothing but the settings can change (the type has no other field); a value the configuration
  // would refuse is refused, naming the field, and leaves the trainer as it was.
  Trainer other(base, nullptr);
  int const layers = base.model.layers, batch = base.train.batch;
  REQUIRE_THROWS_WITH(other.reconfigure(settings(base, [&](Reconfigurable& r) { r.recompute_depth = layers + 1; })),
                      StartsWith("train.recompute_depth is " + std::to_string(layers + 1) + "; allowed: [0, " +
                                 std::to_string(layers) + "]"));
  REQUIRE_THROWS_WITH(other.reconfigure(settings(base, [&](Reconfigurable& r) { r.offload_ratio = 0.5, r.micro_batch = batch - 1; })),
                      Contains("train.micro_batch is " + std::to_string(batch - 1) + ", which does not divide batch"));
  REQUIRE_THROWS_WITH(other.reconfigure(settings(base, [](Reconfigurable& r) { r.offload_ratio = 1.5; })),
                      StartsWith("train.offload_ratio is 1.5; allowed: [0, 1]"));
  // Other sequence shards need the new process groups (under mpirun: train_tune_mpirun_shards).
  REQUIRE_THROWS_WITH(other.reconfigure(settings(base, [](Reconfigurable& r) { r.seq_shards = 2; })),
                      Contains("needs the processes regrouped"));
  REQUIRE_THROWS_WITH(other.reconfigure(settings(base, [](Reconfigurable& r) { r.seq_shards = 2; }), {}, {}),
                      Contains("train.seq_shards = 2 but the new groups have 1 sequence shard(s)"));
  REQUIRE(other.config().train.offload_ratio == base.train.offload_ratio);
  REQUIRE(other.config().json == base.json);
}
