// The joule command. Subcommands live in their own files; this file parses and dispatches.
#include "stop_signals.hpp"
#include "build_facts.hpp"
#include "commands.hpp"
#include "core/compat.hpp"
#include "core/environment.hpp"
#include "core/train/host_cores.hpp"
#include "device_choice.hpp"
#include "energy/source.hpp"
#include "environment.hpp"
#include "standard_output.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <exception>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace {

// Commands that only read files or sensors, or write a dataset: they run where there is no device
// (a CUDA build on a login node, where users read their run logs) and never start Kokkos. Every
// other command starts it. `info --no-device` joins them.
constexpr char const* kDeviceFreeCommands[] = {"inspect", "data info", "data synth", "energy probe"};

// The subcommand parsed, as typed: "inspect", "data info"; "" for none.
std::string command_path(CLI::App& app) {
  std::string path;
  for (CLI::App* cur = &app; !cur->get_subcommands().empty();) {
    cur = cur->get_subcommands().front();
    path += (path.empty() ? "" : " ") + cur->get_name();
  }
  return path;
}

bool starts_no_device(std::string const& command, bool info_no_device) {
  if (command == "info") return info_no_device;
  return std::find(std::begin(kDeviceFreeCommands), std::end(kDeviceFreeCommands), command) !=
         std::end(kDeviceFreeCommands);
}

// Kokkos, started on demand with the --kokkos-* arguments (after joule's own are parsed), and
// finalised when this goes out of scope, after everything that ran on it.
class KokkosStart {
 public:
  explicit KokkosStart(std::vector<char*> args) : args_(std::move(args)), given_(args_.begin() + 1, args_.end()) {
    joule::apps::spell_kokkos_flags_for_this_kokkos(static_cast<int>(args_.size()), args_.data());
    help_asked_ = std::any_of(args_.begin() + 1, args_.end(), [](char const* a) { return std::strcmp(a, "--kokkos-help") == 0; });
    args_.push_back(nullptr);
  }
  bool help_asked() const { return help_asked_; }
  bool started() const { return guard_.has_value(); }

  // Starts Kokkos; returns 0, or the exit status after an error naming what is wrong.
  // command: the command's path ("train", "data synth"); a long job leaves busy CPUs to their work.
  int start(std::string const& command = "") {
    [[maybe_unused]] joule::apps::DeviceChoice device;
    try {
      // Processes started unbound on one node: each its own share of the node's CPUs, before Kokkos
      // starts its threads and before JOULE_HOST_CORES sets some of them aside.
      auto const local = joule::energy::local_process_from_environment();
#if defined(KOKKOS_ENABLE_CUDA)
      // The GPU of this local rank among those it sees (every GPU of the node where the launcher
      // shows them all, as NCCL wants), given to Kokkos explicitly unless the user chose
      // (apps/device_choice.hpp). No GPU: Kokkos' first CUDA call says so.
      int visible = 0;
      if (cudaGetDeviceCount(&visible) != cudaSuccess) {
        visible = 0;
        (void)cudaGetLastError();
      }
      joule::apps::DeviceChoiceInput in;
      in.local_rank = local.rank;
      in.local_size = local.size;
      in.visible = visible;
      if (char const* shown = std::getenv("CUDA_VISIBLE_DEVICES")) in.cuda_visible_devices = shown;
      in.user_setting = joule::apps::user_device_setting(static_cast<int>(args_.size()) - 1, args_.data());
      device = joule::apps::choose_device(in);
      if (device.device) ::setenv("KOKKOS_DEVICE_ID", std::to_string(*device.device).c_str(), 1);
#endif
      if (auto const share = joule::take_local_rank_share(local.rank, local.size); !share.text.empty() && local.rank == 0)
        fmt::print(stderr, "joule: {}: {}\n", share.shared ? "warning" : "note", share.text);
      // JOULE_HOST_CORES: before Kokkos starts its threads.
      if (auto const& cores = joule::reserve_host_cores_from_environment();
          !cores.optimizer.empty() && joule::core_environment::openmp_binds_threads())
        fmt::print(stderr,
                   "joule: warning: OMP_PROC_BIND/OMP_PLACES bind OpenMP's threads to places made before joule "
                   "started, over all {} CPUs, the {} that JOULE_HOST_CORES sets aside for the optimizer included: "
                   "Kokkos' threads may share them (leave binding unset, joule's default, or give OMP_PLACES only "
                   "CPUs {}-{})\n",
                   cores.kokkos.size() + cores.optimizer.size(), cores.optimizer.size(), cores.kokkos.front(),
                   cores.kokkos.back());
      // The OpenMP runtime counted the mask it was loaded with, the whole node's: the share's count.
      if (!joule::host_cores().rank_share.empty() && !std::getenv("OMP_NUM_THREADS"))
        ::setenv("KOKKOS_NUM_THREADS", std::to_string(joule::core_environment::usable_cpus()).c_str(), 0);
      // No more threads than CPUs where Kokkos would take OpenMP's count (apps/environment.hpp).
      bool const long_job = command == "train" || command == "tune" || command == "bench";
      std::function<joule::energy::StartMeasurement()> busy_elsewhere;
      if (long_job && joule::apps::kShareCpus.value()) busy_elsewhere = joule::apps::measure_busy_cpus_before_start;
      auto const choice = joule::apps::choose_kokkos_threads(joule::apps::usable_cpus(), static_cast<int>(args_.size()) - 1,
                                                             args_.data(), busy_elsewhere);
      joule::apps::keep_start_thread_record(choice.record);
      if (choice.threads) {
        ::setenv("KOKKOS_NUM_THREADS", std::to_string(*choice.threads).c_str(), 0);
        if (!choice.note.empty()) fmt::print(stderr, "joule: note: {}\n", choice.note);
      }
    } catch (joule::environment::Error const& e) {
      fmt::print(stderr, "joule: error: {}\n", e.what());
      return 1;
    } catch (std::exception const& e) {
      fmt::print(stderr, "joule: error: {}\n", e.what());
      return 2;
    }
    int count = static_cast<int>(args_.size()) - 1;
    guard_.emplace(count, args_.data());  // consumes the --kokkos-* arguments it knows
    if (help_asked_) return 0;            // Kokkos has printed its options
    if (count > 1) {
      std::vector<std::string> unknown(args_.begin() + 1, args_.begin() + count);
      fmt::print(stderr, "joule: error: Kokkos did not take {}: its options are listed by `joule --kokkos-help`\n",
                 fmt::join(unknown, " "));
      return 1;
    }
#if defined(KOKKOS_ENABLE_CUDA)
    std::string const bus = joule::energy::kokkos_device_pci_bus_id();
    joule::apps::record_device(fmt::format("GPU {}{}: {}", Kokkos::Cuda().cuda_device(),
                                           bus.empty() ? std::string() : " (PCI " + bus + ")", device.how));
#else
    joule::apps::record_device(fmt::format("no GPU ({} build)", Kokkos::DefaultExecutionSpace::name()));
#endif
    long const host_threads = Kokkos::DefaultHostExecutionSpace().concurrency();
    auto const cpus = joule::apps::usable_cpus();
    if (auto const warning = joule::apps::oversubscription_warning(host_threads, cpus); !warning.empty())
      std::fputs(("joule: warning: " + warning + "\n").c_str(), stderr);
    joule::apps::cap_library_threads(host_threads, cpus.count());
    return 0;
  }

