// `joule info`: the build's facts (the table `joule --version` prints too: build_facts.cpp), then
// what this run would use; with --no-device without starting Kokkos.
#include "commands.hpp"

#include "build_facts.hpp"

#include "core/compat.hpp"
#include "core/environment.hpp"
#include "core/model/model.hpp"
#include "core/train/host_cores.hpp"
#include "device_choice.hpp"
#include "environment.hpp"

#include <fmt/format.h>

#include <memory>
#include <string>

namespace joule::apps {
std::function<int()> add_info_command(CLI::App& app, bool& no_device) {
  auto* cmd = app.add_subcommand("info", "print versions and the execution space");
  cmd->add_flag("--no-device", no_device,
                "versions and build settings only: do not start Kokkos or its device (a login node)");
  return [cmd]() -> int {
    if (!*cmd) return -1;
    bool const started = Kokkos::is_initialized();  // false for --no-device
    fmt::print("{}\n", build_facts_text());
    fmt::print("Kokkos {}.{}.{}: default execution space {} ({})\n", KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100,
               KOKKOS_VERSION % 100, Kokkos::DefaultExecutionSpace::name(),
               started ? std::to_string(Kokkos::DefaultExecutionSpace().concurrency()) + " threads/concurrency"
                       : std::string("not started: --no-device"));
    fmt::print("GEMMs (train.precision): fp32: {}; bf16: {}\n", gemm_path(Precision::fp32), gemm_path(Precision::bf16));
    fmt::print("attention: fp32: {}; bf16: {}\n", attention_path(Precision::fp32), attention_path(Precision::bf16));
    fmt::print("OpenMP waiting: {}\n", openmp_wait_text());
    if (long const blas = started ? library_threads() : 0; blas > 0)
      fmt::print("host BLAS threads: {} (Kokkos' threads, at most one per CPU this process may use)\n", blas);
    if (started)  // where the threads run: this process's CPUs, and what joule placed where
      fmt::print("CPUs of Kokkos' host threads: {}{}\n", cpu_list_text(core_environment::process_cpus()),
                 host_cores_text().empty() ? "" : " (" + host_cores_text() + ")");
    if (started) fmt::print("GPU of this process: {}\n", device_text());  // which GPU (by local rank), or none
    return 0;
  };
}

}  // namespace joule::apps
