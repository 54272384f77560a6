#include "processes.hpp"

#if defined(JOULE_HAVE_NCCL)
#include "parallel/nccl_communicator.hpp"
#endif

#include "parallel/agreement.hpp"
#include "core/environment.hpp"
#include "core/train/host_cores.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace joule::apps {

bool launched_by_mpi() {
  for (char const* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

namespace {

// A rank that ends by a signal says so in one line before it goes, with its rank and host: a
// launcher ends every rank when one of them dies, and without this line the dying rank left only
// the launcher's "exited on signal" and the others a stray SIGABRT from inside MPI. Prepared when
// the job starts; the handler itself only write()s (async-signal-safe) and re-raises.
char g_signal_line[256];
std::size_t g_signal_line_size = 0;

void report_signal(int sig) {
  char const* name = sig == SIGTERM ? "SIGTERM (the launcher or the batch system stopped it)"
                     : sig == SIGINT ? "SIGINT (interrupted)"
                     : sig == SIGHUP ? "SIGHUP (its terminal or launcher went away)"
                     : sig == SIGSEGV ? "SIGSEGV (a crash)"
                     : sig == SIGBUS ? "SIGBUS (a crash: memory that is gone, e.g. a file truncated under it)"
                     : sig == SIGABRT ? "SIGABRT (aborted; inside MPI this usually means another rank died first)"
                     : sig == SIGFPE ? "SIGFPE (a crash)"
                                     : "a fatal signal";
  [[maybe_unused]] auto a = ::write(2, g_signal_line, g_signal_line_size);
  [[maybe_unused]] auto b = ::write(2, name, std::strlen(name));
  [[maybe_unused]] auto c = ::write(2, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_signal_report(int rank, int size) {
  char host[128] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  int const n = std::snprintf(g_signal_line, sizeof g_signal_line, "joule: rank %d of %d (process %d on %s) ended by ",
                              rank, size, int(::getpid()), host);
  g_signal_line_size = n > 0 ? std::min<std::size_t>(std::size_t(n), sizeof g_signal_line - 1) : 0;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGSEGV, SIGBUS, SIGABRT, SIGFPE}) std::signal(sig, report_signal);
}

}  // namespace

Processes::Processes(Config const& cfg) {
  if (!launched_by_mpi()) {
    parallel::requested_comm_backend(cfg.json);  // checked here too: a bad value is an error anywhere
    layout_ = parallel::make_layout(1, 0, cfg.train.seq_shards, cfg.model.heads, cfg.model.seq_len());
    return;
  }
  mpi_ = std::make_unique<parallel::MpiSession>(nullptr, nullptr);
  world_ = mpi_->world();
  install_signal_report(world_->rank(), world_->size());
  parallel::require_same_config(*world_, cfg.json);
  choose_collectives(cfg);
  share_host_cores();
  relayout(cfg.train.seq_shards, cfg);
}

void Processes::share_host_cores() {
  // Every rank's node, optimizer CPUs and Kokkos CPUs to rank 0, which decides; each rank gets its
  // own share of the optimizer's. Kokkos' threads started before MPI_Init, so ranks whose Kokkos
  // CPUs overlap (a launcher that bound them to one socket together) can only be warned about;
  // ranks started unbound took their shares then (take_local_rank_share).
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
  auto const& mine = host_cores().optimizer;
  std::string text = std::string(host) + "\n" + cpu_list_text(mine) + "\n" +
                     cpu_list_text(core_environment::process_cpus()) + "\n" +
                     (host_cores().rank_share.empty() ? "0" : "1");
  auto const all = world_->gather(text, 0);
  std::string plan;  // one line per rank: its CPUs; then the note rank 0 prints
  if (world_->rank() == 0) {
    std::vector<std::string> nodes;
    std::vector<std::vector<int>> cpus, kokkos_cpus;
    std::vector<bool> split;
    for (auto const& t : all) {
      std::vector<std::string> lines;
      for (std::size_t pos = 0; pos <= t.size();) {
        auto const nl = std::min(t.find('\n', pos), t.size());
        lines.push_back(t.substr(pos, nl - pos));
        pos = nl + 1;
      }
      lines.resize(4);
      nodes.push_back(lines[0]);
      cpus.push_back(core_environment::parse_cpu_list(lines[1]));
      kokkos_cpus.push_back(core_environment::parse_cpu_list(lines[2]));
      split.push_back(lines[3] == "1");
    }
    auto const shares = share_optimizer_cpus(nodes, cpus);
    for (auto const& s : shares.cpus) plan += cpu_list_text(s) + "\n";
    for (auto const& group : shares.groups) {
      std::string ranks, each;
      for (int r : group) {
        ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
        each += fmt::format("{}rank {}: CPU{} {}", each.empty() ? "" : "; ", r,
                            shares.cpus[std::size_t(r)].size() == 1 ? "" : "s", cpu_list_text(shares.cpus[std::size_t(r)]));
      }
      fmt::print(stderr,
                 "joule: {}: ranks {} on node {} set aside the same CPUs for their host optimizer ({}): the launcher "
                 "did not bind them apart, so each takes {}: {} (bind ranks to their own cores, e.g. mpirun "
                 "--map-by ppr:N:node:pe=C or srun --cpus-per-task=C --cpu-bind=cores, to choose yourself)\n",
                 shares.shared ? "warning" : "note", ranks, nodes[std::size_t(group.front())],
                 (cpus[std::size_t(group.front())].size() == 1 ? "CPU " : "CPUs ") +
                     cpu_list_text(cpus[std::size_t(group.front())]),
                 shares.shared ? "one, shared, as there are fewer CPUs than ranks" : "its own share", each);
    }
    // Kokkos' threads of ranks on one node on the same CPUs, where the launcher placed them so.
    auto const kokkos = share_optimizer_cpus(nodes, kokkos_cpus);  // its groups: the overlapping ranks
    for (auto const& group : kokkos.groups) {
      if (std::all_of(group.begin(), group.end(), [&](int r) { return split[std::size_t(r)]; }))
        continue;  // shares taken at the start, and said then
      std::string ranks, each;
      for (int r : group) {
        ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
        each += fmt::format("{}rank {}: {}", each.empty() ? "" : "; ", r, cpu_list_text(kokkos_cpus[std::size_t(r)]));
      }
      fmt::print(stderr,
                 "joule: warning: ranks {} on node {} run Kokkos' threads on CPUs that overlap ({}): they share "
                 "cores, and every step waits for the slowest (bind ranks to their own cores, e.g. mpirun "
                 "--map-by ppr:N:node:pe=C or srun --cpus-per-task=C --cpu-bind=cores, or start them unbound and "
                 "joule splits the node)\n",
                 ranks, nodes[std::size_t(group.front())], each);
    }
  }
  std::uint64_t size = plan.size();
  world_->broadcast(&size, sizeof size, 0);
  plan.resize(size);
  world_->broadcast(plan.data(), size, 0);
  // This rank's line.
  std::size_t begin = 0;
  for (int r = 0; r < world_->rank(); ++r) begin = plan.find('\n', begin) + 1;
  std::string const line = plan.substr(begin, plan.find('\n', begin) - begin);
  std::vector<int> share = core_environment::parse_cpu_list(line);
  if (share != mine) use_optimizer_cpus(std::move(share));
}

void Processes::choose_collectives(Config const& cfg) {
  // Rank 0 sees where every rank is and decides; every rank gets the same verdict (or error).
  std::string gpu;
#if defined(JOULE_HAVE_NCCL)
  gpu = parallel::local_gpu_identity();
  constexpr bool nccl_built = true;
#else
  constexpr bool nccl_built = false;
#endif
  auto const gpus = world_->gather(gpu, 0);
  std::string verdict;
  if (world_->rank() == 0) {
    try {
      auto const c = parallel::choose_comm_backend(parallel::requested_comm_backend(cfg.json), nccl_built, gpus);
      verdict = std::string(c.nccl ? "nccl" : "mpi") + "\n" + c.reason;
    } catch (std::exception const& e) {
      verdict = std::string("error\n") + e.what();
    }
  }
  std::uint64_t size = verdict.size();
  world_->broadcast(&size, sizeof size, 0);
  verdict.resize(size);
  world_->broadcast(verdict.data(), size, 0);
  auto const newline = verdict.find('\n');
  std::string const kind = verdict.substr(0, newline), text = verdict.substr(newline + 1);
  if (kind == "error") throw parallel::CommError(text);
  comm_ = {kind == "nccl", text};
}

std::string Processes::collectives() const {
  if (!world_) return "collectives: none (single process)";
  return std::string("collectives: ") + (comm_.nccl ? "nccl" : "mpi") + " (" + comm_.reason + ")";
}

int Processes::run_or_abort(std::function<int()> const& body) const {
  if (size() <= 1) return body();
  try {
    return body();
  } catch (std::exception const& e) {
    fmt::print(stderr, "joule: error on rank {} of {}: {}\n", rank(), size(), e.what());
    std::fflush(stderr);
    // The process whose error it is ends the job with its own message: give it the time to print
    // it before this one's abort kills it (it normally ends the job first, and this one with it).
    if (dynamic_cast<ErrorOnOtherProcess const*>(&e)) std::this_thread::sleep_for(std::chrono::seconds(3));
    mpi_->abort_job(1);
  }
}

void Processes::relayout(int seq_shards, Config const& cfg) {
  int const w = world_ ? world_->size() : 1, r = world_ ? world_->rank() : 0;
  layout_ = parallel::make_layout(w, r, seq_shards, cfg.model.heads, cfg.model.seq_len());
  if (!world_) return;
  auto& group = sequence_groups_[seq_shards];
  if (!group) {  // collective: every rank comes here with the same seq_shards (the same search path)
#if defined(JOULE_HAVE_NCCL)
    if (comm_.nccl) {
      if (!sums_) sums_ = parallel::make_nccl_communicator(*world_);
      group = parallel::make_nccl_communicator(*world_->split(layout_.dp_rank, layout_.seq_rank));
    }
#endif
    if (!group) group = world_->split(layout_.dp_rank, layout_.seq_rank);
  }
  sequence_ = group.get();
}

MemorySharing Processes::memory_sharing(MemoryAvailable const& mine) const {
  if (!world_) return {};
  // Rank 0 counts, for every rank, the ranks with the same device and the same host.
  auto const ids = world_->gather(mine.device_identity + "\n" + mine.host_identity, 0);
  std::vector<std::int32_t> counts(2 * std::size_t(size()), 1);
  if (root()) {
    auto part = [](std::string const& id, bool device) {
      auto const newline = id.find('\n');
      return device ? id.substr(0, newline) : id.substr(newline + 1);
    };
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (int d = 0; d < 2; ++d)
        counts[2 * i + d] = std::int32_t(std::count_if(ids.begin(), ids.end(), [&](std::string const& other) {
          return part(other, d == 0) == part(ids[i], d == 0);
        }));
  }
  world_->broadcast(counts.data(), counts.size() * sizeof(std::int32_t), 0);
  return {counts[2 * std::size_t(rank())], counts[2 * std::size_t(rank()) + 1]};
}

std::string Processes::memory_shortfall(Config const& cfg, std::string* summary) const {
  auto const available = available_memory();
  auto const sharing = memory_sharing(available);
  if (summary) *summary = memory_summary(cfg.model, cfg.train, available, sharing);
  auto const mine = joule::memory_shortfall(cfg.model, cfg.train, available, sharing);
  return world_ ? parallel::first_error(*world_, mine) : mine;
}

double Processes::device_memory_per_process(std::string* source) const {
  auto const available = available_memory();
  auto const sharing = memory_sharing(available);
  double bytes = available.device_bytes / sharing.device;
  std::string what = available.device_source + (sharing.device > 1 ? fmt::format(", shared by {} processes", sharing.device) : "");
  if (world_) {
    auto const all = world_->gather(fmt::format("{}\n{}", bytes, what), 0);
    std::string least;
    if (root()) {
      double lowest = -1;
      for (std::size_t r = 0; r < all.size(); ++r) {
        double const b = std::stod(all[r].substr(0, all[r].find('\n')));
        if (lowest < 0 || b < lowest) {
          lowest = b;
          least = all[r] + (all.size() > 1 ? fmt::format(" (rank {}, the least of {})", r, all.size()) : "");
        }
      }
    }
    std::uint64_t size = least.size();
    world_->broadcast(&size, sizeof size, 0);
    least.resize(size);
    world_->broadcast(least.data(), size, 0);
    bytes = std::stod(least.substr(0, least.find('\n')));
    what = least.substr(least.find('\n') + 1);
  }
  if (source) *source = what;
  return bytes;
}

std::string Processes::backend() const {
  if (!world_) return "single process";
  return sums_ ? "nccl + mpi" : "mpi";
}

DataParallel Processes::data_parallel() const {
  DataParallel dp;
  dp.rank = layout_.dp_rank;
  dp.size = layout_.dp;
  if (!world_) return dp;
  parallel::Communicator* floats = sums_ ? sums_.get() : world_.get();
  parallel::Communicator* host = world_.get();
  dp.device_pointers = floats->device_buffers();
  dp.allreduce_sum = [floats](float* p, std::size_t n) { floats->allreduce_sum(p, n); };
  dp.allreduce_sum_double = [host](double* p, std::size_t n) { host->allreduce_sum(p, n); };
  dp.orders_on_device = floats->orders_on_device();
  dp.start_allreduce_sum = [floats](float* p, std::size_t n, void* after_stream) {
    std::shared_ptr<parallel::Request> request = floats->start_allreduce_sum(p, n, after_stream);
    return PendingSum{[request] { return request->test(); }, [request] { request->wait(); },
                      [request](void* stream) { return request->order_before(stream); }};
  };
  return dp;
}

SequenceShards Processes::sequence_shards() const {
  SequenceShards s;
  s.rank = layout_.seq_rank;
  s.size = layout_.seq_shards;
  if (!sequence_ || s.size == 1) return s;
  parallel::Communicator* group = sequence_;
  s.device_pointers = group->device_buffers();
  s.alltoall = [group](float const* send, float* recv, std::size_t n) { group->alltoall(send, recv, n); };
  static_assert(sizeof(bf16) == sizeof(std::uint16_t), "bf16 elements are 2-byte words");
  s.alltoall_bf16 = [group](bf16 const* send, bf16* recv, std::size_t n) {
    group->alltoall_bf16(reinterpret_cast<std::uint16_t const*>(send), reinterpret_cast<std::uint16_t*>(recv), n);
  };
  // Host doubles: the NCCL communicator forwards them to its MPI group.
  s.allreduce_sum = [group](double* p, std::size_t n) { group->allreduce_sum(p, n); };
  return s;
}

}  // namespace joule::apps
