// The tuning pieces that need the real model: the "tune" section's checks, the search space and
// the memory model's feasibility verdicts, and trials measured on the tiny model (ok with finite
// figures; failed with the reason when a trial cannot run; racing, on step figures the tests set).
#include "core/data/synth.hpp"
#include "energy/source.hpp"
#include "scheduler/tune_session.hpp"
#include "scheduler/trial_runner.hpp"
#include "support/tiny_config.hpp"
#include "support/trainer_parameters.hpp"

#include "support/catch.hpp"

#include <cmath>
#include <map>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>

using namespace joule;
using namespace joule::scheduler;
using namespace joule::test;

namespace {

Config with_tune(nlohmann::json j, nlohmann::json tune) {
  j["tune"] = std::move(tune);
  return parse_config(j.dump(), "test config");
}

// The header of a tuning log with model energy, as the sessions below write it.
RunHeader model_log_header(TuneSettings const& settings, Config const& cfg) {
  RunHeader header;
  header.energy_kind = "model";
  header.objective = settings.objective.name();
  header.config_json = cfg.json;
  return header;
}

struct Energy {
  energy::Sampler sampler;
  energy::RegionRecorder regions;
  energy::Monitor monitor;
  explicit Energy(double rate_hz = energy::Sampler::kDefaultRateHz)
      : sampler(model_only(), rate_hz), regions(sampler), monitor(sampler) {}
  static std::vector<std::unique_ptr<energy::Source>> model_only() {
    energy::SourceOptions o;
    o.nvml_library = "none";
    o.hwmon_root = o.powercap_root = "/nonexistent";
    o.local_rank = 0;
    return energy::discover_sources(o);
  }
};

}  // namespace

TEST_CASE("tune settings: defaults, values, and clear errors", "[tune]") {
  auto const j = test::tiny_config_json("unused.h5");  // 3 layers, 2 heads, batch 6
  auto const d = parse_tune_settings(parse_config(j.dump()));
  REQUIRE(d.objective.kind == Objective::Kind::edp);
  REQUIRE(d.knob_values.empty());  // every knob over its row's defaults
  auto const s = parse_tune_settings(with_tune(j, {{"objective", "weighted:0.3"}, {"micro_batches", {1, 3, 6}},
                                                   {"recompute_depths", {0, 3}}, {"measured_steps", 3}}));
  REQUIRE(s.objective.kind == Objective::Kind::weighted);
  REQUIRE(s.objective.eta == Approx(0.3));
  REQUIRE(s.values_of("micro_batch") == std::vector<double>{1, 3, 6});
  REQUIRE(s.values_of("recompute_depth") == std::vector<double>{0, 3});
  REQUIRE(s.strategy_for(24) == StrategyKind::exhaustive);
  REQUIRE(s.strategy_for(25) == StrategyKind::coordinate_descent);
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"micro_batches", {4}}})),
                      Contains("tune.micro_batches[0] = 4: train.micro_batch is 4, which does not divide batch = 6"));
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"recompute_depths", {4}}})),
                      Contains("tune.recompute_depths[0] = 4: train.recompute_depth is 4; allowed: [0, 3]"));
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"offload_ratios", {0.5, 1.5}}})),
                      Contains("tune.offload_ratios[1]"));
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"seq_shards", {4}}})),
                      Contains("tune.seq_shards[0] = 4: train.seq_shards is 4, which must divide model.heads (2)"));
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"objective", "fastest"}})), Contains("tune.objective"));
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"strategy", "random"}})), Contains("tune.strategy"));
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"offload", {0}}})),
                      Contains("unknown field tune.offload") && Contains("offload_ratios"));
  REQUIRE(parse_tune_settings(with_tune(j, {{"power_limits_w", {300, 450}}})).values_of("power_limit_w") ==
          std::vector<double>{300, 450});
  // 2.0 is the number 2 (JSON has one kind of number); 2.5 is not whole.
  REQUIRE(parse_tune_settings(with_tune(j, {{"measured_steps", 3.0}, {"micro_batches", {1.0, 3}}})).values_of("micro_batch") ==
          std::vector<double>{1, 3});
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"measured_steps", 2.5}})),
                      Contains("tune.measured_steps must be a whole number"));
  // Cast placements: names, each once, and only for bf16 runs (an fp32 run has no cast to place).
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"offload_casts", {"host"}}})), Contains("is for bf16 runs"));
  {
    auto b = j;
    b["train"]["precision"] = "bf16";
    REQUIRE(parse_tune_settings(with_tune(b, {{"offload_casts", {"host", "device", "host"}}})).values_of("offload_cast") ==
            std::vector<double>{1, 0});
    REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(b, {{"offload_casts", {"gpu"}}})),
                        Contains("tune.offload_casts contains \"gpu\"; allowed: \"device\", \"host\""));
    REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(b, {{"offload_casts", {1}}})), Contains("tune.offload_casts contains 1"));
  }
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"power_limits_w", {0}}})), Contains("tune.power_limits_w[0]"));
  // 64-bit values are judged before conversion to int (2^32 + 1 wrapped to 1 and passed).
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"warmup_steps", 4294967297LL}})),
                      Contains("tune.warmup_steps = 4294967297 is outside [0, 1000]"));
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"recompute_depths", {0, 4294967296ULL}}})),
                      Contains("tune.recompute_depths[1] = 4294967296 is outside the integers joule takes"));
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"power_limits_w", {300, 100001}}})),
                      Contains("tune.power_limits_w[1] = 100001: outside [1, 100000] watts"));
  REQUIRE_THROWS_WITH(parse_tune_settings(with_tune(j, {{"measured_steps", -4294967294LL}})),
                      Contains("tune.measured_steps = -4294967294 is outside [2, 10000]"));
}

