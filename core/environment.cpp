#include "core/environment.hpp"

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

namespace joule::core_environment {

bool openmp_binds_threads() {
#if defined(_OPENMP)
  return omp_get_proc_bind() != omp_proc_bind_false && omp_get_num_places() > 0;
#else
  return false;
#endif
}

std::vector<int> process_cpus() {
  std::vector<int> cpus;
#if defined(__linux__)
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return cpus;
#if defined(_OPENMP)
  // Bound by the OpenMP runtime before main (OMP_PROC_BIND, OMP_PLACES), this thread holds its
  // first place only; the places were made from the mask the process started with.
  if (openmp_binds_threads())
    for (int place = 0; place < omp_get_num_places(); ++place) {
      std::vector<int> ids(std::size_t(std::max(0, omp_get_place_num_procs(place))));
      omp_get_place_proc_ids(place, ids.data());
      for (int cpu : ids)
        if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &mask);
    }
#endif
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
#endif
  return cpus;
}

long usable_cpus() { return std::max<long>(1, long(process_cpus().size())); }

std::vector<int> parse_cpu_list(std::string const& text) {
  std::vector<int> cpus;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t const comma = std::min(text.find(',', pos), text.size());
    std::string const item = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    auto const number = [](char const* from, char** end) {  // digits only: no sign, no space
      return std::isdigit(static_cast<unsigned char>(*from)) ? std::strtol(from, end, 10) : (*end = nullptr, -1L);
    };
    char* end = nullptr;
    long const first = number(item.c_str(), &end);
    long last = first;
    if (end && *end == '-') last = number(end + 1, &end);
    if (!end || *end != '\0' || first < 0 || last < first || last >= 1 << 20) return {};
    for (long c = first; c <= last; ++c) cpus.push_back(int(c));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::vector<int> node_cpus() {
  auto const first_line = [](std::string const& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    return line;
  };
  // This process's cgroup paths: "0::/path" (v2), "N:cpuset:/path" (v1).
  std::ifstream groups("/proc/self/cgroup");
  std::string line, v2_path, v1_path;
  while (std::getline(groups, line)) {
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
    auto const colon = line.find(':');
    if (colon != std::string::npos && line.compare(colon, 8, ":cpuset:") == 0) v1_path = line.substr(colon + 8);
  }
  for (std::string const& path : {"/sys/fs/cgroup" + v2_path + "/cpuset.cpus.effective",
                                  "/sys/fs/cgroup/cpuset" + v1_path + "/cpuset.effective_cpus",
                                  "/sys/fs/cgroup/cpuset" + v1_path + "/cpuset.cpus", std::string("/sys/devices/system/cpu/online")})
    if (auto cpus = parse_cpu_list(first_line(path)); !cpus.empty()) return cpus;
  return {};
}

std::optional<long> host_cores_wanted(long cpus) {
  auto const text = environment::text_of(kHostCoresName);
  if (!text) return std::nullopt;
#if !defined(__linux__)
  environment::refuse(kHostCoresName, *text, "nothing on this system (CPU affinity is only supported on Linux)");
#endif
  std::string const cpus_text = "this process may use " + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs");
  if (cpus < 2)
    throw environment::Error(std::string(kHostCoresName) + " is '" + *text + "', but no value can work here: " +
                             cpus_text + "; " + kHostCoresName + " needs at least 2 (Kokkos keeps one)");
  auto const value = environment::parse_integer(*text);
  if (!value || *value < 1 || *value > cpus - 1)
    environment::refuse(kHostCoresName, *text, environment::integer_range_text(1, cpus - 1),
                        cpus_text + ", and Kokkos keeps at least one");
  return long(*value);
}

void validate_environment() {
  host_cores_wanted(usable_cpus());
  for (char const* name : {kAcceptSharedFolderName, kReplaceOthersFilesName})
    if (auto const text = environment::text_of(name); text && *text != "0" && *text != "1")
      environment::refuse(name, *text, "0 or 1");
  kReadTimeout.read();
  kReadGuard.read();
}

std::vector<environment::Description> environment_variables() {
  return {{kHostCoresName,
           "the last k CPUs of the process's affinity mask go to the host optimizer's threads, the others to Kokkos",
           "an integer in [1, CPUs this process may use - 1]",
           "CPU builds: none set aside (the host jobs run inline); GPU builds: all but 4 of the process's CPUs (half of "
           "them below 8), pinned"},
          kReadTimeout.describe(),
          kReadGuard.describe(),
          {kAcceptSharedFolderName,
           "1: write outputs in a folder that another user can change (writable by others without the sticky bit, "
           "or another user's, on the way to the output or the output's own), with a warning (docs/outputs.md)",
           "0 or 1",
           "0: such a folder is refused"},
          {kReplaceOthersFilesName,
           "1: replace an output that is a regular file of another user (the new file is this user's; "
           "docs/outputs.md)",
           "0 or 1",
           "0: such a file is refused"}};
}

}  // namespace joule::core_environment
