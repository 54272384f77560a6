#include "bench/bench_energy.hpp"

#include "core/data/synth.hpp"
#include "core/io/scratch_folder.hpp"
#include "core/train/trainer.hpp"
#include "energy/monitor.hpp"
#include "energy_setup.hpp"
#include "default_config.hpp"
#include "runlog/run_log.hpp"
#include "runlog/statistics.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace joule::apps {

namespace {

// The energy tool loaded into this process as Kokkos would load it (its kokkosp_* entry points),
// its callbacks installed with Kokkos::Tools::Experimental::set_callbacks for one round at a time.
class LoadedEnergyTool {
 public:
  using Events = Kokkos::Tools::Experimental::EventSet;

  // "" or a message saying why the tool is not there.
  static std::string find(std::string const& given, std::string* path) {
    if (!given.empty()) {
      *path = given;
      return "";
    }
    std::error_code error;
    auto const exe = std::filesystem::read_symlink("/proc/self/exe", error);
    if (error) return "cannot tell where joule is (/proc/self/exe); give --energy-tool";
    for (auto const& candidate : {exe.parent_path() / "energy_tool" / "libjoule_energy_tool.so",
                                  exe.parent_path().parent_path() / "lib" / "libjoule_energy_tool.so"})
      if (std::filesystem::exists(candidate)) {
        *path = candidate.string();
        return "";
      }
    return fmt::format("no libjoule_energy_tool.so in {}/energy_tool or {}/../lib; give --energy-tool",
                       exe.parent_path().string(), exe.parent_path().string());
  }

  explicit LoadedEnergyTool(std::string const& path) : path_(path) {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) throw std::runtime_error(fmt::format("cannot load the energy tool {}: {}", path, dlerror()));
    auto symbol = [&](char const* name) {
      void* f = dlsym(handle_, name);
      if (!f) throw std::runtime_error(fmt::format("the energy tool {} has no {}", path, name));
      return f;
    };
    init_ = reinterpret_cast<decltype(init_)>(symbol("kokkosp_init_library"));
    finalize_ = reinterpret_cast<decltype(finalize_)>(symbol("kokkosp_finalize_library"));
    events_ = Kokkos::Tools::Experimental::get_callbacks();
    events_.init = init_;  // what Kokkos asks to know that a tool is there; never called by set_callbacks
    events_.finalize = finalize_;
    events_.push_region = reinterpret_cast<decltype(events_.push_region)>(symbol("kokkosp_push_profile_region"));
    events_.pop_region = reinterpret_cast<decltype(events_.pop_region)>(symbol("kokkosp_pop_profile_region"));
    events_.begin_parallel_for = reinterpret_cast<decltype(events_.begin_parallel_for)>(symbol("kokkosp_begin_parallel_for"));
    events_.end_parallel_for = reinterpret_cast<decltype(events_.end_parallel_for)>(symbol("kokkosp_end_parallel_for"));
    events_.begin_parallel_reduce =
        reinterpret_cast<decltype(events_.begin_parallel_reduce)>(symbol("kokkosp_begin_parallel_reduce"));
    events_.end_parallel_reduce = reinterpret_cast<decltype(events_.end_parallel_reduce)>(symbol("kokkosp_end_parallel_reduce"));
    events_.begin_parallel_scan = reinterpret_cast<decltype(events_.begin_parallel_scan)>(symbol("kokkosp_begin_parallel_scan"));
    events_.end_parallel_scan = reinterpret_cast<decltype(events_.end_parallel_scan)>(symbol("kokkosp_end_parallel_scan"));
    events_.begin_fence = reinterpret_cast<decltype(events_.begin_fence)>(symbol("kokkosp_begin_fence"));
    events_.end_fence = reinterpret_cast<decltype(events_.end_fence)>(symbol("kokkosp_end_fence"));
    events_.begin_deep_copy = reinterpret_cast<decltype(events_.begin_deep_copy)>(symbol("kokkosp_begin_deep_copy"));
    events_.end_deep_copy = reinterpret_cast<decltype(events_.end_deep_copy)>(symbol("kokkosp_end_deep_copy"));
    // What the tool wrote: it never replaces a file and may write beside the name it was given,
    // or nothing (then it says why on stderr); the profile read back is the file it names.
    last_output_ = reinterpret_cast<decltype(last_output_)>(symbol("joule_energy_tool_last_output"));
  }
  ~LoadedEnergyTool() {
    if (handle_) dlclose(handle_);
  }
  LoadedEnergyTool(LoadedEnergyTool const&) = delete;
  LoadedEnergyTool& operator=(LoadedEnergyTool const&) = delete;