TEST_CASE("trial runner: the space, the memory model's verdicts, and measured trials", "[tune][train]") {
  test::TempFile data(".h5");
  auto j = test::tiny_config_json(data.path());
  Config const cfg = with_tune(j, {{"micro_batches", {3, 6}}, {"offload_ratios", {0, 1}}, {"warmup_steps", 1},
                                   {"measured_steps", 3}, {"max_repeats", 2}});
  write_synthetic(data.path(), SynthOptions::for_model(cfg.model, 24, 3));
  auto settings = parse_tune_settings(cfg);
  Energy e(5000);  // sampled at 5 kHz: a round of tiny steps covers enough updates to race (below)
  e.sampler.start();
  TrialRunner runner(cfg, settings, e.monitor, e.regions, {}, {});
  auto const space = runner.space();
  REQUIRE(space.size() == 2 * 4 * 2);  // offload x recompute depth 0..3 x micro-batch
  REQUIRE(space.front().offload_ratio == 0);
  REQUIRE(space[1].offload_ratio == 1);
  // Every combination once, and each knob the search sets lands in its configuration field.
  for (std::size_t i = 0; i < space.size(); ++i)
    for (std::size_t other = i + 1; other < space.size(); ++other) REQUIRE(space[i] != space[other]);
  Knobs set;
  set.offload_ratio = 0.5, set.recompute_depth = 2, set.micro_batch = 6, set.host_threads = 1,
      set.offload_cast = TrainConfig::OffloadCast::host;
  auto const trial = runner.config_for(set, 5);
  REQUIRE(trial.train.offload_cast == TrainConfig::OffloadCast::host);  // written as its name
  auto const reparsed = parse_config(trial.json, "the trial's stored configuration");  // its text says the same
  for (auto const& knob : knob_table()) {
    if (!knob.field()) continue;
    INFO(knob.config_field);
    REQUIRE(knob.configured(trial) == knob.get(set));
    REQUIRE(knob.configured(reparsed) == knob.get(set));
  }
  {  // bf16: the cast placements are searched where something is offloaded, once where nothing is
    auto b = j;
    b["train"]["precision"] = "bf16";
    Config const bf16_cfg = with_tune(b, {{"offload_ratios", {0, 0.5, 1}}, {"recompute_depths", {0}},
                                          {"offload_casts", {"device", "host"}}});
    TrialRunner bf16_runner(bf16_cfg, parse_tune_settings(bf16_cfg), e.monitor, e.regions, {}, {});
    auto const bf16_space = bf16_runner.space();
    REQUIRE(bf16_space.size() == 1 + 2 * 2);
    int host_casts = 0;
    for (auto const& k : bf16_space) host_casts += k.offload_cast == TrainConfig::OffloadCast::host;
    REQUIRE(host_casts == 2);
  }
  Knobs unset = set;
  // Not searched (Knobs()' values): the configuration's values stay.
  unset.micro_batch = Knobs{}.micro_batch, unset.host_threads = Knobs{}.host_threads,
  unset.offload_cast = Knobs{}.offload_cast;
  auto const kept = runner.config_for(unset, 5);
  REQUIRE(kept.train.micro_batch == cfg.train.micro_batch);
  REQUIRE(kept.train.host_threads == cfg.train.host_threads);

  // The memory model orders them: more recomputation needs less, a smaller micro-batch less.
  Knobs a, b;
  a.micro_batch = b.micro_batch = 6;
  b.recompute_depth = 3;
  REQUIRE(runner.predicted_device_bytes(b) < runner.predicted_device_bytes(a));
  // A budget between the two: one fits, the other is infeasible with the reason.
  settings.device_memory_budget_mib =
      (runner.predicted_device_bytes(a) + runner.predicted_device_bytes(b)) / 2.0 / 1048576.0;
  TrialRunner tight(cfg, settings, e.monitor, e.regions, {}, {});
  REQUIRE(tight.infeasible_reason(b).empty());
  REQUIRE_THAT(tight.infeasible_reason(a), Contains("memory model predicts") && Contains("over the budget"));

  // A measured trial: finite medians of its steps, regions, a power trace.
  Knobs k;
  k.micro_batch = 3;
  k.recompute_depth = 1;
  auto const r = runner.measure(k);
  INFO(r.reason);
  REQUIRE(r.ok());
  REQUIRE(r.measured_steps >= 3);
  REQUIRE(r.step_time_s.size() == std::size_t(r.measured_steps));
  REQUIRE(r.time_per_step_s > 0);
  REQUIRE(r.energy_per_step_j > 0);
  REQUIRE(r.objective == Approx(r.energy_per_step_j * r.time_per_step_s));
  bool has_step_region = false;
  for (auto const& g : r.regions) has_step_region = has_step_region || (g.name == "step" && g.calls == r.measured_steps);
  REQUIRE(has_step_region);
  // Per call path: step at the top with a call per measured step, forward inside it once per
  // micro-batch, each row's parent an earlier row, and by name the sum over a name's paths.
  REQUIRE_FALSE(r.region_paths.empty());
  std::map<std::string, long long> path_calls;
  long long step_calls = -1, forward_in_step = -1;
  for (std::size_t i = 0; i < r.region_paths.size(); ++i) {
    auto const& p = r.region_paths[i];
    INFO(p.name << " in row " << p.parent_row);
    REQUIRE(p.parent_row < int(i));
    CHECK(p.parent == (p.parent_row < 0 ? std::string() : r.region_paths[std::size_t(p.parent_row)].name));
    path_calls[p.name] += p.calls;
    if (p.name == "step" && p.parent_row < 0) step_calls = p.calls;
    if (p.name == "forward" && p.parent == "step" && r.region_paths[std::size_t(p.parent_row)].parent_row < 0)
      forward_in_step = p.calls;
  }
  CHECK(step_calls == r.measured_steps);
  CHECK(forward_in_step == r.measured_steps * (cfg.train.batch / 3));  // micro-batches of 3
  for (auto const& g : r.regions) CHECK(path_calls[g.name] == g.calls);
  REQUIRE_FALSE(r.power.domains.empty());

  // Racing, on step figures the test sets (the machine's own are replaced, so the verdicts do not
  // depend on how loaded it is): every round's three steps take 0.8, 1.0 and 1.2 s at 100 J each.
  // E·T per step 80, 100, 120: mean 100, s = 20, so after one round the 95% interval's half-width
  // is t(0.975, 2)·20/√3 = 4.303·11.547 = 49.69, 0.4969 of the objective, which is median E ·
  // median T = 100 · 1.0 = 100: the interval [50.31, 149.69]. After two rounds (6 steps: s² =
  // 1600/5, t(0.975, 5) = 2.571) 2.571·17.889/√6 = 18.78: 0.1878. No CI target is reachable
  // (ci_target 0), so a trial repeats to max_repeats (2 rounds), unless after a round its interval
  // lies entirely above the leader's: then it stops after 3 steps.
  auto never_precise = settings;
  never_precise.ci_target = 0;
  TrialRunner racing(cfg, never_precise, e.monitor, e.regions, {}, {});
  int rounds = 0;
  racing.filter_measurements([&](Knobs const&, std::vector<double>& seconds, std::vector<double>& joules) {
    ++rounds;
    seconds = {0.8, 1.0, 1.2};
    joules = {100, 100, 100};
  });
  auto const race = [&] {
    rounds = 0;
    auto const t = racing.measure(k);
    INFO(t.reason);
    REQUIRE(t.ok());
    REQUIRE(t.objective == Approx(100));
    REQUIRE(t.measured_steps == 3 * rounds);
    return t;
  };
  {
    auto const no_leader = race();  // nothing measured before: both rounds
    REQUIRE(no_leader.repeats == 2);
    REQUIRE(no_leader.measured_steps == 6);
    REQUIRE(no_leader.ci_relative == Approx(0.1878).epsilon(1e-3));
  }
  struct Leader {
    double objective, ci_relative;
    bool stops;
  };
  for (auto const& leader : {Leader{10, 0.01, true},      // [9.9, 10.1]: far better
                             Leader{48, 0.04, true},      // [46.08, 49.92]: just below 50.31
                             Leader{48, 0.06, false},     // [45.12, 50.88]: overlaps from 50.31 on
                             Leader{90, 0.01, false},     // better, but within the interval
                             Leader{1000, 0.01, false}}) {  // far worse
    INFO("leader " << leader.objective << " +- " << 100 * leader.ci_relative << "%");
    racing.set_leader(leader.objective, leader.ci_relative);
    auto const raced = race();
    if (leader.stops) {
      REQUIRE(raced.repeats == 1);
      REQUIRE(raced.measured_steps == 3);
      REQUIRE(raced.ci_relative == Approx(0.4969).epsilon(1e-3));
    } else {
      REQUIRE(raced.repeats == 2);
      REQUIRE(raced.measured_steps == 6);
    }
  }

  // A trial that cannot run (here: its dataset vanished) is failed with the reason; the runner
  // goes on. (A NaN/Inf loss is a TrainingError like this one: see test_training.)
  std::remove(data.path().c_str());
  auto const f = runner.measure(k);
  REQUIRE(f.status == TrialStatus::failed);
  REQUIRE_THAT(f.reason, Contains(data.path()));
  REQUIRE(std::isnan(f.objective));
  REQUIRE(std::isnan(f.time_per_step_s));
  e.sampler.stop();
}