  // For a command that runs without Kokkos: --kokkos-* arguments given to it would do nothing.
  void not_needed(std::string const& command) const {
    if (!given_.empty())  // as the user spelled them (args_ holds this Kokkos' spelling)
      fmt::print(stderr, "joule: note: {} not used: `joule {}` does not start Kokkos\n", fmt::join(given_, " "),
                 command);
  }

 private:
  std::vector<char*> args_;  // argv[0], the --kokkos-* arguments, nullptr
  std::vector<std::string> given_;  // the --kokkos-* arguments as given
  bool help_asked_ = false;
  std::optional<Kokkos::ScopeGuard> guard_;
};

// CLI11 says only "A subcommand is required" when the word after `joule` (or `joule data`, `joule
// energy`) is not one of its subcommands. Returns the message to print instead: which command,
// which word, and the subcommands there are; "" when the error is another one.
std::string subcommand_problem(CLI::App& app) {
  CLI::App* cur = &app;
  std::string path = "joule";
  for (auto parsed = cur->get_subcommands(); !parsed.empty(); parsed = cur->get_subcommands()) {
    cur = parsed.front();
    path += " " + cur->get_name();
  }
  if (cur->get_require_subcommand_min() == 0) return "";
  std::vector<std::string> names;
  for (auto const* sub : cur->get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
  std::string const list = fmt::format("{}", fmt::join(names, ", "));
  auto const rest = cur->remaining();
  if (rest.empty()) return fmt::format("{}: a subcommand is required; the subcommands are: {}", path, list);
  if (!rest.front().empty() && rest.front()[0] == '-')
    return fmt::format("{}: unknown option '{}' (a subcommand comes first; the subcommands are: {})", path,
                       rest.front(), list);
  return fmt::format("{}: unknown subcommand '{}'; the subcommands are: {}", path, rest.front(), list);
}

// Help that starts with the usage line, then the description (CLI11 puts the description first).
class UsageFirst : public CLI::Formatter {
 public:
  std::string make_description(CLI::App const*) const override { return ""; }
  std::string make_usage(CLI::App const* app, std::string name) const override {
    std::string const description = CLI::Formatter::make_description(app);
    return CLI::Formatter::make_usage(app, std::move(name)) + (description.empty() ? "" : "\n" + description);
  }
};

}  // namespace

