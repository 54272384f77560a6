#include "environment.hpp"

#include "core/compat.hpp"
#include "core/environment.hpp"
#include "energy/machine_load.hpp"
#include "energy/source.hpp"

#include <Kokkos_Core.hpp>

#include <sched.h>
#include <unistd.h>

#if defined(KOKKOS_ENABLE_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <deque>
#include <string_view>
#include <utility>
#include <vector>

namespace joule::apps {

namespace {
using environment::Integer;

#if defined(KOKKOS_ENABLE_OPENMP) && KOKKOS_VERSION >= 30400 && KOKKOS_VERSION < 30500
static_assert(Kokkos::Impl::OpenMPExec::MAX_THREAD_COUNT == kMaxKokkosThreads,
              "kMaxKokkosThreads is the size of Kokkos' OpenMP thread pool");
#endif

constexpr char const* kThreadsWhy = "Kokkos' OpenMP backend holds at most 512 threads";
// No node has this many GPUs; what is refused is text, signs and typos (Kokkos checks the real count).
constexpr long long kMaxDevices = 1024;

constexpr Integer kKokkosNumThreads{"KOKKOS_NUM_THREADS",
                                    "the threads Kokkos starts (set from JOULE_HOST_CORES when that is set)",
                                    1,
                                    kMaxKokkosThreads,
                                    0,
                                    "OpenMP's (OMP_NUM_THREADS, else one per CPU)",
                                    kThreadsWhy};
constexpr char const* kOmpNumThreadsName = "OMP_NUM_THREADS";
constexpr Integer kOmpThreadsPerLevel{kOmpNumThreadsName, "", 1, kMaxKokkosThreads, 0, nullptr, kThreadsWhy};
constexpr Integer kKokkosVariables[] = {
    kKokkosNumThreads,
    {"KOKKOS_NUMA", "NUMA regions Kokkos uses (Kokkos 3.x)", 1, kMaxKokkosThreads, 1, "Kokkos' default"},
    {"KOKKOS_DEVICE_ID", "the GPU Kokkos runs on (GPU builds)", 0, kMaxDevices - 1, 0,
     "joule sets it: the local rank modulo the GPUs the process sees (joule info and the run log's /@gpu name it)"},
    {"KOKKOS_NUM_DEVICES", "GPUs on the node Kokkos deals to local ranks (GPU builds)", 1, kMaxDevices, 1, "all"},
    {"KOKKOS_SKIP_DEVICE", "a GPU Kokkos does not deal out (GPU builds)", 0, kMaxDevices - 1, 0, "none"},
};

// Kokkos' OpenMP backend warns without a binding policy. joule's is "false", which is also what
// libgomp does when neither OMP_PROC_BIND nor OMP_PLACES is set: beside a busy process on 2 CPUs a
// step took 107-111 ms unbound against 129-148 ms bound (spread, threads), quiet the same (~48 ms;
// issue 41): a bound thread cannot leave the CPU it shares.
constexpr char const* kOmpProcBind = "OMP_PROC_BIND";
constexpr char const* kOmpProcBindDefault = "false";

// The numeric --kokkos-* flags: the same ranges as their variables. Kokkos 3.x also reads the
// older spellings without "kokkos-" (measured with 3.4.1: `--threads=abc` aborted in stoi too).
struct KokkosFlag {
  char const* flag;
  Integer const& range;
};
constexpr KokkosFlag kKokkosFlags[] = {
    {"--kokkos-threads", kKokkosVariables[0]},     {"--kokkos-num-threads", kKokkosVariables[0]},
    {"--threads", kKokkosVariables[0]},            {"--kokkos-numa", kKokkosVariables[1]},
    {"--numa", kKokkosVariables[1]},               {"--kokkos-device-id", kKokkosVariables[2]},
    {"--kokkos-device", kKokkosVariables[2]},      {"--device-id", kKokkosVariables[2]},
    {"--device", kKokkosVariables[2]},             {"--kokkos-num-devices", kKokkosVariables[3]},
    {"--kokkos-skip-device", kKokkosVariables[4]},
};
// --kokkos-ndevices=N[,S] (Kokkos 3.x, also spelt --ndevices): N GPUs, skipping GPU S.
constexpr char const* kNdevicesFlags[] = {"--kokkos-ndevices", "--ndevices"};

std::string omp_allowed() {
  return kOmpThreadsPerLevel.allowed() + " or a comma-separated list of them, one per nesting level";
}

// OpenMP reads OMP_NUM_THREADS when it is loaded (before main) but starts its threads at the first
// parallel region, Kokkos::initialize; libgomp ignores text and 0 with a warning.
void check_omp_num_threads() {
  auto const text = environment::text_of(kOmpNumThreadsName);
  if (!text) return;
  std::string_view rest = *text;
  while (true) {
    auto const comma = rest.find(',');
    auto const value = environment::parse_integer(rest.substr(0, comma));
    if (!value || *value < kOmpThreadsPerLevel.min || *value > kOmpThreadsPerLevel.max)
      environment::refuse(kOmpNumThreadsName, *text, omp_allowed(), kThreadsWhy);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
}

void check_kokkos_flag(std::string_view arg) {
  for (auto const& f : kKokkosFlags) {
    std::string_view const flag = f.flag;
    if (arg == flag)
      throw environment::Error(std::string(flag) + " needs its value after '=' (" + std::string(flag) + "=N, N " +
                               f.range.allowed() + ")");
    if (arg.size() > flag.size() && arg.substr(0, flag.size()) == flag && arg[flag.size()] == '=') {
      std::string const label(flag);
      long long const value = f.range.check(arg.substr(flag.size() + 1), label.c_str());
      // Kokkos throws (an uncaught "expecting a match") when a flag and its variable disagree.
      if (auto const variable = f.range.read(); variable && *variable != value)
        throw environment::Error(std::string(f.range.name) + "=" + std::to_string(*variable) + " and " + label + "=" +
                                 std::to_string(value) + " disagree: Kokkos takes both only when they match; set one "
                                 "of them (or the same value in both)");
    }
  }
  for (std::string_view const ndevices : kNdevicesFlags) {
    if (arg.substr(0, ndevices.size()) != ndevices || (arg.size() > ndevices.size() && arg[ndevices.size()] != '='))
      continue;
    std::string_view const value = arg.size() > ndevices.size() ? arg.substr(ndevices.size() + 1) : "";
    auto const comma = value.find(',');
    auto const count = environment::parse_integer(value.substr(0, comma));
    auto const skip = comma == std::string_view::npos ? std::optional<long long>(0)
                                                      : environment::parse_integer(value.substr(comma + 1));
    if (!count || *count < 1 || *count > kMaxDevices || !skip || *skip < 0 || *skip >= kMaxDevices)
      environment::refuse(ndevices, value,
                          "N or N,S: N GPUs " + environment::integer_range_text(1, kMaxDevices) +
                              ", S the one skipped " + environment::integer_range_text(0, kMaxDevices - 1));
  }
}
}  // namespace

void set_openmp_binding_defaults() {
  // After libgomp has read its variables: only Kokkos reads it now, and libgomp has done the same.
  if (!std::getenv(kOmpProcBind) && !std::getenv("OMP_PLACES")) ::setenv(kOmpProcBind, kOmpProcBindDefault, 0);
}

void set_openmp_wait_defaults(char** argv) {
  auto const set = [](char const* name) {
    char const* v = std::getenv(name);
    return v && *v;
  };
  if (set("GOMP_SPINCOUNT") || set("OMP_WAIT_POLICY") || set("JOULE_OPENMP_WAIT")) return;
  ::setenv("GOMP_SPINCOUNT", kGompSpinCountDefault, 1);
  ::setenv("JOULE_OPENMP_WAIT", "joule", 1);
#if defined(KOKKOS_ENABLE_OPENMP) && defined(__linux__)
  // With OMP_PROC_BIND or OMP_PLACES set, libgomp has already bound this (initial) thread to the
  // first place, and an exec keeps that mask: the new process would see one CPU and start one
  // thread. Its places were made from the mask the process was started with; their union is it.
  if (core_environment::openmp_binds_threads()) {
    cpu_set_t started_with;
    CPU_ZERO(&started_with);
    for (int cpu : core_environment::process_cpus()) CPU_SET(cpu, &started_with);
    ::sched_setaffinity(0, sizeof started_with, &started_with);
  }
#endif
  ::execv("/proc/self/exe", argv);
  // No /proc (or exec refused): run on with libgomp's own default, and say so in joule info.
  ::unsetenv("GOMP_SPINCOUNT");
  ::setenv("JOULE_OPENMP_WAIT", "unset", 1);
}

std::string openmp_wait_text() {
  char const* mark = std::getenv("JOULE_OPENMP_WAIT");
  char const* spin = std::getenv("GOMP_SPINCOUNT");
  char const* policy = std::getenv("OMP_WAIT_POLICY");
  if (mark && std::string_view(mark) == "joule" && spin)
    return std::string("GOMP_SPINCOUNT=") + spin + " (joule's default: idle threads sleep soon on a shared machine)";
  std::string text;
  if (policy) text += std::string("OMP_WAIT_POLICY=") + policy + " (yours)";
  if (spin) text += std::string(text.empty() ? "" : ", ") + "GOMP_SPINCOUNT=" + spin + " (yours)";
  return text.empty() ? "the OpenMP runtime's default (joule could not execute itself again to set its own)" : text;
}

long cap_library_threads(long kokkos_threads, long usable) {
#if defined(KOKKOS_ENABLE_OPENMP)
  long const threads = std::max(1L, std::min(kokkos_threads, usable));
  omp_set_num_threads(int(threads));
  return threads;
#else
  (void)kokkos_threads, (void)usable;
  return 0;
#endif
}

long library_threads() {
#if defined(KOKKOS_ENABLE_OPENMP)
  return omp_get_max_threads();
#else
  return 0;
#endif
}

namespace {
// The cgroup's CPU quota in CPUs, 0 for none: v2 cpu.max "QUOTA PERIOD" ("max" for none), else v1.
double cgroup_cpu_quota() {
  auto const read = [](char const* path) {
    std::ifstream in(path);
    std::string text;
    std::getline(in, text);
    return text;
  };
  std::string const v2 = read("/sys/fs/cgroup/cpu.max");
  if (!v2.empty()) {
    std::istringstream in(v2);
    std::string quota;
    double period = 0;
    in >> quota >> period;
    if (quota == "max" || period <= 0) return 0;
    return std::strtod(quota.c_str(), nullptr) / period;
  }
  std::string const quota = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), period = read("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  double const q = std::strtod(quota.c_str(), nullptr), p = std::strtod(period.c_str(), nullptr);
  return q > 0 && p > 0 ? q / p : 0;
}
}  // namespace

long UsableCpus::count() const {
  long const by_quota = quota > 0 ? std::max(1L, long(quota)) : affinity;
  return std::min(affinity, by_quota);
}

UsableCpus usable_cpus() {
  UsableCpus cpus;
  cpus.affinity = core_environment::usable_cpus();
  cpus.quota = cgroup_cpu_quota();
  return cpus;
}

double cpus_busy_elsewhere(double seconds) {
  std::vector<int> const cpus = core_environment::process_cpus();
  auto const before = energy::read_load(cpus);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return energy::load_between(before, energy::read_load(cpus)).other_cpus;
}

energy::StartMeasurement measure_busy_cpus_before_start() {
  return energy::measure_before_start([](double seconds) { return cpus_busy_elsewhere(seconds); });
}

ThreadChoice choose_kokkos_threads(UsableCpus const& cpus, int argc, char** args,
                                   std::function<energy::StartMeasurement()> const& busy_elsewhere) {
  if (std::getenv(kKokkosNumThreads.name)) return {};
  for (int i = 1; i < argc; ++i)
    for (auto const& f : kKokkosFlags)
      if (&f.range == &kKokkosVariables[0] && std::string_view(args[i]).substr(0, std::strlen(f.flag)) == f.flag)
        return {};
  long const usable = cpus.count();
  if (auto const omp = environment::text_of(kOmpNumThreadsName)) {
    // The first nesting level's count, checked already (check_omp_num_threads).
    auto const asked = environment::parse_integer(std::string_view(*omp).substr(0, omp->find(',')));
    if (!asked || *asked <= usable) return {};
    return {usable, "OMP_NUM_THREADS=" + *omp + " asks for more threads than the " + std::to_string(usable) +
                        (usable == 1 ? " CPU" : " CPUs") + " this process may use: Kokkos gets " +
                        std::to_string(usable) + " (more would only wait for each other; KOKKOS_NUM_THREADS=" +
                        std::to_string(*asked) + " keeps " + std::to_string(*asked) + ")",
            ""};
  }
  std::string record;
  if (busy_elsewhere) {
    auto const measured = busy_elsewhere();
    char busy_text[64], busy_exact[64], seconds_text[32];
    std::snprintf(busy_text, sizeof busy_text, "%.1f", measured.busy);
    std::snprintf(busy_exact, sizeof busy_exact, "%.2f", measured.busy);
    std::snprintf(seconds_text, sizeof seconds_text, "%.2f", measured.seconds);
    if (measured.level >= 1 && usable > 1) {
      long const threads = std::max(1L, usable - measured.level);
      record = "Kokkos gets " + std::to_string(threads) + " of the " + std::to_string(usable) +
               " CPUs this process may use: other work kept " + busy_exact +
               " of them busy in every quarter second of " + seconds_text + " s as the run started; fixed for the run";
      return {threads, std::string("other work keeps ") + busy_text + " of the " + std::to_string(usable) +
                           " CPUs this process may use busy (at least that in every quarter second of " +
                           seconds_text + " s): Kokkos gets " + std::to_string(threads) +
                           (threads == 1 ? " thread" : " threads") +
                           ", one per CPU left (a thread that shares a CPU holds up every parallel region). "
                           "The count is fixed for this run: joule does not change Kokkos' threads once they "
                           "have started (JOULE_SHARE_CPUS=off, OMP_NUM_THREADS or KOKKOS_NUM_THREADS sets it)",
              record};
    }
    std::string const all = usable == 1 ? "the 1 CPU" : "all " + std::to_string(usable) + " CPUs";
    record = std::isfinite(measured.busy)
                 ? "Kokkos gets " + all + " this process may use: no sustained load from other work (" + busy_exact +
                       " CPUs busy in the last quarter second of " + seconds_text +
                       " s measured as the run started); fixed for the run"
                 : "Kokkos gets " + all + " this process may use: other work could not be measured (/proc/stat unreadable)";
  }
  if (usable >= cpus.affinity) return {std::nullopt, "", record};
  return {usable, "", record};
}

namespace {
std::string& kept_start_thread_record() {
  static std::string record;
  return record;
}
}  // namespace

void keep_start_thread_record(std::string record) { kept_start_thread_record() = std::move(record); }
std::string const& start_thread_record() { return kept_start_thread_record(); }

std::string oversubscription_warning(long threads, UsableCpus const& cpus) {
  long const usable = cpus.count();
  if (threads <= usable) return "";
  std::string limits = "its affinity mask allows " + std::to_string(cpus.affinity);
  if (cpus.quota > 0) {
    char quota[32];
    std::snprintf(quota, sizeof quota, "%.2f", cpus.quota);
    limits += ", its cgroup's CPU quota " + std::string(quota);
  }
  return std::to_string(threads) + " host threads on " + std::to_string(usable) + (usable == 1 ? " CPU" : " CPUs") +
         " this process may use (" + limits + "): threads that share a CPU wait for each other at every barrier, "
         "so a step can take many times longer; give at most " + std::to_string(usable) +
         " (OMP_NUM_THREADS, KOKKOS_NUM_THREADS or --kokkos-threads)";
}

void validate_environment_and_kokkos_flags(int argc, char** args) {
  for (auto const& v : kKokkosVariables) {
    v.read();
    // Empty counts as unset, for Kokkos too (Kokkos 3.4 aborts on KOKKOS_NUM_THREADS=).
    if (char const* text = std::getenv(v.name); text && !*text) ::unsetenv(v.name);
  }
  check_omp_num_threads();
  kShareCpus.read();
  for (int i = 1; i < argc; ++i) check_kokkos_flag(args[i]);
  core_environment::validate_environment();
  energy::validate_environment();
}

void spell_kokkos_flags_for_this_kokkos(int argc, char** args) {
  static std::deque<std::string> respelled;  // args point into it until the process ends
  std::string_view const other = compat::kKokkosThreadsFlagOther;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(args[i]).substr(0, other.size()) == other) {
      respelled.push_back(compat::kKokkosThreadsFlag + std::string(args[i] + other.size()));
      args[i] = respelled.back().data();
    }
}

std::vector<environment::Description> environment_variables() {
  std::vector<environment::Description> rows;
  for (auto const& v : kKokkosVariables) rows.push_back(v.describe());
  rows.push_back({kOmpNumThreadsName,
                  "OpenMP's threads, Kokkos' thread count when KOKKOS_NUM_THREADS is not set, at most one per CPU "
                  "this process may use (more gives way to them, with a note; KOKKOS_NUM_THREADS keeps more)",
                  omp_allowed() + " (" + kThreadsWhy + ")",
                  "one per CPU this process may use (its affinity mask, or fewer under a cgroup CPU quota)"});
  rows.push_back({kOmpProcBind,
                  "OpenMP's thread binding: joule leaves threads unbound unless it or OMP_PLACES is set (a bound "
                  "thread cannot leave a CPU it shares with other work: a step beside a busy process took 1.2-1.35x "
                  "as long bound, BENCHMARKS.md)",
                  "OpenMP's values", kOmpProcBindDefault});
  rows.push_back(kShareCpus.describe());
  rows.push_back({"GOMP_SPINCOUNT",
                  "how long an idle OpenMP thread spins before it sleeps (libgomp's; joule sets it before libgomp "
                  "loads, unless it or OMP_WAIT_POLICY is set)",
                  "libgomp's values (a count, or infinite)",
                  std::string(kGompSpinCountDefault) + " (libgomp's own: 300000)"});
  for (auto& row : core_environment::environment_variables()) rows.push_back(std::move(row));
  rows.push_back({"TMPDIR",
                  "where joule bench's offload and energy suites make their private scratch folder (mode 0700, a "
                  "random name; removed with what is in it at the end or on any error; io::ScratchFolder)",
                  "a folder (one others can write without the sticky bit is refused, as for an output)", "/tmp"});
  for (auto& row : energy::environment_variables()) rows.push_back(std::move(row));
  return rows;
}

}  // namespace joule::apps
