#include "core/train/host_cores.hpp"

#include "core/environment.hpp"
#include "core/model/model.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <sched.h>
#endif

namespace joule {

namespace {
HostCores g_cores;
}

HostCores const& host_cores() { return g_cores; }

long default_host_cores(long cpus, bool device_is_host) {
  if (device_is_host) return 0;  // CPU builds: the host jobs run inline unless cores are asked for
  return cpus >= 8 ? cpus - 4 : cpus / 2;
}

HostCores const& reserve_host_cores_from_environment() {
  bool const asked = environment::text_of(core_environment::kHostCoresName).has_value();
  if (!asked && kDeviceIsHost) return g_cores;
#if defined(__linux__)
  std::vector<int> const cpus = core_environment::process_cpus();
  if (cpus.empty()) throw std::runtime_error("JOULE_HOST_CORES: cannot read this process's CPU affinity");
  // Unset on a GPU build: the default share of this process's own CPUs (its affinity mask, which
  // mpirun's binding sets; not the node's core count), pinned like an asked-for one.
  auto const wanted = asked ? core_environment::host_cores_wanted(long(cpus.size()))  // the one parse of it
                            : std::optional<long>(default_host_cores(long(cpus.size()), kDeviceIsHost));
  if (!wanted || *wanted <= 0) return g_cores;
  long const k = *wanted;
  HostCores cores;
  cores.kokkos.assign(cpus.begin(), cpus.end() - k);
  cores.optimizer.assign(cpus.end() - k, cpus.end());
  cpu_set_t kokkos_mask;
  CPU_ZERO(&kokkos_mask);
  for (int c : cores.kokkos) CPU_SET(c, &kokkos_mask);
  if (sched_setaffinity(0, sizeof(kokkos_mask), &kokkos_mask) != 0)
    throw std::runtime_error("JOULE_HOST_CORES: cannot restrict this thread to the CPUs left to Kokkos");
  // Kokkos reads KOKKOS_NUM_THREADS when it initialises and sets OpenMP's thread count from it
  // (OMP_NUM_THREADS itself is read by the OpenMP runtime when it is loaded, before main).
  setenv("KOKKOS_NUM_THREADS", std::to_string(cores.kokkos.size()).c_str(), /*overwrite=*/0);
  g_cores = cores;
  return g_cores;
#else
  if (asked) core_environment::host_cores_wanted(1);  // refuses any value: no CPU affinity here
  return g_cores;
#endif
}

}  // namespace joule

