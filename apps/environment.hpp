#pragma once
// The command's checks of its environment, made before Kokkos starts (docs/configuration.md,
// "Environment variables"): the thread counts Kokkos and OpenMP read (KOKKOS_NUM_THREADS,
// OMP_NUM_THREADS and the other numeric KOKKOS_* variables), the numeric --kokkos-* flags, and
// every variable core and energy read (their own tables, core/environment.hpp and
// energy/source.hpp). A bad value is an environment::Error naming it, its value and what is
// allowed, where Kokkos or OpenMP would abort, crash or quietly use something else.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/environment.hpp"
#include "energy/busy_cpus.hpp"

namespace joule::apps {

// The most threads Kokkos may be given: Kokkos' OpenMP backend keeps its threads' data in a
// fixed array of this size (OpenMPExec::MAX_THREAD_COUNT in Kokkos 3.4) and writes past it with
// more (measured: OMP_NUM_THREADS=1024 ends `joule info` in SIGSEGV; 512 works).
inline constexpr long long kMaxKokkosThreads = 512;

// OMP_PROC_BIND=false unless it or OMP_PLACES is set (libgomp's own default, said out loud so that
// Kokkos' OpenMP backend does not warn); before Kokkos starts.
void set_openmp_binding_defaults();

// How OpenMP's idle threads wait between parallel regions. libgomp spins 300,000 times before it
// sleeps (GOMP_SPINCOUNT's default): on a shared machine the spinning threads take the cores that
// other work (and joule's own threads, sharing a core with it) need. joule's default is 1,000
// spins (measured: a quiet step as fast, beside a busy process 2.2x instead of 2.6-3.1x alone's
// time, BENCHMARKS.md). libgomp reads the variable as it loads, before main, so joule sets it and
// executes itself again, once (JOULE_OPENMP_WAIT marks the second start); nothing is changed
// where the user set GOMP_SPINCOUNT or OMP_WAIT_POLICY. First thing in main: `argv` as given.
inline constexpr char const* kGompSpinCountDefault = "1000";
void set_openmp_wait_defaults(char** argv);
// "GOMP_SPINCOUNT=1000 (joule's default)", "OMP_WAIT_POLICY=passive (yours)", ...: for joule info.
std::string openmp_wait_text();

// CPUs this process may use: its affinity mask, and the cgroup's CPU quota (cpu.max in cgroup v2,
// cpu.cfs_quota_us / cpu.cfs_period_us in v1), whichever is less (a quota of 1.5 CPUs counts as 1).
struct UsableCpus {
  long affinity = 1;
  double quota = 0;  // 0: no quota
  long count() const;
};
UsableCpus usable_cpus();
// The thread count joule gives Kokkos (KOKKOS_NUM_THREADS) where Kokkos would take OpenMP's:
// - Kokkos' own count (KOKKOS_NUM_THREADS, a --kokkos-threads flag in `args`) is taken as asked;
// - OMP_NUM_THREADS above the CPUs this process may use gives way to them, with `note` saying so:
//   OpenMP's count is often set for other programs, and 64 threads on 2 CPUs made a small step
//   7.6x as long as 2 threads (every parallel region wakes and puts to sleep 64 threads);
// - unset, a cgroup quota below the affinity mask gives the CPUs the quota pays for (OpenMP
//   counts the mask only);
// - unset, and `busy_elsewhere` given (a long job, JOULE_SHARE_CPUS on): the CPUs that other work
//   keeps busy are left to it, one thread per CPU left (at least one), with a note. Every parallel
//   region waits for its slowest thread, and a thread that shares its CPU with a busy process runs
//   half the time: beside one busy loop on 2 CPUs a step took 1.98x the quiet step's time with 2
//   threads and 1.73x with 1 (medians of 5, BENCHMARKS.md, issue 41). Measured as the job starts,
//   over a window long enough to tell a sustained load from a transient (energy/busy_cpus.hpp):
//   a compile or a copy that ends within it leaves the run all its threads.
struct ThreadChoice {
  std::optional<long> threads;  // nullopt: Kokkos' own choice
  std::string note;             // for the user when their setting was not taken, or CPUs were left
  std::string record;           // for the run log (/@host_threads) where the machine was measured; "" otherwise
};
// The record of this process's thread choice, kept by the command for the run log it writes.
void keep_start_thread_record(std::string record);
std::string const& start_thread_record();
// busy_elsewhere(): the CPUs (of those this process may use) that other work keeps busy, measured
// (measure_busy_cpus_before_start()).
ThreadChoice choose_kokkos_threads(UsableCpus const& cpus, int argc, char** args,
                                   std::function<energy::StartMeasurement()> const& busy_elsewhere = {});
// JOULE_SHARE_CPUS: whether a long job (train, tune, bench) measures the CPUs other work keeps busy.
inline constexpr environment::Switch kShareCpus{
    "JOULE_SHARE_CPUS",
    "whether train, tune and bench leave the CPUs that other work keeps busy to it (measured as they start, "
    "when no thread count is set: a load that lasts 1.5 s, not a shorter one): one Kokkos thread per CPU left",
    true};
// The CPUs of this process's affinity mask that other work kept busy over `seconds` (this thread
// sleeps meanwhile, and no other has started yet); NaN where /proc/stat cannot be read.
double cpus_busy_elsewhere(double seconds);
// Samples of cpus_busy_elsewhere() by energy::measure_before_start's rule: one quarter second on a
// quiet machine, 1.5 s where other work keeps a CPU busy throughout.
energy::StartMeasurement measure_busy_cpus_before_start();
// A warning when `threads` (Kokkos' host threads) are more than the CPUs this process may use,
// naming both numbers and what limits them; "" otherwise.
std::string oversubscription_warning(long threads, UsableCpus const& cpus);

// OpenBLAS (OpenMP build) splits every GEMM over omp_get_max_threads() threads, which Kokkos sets
// to its own thread count: with more threads than CPUs a small GEMM ran 8.6x slower (measured).
// After Kokkos starts, the calling thread's OpenMP count becomes min(Kokkos' threads, usable CPUs);
// Kokkos' own kernels name their thread count and keep all of theirs. Returns the count set, 0
// without OpenMP.
long cap_library_threads(long kokkos_threads, long usable);
// The OpenMP thread count the host BLAS uses now (0 without OpenMP): for joule info.
long library_threads();

// Throws environment::Error for the first bad variable or flag; `args` is argv (args[argc] ==
// nullptr). Kokkos 3.4's arguments take their value after '=' only ("--kokkos-threads=4"). A
// KOKKOS_* variable set to "" is unset, so that Kokkos too takes it as not set.
void validate_environment_and_kokkos_flags(int argc, char** args);

// The thread-count flag in the spelling this Kokkos reads (compat::kKokkosThreadsFlag):
// --kokkos-num-threads becomes --kokkos-threads before Kokkos 3.7 and --kokkos-threads becomes
// --kokkos-num-threads from 3.7 on, so both spellings work with every Kokkos.
void spell_kokkos_flags_for_this_kokkos(int argc, char** args);

// Every environment variable joule reads, in the order of docs/configuration.md's table.
std::vector<environment::Description> environment_variables();

}  // namespace joule::apps
