#include "energy/source.hpp"

#include "common/environment.hpp"

#include <cstdlib>
#include <string>

namespace joule::energy {

namespace {
using environment::Integer;
using environment::Real;
using environment::Text;

// The energy model's and the sources' variables, each defined once: validate_environment() checks
// them before Kokkos starts and from_environment() reads them through the same objects.
constexpr Text kNvmlLibrary{"JOULE_NVML_LIBRARY",
                            "the NVML library joule opens (dlopen) for GPU energy and power limits",
                            "a library name or path; none: do not use NVML", "libnvidia-ml.so.1"};
constexpr Text kHwmonRoot{"JOULE_HWMON_ROOT", "where the hwmon sensors are (Grace's power and energy channels)",
                          "a folder (one that does not exist: no hwmon source)", "/sys/class/hwmon"};
constexpr Text kPowercapRoot{"JOULE_POWERCAP_ROOT", "where the RAPL (powercap) energy counters are",
                             "a folder (one that does not exist: no RAPL source)", "/sys/class/powercap"};
// Watts of a whole node at most: beyond that the model describes no machine (and no typo passes).
constexpr Real kModelIdleWatts{"JOULE_MODEL_IDLE_W",
                               "the CPU-time model's idle power (used only when nothing is measured)",
                               0.0,
                               1e5,
                               false,
                               20.0,
                               "watts"};
constexpr Real kModelCoreWatts{
    "JOULE_MODEL_CORE_W", "the CPU-time model's power per busy core of this process", 0.0, 1e5, false, 8.0, "watts"};

// Processes on one node: far more than any node runs; what is refused is text, signs and typos.
constexpr long long kMaxLocalProcesses = 1 << 20;
constexpr char const* kRankMeaning =
    "this process's rank on its node (node sensors are read by local rank 0 only; "
    "picks the GPU where CUDA does not say; processes started unbound split the node's CPUs by it)";
constexpr char const* kByLauncher = "set by the launcher";
constexpr char const* kSizeMeaning = "the number of joule processes on this node";
// In order of preference: JOULE_* overrides, then the local rank as Kokkos 4.x finds it
// (Kokkos::Impl::mpi_local_rank_on_node, same order), so the GPU chosen is the one Kokkos chose.
// Only the first one set is read, so only it is checked.
constexpr Integer kLocalRanks[] = {
    {"JOULE_LOCAL_RANK", kRankMeaning, 0, kMaxLocalProcesses - 1, 0,
     "the first of the launcher variables below set, else 0"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI's local rank (read when JOULE_LOCAL_RANK is not set)", 0,
     kMaxLocalProcesses - 1, 0, kByLauncher},
    {"MV2_COMM_WORLD_LOCAL_RANK", "MVAPICH2's local rank (when none of the above is set)", 0, kMaxLocalProcesses - 1, 0,
     kByLauncher},
    {"MPI_LOCALRANKID", "MPICH's (Hydra's) local rank (when none of the above is set)", 0, kMaxLocalProcesses - 1, 0,
     kByLauncher},
    {"SLURM_LOCALID", "Slurm's local task id (when none of the above is set)", 0, kMaxLocalProcesses - 1, 0,
     kByLauncher},
    {"PMI_LOCAL_RANK", "PMI's local rank (when none of the above is set)", 0, kMaxLocalProcesses - 1, 0, kByLauncher},
};
constexpr Integer kLocalSizes[] = {
    {"JOULE_LOCAL_SIZE", kSizeMeaning, 1, kMaxLocalProcesses, 1,
     "the first of the launcher variables below set, else 1"},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI's processes on this node (when JOULE_LOCAL_SIZE is not set)", 1,
     kMaxLocalProcesses, 1, kByLauncher},
    {"MV2_COMM_WORLD_LOCAL_SIZE", "MVAPICH2's processes on this node (when none of the above is set)", 1,
     kMaxLocalProcesses, 1, kByLauncher},
    {"MPI_LOCALNRANKS", "MPICH's (Hydra's) processes on this node (when none of the above is set)", 1,
     kMaxLocalProcesses, 1, kByLauncher},
    {"SLURM_NTASKS_PER_NODE", "Slurm's tasks per node (when none of the above is set)", 1, kMaxLocalProcesses, 1,
     kByLauncher},
    {"PMI_LOCAL_SIZE", "PMI's processes on this node (when none of the above is set)", 1, kMaxLocalProcesses, 1,
     kByLauncher},
};

// CUDA's own (any text: "set but empty" means no GPU, so it is read as it is).
constexpr char const* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";

template <std::size_t N>
int first_set(Integer const (&variables)[N]) {
  for (auto const& v : variables)
    if (auto const value = v.read()) return int(*value);
  return int(variables[0].fallback);
}
}  // namespace

void validate_environment() {
  kModelIdleWatts.read();
  kModelCoreWatts.read();
  first_set(kLocalRanks);
  first_set(kLocalSizes);
}

std::vector<environment::Description> environment_variables() {
  std::vector<environment::Description> rows{kNvmlLibrary.describe(), kHwmonRoot.describe(), kPowercapRoot.describe(),
                                             kModelIdleWatts.describe(), kModelCoreWatts.describe()};
  for (auto const& v : kLocalRanks) rows.push_back(v.describe());
  for (auto const& v : kLocalSizes) rows.push_back(v.describe());
  rows.push_back({kCudaVisibleDevices, "the GPUs this process sees: maps its CUDA device to NVML's numbering",
                  "CUDA's syntax (indices or UUIDs, comma-separated); set but empty: no GPU", "all GPUs"});
  return rows;
}

LocalProcess local_process_from_environment() { return {first_set(kLocalRanks), first_set(kLocalSizes)}; }

SourceOptions SourceOptions::from_environment_variables() {
  SourceOptions o;
  o.nvml_library = kNvmlLibrary.value();
  o.hwmon_root = kHwmonRoot.value();
  o.powercap_root = kPowercapRoot.value();
  o.model_idle_watts = kModelIdleWatts.value();
  o.model_core_watts = kModelCoreWatts.value();
  o.local_rank = first_set(kLocalRanks);
  o.local_size = first_set(kLocalSizes);
  if (char const* v = std::getenv(kCudaVisibleDevices)) o.cuda_visible_devices = v;  // set but empty: no GPU
  o.cuda_device_by_local_rank = true;
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
  // A GPU inside a module meter: where NVML gives no module power, local rank 0 counts the node's
  // module meters whole (hwmon), so another rank's GPU is in them already and counts there only.
  if (options.local_rank > 0) {
    bool own_module = false;
    for (auto const& s : found)
      for (auto const& c : s->channels()) own_module = own_module || c.domain == kDomainModule;
    if (auto const meters = node_module_meters(options); !own_module && !meters.empty()) {
      std::string const why = "inside this node's module meters (hwmon " + meters.front() +
                              (meters.size() > 1 ? " ... " + meters.back() : std::string()) +
                              "), which local rank 0 counts";
      for (auto& s : found) s->count_elsewhere(kDomainGpu, why);
      if (attempts)
        for (auto& a : *attempts)
          if (a.source == "hwmon") a.outcome += "; its module meters hold this process's GPU: it counts there";
    }
  }
  if (!measured || options.force_model) found.push_back(open_model(options));
  return found;
}

}  // namespace joule::energy