  // Runs `work` with the tool attributing (kernels or regions only), its profile written to `out`
  // and read back: the tool's own count of its callbacks' time.
  template <class Work>
  scheduler::ProfileRecord run(bool kernels, double rate_hz, std::string const& out, Work const& work) {
    setenv("JOULE_ENERGY_QUIET", "1", 1);
    setenv("JOULE_ENERGY_KERNELS", kernels ? "1" : "0", 1);
    setenv("JOULE_ENERGY_OUT", out.c_str(), 1);
    setenv("JOULE_ENERGY_RATE_HZ", fmt::format("{}", rate_hz).c_str(), 1);
    init_(0, 0, 0, nullptr);
    for (char const* name : {"JOULE_ENERGY_QUIET", "JOULE_ENERGY_KERNELS", "JOULE_ENERGY_OUT", "JOULE_ENERGY_RATE_HZ"})
      unsetenv(name);
    auto const before = Kokkos::Tools::Experimental::get_callbacks();
    Kokkos::Tools::Experimental::set_callbacks(events_);
    try {
      work();
    } catch (...) {
      Kokkos::Tools::Experimental::set_callbacks(before);
      finalize_();
      throw;
    }
    Kokkos::Tools::Experimental::set_callbacks(before);
    finalize_();
    char const* text = nullptr;
    int const written = last_output_(&text);
    std::string const what = text ? text : "";
    if (written != 1)
      throw std::runtime_error(fmt::format("the energy tool {} wrote no profile{}", path_,
                                           what.empty() ? std::string(" (it made no report)") : ": " + what));
    if (io::folder_of(what) != io::folder_of(out))  // beside `out`, in the suite's private folder
      throw std::runtime_error(fmt::format("the energy tool {} wrote {}, not beside {}", path_, what, out));
    auto log = scheduler::read_run_log(what);
    std::remove(what.c_str());
    if (!log.profile) throw std::runtime_error("the energy tool's file " + what + " holds no profile");
    return *log.profile;
  }

 private:
  std::string path_;
  void* handle_ = nullptr;
  void (*init_)(int, uint64_t, uint32_t, Kokkos_Profiling_KokkosPDeviceInfo*) = nullptr;
  void (*finalize_)() = nullptr;
  int (*last_output_)(char const**) = nullptr;
  Events events_{};
};

}  // namespace

namespace {
// The connector case: the same trainer's steps with no tool, with the tool attributing regions,
// and regions and kernels, in interleaved rounds.
void run_energy_tool_rounds(EnergyBenchOptions const& o, Trainer& trainer, io::ScratchFolder const& scratch) {
  std::string path;
  if (auto const missing = LoadedEnergyTool::find(o.energy_tool, &path); !missing.empty()) {
    fmt::print("\nenergy tool: skipped ({})\n", missing);
    return;
  }
  if (Kokkos::Tools::profileLibraryLoaded()) {
    fmt::print("\nenergy tool: skipped (a Kokkos Tools library is loaded already: KOKKOS_TOOLS_LIBS)\n");
    return;
  }
  LoadedEnergyTool tool(path);
  struct Mode {
    char const* name;
    std::optional<bool> kernels;  // nullopt: no tool
  };
  std::vector<Mode> const modes{{"no tool", std::nullopt}, {"tool: regions", false}, {"tool: regions + kernels", true}};
  std::vector<std::vector<double>> step_ms(modes.size());
  std::vector<double> edges(modes.size()), hook_s(modes.size()), rows(modes.size());
  std::string const out = scratch.file("tool-profile.h5");
  for (int round = 0; round < o.repeats; ++round)
    for (std::size_t m = 0; m < modes.size(); ++m) {
      auto const steps = [&] {
        for (auto const& s : trainer.run(o.steps).steps) step_ms[m].push_back(1e3 * s.seconds);
      };
      if (!modes[m].kernels) {
        steps();
        continue;
      }
      auto const profile = tool.run(*modes[m].kernels, o.rate_hz, out, steps);
      edges[m] += double(profile.tool_edges);
      hook_s[m] += profile.tool_seconds;
      rows[m] = double(profile.regions.size() + profile.kernels.size());
    }
  double const base = scheduler::median(step_ms[0]);
  double const steps_per_mode = double(o.repeats) * o.steps;
  fmt::print("\nthe energy tool ({}) on the same steps, its Kokkos Tools callbacks installed in this process\n"
             "for its rounds only; {} rounds of {} steps per mode, interleaved, median step times\n",
             path, o.repeats, o.steps);
  fmt::print("{:<28} {:>12} {:>10} {:>14} {:>16} {:>10} {:>8}\n", "mode", "step ms", "vs none", "edges / step",
             "hooks ms / step", "hooks %", "rows");
  for (std::size_t m = 0; m < modes.size(); ++m) {
    double const step = scheduler::median(step_ms[m]);
    double const hooks_ms = 1e3 * hook_s[m] / steps_per_mode;
    fmt::print("{:<28} {:>12.3f} {:>10.4f} {:>14.0f} {:>16.4f} {:>10.3f} {:>8.0f}\n", modes[m].name, step, step / base,
               edges[m] / steps_per_mode, hooks_ms, 100 * hooks_ms / step, rows[m]);
  }
  fmt::print("(vs none: the median step with the tool over the median step without it, same run; edges: the\n"
             " tool's callbacks per step (regions, kernels, copies, fences); hooks: the tool's own count of the\n"
             " time inside them, a lower bound of its cost, % of the step; rows: regions and kernels in its table)\n");
}
}  // namespace

