#include "bench/bench_offload.hpp"

#include "core/data/synth.hpp"
#include "core/io/scratch_folder.hpp"
#include "core/ops/adamw.hpp"
#include "core/train/host_cores.hpp"
#include "core/train/trainer.hpp"
#include "energy_setup.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace joule::apps {

namespace {

using Host = Kokkos::DefaultHostExecutionSpace;

template <class F>
double median_seconds(int repeats, F&& f) {
  f();  // warm-up (first touch)
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    Kokkos::Timer timer;
    f();
    Host().fence();
    t.push_back(timer.seconds());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int run_adamw_bandwidth_bench(OffloadBenchOptions const& o) {
  fmt::print("host AdamW bandwidth vs STREAM triad ({} on {} threads, float32, median of {})\n",
             Host::name(), Host().concurrency(), o.repeats);
  fmt::print("  triad: a = b + s*c, 12 bytes/element counted (as STREAM: the write-allocate read of a\n"
             "  is not counted); AdamW: 28 bytes/parameter (reads p, g, m, v; writes p, m, v); out of place: the\n"
             "  speculative step's loop (writes a second p, m, v; 28 bytes counted the same way); the first row fits\n"
             "  in the caches and shows the arithmetic's speed, not memory's (each sample repeats the update)\n");
  fmt::print("{:>12} {:>14} {:>15} {:>10} {:>22} {:>10}\n", "parameters", "triad GB/s", "AdamW GB/s", "AdamW/triad",
             "out of place GB/s", "/triad");
  for (long long const n : {65536LL, 3000000LL, 30000000LL, 300000000LL}) {
    int const inner = int(std::max(1LL, 30000000LL / n));  // calls per sample: samples of a few ms
    Kokkos::View<float*, Kokkos::HostSpace> a("a", n), b("b", n), c("c", n), d("d", n);
    Kokkos::deep_copy(b, 1.0f);
    Kokkos::deep_copy(c, 0.5f);
    Kokkos::deep_copy(d, 0.25f);
    double const triad = median_seconds(o.repeats, [&] {
      for (int k = 0; k < inner; ++k)
        Kokkos::parallel_for("joule::stream_triad", Kokkos::RangePolicy<Host>(0, n),
                             KOKKOS_LAMBDA(long long i) { a(i) = b(i) + 3.0f * c(i); });
    }) / inner;
    Kokkos::deep_copy(a, 0.1f);  // a: params, b: gradients, c: m, d: v
    Kokkos::deep_copy(c, 0.0f);
    Kokkos::deep_copy(d, 0.0f);
    long step = 0;
    AdamWConfig cfg;
    double const adamw = median_seconds(o.repeats, [&] {
      for (int k = 0; k < inner; ++k) adamw_update(Host(), a, b, c, d, cfg, ++step);
    }) / inner;
    // Out of place, one contiguous chunk per thread, as the host worker splits a group.
    Kokkos::View<float*, Kokkos::HostSpace> p2("p2", n), m2("m2", n), v2("v2", n);
    int const chunks = Host().concurrency();
    auto const element = detail::make_adamw_element<float>(cfg, 3, 1.0);
    double const into = median_seconds(o.repeats, [&] {
      for (int r = 0; r < inner; ++r)
        Kokkos::parallel_for("joule::adamw_into_bench", Kokkos::RangePolicy<Host>(0, chunks), [&](int k) {
          std::size_t const begin = std::size_t(n) * k / chunks, end = std::size_t(n) * (k + 1) / chunks;
          detail::adamw_host_range_into(element, detail::AdamWState<float const>{a.data(), c.data(), d.data()}, b.data(),
                                        detail::AdamWState<float>{p2.data(), m2.data(), v2.data()}, begin, end);
        });
    }) / inner;
    double const triad_gbs = 12.0 * n / triad * 1e-9, adamw_gbs = 28.0 * n / adamw * 1e-9, into_gbs = 28.0 * n / into * 1e-9;
    fmt::print("{:>12} {:>14.2f} {:>15.2f} {:>10.2f} {:>22.2f} {:>10.2f}\n", n, triad_gbs, adamw_gbs, adamw_gbs / triad_gbs,
               into_gbs, into_gbs / triad_gbs);
  }
  return 0;
}

int run_offload_overlap_bench(OffloadBenchOptions const& o) {
  // A model where the optimizer is a visible part of the step: 4 blocks of width 256.
  // Its dataset in a private folder under $TMPDIR, removed with it however the suite ends: no
  // name another user could guess and take first (io::ScratchFolder).
  io::ScratchFolder const scratch("joule-bench-offload-");
  std::string const data = scratch.file("data.h5");
  auto cfg_json = nlohmann::json::parse(R"({
    "model": {"layers": 4, "d_model": 256, "heads": 4, "mlp_ratio": 4, "image_size": 32,
              "patch_size": 8, "channels": 3, "frames": 1, "text_len": 36, "tie_embeddings": true},
    "data": {"path": "", "eval_fraction": 0.1},
    "train": {"batch": 8, "micro_batch": 8, "steps": 1000, "lr": 0.001, "min_lr": 0.0001,
              "warmup_steps": 10, "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95,
              "grad_clip": 0.0, "eval_every": 0, "eval_samples": 1, "log_every": 1000, "seed": 1,
              "recompute_depth": 0}
  })");
  cfg_json["data"]["path"] = data;
  Config cfg = parse_config(cfg_json.dump(), "offload bench");
  write_synthetic(data, SynthOptions::for_model(cfg.model, 256, 1));

  auto const& cores = host_cores();
  std::string cpus;
  for (int c : cores.optimizer) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
  fmt::print("offload overlap: {} layers, d_model {}, batch {}; ratios interleaved over {} rounds of {} steps, medians\n",
             cfg.model.layers, cfg.model.d_model, cfg.train.batch, o.repeats, o.steps);
  if (!kDeviceIsHost || !cores.optimizer.empty())
    fmt::print("host jobs on the optimizer's worker thread{} ({} Kokkos thread(s) for the \"device\" work)\n",
               cpus.empty() ? std::string() : ", pinned to CPU(s) " + cpus, Kokkos::DefaultHostExecutionSpace().concurrency());
  else
    fmt::print("host jobs on the launching thread: this CPU-only build shares its cores between \"device\" and host\n"
               "work (JOULE_HOST_CORES=k sets k cores aside for the host optimizer, so the overlap can show)\n");
  std::vector<double> const ratios{0.0, 0.5, 1.0};
  // Clipping off; on, the jobs waiting for the norm; on, speculating (STV, the default), with a
  // threshold this model's norms stay above (every step clipped: every job run twice, the worst
  // case) and one they stay below (the common case of a healthy run after its first steps).
  struct Mode {
    double clip;
    bool speculate;
    char const* what;
  };
  for (Mode const mode : {Mode{0.0, true, ""}, Mode{1.0, false, ""}, Mode{1.0, true, ", grad_clip 1: every step clipped here"},
                          Mode{1e6, true, ", grad_clip 1e6: no step clipped"}}) {
    double const clip = mode.clip;
    cfg.train.grad_clip = clip;
    cfg.train.offload_speculation = mode.speculate;
    std::vector<std::unique_ptr<Trainer>> trainers;
    for (double const ratio : ratios) {
      cfg.train.offload_ratio = ratio;
      trainers.push_back(std::make_unique<Trainer>(cfg, nullptr));
      trainers.back()->run(3);  // warm-up
    }
    struct Times {
      std::vector<double> step, backward, host, waited, device;
      long long speculated = 0, rolled_back = 0;
    };
    std::vector<Times> times(ratios.size());
    for (int round = 0; round < o.repeats; ++round)
      for (std::size_t k = 0; k < ratios.size(); ++k) {
        // Region times through the energy module's recorder (no sensors needed for times); the
        // host jobs' time from the worker's own timestamps, and the launching thread's waits for
        // them where it waited.
        energy::Sampler sampler({});
        auto const regions = make_region_recorder(sampler, energy::EdgeMode::timeline);
        auto& opt = trainers[k]->optimizer();
        opt.reset_offload_times();
        auto const summary = trainers[k]->run(o.steps);
        opt.wait_all();
        for (auto const& r : summary.steps) times[k].step.push_back(1e3 * r.seconds);
        auto const stats = regions->stats(/*settle=*/true);
        auto ms = [&](char const* name) {
          auto it = stats.find(name);
          return it == stats.end() ? 0.0 : 1e3 * it->second.seconds / o.steps;
        };
        auto const ot = opt.offload_times();
        times[k].backward.push_back(ms("backward"));
        times[k].host.push_back(1e3 * ot.host_seconds / o.steps);
        times[k].waited.push_back(1e3 * ot.wait_seconds / o.steps);
        times[k].device.push_back(ms("optimizer_device"));
        times[k].speculated += ot.speculated;
        times[k].rolled_back += ot.rolled_back;
      }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    bool const speculates = clip > 0 && mode.speculate && offload_speculates(clip);
    fmt::print("\ngradient clipping {}{}: {}\n", clip > 0 ? (speculates ? "on, speculating" : "on, waiting") : "off", mode.what,
               clip <= 0    ? "host jobs handed over as the backward pass finishes each group"
               : speculates ? "host jobs handed over as each group's gradient lands, as if unclipped; run again "
                              "on clipped steps (train.offload_speculation)"
                            : "host jobs handed over after the norm (end of the backward pass), in forward order");
    fmt::print("{:>6} {:>9} {:>9} {:>12} {:>13} {:>14} {:>10} {:>8} {:>12} {:>11}\n", "ratio", "achieved", "step ms",
               "backward ms", "host work ms", "launcher waits", "hidden", "device-opt", "step / r=0", "rolled back");
    double const base_step = median(times[0].step);
    for (std::size_t k = 0; k < ratios.size(); ++k) {
      double const step = median(times[k].step), host = median(times[k].host), waited = median(times[k].waited);
      bool const on_worker = trainers[k]->optimizer().offload_times().on_worker;
      // Hidden: the share of the host work the launching thread did not wait for (on the worker);
      // on the launching thread itself nothing is hidden.
      std::string const hidden = host <= 0 ? "-" : !on_worker ? "0% (inline)"
                                 : fmt::format("{:.0f}%", 100.0 * std::clamp(1.0 - waited / host, 0.0, 1.0));
      std::string const rolled = times[k].speculated > 0 ? fmt::format("{}/{}", times[k].rolled_back, times[k].speculated) : "-";
      fmt::print("{:>6.2f} {:>9.3f} {:>9.2f} {:>12.2f} {:>13.2f} {:>14.2f} {:>10} {:>8.2f} {:>12.3f} {:>11}\n", ratios[k],
                 trainers[k]->optimizer().achieved_ratio(), step, median(times[k].backward), host, waited, hidden,
                 median(times[k].device), step / base_step, rolled);
    }
  }
  fmt::print("\n(host work: the jobs' time (AdamW, and the new weights' copy to the device) from timestamps taken\n"
             " where they ran: on the worker, or inline on the launching thread; launcher waits: the launching\n"
             " thread's time in wait_for_group(), just before a forward pass needed a group; hidden = 1 - waits /\n"
             " host work. Step: the median optimizer step, forward + backward + optimizer. Rolled back: speculative\n"
             " jobs run again because their step was clipped, of those speculated.)\n");
  return 0;
}

}  // namespace joule::apps