int main(int argc, char** argv) {
  joule::apps::set_openmp_wait_defaults(argv);  // may execute joule again, once, with GOMP_SPINCOUNT set
  joule::apps::set_openmp_binding_defaults();  // bind unless the user chose otherwise
  joule::apps::ignore_file_size_signal();       // a write past ulimit -f is an error the writer reports
  try {
    // Every variable and numeric --kokkos-* flag, like configuration values, before Kokkos (or
    // OpenMP, at its first parallel region) can abort or crash on one (apps/environment.hpp).
    joule::apps::validate_environment_and_kokkos_flags(argc, argv);
  } catch (joule::environment::Error const& e) {
    fmt::print(stderr, "joule: error: {}\n", e.what());
    return 1;  // bad input, as a bad configuration value is
  } catch (std::exception const& e) {
    fmt::print(stderr, "joule: error: {}\n", e.what());
    return 2;
  }
  // --kokkos-* arguments are Kokkos' (they take their value after '='), the rest joule's: joule
  // parses first, and Kokkos starts only for a command that computes (KokkosStart above).
  std::vector<char*> args{argv[0]}, kokkos_args{argv[0]};
  for (int i = 1; i < argc; ++i)
    (std::string_view(argv[i]).substr(0, 9) == "--kokkos-" ? kokkos_args : args).push_back(argv[i]);
  args.push_back(nullptr);
  KokkosStart kokkos(std::move(kokkos_args));
  if (kokkos.help_asked()) {  // `joule --kokkos-help`: Kokkos prints its options as it starts
    if (int const rc = kokkos.start(); rc != 0) return rc;
    return 0;
  }
  int const args_left = static_cast<int>(args.size()) - 1;

  CLI::App app{"joule: energy-aware training of multimodal transformers on Kokkos", "joule"};
  app.formatter(std::make_shared<UsageFirst>());  // before the subcommands, which copy it
  app.require_subcommand(1);
  // The build's facts, the same table `joule info` starts with (build_facts.cpp).
  app.set_version_flag("--version", [] { return joule::apps::build_facts_text(); });

  bool info_no_device = false;
  auto const run_bench = joule::apps::add_bench_command(app);
  auto const run_info = joule::apps::add_info_command(app, info_no_device);
  auto const run_train = joule::apps::add_train_command(app);
  auto const run_data = joule::apps::add_data_command(app);
  auto const run_energy = joule::apps::add_energy_command(app);
  auto const run_tune = joule::apps::add_tune_command(app);
  auto const run_inspect = joule::apps::add_inspect_command(app);
  auto const run_caption = joule::apps::add_caption_command(app);

  std::string const kokkos_line = "Kokkos' own options (threads, devices, tools): joule --kokkos-help; --kokkos-* arguments pass to Kokkos.";
  app.footer(kokkos_line);
  for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    sub->footer(kokkos_line);
    for (auto* inner : sub->get_subcommands([](CLI::App*) { return true; })) inner->footer(kokkos_line);
  }
  try {
    app.parse(args_left, args.data());
  } catch (CLI::ParseError const& e) {
    if (dynamic_cast<CLI::RequiredError const*>(&e))
      if (auto const text = subcommand_problem(app); !text.empty()) {
        fmt::print(stderr, "{}\nRun with --help for more information.\n", text);
        return e.get_exit_code();
      }
    return app.exit(e);
  }
  if (std::string const command = command_path(app); starts_no_device(command, info_no_device)) {
    kokkos.not_needed(command);
  } else if (int const rc = kokkos.start(command); rc != 0) {
    return rc;
  }
  // What a command printed must reach standard output whole: a full disk or a closed pipe there is
  // an error (a short report written to /dev/full used to be lost with exit status 0).
  auto const output_written = [](int rc) {
    std::cout.flush();
    if (std::fflush(stdout) == 0 && !std::ferror(stdout) && std::cout.good()) return rc;
    int const error = errno;
    // std::fputs, not fmt::print, which throws where standard error fails too (a terminal that
    // hung up: a run stopped by SIGHUP then ended in std::terminate, not with 129).
    std::fputs(fmt::format("joule: error: cannot write to standard output ({}): what it printed is incomplete\n",
                           joule::apps::output_error_text(error)).c_str(), stderr);
    return rc == 0 ? 1 : rc;
  };
  try {
    return output_written([&]() -> int {
    for (auto const& run : {run_bench, run_info, run_train, run_data, run_energy, run_tune, run_inspect, run_caption})
      if (int const rc = run(); rc >= 0) return rc;
    return 0;
    }());
  } catch (std::exception const& e) {
    std::fputs(fmt::format("joule: error: {}\n", e.what()).c_str(), stderr);  // never throws (above)
    return 1;
  }
  return 0;
}
