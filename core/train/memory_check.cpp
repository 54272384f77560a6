#include "core/train/memory_check.hpp"

#include "core/detail/bytes_text.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <fstream>
#include <sstream>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace joule {

using detail::bytes_text;

MemoryNeed memory_need(ModelConfig const& m, int micro_batch, int recompute_depth, int seq_shards, double offload_ratio,
                       Precision precision, bool cast_on_host, bool speculative) {
  return {estimate_memory(m, micro_batch, recompute_depth, seq_shards, precision),
          estimate_optimizer_memory(m, offload_ratio, precision, cast_on_host, speculative)};
}

MemoryNeed memory_need(ModelConfig const& m, TrainConfig const& t) {
  return memory_need(m, t.micro_batch, t.recompute_depth, t.seq_shards, t.offload_ratio, t.precision,
                     t.offload_cast == TrainConfig::OffloadCast::host, offload_speculates(t.grad_clip, t.offload_speculation));
}

namespace {

std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// The host threads that will run GEMMs (Kokkos' host space, which the BLAS follows); 1 before
// Kokkos starts.
int host_threads() {
  return Kokkos::is_initialized() ? std::max(1, int(Kokkos::DefaultHostExecutionSpace().concurrency())) : 1;
}

// The first whole number in `path` (a cgroup file holds one number, or "max"); -1 if none.
double number_in(std::string const& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stod(word);
}

// Room left under the memory cgroup's limit; -1 when there is no limit (or none can be read).
double cgroup_room(std::string const& root, std::string const& self_cgroup, std::string* which) {
  std::ifstream in(self_cgroup);
  std::string line, v2_path, v1_path;
  while (std::getline(in, line)) {  // "0::/path" (v2), "4:memory:/path" (v1)
    auto const a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string const controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
    if (controllers == "memory" || controllers.find("memory,") == 0 || controllers.find(",memory") != std::string::npos)
      v1_path = path;
  }
  // A limit of 2^60 or more is v1's way of saying "none".
  auto room = [&](std::string const& dir, char const* limit_file, char const* usage_file) {
    double const limit = number_in(dir + "/" + limit_file), usage = number_in(dir + "/" + usage_file);
    if (limit < 0 || usage < 0 || limit >= 1152921504606846976.0) return -1.0;
    if (which) *which = dir + "/" + limit_file;
    return std::max(0.0, limit - usage);
  };
  // Inside a container the cgroup namespace's root is mounted at the root itself: try both.
  for (std::string const& dir : {root + v2_path, root})
    if (!v2_path.empty())
      if (double const r = room(dir, "memory.max", "memory.current"); r >= 0) return r;
  for (std::string const& dir : {root + "/memory" + v1_path, root + "/memory"})
    if (!v1_path.empty())
      if (double const r = room(dir, "memory.limit_in_bytes", "memory.usage_in_bytes"); r >= 0) return r;
  return -1;
}

}  // namespace

double address_space_room(double limit_bytes, std::string const& self_status, int threads, std::string* why) {
  if (limit_bytes < 0) return std::numeric_limits<double>::infinity();
  double mapped = 0;
  std::ifstream in(self_status);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmSize:", 0) == 0) mapped = std::atof(line.c_str() + 7) * 1024.0;
  // The first thread allocates from the main arena; each other one opens an arena of its own.
  double const reserved = kDeviceIsHost ? threads * kBlasBufferBytesPerThread + (threads - 1) * kMallocArenaBytes : 0;
  if (why)
    *why = fmt::format("the room left under this process's address-space limit (ulimit -v {}: {} mapped now, {} "
                       "kept for the BLAS's buffers of {} threads)", detail::bytes_text(limit_bytes),
                       detail::bytes_text(mapped), detail::bytes_text(reserved), kDeviceIsHost ? threads : 0);
  return std::max(0.0, limit_bytes - mapped - reserved);
}

