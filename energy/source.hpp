#pragma once
// Energy sources: where joule's energy numbers come from. Each source offers channels (one per
// physical sensor it reads); a channel measures a domain and is either a cumulative energy
// counter (joules), a power reading (watts, integrated by the sampler) or a gauge (e.g. clocks,
// recorded, never integrated). A modelled channel is flagged and labelled `model` everywhere.
#include "common/environment.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace joule::energy {

// Domains. Containing domains (module > gpu + cpu + memory; package > cpu) are reported side by
// side and never added together.
inline constexpr char const* kDomainGpu = "gpu";
inline constexpr char const* kDomainModule = "module";
inline constexpr char const* kDomainCpu = "cpu";
inline constexpr char const* kDomainSysio = "sysio";
inline constexpr char const* kDomainDram = "dram";
inline constexpr char const* kDomainPackage = "package";
inline constexpr char const* kDomainModel = "model";

enum class Quantity { energy_counter, power, gauge };

struct Channel {
  std::string domain;  // one of the kDomain* names; for gauges, what it is ("sm_clock_mhz")
  std::string sensor;  // what exactly is read, e.g. "nvml gpu 0 total energy"
  Quantity quantity = Quantity::power;
  bool measured = true;  // false: modelled
  // The sensor's own update period or averaging window in seconds (0: finer than any sampling
  // rate joule uses). A region shorter than this is below what the sensor can resolve.
  double resolution_s = 0;
  // Non-empty: this channel's hardware is inside a sensor another process of this node counts
  // (why, e.g. the module meters local rank 0 reads): shown, never in this process's total.
  std::string counted_elsewhere = {};
};

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string name() const = 0;  // "nvml", "hwmon", "rapl", "model"
  std::vector<Channel> const& channels() const { return channels_; }
  // Reads every channel now into values (joules for counters, already unwrapped and monotonic;
  // watts for power; gauge units). A channel that cannot be read (sensor gone) gets NaN.
  virtual void read(std::vector<double>& values) = 0;
  // Things a user should know: unreadable files, unsupported scopes, lost sensors.
  std::vector<std::string> const& notes() const { return notes_; }
  // Marks this source's channels of `domain` as counted by another process of the node (why).
  void count_elsewhere(std::string const& domain, std::string const& why) {
    for (auto& c : channels_)
      if (c.domain == domain) c.counted_elsewhere = why;
  }

 protected:
  std::vector<Channel> channels_;
  std::vector<std::string> notes_;
};

// Where to look. Every root can be redirected (tests point them at fake trees); the defaults can
// also be overridden by the environment variables named here.
struct SourceOptions {
  std::string nvml_library;   // JOULE_NVML_LIBRARY, default "libnvidia-ml.so.1"; "none" disables
  std::string hwmon_root;     // JOULE_HWMON_ROOT, default "/sys/class/hwmon"
  std::string powercap_root;  // JOULE_POWERCAP_ROOT, default "/sys/class/powercap"
  // The CPU-time model (used only when nothing can be measured): idle + per busy core.
  double model_idle_watts = 20.0;      // JOULE_MODEL_IDLE_W
  double model_core_watts = 8.0;       // JOULE_MODEL_CORE_W
  // The model's clocks, in seconds: this process's CPU time and wall time unless given (tests
  // give known times, so that what they check does not depend on the machine's load).
  std::function<double()> model_cpu_clock, model_wall_clock;
  // Several processes on a node: node sensors (hwmon, RAPL) are read by local rank 0 only.
  // Defaults: JOULE_LOCAL_RANK/SIZE, else the variables Kokkos reads (OMPI_COMM_WORLD_LOCAL_*,
  // MV2_COMM_WORLD_LOCAL_*, MPI_LOCALRANKID/MPI_LOCALNRANKS, SLURM_LOCALID/SLURM_NTASKS_PER_NODE,
  // PMI_LOCAL_*); 0 and 1 otherwise.
  int local_rank = -1;
  int local_size = -1;
  bool force_model = false;  // also add the model when measured sources exist

