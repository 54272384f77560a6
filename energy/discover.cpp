#include "energy/source.hpp"

#include <cstdlib>
#include <string>

namespace joule::energy {

namespace {
std::string env_or(char const* name, std::string const& fallback) {
  char const* v = std::getenv(name);
  return v && *v ? v : fallback;
}
int env_int(std::initializer_list<char const*> names, int fallback) {
  for (char const* n : names)
    if (char const* v = std::getenv(n); v && *v) return std::atoi(v);
  return fallback;
}
}  // namespace

SourceOptions SourceOptions::from_environment() {
  SourceOptions o;
  o.nvml_library = env_or("JOULE_NVML_LIBRARY", "libnvidia-ml.so.1");
  o.hwmon_root = env_or("JOULE_HWMON_ROOT", "/sys/class/hwmon");
  o.powercap_root = env_or("JOULE_POWERCAP_ROOT", "/sys/class/powercap");
  o.model_idle_watts = std::atof(env_or("JOULE_MODEL_IDLE_W", "20").c_str());
  o.model_core_watts = std::atof(env_or("JOULE_MODEL_CORE_W", "8").c_str());
  // The local rank as Kokkos 4.x finds it (Kokkos::Impl::mpi_local_rank_on_node, same order), so
  // the GPU chosen below is the one Kokkos chose; JOULE_LOCAL_RANK overrides.
  o.local_rank = env_int({"JOULE_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                          "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"},
                         0);
  o.local_size = env_int({"JOULE_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE",
                          "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE", "PMI_LOCAL_SIZE"},
                         1);
  if (char const* v = std::getenv("CUDA_VISIBLE_DEVICES")) o.cuda_visible_devices = v;  // set but empty: no GPU
  // The device Kokkos runs on, exactly, on CUDA builds; else the one Kokkos' rule would pick.
  o.cuda_pci_bus_id = kokkos_device_pci_bus_id();
  o.cuda_device_by_local_rank = o.cuda_pci_bus_id.empty();
  return o;
}

std::vector<std::unique_ptr<Source>> discover_sources(SourceOptions const& options, std::vector<std::string>* notes,
                                                      std::vector<SourceAttempt>* attempts) {
  std::vector<std::unique_ptr<Source>> found;
  bool measured = false;
  for (auto* open : {&open_nvml, &open_hwmon, &open_rapl}) {
    SourceAttempt attempt;
    auto s = (*open)(options, &attempt);
    if (attempts) attempts->push_back(attempt);
    if (!s) continue;
    if (notes) notes->insert(notes->end(), s->notes().begin(), s->notes().end());
    for (auto const& c : s->channels()) measured = measured || (c.measured && c.quantity != Quantity::gauge);
    if (!s->channels().empty()) found.push_back(std::move(s));
  }
  if (!measured || options.force_model) found.push_back(open_model(options));
  return found;
}

}  // namespace joule::energy
