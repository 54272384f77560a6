#pragma once
// The command's checks of its environment, made before Kokkos starts (docs/configuration.md,
// "Environment variables"): the thread counts Kokkos and OpenMP read (KOKKOS_NUM_THREADS,
// OMP_NUM_THREADS and the other numeric KOKKOS_* variables), the numeric --kokkos-* flags, and
// every variable core and energy read (their own tables, core/environment.hpp and
// energy/source.hpp). A bad value is an environment::Error naming it, its value and what is
// allowed, where Kokkos or OpenMP would abort, crash or quietly use something else.
#include <string>
#include <vector>

#include "common/environment.hpp"

namespace joule::apps {

// The most threads Kokkos may be given: Kokkos' OpenMP backend keeps its threads' data in a
// fixed array of this size (OpenMPExec::MAX_THREAD_COUNT in Kokkos 3.4) and writes past it with
// more (measured: OMP_NUM_THREADS=1024 ends `joule info` in SIGSEGV; 512 works).
inline constexpr long long kMaxKokkosThreads = 512;

// OMP_PROC_BIND=spread and OMP_PLACES=threads unless set (Kokkos' OpenMP backend warns without a
// binding policy); before Kokkos starts.
void set_openmp_binding_defaults();

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