int run_energy_overhead_bench(EnergyBenchOptions const& o) {
  // Its dataset and the tool's profiles in a private folder under $TMPDIR, removed with all in it
  // however the suite ends: no name another user could guess and take first (io::ScratchFolder).
  io::ScratchFolder const scratch("joule-bench-energy-");
  std::string const data = scratch.file("data.h5");
  auto j = nlohmann::json::parse(kDefaultConfigJson);  // the main job's model
  j["data"]["path"] = data;
  j["train"]["steps"] = 1 << 30;
  j["train"]["eval_every"] = 0;
  j["train"].erase("checkpoint");
  Config const cfg = parse_config(j.dump(), "energy bench");
  write_synthetic(data, SynthOptions::for_model(cfg.model, 512, 1));
  Trainer trainer(cfg, nullptr);
  trainer.run(5);  // warm-up

  struct Mode {
    char const* name;
    bool energy;
    energy::EdgeMode edges;
  };
  std::vector<Mode> const modes{{"energy off (--no-energy)", false, energy::EdgeMode::timeline},
                                {"default: timeline regions", true, energy::EdgeMode::timeline},
                                {"--energy-regions fenced", true, energy::EdgeMode::fenced}};
  std::vector<std::vector<double>> step_ms(modes.size());
  std::vector<double> edges_per_step(modes.size()), hook_ms_per_step(modes.size()), sampler_cpu(modes.size());
  fmt::print("energy measurement overhead: the default tiny model ({} layers, d_model {}, batch {}), {} Hz "
             "sampling;\n{} rounds of {} steps per mode, modes interleaved on one trainer, median step times\n",
             cfg.model.layers, cfg.model.d_model, cfg.train.batch, o.rate_hz, o.repeats, o.steps);
  for (int round = 0; round < o.repeats; ++round)
    for (std::size_t m = 0; m < modes.size(); ++m) {
      std::unique_ptr<energy::Sampler> sampler;
      std::unique_ptr<energy::RegionRecorder> regions;
      if (modes[m].energy) {
        sampler = std::make_unique<energy::Sampler>(
            energy::discover_sources(energy::SourceOptions::from_environment()), o.rate_hz);
        regions = make_region_recorder(*sampler, modes[m].edges);
        sampler->start();
      }
      auto const summary = trainer.run(o.steps);
      for (auto const& s : summary.steps) step_ms[m].push_back(1e3 * s.seconds);
      if (sampler) {
        sampler->stop();
        (void)regions->stats(/*settle=*/true);  // the attribution itself runs after the steps
        edges_per_step[m] = double(regions->hook_calls()) / o.steps;
        hook_ms_per_step[m] = 1e3 * regions->hook_seconds() / o.steps;
        sampler_cpu[m] += sampler->thread_cpu_seconds();
      }
    }
  double const base = scheduler::median(step_ms[0]);
  fmt::print("{:<28} {:>12} {:>10} {:>14} {:>16} {:>14}\n", "mode", "step ms", "vs off", "edges / step",
             "hooks ms / step", "sampler CPU s");
  for (std::size_t m = 0; m < modes.size(); ++m) {
    double const step = scheduler::median(step_ms[m]);
    fmt::print("{:<28} {:>12.3f} {:>10.4f} {:>14.0f} {:>16.4f} {:>14.3f}\n", modes[m].name, step, step / base,
               edges_per_step[m], hook_ms_per_step[m], sampler_cpu[m]);
  }
  fmt::print("(vs off: the median step with that mode over the median step without energy, measured in the same\n"
             " run; edges: region edges passed per step, library regions included; hooks: time inside the\n"
             " region callbacks; sampler CPU: the sampler thread's CPU time over all rounds of that mode)\n");
  run_energy_tool_rounds(o, trainer, scratch);
  return 0;
}

}  // namespace joule::apps
