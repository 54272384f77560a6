// The training loop: a checkpointed and resumed run continues the uninterrupted loss trajectory,
// training drives the loss down, and a non-finite loss stops with a clear message.
#include "core/data/synth.hpp"
#include "core/train/host_cores.hpp"
#include "core/train/trainer.hpp"
#include "support/test_support.hpp"
#include "support/tiny_config.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>
#include <set>
#include <sstream>

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
          "[train][checkpoint]") {
  TempFile data(".h5"), checkpoint(".ckpt.h5");
  auto cfg = write_data_and_config(data.path());  // 12 steps, 2 micro-batches each
  SECTION("all optimizer state on the device") { cfg.train.offload_ratio = 0.0; }
  SECTION("half of it on the host") { cfg.train.offload_ratio = 0.5; }

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
  std::vector<float> out;
  t.model().params.for_each_group([&](std::string const&, auto const& g) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g);
    out.insert(out.end(), h.data(), h.data() + h.span());
  });
  return out;
}
}  // namespace

TEST_CASE("offload: every offload ratio trains to the same parameters as none", "[train][offload]") {
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
    auto const e = estimate_optimizer_memory(cfg.model, ratio);
    REQUIRE(o.achieved_ratio() == Approx(e.achieved_ratio));
    REQUIRE(o.device_state_bytes() == e.device);
    REQUIRE(o.host_state_bytes() == e.host);
    // No other choice of whole groups is closer to the target.
    double best = 1e300;
    for (unsigned mask = 0; mask < (1u << sizes.size()); ++mask) {
      std::size_t host = 0;
      for (std::size_t i = 0; i < sizes.size(); ++i)
        if (mask & (1u << i)) host += sizes[i];
      best = std::min(best, std::abs(double(host) / total - ratio));
    }
    REQUIRE(std::abs(o.achieved_ratio() - ratio) <= best + 0.05);
    REQUIRE(e.device + e.host / 2 == 2 * total * sizeof(float));  // moments are somewhere, once
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
      INFO("offload ratio " << ratio << ", recompute depth " << depth);
      cfg.train.offload_ratio = ratio;
      cfg.train.recompute_depth = depth;
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
    REQUIRE(times.jobs == 3 * offloaded);
    REQUIRE(times.host_seconds > 0);
    for (std::size_t g = 0; g < opt.offloaded().size(); ++g) {
      if (!opt.offloaded()[g]) continue;
      int const cpu = opt.host_worker()->last_span(int(g)).cpu;
      INFO("group " << g << " ran on CPU " << cpu);
      REQUIRE(std::find(cores.optimizer.begin(), cores.optimizer.end(), cpu) != cores.optimizer.end());
    }
  }
}