namespace joule {

CoreShares share_optimizer_cpus(std::vector<std::string> const& nodes, std::vector<std::vector<int>> const& cpus) {
  std::size_t const n = cpus.size();
  CoreShares out;
  out.cpus = cpus;
  // Union-find over ranks on one node whose sets intersect.
  std::vector<std::size_t> parent(n);
  for (std::size_t i = 0; i < n; ++i) parent[i] = i;
  auto find = [&](std::size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = a + 1; b < n; ++b) {
      if (nodes[a] != nodes[b]) continue;
      bool overlap = false;
      for (int c : cpus[a])
        if (std::find(cpus[b].begin(), cpus[b].end(), c) != cpus[b].end()) overlap = true;
      if (overlap) parent[find(b)] = find(a);
    }
  std::vector<std::vector<std::size_t>> members(n);
  for (std::size_t i = 0; i < n; ++i) members[find(i)].push_back(i);
  for (auto const& group : members) {
    if (group.size() < 2) continue;
    std::vector<int> pool;
    for (auto r : group) pool.insert(pool.end(), cpus[r].begin(), cpus[r].end());
    std::sort(pool.begin(), pool.end());
    pool.erase(std::unique(pool.begin(), pool.end()), pool.end());
    std::size_t const k = group.size();
    out.groups.emplace_back(group.begin(), group.end());
    if (pool.size() < k) out.shared = true;
    for (std::size_t j = 0; j < k; ++j) {
      if (pool.size() < k) {
        out.cpus[group[j]] = {pool[j % pool.size()]};
        continue;
      }
      std::size_t const begin = j * pool.size() / k, end = (j + 1) * pool.size() / k;
      out.cpus[group[j]].assign(pool.begin() + long(begin), pool.begin() + long(end));
    }
  }
  return out;
}

NodeShares node_shares(std::vector<int> const& node, int local_size) {
  NodeShares out;
  std::size_t const k = std::size_t(std::max(1, local_size));
  out.shared = node.size() < k;
  for (std::size_t j = 0; j < k; ++j) {
    if (node.empty()) {
      out.cpus.emplace_back();
    } else if (out.shared) {
      out.cpus.push_back({node[j % node.size()]});
    } else {
      std::size_t const begin = j * node.size() / k, end = (j + 1) * node.size() / k;
      out.cpus.emplace_back(node.begin() + long(begin), node.begin() + long(end));
    }
  }
  return out;
}

bool started_unbound(std::vector<int> const& process, std::vector<int> const& node, int local_size) {
  return local_size > 1 && !node.empty() && process == node;
}

ShareNote take_local_rank_share(int local_rank, int local_size) {
#if defined(__linux__)
  if (core_environment::openmp_binds_threads()) return {};  // OMP_PLACES/OMP_PROC_BIND: the user placed the threads
  auto const node = core_environment::node_cpus();
  if (!started_unbound(core_environment::process_cpus(), node, local_size) || local_rank < 0 || local_rank >= local_size)
    return {};
  auto const shares = node_shares(node, local_size);
  auto const& mine = shares.cpus[std::size_t(local_rank)];
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int c : mine) CPU_SET(c, &mask);
  if (sched_setaffinity(0, sizeof(mask), &mask) != 0) return {};  // left as it was: the overlap check after MPI_Init warns
  g_cores.rank_share = mine;
  g_cores.local_rank = local_rank;
  g_cores.local_size = local_size;
  std::string each;
  std::size_t const listed = std::min<std::size_t>(shares.cpus.size(), 8);
  for (std::size_t r = 0; r < listed; ++r)
    each += (r ? "; " : "") + std::string("local rank ") + std::to_string(r) + ": " + cpu_list_text(shares.cpus[r]);
  if (listed < shares.cpus.size()) each += "; ...";
  return {std::to_string(local_size) + " processes on this node were started unbound (each could use CPU" +
         (node.size() == 1 ? " " : "s ") + cpu_list_text(node) + "), so each runs its threads on " +
         (shares.shared ? "one CPU, shared round robin, as the node has fewer CPUs than processes"
                        : "its own share of them") +
         ": " + each +
         " (bind them yourself, e.g. mpirun --map-by ppr:N:node:pe=C or srun --cpus-per-task=C --cpu-bind=cores, to choose)",
          shares.shared};
#else
  (void)local_rank;
  (void)local_size;
  return {};
#endif
}

void use_optimizer_cpus(std::vector<int> cpus) { g_cores.optimizer = std::move(cpus); }

std::string cpu_list_text(std::vector<int> const& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string host_cores_text() {
  std::string const share =
      g_cores.rank_share.empty()
          ? ""
          : "local rank " + std::to_string(g_cores.local_rank) + " of " + std::to_string(g_cores.local_size) +
                " started unbound on its node: its share, CPU" + (g_cores.rank_share.size() == 1 ? " " : "s ") +
                cpu_list_text(g_cores.rank_share);
  if (g_cores.optimizer.empty()) return share;
  return "host optimizer threads on CPU" + std::string(g_cores.optimizer.size() == 1 ? " " : "s ") +
         cpu_list_text(g_cores.optimizer) + "; launching thread, Kokkos' host threads and data reader on " +
         cpu_list_text(g_cores.kokkos) + (share.empty() ? "" : " (" + share + ")");
}

}  // namespace joule