// Racing in a search: the session hands each trial's result to the runner as the bar to beat, so
// a candidate clearly worse than the best so far costs one round, where the best and a candidate
// worse only within the noise take every round.
TEST_CASE("tune session: racing stops a clearly worse trial after one round; one within the noise measures on",
          "[tune][train]") {
  test::TempFile data(".h5");
  auto j = test::tiny_config_json(data.path());
  j["train"]["offload_ratio"] = 0.0;
  Config const cfg = with_tune(j, {{"offload_ratios", {0, 0.5, 1}}, {"recompute_depths", {0}}, {"warmup_steps", 1},
                                   {"measured_steps", 3}, {"max_repeats", 3}, {"ci_target", 0},
                                   {"reference_every", 0}, {"confirm_rounds", 0}});
  write_synthetic(data.path(), SynthOptions::for_model(cfg.model, 24, 3));
  auto const settings = parse_tune_settings(cfg);
  Energy e(5000);
  e.sampler.start();
  TrialRunner runner(cfg, settings, e.monitor, e.regions, {}, {});
  // Each round's steps take 0.8, 1.0 and 1.2 s; per step offload 0 uses 100 J, 0.5 400 J, 1 120 J.
  // Exhaustive search measures them in that order (edp; s the steps' spread of E·T, t(0.975, n−1)):
  //   offload 0, first, has no leader: 3 rounds, E·T per step 80, 100, 120 thrice: mean 100,
  //     s² = 2400/8, half-width 2.306·17.32/3 = 13.31: the leader is 100 +- 13.31%, up to 113.31.
  //   offload 0.5: E·T 320, 400, 480, objective 400 +- 49.69% after one round (t(0.975, 2) = 4.303,
  //     s = 80: 4.303·80/√3 = 198.8): from 201.2 up, entirely above 113.31: it stops.
  //   offload 1: objective 120 +- 49.69% after one round, from 60.38; +- 18.78% after two
  //     (t(0.975, 5) = 2.571), from 97.47: both reach below 113.31, so it takes its 3 rounds.
  std::map<double, int> rounds;
  runner.filter_measurements([&](Knobs const& k, std::vector<double>& seconds, std::vector<double>& joules) {
    ++rounds[k.offload_ratio];
    double const joules_per_step = k.offload_ratio == 0 ? 100 : k.offload_ratio == 0.5 ? 400 : 120;
    seconds = {0.8, 1.0, 1.2};
    joules = {joules_per_step, joules_per_step, joules_per_step};
  });
  TuneSession session(runner, settings, nullptr);
  REQUIRE(session.feasible().size() == 3);
  REQUIRE(session.strategy() == StrategyKind::exhaustive);
  session.search(nullptr);
  auto const& trials = session.result().trials;
  REQUIRE(trials.size() == 3);
  std::map<double, TrialRecord> by_offload;
  for (auto const& t : trials) {
    INFO(t.knobs.describe() << ": " << t.reason);
    REQUIRE(t.ok());
    by_offload[t.knobs.offload_ratio] = t;
  }
  REQUIRE(trials[0].knobs.offload_ratio == 0);  // measured first: no leader yet
  REQUIRE(by_offload.at(0).objective == Approx(100));
  REQUIRE(by_offload.at(0).ci_relative == Approx(0.1331).epsilon(2e-3));
  // Clearly worse: one round
  REQUIRE(by_offload.at(0.5).objective == Approx(400));
  REQUIRE(by_offload.at(0.5).repeats == 1);
  REQUIRE(by_offload.at(0.5).measured_steps == 3);
  REQUIRE(rounds[0.5] == 1);
  // The best and the one within the noise: every round
  for (double const offload : {0.0, 1.0}) {
    INFO("offload " << offload);
    REQUIRE(by_offload.at(offload).repeats == 3);
    REQUIRE(by_offload.at(offload).measured_steps == 9);
    REQUIRE(rounds[offload] == 3);
  }
  REQUIRE(by_offload.at(1).objective == Approx(120));
  REQUIRE(session.chosen().knobs.offload_ratio == 0);
  e.sampler.stop();
}