double available_host_memory(std::string* source, std::string const& meminfo, std::string const& cgroup_root,
                             std::string const& self_cgroup, std::string const& self_status) {
  double bytes = -1;
  std::string what;
  std::ifstream in(meminfo);
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") {
      bytes = kib * 1024.0;
      what = "MemAvailable in " + meminfo;
      break;
    }
  }
  if (bytes < 0) {  // no /proc: all of the physical memory
    bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
    what = "this machine's physical memory (no MemAvailable in " + meminfo + ")";
  }
  std::string limit_file;
  if (double const room = cgroup_room(cgroup_root, self_cgroup, &limit_file); room >= 0 && room < bytes) {
    bytes = room;
    what = "the room left under the limit in " + limit_file;
  }
  struct rlimit as_limit;
  if (::getrlimit(RLIMIT_AS, &as_limit) == 0 && as_limit.rlim_cur != RLIM_INFINITY) {
    std::string why;
    double const room = address_space_room(double(as_limit.rlim_cur), self_status, host_threads(), &why);
    if (room < bytes) bytes = room, what = why;
  }
  if (source) *source = what;
  return bytes;
}

MemoryAvailable available_memory() {
  MemoryAvailable a;
  a.host_identity = host_name();
  a.host_bytes = available_host_memory(&a.host_source);
  a.device_identity = a.host_identity;
  a.device_bytes = a.host_bytes;
  a.device_source = a.host_source;
#if defined(KOKKOS_ENABLE_CUDA)
  int device = 0;
  std::size_t free = 0, total = 0;
  char bus[64] = {};
  if (cudaGetDevice(&device) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess) {
    a.device_bytes = double(free);
    a.device_source = fmt::format("the free memory of GPU {} (cudaMemGetInfo)", device);
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) == cudaSuccess) a.device_identity += std::string(":") + bus;
  }
#endif
  return a;
}

namespace {

struct Fit {
  bool device = false, host = false;
  bool both() const { return device && host; }
};

// `use`: the share of the free memory a configuration may take (suggestions keep a margin, as the
// memory model is good to about 10% per category).
Fit fits(MemoryNeed const& n, MemoryAvailable const& a, MemorySharing s, double use = 1.0) {
  return {double(n.device_bytes()) * s.device <= use * a.device_bytes,
          double(n.host_bytes()) * s.host <= use * a.host_bytes};
}

std::string breakdown(MemoryNeed const& n, bool device) {
  if (!device) return fmt::format("offloaded optimizer state {}", bytes_text(double(n.host_bytes())));
  std::size_t const optimizer = n.device_bytes() - n.model.total();
  return fmt::format("parameters {}, gradients {}, activations {}, workspace {}, optimizer state {}",
                     bytes_text(double(n.model.parameters)), bytes_text(double(n.model.gradients)),
                     bytes_text(double(n.model.activations)), bytes_text(double(n.model.workspace)),
                     bytes_text(double(optimizer)));
}

std::string knobs_text(TrainConfig const& t) {
  return fmt::format("train.micro_batch {}, train.recompute_depth {}, train.offload_ratio {:g}", t.micro_batch,
                     t.recompute_depth, t.offload_ratio);
}

}  // namespace

std::string memory_summary(ModelConfig const& m, TrainConfig const& t, MemoryAvailable const& available,
                           MemorySharing sharing) {
  MemoryNeed const need = memory_need(m, t);
  auto shared = [](int n) { return n > 1 ? fmt::format(", shared by {} processes", n) : std::string(); };
  std::string text = fmt::format("memory: {} per process predicted ({}); {} free ({}{})",
                                 bytes_text(double(need.device_bytes())), breakdown(need, true),
                                 bytes_text(available.device_bytes), available.device_source, shared(sharing.device));
  if (!kDeviceIsHost)
    text += fmt::format("; host: {} predicted, {} free ({}{})", bytes_text(double(need.host_bytes())),
                        bytes_text(available.host_bytes), available.host_source, shared(sharing.host));
  return text;
}

