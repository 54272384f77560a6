#pragma once
// The environment variables joule::core reads (docs/configuration.md, "Environment variables"),
// each defined once here and read through these objects (common/environment.hpp).
#include <string>
#include <vector>

#include "common/environment.hpp"

namespace joule::core_environment {

// JOULE_HOST_CORES=k: the last k CPUs of the process's affinity mask go to the host optimizer
// (core/train/host_cores.hpp). Its range depends on the CPUs this process may use.
inline constexpr char const* kHostCoresName = "JOULE_HOST_CORES";
// Outputs in a folder others can write without the sticky bit: refused unless this is 1 (core/io/commit.hpp).
inline constexpr char const* kAcceptSharedFolderName = "JOULE_ACCEPT_SHARED_FOLDER";
// An output's name taken by a regular file of another user: refused unless this is 1; the new file
// is then this user's (core/io/commit.hpp).
inline constexpr char const* kReplaceOthersFilesName = "JOULE_REPLACE_OTHERS_FILES";
// k from JOULE_HOST_CORES for a process that may use `cpus` CPUs (nullopt: unset): an integer in
// [1, cpus - 1], since Kokkos keeps at least one; with one CPU the Error says that no value works.
std::optional<long> host_cores_wanted(long cpus);
// The CPUs this process may use: its affinity mask, or where the OpenMP runtime bound this thread
// to one place before main (OMP_PROC_BIND, OMP_PLACES), the union of its places, which it made from
// the mask the process started with. Sorted; empty where unreadable.
std::vector<int> process_cpus();
long usable_cpus();  // their count (at least 1)
// The CPUs the node gives this process's cgroup (cpuset.cpus.effective in cgroup v2,
// cpuset.effective_cpus in v1), else the online CPUs: what an unbound process's mask holds. Sorted;
// empty where unreadable.
std::vector<int> node_cpus();
// "0-3,8,10-11" read as CPU numbers (the kernel's list format); empty for text it is not.
std::vector<int> parse_cpu_list(std::string const& text);
// Whether the OpenMP runtime binds its threads to places (the user set OMP_PROC_BIND or OMP_PLACES).
bool openmp_binds_threads();

// Seconds a guarded read of a file may take before it is given up, before 1 s per 20 MB of file.
inline constexpr environment::Real kReadTimeout{
    "JOULE_READ_TIMEOUT",
    "seconds a guarded HDF5 read may take (plus 1 s per 20 MB of the file) before it is given up",
    0.0,
    1e6,
    /*min_excluded=*/true,
    60.0,
    "seconds"};
// off: HDF5 files are read in this process, without the forked reader that contains crashes and hangs.
inline constexpr environment::Switch kReadGuard{
    "JOULE_READ_GUARD", "read HDF5 files in a forked child that contains crashes and hangs (off: in this process)",
    true};

// Throws environment::Error for the first variable above that is set to a value not allowed.
void validate_environment();
std::vector<environment::Description> environment_variables();

}  // namespace joule::core_environment
