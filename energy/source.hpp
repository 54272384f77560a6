#pragma once
// Energy sources: where joule's energy numbers come from. Each source offers channels (one per
// physical sensor it reads); a channel measures a domain and is either a cumulative energy
// counter (joules), a power reading (watts, integrated by the sampler) or a gauge (e.g. clocks,
// recorded, never integrated). A modelled channel is flagged and labelled `model` everywhere.
#include <cstdint>
#include <memory>
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
  // Several processes on a node: node sensors (hwmon, RAPL) are read by local rank 0 only, GPU g
  // by the local rank g % local_size. Defaults from OMPI_COMM_WORLD_LOCAL_RANK/SIZE, SLURM_LOCALID
  // /SLURM_NTASKS_PER_NODE or JOULE_LOCAL_RANK/SIZE; 0 and 1 otherwise.
  int local_rank = -1;
  int local_size = -1;
  bool force_model = false;  // also add the model when measured sources exist

  static SourceOptions from_environment();
};

std::unique_ptr<Source> open_nvml(SourceOptions const& options);      // nullptr: none there
std::unique_ptr<Source> open_hwmon(SourceOptions const& options);
std::unique_ptr<Source> open_rapl(SourceOptions const& options);
std::unique_ptr<Source> open_model(SourceOptions const& options);

// All sources found, in order of preference; the model only when none measures anything (or
// force_model). Notes about sources that were looked for and not usable go to `notes`.
std::vector<std::unique_ptr<Source>> discover_sources(SourceOptions const& options,
                                                      std::vector<std::string>* notes = nullptr);

}  // namespace joule::energy