std::string memory_shortfall(ModelConfig const& m, TrainConfig const& t, MemoryAvailable const& available,
                             MemorySharing sharing) {
  MemoryNeed const need = memory_need(m, t);
  Fit const fit = fits(need, available, sharing);
  if (fit.both()) return "";

  bool const device = !fit.device;  // the device's memory is named first when both are short
  int const share = device ? sharing.device : sharing.host;
  double const per_process = double(device ? need.device_bytes() : need.host_bytes());
  char const* where = !device ? "host memory" : kDeviceIsHost ? "this machine's memory" : "the GPU's memory";
  std::string text = fmt::format(
      "the model does not fit in {}: the memory model predicts {} per process ({}){} with {}, but {} {} free ({})",
      where, bytes_text(per_process), breakdown(need, device),
      share > 1 ? fmt::format(", x {} processes sharing it = {}", share, bytes_text(per_process * share)) : "",
      knobs_text(t), bytes_text(device ? available.device_bytes : available.host_bytes),
      (device ? available.device_bytes : available.host_bytes) == 1 ? "is" : "are",
      device ? available.device_source : available.host_source);

  // The nearest configuration that fits with a 10% margin: more recomputation first (costs
  // compute only), then offload (moves the optimizer state to the host: only where the host's
  // memory is another memory), then smaller micro-batches.
  auto suggest = [&](TrainConfig const& c) {
    MemoryNeed const n = memory_need(m, c);
    return fmt::format("; {} would need {}{}", knobs_text(c), bytes_text(double(n.device_bytes())),
                       kDeviceIsHost ? "" : fmt::format(" on the GPU and {} on the host", bytes_text(double(n.host_bytes()))));
  };
  auto fits_with_margin = [&](TrainConfig const& c) { return fits(memory_need(m, c), available, sharing, 0.9).both(); };
  if (fit.device && !fit.host)
    return text + "; a lower train.offload_ratio keeps less optimizer state on the host";
  TrainConfig c = t;
  for (c.recompute_depth = t.recompute_depth; c.recompute_depth <= m.layers; ++c.recompute_depth)
    if (fits_with_margin(c)) return text + suggest(c);
  c.recompute_depth = m.layers;
  if (!kDeviceIsHost && c.offload_ratio < 1) {
    c.offload_ratio = 1;
    if (fits_with_margin(c)) return text + suggest(c);
  }
  for (int micro = t.micro_batch - 1; micro >= 1; --micro) {
    if (t.batch % micro != 0) continue;
    c.micro_batch = micro;
    if (fits_with_margin(c)) return text + suggest(c);
  }
  c.micro_batch = 1;
  return text + fmt::format("; even {} would need {} per process: use a smaller model, or more processes with "
                            "train.seq_shards (they divide the activations, not the parameters)",
                            knobs_text(c), bytes_text(double(memory_need(m, c).device_bytes())));
}

std::string inference_memory_shortfall(ModelConfig const& m, int micro_batch, MemoryAvailable const& available,
                                      Precision precision) {
  // Forward passes only, every block recomputed (the least activation memory); no optimizer.
  auto const need = [&](int b) {
    MemoryNeed n;
    n.model = estimate_memory(m, b, m.layers, 1, precision);
    return n;
  };
  MemoryNeed const n = need(micro_batch);
  if (double(n.device_bytes()) <= available.device_bytes) return "";
  int fitting = 0;  // the largest micro-batch that fits with a 10% margin, by bisection
  for (int lo = 1, hi = micro_batch - 1; lo <= hi;) {
    int const mid = lo + (hi - lo) / 2;
    if (double(need(mid).device_bytes()) <= 0.9 * available.device_bytes) fitting = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  return fmt::format("micro-batch {}: {} predicted ({}), more than the {} free ({}); {}", micro_batch,
                     bytes_text(double(n.device_bytes())), breakdown(n, true), bytes_text(available.device_bytes),
                     available.device_source,
                     fitting > 0 ? fmt::format("--micro-batch {} fits", fitting)
                                 : std::string("no micro-batch fits: the parameters alone do not"));
}

std::string memory_figures(ModelConfig const& m, int micro_batch, int recompute_depth, MemoryAvailable const& available,
                           Precision precision) {
  MemoryNeed n;
  n.model = estimate_memory(m, micro_batch, recompute_depth, 1, precision);
  return fmt::format("the memory model predicts {} ({}); {} free ({})", bytes_text(double(n.device_bytes())),
                     breakdown(n, true), bytes_text(available.device_bytes), available.device_source);
}

}  // namespace joule