  // This process's GPU, the only one NVML reads and the power limiter changes. NVML numbers every
  // GPU of the node whatever CUDA_VISIBLE_DEVICES hides, so the NVML device is found from the CUDA
  // device (energy/detail/nvml_select.hpp), in this order of preference:
  std::string cuda_pci_bus_id;  // its PCI bus id as cudaDeviceGetPCIBusId gives it ("0009:01:00.0")
  int cuda_device = -1;         // its CUDA runtime ordinal (within CUDA_VISIBLE_DEVICES)
  // Neither known: the device Kokkos picks, local_rank % visible devices (from_environment sets it).
  bool cuda_device_by_local_rank = false;
  // CUDA_VISIBLE_DEVICES as this process got it (nullopt: not set); maps a CUDA ordinal to NVML.
  std::optional<std::string> cuda_visible_devices;
  // With none of the above (options built by hand): every GPU g with g % local_size == local_rank.

  // Reads the variables above; the bus id of Kokkos' CUDA device when Kokkos runs on one. Throws
  // environment::Error for a value validate_environment() refuses.
  static SourceOptions from_environment();
  // The variables alone, the GPU by Kokkos' local-rank rule (Kokkos-free: the connector, which
  // sees another program's Kokkos only through Kokkos Tools).
  static SourceOptions from_environment_variables();
};

// Checks the variables from_environment() reads (the model's watts, the local rank and size), before
// Kokkos starts: throws environment::Error (common/environment.hpp) naming the first one set to a
// value not allowed (text, NaN, a negative number, ...). Of the local-rank (and local-size)
// variables only the first set is read, and checked.
void validate_environment();
// Every variable from_environment() reads: name, meaning, allowed values, default.
std::vector<environment::Description> environment_variables();

// This process's rank among the processes on its node, and their number, from the variables above
// (JOULE_LOCAL_RANK/SIZE, else the launcher's): 0 and 1 where none is set. Read before Kokkos
// starts too: the processes of one node share its CPUs (core/train/host_cores.hpp).
struct LocalProcess {
  int rank = 0;
  int size = 1;
};
LocalProcess local_process_from_environment();

// The PCI bus id of the CUDA device Kokkos runs on; "" when Kokkos is not initialised or has no
// CUDA backend (kokkos/device.cpp, the one unit of energy/ that calls CUDA).
std::string kokkos_device_pci_bus_id();

// What discovery looked for, per source, and what it found: the probe's "looked for:" list, so a
// machine where nothing is readable says why.
struct SourceAttempt {
  std::string source;      // "nvml", "hwmon", "rapl"
  std::string looked_for;  // the library, or the sysfs folder
  std::string outcome;     // "found: ..." or why not ("not found (no NVIDIA driver installed?)")
  bool found = false;
};

// nullptr: none there (then *attempt, when given, says why).
std::unique_ptr<Source> open_nvml(SourceOptions const& options, SourceAttempt* attempt = nullptr);
std::unique_ptr<Source> open_hwmon(SourceOptions const& options, SourceAttempt* attempt = nullptr);
std::unique_ptr<Source> open_rapl(SourceOptions const& options, SourceAttempt* attempt = nullptr);
std::unique_ptr<Source> open_model(SourceOptions const& options);
// The node's module meters (hwmon "Module Power Socket N", GPU + CPU + memory of a Grace Hopper
// superchip), by label, whatever the local rank: they contain every GPU of the node.
std::vector<std::string> node_module_meters(SourceOptions const& options);

// All sources found, in order of preference; the model only when none measures anything (or
// force_model). Notes about sources that were looked for and not usable go to `notes`; what was
// looked for and why it is or is not used, per measuring source, to `attempts`.
std::vector<std::unique_ptr<Source>> discover_sources(SourceOptions const& options,
                                                      std::vector<std::string>* notes = nullptr,
                                                      std::vector<SourceAttempt>* attempts = nullptr);

}  // namespace joule::energy