TEST_CASE("in-flight tuning: the search runs on the run's own steps and ends with the untuned run's bits",
          "[tune][train][inflight][long]") {
  test::TempFile data(".h5");
  auto j = test::tiny_config_json(data.path());
  j["train"]["steps"] = 40;
  j["train"]["eval_every"] = 0;
  j["train"]["eval_samples"] = 4;
  Config const cfg = with_tune(j, {{"offload_ratios", {0, 1}}, {"recompute_depths", {0, 1, 3}},
                                   {"host_threads", {0, 1}}, {"warmup_steps", 1}, {"measured_steps", 2},
                                   {"max_repeats", 1}});
  write_synthetic(data.path(), SynthOptions::for_model(cfg.model, 40, 3));
  auto const settings = parse_tune_settings(cfg);
  Energy e;
  e.sampler.start();
  TrialRunner runner(cfg, settings, e.monitor, e.regions, {}, {});
  Trainer untuned(cfg, nullptr);
  auto const untuned_summary = untuned.run();
  auto const a = parameters_of(untuned);

  // The session, in flight, with its log: 12 candidates over knobs neutral to the arithmetic.
  test::TempFile log_path(".h5");
  auto writer = RunLogWriter::create(log_path.path(), model_log_header(settings, cfg));
  TuneSession session(runner, settings, nullptr);
  REQUIRE(session.feasible().size() == 2 * 3 * 2);
  session.use_log(&writer, {});
  session.record_infeasible();
  Trainer live(cfg, nullptr);
  session.search(&live);
  // Exhaustive over the 12: each 1 warm-up + 2 measured steps of the run itself.
  REQUIRE(session.result().trials.size() == 12);
  for (auto const& t : session.result().trials) {
    INFO(t.knobs.describe() << ": " << t.reason);
    REQUIRE(t.ok());
    REQUIRE(t.measured_steps == 2);
  }
  // ... and once (reference_every = 6) the start configuration again, 3 more steps: the drift.
  REQUIRE(session.search_steps() == 39);
  auto const& tried = session.result().trials;
  REQUIRE(std::isnan(tried.front().drift));  // from the check on, each trial carries the latest drift
  REQUIRE(std::isfinite(tried.back().drift));
  auto const train = session.train(&live, nullptr);
  REQUIRE(live.step() == 40);
  // The record is the whole run, the search's steps first, each with the trial it ran in.
  REQUIRE(train.in_flight);
  REQUIRE(train.search_steps == 39);
  REQUIRE(train.steps.size() == 40);
  REQUIRE(train.knobs == session.chosen().knobs);
  REQUIRE(train.steps.back().trial == session.chosen().index);
  int measured = 0;
  for (std::size_t i = 0; i < train.steps.size(); ++i) {
    auto const& s = train.steps[i];
    REQUIRE(s.step == int(i) + 1);
    // Every knob here is neutral: the same losses as a run that never switched.
    REQUIRE(s.loss == untuned_summary.steps[i].loss);
    REQUIRE(s.trial >= 0);
    measured += s.measured;
  }
  REQUIRE(measured == 12 * 2);
  for (auto const& t : session.result().trials) {  // each trial's measurements are measured steps (see the log below)
    REQUIRE(t.measured_on.size() == 2);
    for (int step : t.measured_on) REQUIRE(train.steps[std::size_t(step - 1)].measured);
  }
  auto const b = parameters_of(live);
  REQUIRE(a.size() == b.size());
  REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  // The log holds every trial, the choice and the run.
  writer.close();
  auto const log = read_run_log(log_path.path());
  REQUIRE(log.trials.size() == 12);
  // Sequence shards need the processes regrouped: without groups to re-form, not in flight.
  Knobs sharded = session.chosen().knobs;
  sharded.seq_shards = 2;
  REQUIRE_THAT(runner.unreachable_in_flight(sharded), Contains("seq_shards 2 needs the processes regrouped"));
  REQUIRE(log.best == session.chosen().index);
  REQUIRE(log.train);
  REQUIRE(log.train->steps.size() == 40);
  REQUIRE(log.train->search_steps == 39);
  for (std::size_t i = 0; i < 40; ++i) {
    REQUIRE(log.train->steps[i].trial == train.steps[i].trial);
    REQUIRE(log.train->steps[i].measured == train.steps[i].measured);
    auto const* t = log.trial(train.steps[i].trial);
    REQUIRE(t);
    REQUIRE(t->ok());
    if (train.steps[i].measured)  // measured on this step, by the trial the step is labelled with
      REQUIRE(std::count(t->measured_on.begin(), t->measured_on.end(), int(i) + 1) == 1);
  }

  // A search longer than the run: the candidates it cannot reach fail with the reason, and the run
  // still ends at its last step with the same bits.
  Trainer short_run(cfg, nullptr);
  short_run.run(30);
  TuneSession cut(runner, settings, nullptr);
  cut.search(&short_run);
  cut.train(&short_run, nullptr);
  REQUIRE(short_run.step() == 40);
  auto const& trials = cut.result().trials;
  REQUIRE(std::count_if(trials.begin(), trials.end(), [](TrialRecord const& t) { return t.ok(); }) == 3);
  REQUIRE_THAT(trials.back().reason, Contains("the training run ended before this configuration was measured"));
  auto const c = parameters_of(short_run);
  REQUIRE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("in-flight tuning: evaluations and checkpoints are never measured, and a killed search resumes where it "
          "was, bitwise", "[tune][train][inflight][resume][long]") {
  test::TempFile data(".h5"), checkpoint(".h5"), log_path(".h5");
  auto j = test::tiny_config_json(data.path());
  j["train"]["steps"] = 70;
  j["train"]["eval_every"] = 4;
  j["train"]["eval_samples"] = 4;
  j["train"]["checkpoint"] = checkpoint.path();
  j["train"]["checkpoint_every"] = 5;
  Config const cfg = with_tune(j, {{"offload_ratios", {0, 0.5, 1}}, {"recompute_depths", {0, 1, 2, 3}},
                                   {"warmup_steps", 1}, {"measured_steps", 2}, {"max_repeats", 1}});
  write_synthetic(data.path(), SynthOptions::for_model(cfg.model, 40, 3));
  auto const settings = parse_tune_settings(cfg);
  Energy e;
  e.sampler.start();
  auto untuned_cfg = j;
  untuned_cfg["train"].erase("checkpoint");
  Trainer untuned(parse_config(untuned_cfg.dump(), "untuned"), nullptr);
  untuned.run();
  auto const a = parameters_of(untuned);

  RunHeader header = model_log_header(settings, cfg);
  header.tuning = "in_flight";
  // The first run is killed between steps 23 and 24: its last checkpoint is step 20's.
  int const killed_after = 23;
  std::vector<TrialRecord> measured_first;
  {
    Trainer live(cfg, nullptr);
    TrialRunner runner(cfg, settings, e.monitor, e.regions, {}, [&] { return live.step() >= killed_after; });
    auto writer = RunLogWriter::create(log_path.path(), header);
    TuneSession session(runner, settings, nullptr);
    session.use_log(&writer, {});
    session.record_infeasible();
    REQUIRE_THROWS_AS(session.search(&live), Interrupted);
    REQUIRE(live.step() == killed_after);
    measured_first = read_run_log(log_path.path()).trials;
  }
  REQUIRE(measured_first.size() >= 4);
  for (auto const& t : measured_first) {
    REQUIRE(t.ok());
    for (int step : t.measured_on) {  // no step followed by an evaluation or a checkpoint
      INFO("trial " << t.index << " measured on step " << step);
      REQUIRE(step % 4 != 0);
      REQUIRE(step % 5 != 0);
    }
  }
  // Resumed: the finished trials come from the log (not measured again), the run from step 20.
  std::vector<TrialRecord> finished;
  auto writer = RunLogWriter::resume(log_path.path(), header, &finished);
  REQUIRE(finished.size() == measured_first.size());
  Trainer live(cfg, nullptr);
  live.resume(checkpoint.path());
  REQUIRE(live.step() == 20);
  TrialRunner runner(cfg, settings, e.monitor, e.regions, {}, {});
  TuneSession session(runner, settings, nullptr);
  session.use_log(&writer, finished);
  session.record_infeasible();
  session.search(&live);
  auto const train = session.train(&live, nullptr);
  writer.close();
  REQUIRE(live.step() == 70);
  REQUIRE(train.steps.front().step == 21);
  // The run's regions per call path: forward inside the steps once per micro-batch (batch 6 in
  // micro-batches of 3), apart from the forward that decoding runs inside the evaluations.
  {
    auto const path_of = [&](std::size_t row) {
      std::string path;
      for (int r = int(row); r >= 0; r = train.region_paths[std::size_t(r)].parent_row)
        path = "/" + train.region_paths[std::size_t(r)].name + path;
      return path;
    };
    std::map<std::string, long long> calls;
    for (std::size_t i = 0; i < train.region_paths.size(); ++i) {
      REQUIRE(train.region_paths[i].parent_row < int(i));
      REQUIRE(calls.emplace(path_of(i), train.region_paths[i].calls).second);
    }
    std::string listed;
    for (auto const& [path, n] : calls) listed += path + ": " + std::to_string(n) + "\n";
    INFO(listed);
    CHECK(calls["/step"] == long(train.steps.size()));
    CHECK(calls["/step/forward"] == 2 * long(train.steps.size()));
    CHECK(calls["/evaluate/greedy_captions/forward"] > 0);
    CHECK(calls["/evaluate/greedy_captions/forward/joule::block_forward"] ==
          cfg.model.layers * calls["/evaluate/greedy_captions/forward"]);
  }
  auto const log = read_run_log(log_path.path());
  REQUIRE(log.trials.size() == 12);  // every candidate once: none measured twice
  for (std::size_t i = 0; i < measured_first.size(); ++i) {
    REQUIRE(log.trials[i].knobs == measured_first[i].knobs);
    REQUIRE(log.trials[i].step_time_s == measured_first[i].step_time_s);
  }
  for (auto const& t : log.trials) {
    REQUIRE(t.ok());
    for (int step : t.measured_on) REQUIRE((step % 4 != 0 && step % 5 != 0));
  }
  // All knobs neutral: the parameters of the run that was never tuned, killed or resumed.
  auto const b = parameters_of(live);
  REQUIRE(a.size() == b.size());
  REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  e.sampler.stop();
}

TEST_CASE("in-flight tuning over micro-batches: the loss curve of the untuned run, up to summation order",
          "[tune][train][inflight][long]") {
  test::TempFile data(".h5");
  auto j = test::tiny_config_json(data.path());
  j["train"]["steps"] = 40;
  j["train"]["batch"] = 12;
  j["train"]["micro_batch"] = 12;
  j["train"]["eval_every"] = 0;
  j["train"]["eval_samples"] = 4;
  Config const cfg = with_tune(j, {{"offload_ratios", {0, 1}}, {"recompute_depths", {0}}, {"micro_batches", {2, 4, 12}},
                                   {"warmup_steps", 1}, {"measured_steps", 2}, {"max_repeats", 1}});
  write_synthetic(data.path(), SynthOptions::for_model(cfg.model, 40, 3));
  auto const settings = parse_tune_settings(cfg);
  Energy e;
  e.sampler.start();
  Trainer untuned(cfg, nullptr);
  auto const want = untuned.run();
  TrialRunner runner(cfg, settings, e.monitor, e.regions, {}, {});
  TuneSession session(runner, settings, nullptr);
  Trainer live(cfg, nullptr);
  session.search(&live);
  REQUIRE(session.result().trials.size() == 6);  // every micro-batch reachable in flight
  for (auto const& t : session.result().trials) REQUIRE(t.ok());
  auto const run = session.train(&live, nullptr);
  REQUIRE(run.steps.size() == 40);
  double worst = 0;
  for (std::size_t i = 0; i < run.steps.size(); ++i)
    worst = std::max(worst, std::abs(run.steps[i].loss - want.steps[i].loss) / std::abs(want.steps[i].loss));
  INFO("largest relative loss difference " << worst);
  REQUIRE(worst < 1e-3);  // the same samples per step; float sums in another order
  e.sampler.stop();
}

TEST_CASE("in-flight tuning with an injected noisy objective: a choice beyond the noise is announced, one within "
          "it keeps the configuration's settings, and the log says which",
          "[tune][train][inflight][significance]") {
  test::TempFile data(".h5");
  auto j = test::tiny_config_json(data.path());
  j["train"]["steps"] = 60;
  j["train"]["eval_every"] = 0;
  j["train"]["eval_samples"] = 4;
  j["train"]["offload_ratio"] = 0.0;  // the configuration's own settings: offload 0
  Config const cfg = with_tune(j, {{"offload_ratios", {0, 1}}, {"recompute_depths", {0}}, {"warmup_steps", 1},
                                   {"measured_steps", 4}, {"max_repeats", 1}, {"reference_every", 0},
                                   {"confirm_rounds", 4}});
  write_synthetic(data.path(), SynthOptions::for_model(cfg.model, 40, 3));
  auto const settings = parse_tune_settings(cfg);
  Energy e;
  e.sampler.start();
  // The landscape: offload 1 takes 70% of offload 0's time at 100 W, each step times exp(noise·z).
  // The machine's own times are replaced, so the verdict does not depend on how loaded it is.
  auto const run = [&](double noise, std::uint64_t seed) {
    TrialRunner runner(cfg, settings, e.monitor, e.regions, {}, {});
    auto rng = std::make_shared<std::mt19937_64>(seed);
    runner.filter_measurements([=](Knobs const& k, std::vector<double>& seconds, std::vector<double>& joules) {
      std::normal_distribution<double> z(0, 1);
      for (std::size_t i = 0; i < seconds.size(); ++i) {
        seconds[i] = (k.offload_ratio == 1 ? 0.07 : 0.10) * std::exp(noise * z(*rng));
        joules[i] = 100 * seconds[i];
      }
    });
    test::TempFile log_path(".h5");
    auto writer = RunLogWriter::create(log_path.path(), model_log_header(settings, cfg));
    TuneSession session(runner, settings, nullptr);
    session.use_log(&writer, {});
    Trainer live(cfg, nullptr);
    session.search(&live);
    auto const decision = session.decision();
    auto const train = session.train(&live, nullptr);
    REQUIRE(live.step() == 60);
    REQUIRE(train.knobs == session.chosen().knobs);
    writer.close();
    auto const log = read_run_log(log_path.path());
    REQUIRE(log.choice);
    REQUIRE(log.choice->verdict == decision.verdict);
    REQUIRE(log.choice->confirm_ratios == decision.confirm_ratios);
    REQUIRE(log.best == session.chosen().index);
    return std::pair{decision, session.chosen().knobs};
  };
  SECTION("1% noise: offload 1 is chosen, confirmed in alternating rounds") {
    auto const [d, knobs] = run(0.01, 1);
    INFO(d.verdict);
    REQUIRE(knobs.offload_ratio == 1);
    REQUIRE(d.confirm_ratios.size() == 4);
    REQUIRE(d.best_vs_baseline.significant);
    REQUIRE(d.best_vs_baseline.difference == Approx(0.7 * 0.7 - 1).margin(0.03));  // E·T: 0.49
    REQUIRE_THAT(d.verdict, Contains("chose trial"));
  }
  SECTION("100% noise: the search's best is not told apart, and offload 0 is kept") {
    auto const [d, knobs] = run(1.0, 5);
    INFO(d.verdict);
    REQUIRE(d.best != d.baseline);  // the seed gives the case under test: a best other than offload 0
    REQUIRE(knobs.offload_ratio == 0);
    REQUIRE_FALSE(d.best_vs_baseline.significant);
    REQUIRE_THAT(d.verdict, Contains("kept the configuration's own settings") &&
                                Contains("no candidate was distinguishable from it under this machine's noise"));
  }
}

// A step shorter than its energy sensor's update (hwmon: 50 ms) has no energy of its own: the
// trial says so, takes the mean over its window, and measures at least kMinSensorUpdates updates
// before it may stop (issue 53). A fake Grace meter sets the update interval.
TEST_CASE("trial runner: energy below the sensor's resolution is flagged and measured longer", "[tune][train]") {
  test::TempFile data(".h5");
  auto j = test::tiny_config_json(data.path());
  Config const cfg = with_tune(j, {{"offload_ratios", {0}}, {"recompute_depths", {0}}, {"warmup_steps", 1},
                                   {"measured_steps", 3}, {"max_repeats", 6}});
  write_synthetic(data.path(), SynthOptions::for_model(cfg.model, 24, 3));
  auto settings = parse_tune_settings(cfg);
  settings.ci_target = 100;  // any interval would do: only the sensor's updates keep it measuring
  char folder[] = "/tmp/joule-test-hwmon-XXXXXX";
  REQUIRE(mkdtemp(folder) != nullptr);
  std::string const hwmon = folder;
  auto const measure_with_interval = [&](char const* interval_ms) {
    std::string const dir = hwmon + "/hwmon0/device";
    REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
    std::ofstream(dir + "/power1_oem_info") << "Module Power Socket 0\n";
    std::ofstream(dir + "/power1_average") << "300000000\n";  // 300 W
    std::ofstream(dir + "/power1_average_interval") << interval_ms << "\n";
    energy::SourceOptions o;
    o.nvml_library = "none";
    o.powercap_root = "/nonexistent";
    o.hwmon_root = hwmon;
    o.local_rank = 0;
    energy::Sampler sampler(energy::discover_sources(o));
    energy::RegionRecorder regions(sampler);
    energy::Monitor monitor(sampler);
    sampler.start();
    TrialRunner runner(cfg, settings, monitor, regions, {}, {});
    Knobs k;
    k.micro_batch = cfg.train.micro_batch;
    auto const r = runner.measure(k);
    sampler.stop();
    return r;
  };
  auto const window = [](std::vector<double> const& t, std::size_t n) {
    return std::accumulate(t.begin(), t.begin() + std::min(n, t.size()), 0.0);
  };

  SECTION("a 5 s meter: every step is below it, and no number of repeats reaches 10 updates") {
    auto const r = measure_with_interval("5000");
    INFO(r.reason);
    REQUIRE(r.ok());
    REQUIRE(r.energy_resolution_s == Approx(5.0));
    REQUIRE(r.time_per_step_s < 5.0);
    REQUIRE(r.energy_below_resolution());
    REQUIRE(r.repeats == 6);  // kept measuring to max_repeats, though the CI target was met at once
    double const mean = std::accumulate(r.step_energy_j.begin(), r.step_energy_j.end(), 0.0) / r.step_energy_j.size();
    REQUIRE(r.energy_per_step_j == Approx(mean));
    auto const line = trial_line(r);
    REQUIRE_THAT(line, Contains("steps below the energy sensor's 5000 ms: J/step is the mean over") &&
                           Contains("(too few: energy cannot rank it)"));
  }
  SECTION("a 20 ms meter: the trial stops once its steps cover 10 updates (0.2 s), not before") {
    auto const r = measure_with_interval("20");
    INFO(r.reason);
    REQUIRE(r.ok());
    REQUIRE(r.energy_resolution_s == Approx(0.02));
    REQUIRE(r.energy_below_resolution() == (r.time_per_step_s < 0.02));
    double const all = window(r.step_time_s, r.step_time_s.size());
    REQUIRE((all >= 10 * 0.02 || r.repeats == 6));
    // It stopped at the first repeat that covered them: the repeats before it did not.
    double const before_last = window(r.step_time_s, r.step_time_s.size() - 3);
    INFO("measured " << all << " s in " << r.repeats << " repeats");
    if (r.repeats > 1) REQUIRE(before_last < 10 * 0.02);
    if (!r.energy_below_resolution()) REQUIRE_THAT(trial_line(r), !Contains("below the energy sensor"));
  }
  std::system(("rm -rf " + hwmon).c_str());
}

TEST_CASE("knobs: the knob table, the trainer's settings and the configuration name the same fields",
          "[tune][knobs]") {
  // Adding a knob takes a configuration field, a field of Reconfigurable with its row in
  // reconfigurable_fields(), and a row of the knob table (docs/design.md); this fails when they disagree.
  auto const& fields = reconfigurable_fields();
  Reconfigurable const defaults;
  // The struct's fields, counted by a structured binding: it stops compiling when a field is added
  // or removed, and the rows must follow.
  auto const& [ratio, depth, threads, micro, shards, cast] = defaults;
  (void)ratio, (void)depth, (void)threads, (void)micro, (void)shards, (void)cast;
  REQUIRE(fields.size() == 6);
  for (auto const& f : fields) {
    INFO(f.name);
    // Each row reaches its own member: setting it changes exactly that row's value.
    Reconfigurable r = defaults;
    double const v = f.get(defaults) == 1 ? 2 : 1;
    f.set(r, v);
    REQUIRE(f.get(r) == v);
    for (auto const& other : fields)
      if (&other != &f) REQUIRE(other.get(r) == other.get(defaults));
    // ... and the configuration's field of the same name: with_reconfigured writes it in the text.
    Config cfg = parse_config(R"({"model": {"layers": 2, "d_model": 64, "heads": 2, "mlp_ratio": 2, "image_size": 16,
        "patch_size": 8, "channels": 1, "frames": 1, "text_len": 12, "tie_embeddings": true},
        "data": {"path": "never-read.h5", "eval_fraction": 0.1},
        "train": {"batch": 4, "micro_batch": 2, "steps": 2, "lr": 0.001, "min_lr": 0.0001, "warmup_steps": 1,
        "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "eval_every": 0, "eval_samples": 1,
        "log_every": 1, "seed": 1, "recompute_depth": 0}})");
    Reconfigurable changed = reconfigurable_of(cfg.train);
    f.set(changed, f.get(changed) == 1 ? 2 : 1);
    Config const next = with_reconfigured(cfg, changed);
    REQUIRE(f.configured(next.train) == f.get(changed));
    REQUIRE(f.configured(parse_config(next.json).train) == f.get(changed));
    REQUIRE(reconfigurable_of(next.train) == changed);
    // Named by exactly one knob.
    int named = 0;
    for (auto const& k : knob_table()) named += std::string(k.config_field) == f.name;
    REQUIRE(named == 1);
  }
  for (auto const& k : knob_table()) {
    INFO(k.name);
    if (*k.config_field) REQUIRE(k.field() != nullptr);  // every configuration knob a running trainer can switch
    if (!k.field()) continue;
    REQUIRE(k.integer == k.field()->integer);  // the log's attribute type is the field's
    // The search's point holds the knob in the trainer's settings: setting it there changes only it.
    Knobs point;
    double const v = k.get(point) == 1 ? 2 : 1;
    k.set(point, v);
    REQUIRE(k.get(point) == v);
    REQUIRE(k.field()->get(point) == v);
    for (auto const& other : knob_table())
      if (&other != &k) REQUIRE(other.get(point) == other.get(Knobs{}));
  }
}
