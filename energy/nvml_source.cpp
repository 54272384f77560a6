// NVML, loaded at run time with dlopen: no build-time dependency, and a machine without the
// driver simply has no NVML source. Energy: nvmlDeviceGetTotalEnergyConsumption (mJ since driver
// load). Power: nvmlDeviceGetFieldValues with NVML_FI_DEV_POWER_INSTANT and the scope set
// explicitly (GPU; MODULE on Grace Hopper, where C2C mode is enabled). Clocks: SM and memory.
// Only this process's GPU is read (detail/nvml_select.hpp): NVML numbers every GPU of the node.
#include "energy/source.hpp"

#include "energy/detail/dl_symbol.hpp"
#include "energy/detail/nvml_select.hpp"

#include <dlfcn.h>

#include <cmath>
#include <cstring>

namespace joule::energy {

namespace {

// The slice of the NVML ABI joule uses (nvml.h, CUDA 12).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_opaque*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr unsigned NVML_FI_DEV_POWER_INSTANT = 186;
constexpr unsigned NVML_POWER_SCOPE_GPU = 0;
constexpr unsigned NVML_POWER_SCOPE_MODULE = 1;
constexpr int NVML_CLOCK_SM = 1;
constexpr int NVML_CLOCK_MEM = 2;
union nvmlValue_t {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
  unsigned short usVal;
};
struct nvmlFieldValue_t {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};
struct nvmlC2cModeInfo_v1_t {
  unsigned int isC2cEnabled;
};

struct Nvml {
  void* handle = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*device_count)(unsigned*) = nullptr;
  nvmlReturn_t (*device_handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*device_name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*total_energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*field_values)(nvmlDevice_t, int, nvmlFieldValue_t*) = nullptr;
  nvmlReturn_t (*c2c_mode)(nvmlDevice_t, nvmlC2cModeInfo_v1_t*) = nullptr;  // optional
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;             // optional
  char const* (*error_string)(nvmlReturn_t) = nullptr;                       // optional

  std::string error(nvmlReturn_t r) const {
    return error_string ? error_string(r) : "NVML error " + std::to_string(r);
  }
};


// One power field value, zero-initialised as NVML asks.
bool power_field(Nvml const& nvml, nvmlDevice_t dev, unsigned scope, double& watts, nvmlReturn_t& status) {
  nvmlFieldValue_t v;
  std::memset(&v, 0, sizeof v);
  v.fieldId = NVML_FI_DEV_POWER_INSTANT;
  v.scopeId = scope;
  status = nvml.field_values(dev, 1, &v);
  if (status == NVML_SUCCESS) status = v.nvmlReturn;
  if (status != NVML_SUCCESS) return false;
  watts = v.value.uiVal * 1e-3;  // milliwatts
  return true;
}

class NvmlSource final : public Source {
 public:
  // Reads the GPUs `choice` names (one: this process's; several only for options built by hand).
  NvmlSource(Nvml nvml, detail::NvmlChoice const& choice) : nvml_(nvml) {
    if (!choice.error.empty()) notes_.push_back("nvml: " + choice.error + "; no GPU is read");
    for (unsigned g : choice.indices) {
      nvmlDevice_t dev = nullptr;
      if (nvmlReturn_t const r = nvml_.device_handle(g, &dev); r != NVML_SUCCESS) {
        notes_.push_back("nvml gpu " + std::to_string(g) + ": " + nvml_.error(r));
        continue;
      }
      char name[96] = "GPU";
      nvml_.device_name(dev, name, sizeof name);
      std::string const who = "nvml gpu " + std::to_string(g) + " (" + name + ")";
      unsigned long long mj = 0;
      nvmlReturn_t status = nvml_.total_energy(dev, &mj);
      double watts = 0;
      if (status == NVML_SUCCESS) {
        add({kDomainGpu, who + " total energy", Quantity::energy_counter, true}, dev, Kind::energy, 0);
        first_mj_.back() = mj;
      } else if (power_field(nvml_, dev, NVML_POWER_SCOPE_GPU, watts, status)) {
        notes_.push_back(who + ": total energy counter unsupported (" + nvml_.error(status) + "), integrating GPU power");
        add({kDomainGpu, who + " power (GPU scope)", Quantity::power, true}, dev, Kind::power, NVML_POWER_SCOPE_GPU);
      } else {
        notes_.push_back(who + ": neither energy counter nor GPU power readable (" + nvml_.error(status) + ")");
      }
      nvmlC2cModeInfo_v1_t c2c{};
      bool const grace_hopper = nvml_.c2c_mode && nvml_.c2c_mode(dev, &c2c) == NVML_SUCCESS && c2c.isC2cEnabled;
      if (grace_hopper) {
        if (power_field(nvml_, dev, NVML_POWER_SCOPE_MODULE, watts, status))
          add({kDomainModule, who + " power (module scope)", Quantity::power, true}, dev, Kind::power,
              NVML_POWER_SCOPE_MODULE);
        else
          notes_.push_back(who + ": C2C enabled but module-scope power " + nvml_.error(status) +
                           " (older driver?): no module domain from NVML");
      }
      unsigned mhz = 0;
      if (nvml_.clock && nvml_.clock(dev, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS)
        add({"sm_clock_mhz", who + " SM clock", Quantity::gauge, true}, dev, Kind::sm_clock, 0);
      if (nvml_.clock && nvml_.clock(dev, NVML_CLOCK_MEM, &mhz) == NVML_SUCCESS)
        add({"mem_clock_mhz", who + " memory clock", Quantity::gauge, true}, dev, Kind::mem_clock, 0);
    }
  }
  ~NvmlSource() override {
    nvml_.shutdown();
    dlclose(nvml_.handle);
  }
  std::string name() const override { return "nvml"; }

  void read(std::vector<double>& values) override {
    values.resize(reads_.size());
    for (std::size_t i = 0; i < reads_.size(); ++i) {
      auto const& r = reads_[i];
      nvmlReturn_t status = NVML_SUCCESS;
      double v = std::nan("");
      switch (r.kind) {
        case Kind::energy: {
          unsigned long long mj = 0;
          status = nvml_.total_energy(r.dev, &mj);
          if (status == NVML_SUCCESS) v = double(mj - first_mj_[i]) * 1e-3;
          break;
        }
        case Kind::power: power_field(nvml_, r.dev, r.scope, v, status); break;
        case Kind::sm_clock:
        case Kind::mem_clock: {
          unsigned mhz = 0;
          status = nvml_.clock(r.dev, r.kind == Kind::sm_clock ? NVML_CLOCK_SM : NVML_CLOCK_MEM, &mhz);
          if (status == NVML_SUCCESS) v = mhz;
          break;
        }
      }
      if (status != NVML_SUCCESS) v = std::nan("");
      if (status != NVML_SUCCESS && !lost_[i]) {
        notes_.push_back(channels_[i].sensor + ": " + nvml_.error(status) + " during the run");
        lost_[i] = true;
      }
      values[i] = v;
    }
  }

 private:
  enum class Kind { energy, power, sm_clock, mem_clock };
  struct Read {
    nvmlDevice_t dev;
    Kind kind;
    unsigned scope;
  };
  void add(Channel c, nvmlDevice_t dev, Kind kind, unsigned scope) {
    channels_.push_back(std::move(c));
    reads_.push_back({dev, kind, scope});
    first_mj_.push_back(0);
    lost_.push_back(false);
  }
  Nvml nvml_;
  std::vector<Read> reads_;
  std::vector<unsigned long long> first_mj_;
  std::vector<bool> lost_;
};

std::string indices(detail::NvmlChoice const& choice) {
  std::string text;
  for (unsigned g : choice.indices) text += (text.empty() ? "" : ", ") + std::to_string(g);
  return text;
}

}  // namespace

std::unique_ptr<Source> open_nvml(SourceOptions const& options, SourceAttempt* attempt) {
  SourceAttempt local;
  SourceAttempt& a = attempt ? *attempt : local;
  a = {"nvml", options.nvml_library, "", false};
  if (options.nvml_library == "none") {
    a.outcome = "disabled (JOULE_NVML_LIBRARY=none)";
    return nullptr;
  }
  Nvml n;
  n.handle = dlopen(options.nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!n.handle) {
    char const* why = dlerror();
    std::string const text = why ? why : "";
    a.outcome = text.find("No such file") != std::string::npos
                    ? "not found (no NVIDIA driver installed?)"
                    : "cannot be loaded: " + text;
    return nullptr;
  }
  char const* missing = nullptr;
  auto need = [&](char const* symbol, auto& f) {
    if (!missing && !detail::bind_symbol(n.handle, symbol, f)) missing = symbol;
  };
  need("nvmlInit_v2", n.init);
  need("nvmlShutdown", n.shutdown);
  need("nvmlDeviceGetCount_v2", n.device_count);
  need("nvmlDeviceGetHandleByIndex_v2", n.device_handle);
  need("nvmlDeviceGetName", n.device_name);
  need("nvmlDeviceGetTotalEnergyConsumption", n.total_energy);
  need("nvmlDeviceGetFieldValues", n.field_values);
  detail::bind_symbol(n.handle, "nvmlDeviceGetC2cModeInfoV", n.c2c_mode);
  detail::bind_symbol(n.handle, "nvmlDeviceGetClockInfo", n.clock);
  detail::bind_symbol(n.handle, "nvmlErrorString", n.error_string);
  if (missing) {
    a.outcome =
        std::string("loaded, but symbol ") + missing + " missing (not NVML, or a driver older than joule needs)";
    dlclose(n.handle);
    return nullptr;
  }
  if (nvmlReturn_t const r = n.init(); r != NVML_SUCCESS) {
    a.outcome = "nvmlInit_v2 failed: " + n.error(r) + " (driver not loaded, or no GPU?)";
    dlclose(n.handle);
    return nullptr;
  }
  auto const devices = detail::list_nvml_devices(n.handle, options.cuda_visible_devices);
  auto const choice = detail::choose_nvml_devices(options, devices);
  auto source = std::make_unique<NvmlSource>(n, choice);
  if (!choice.error.empty()) {
    a.outcome = "loaded, but no GPU of this process: " + choice.error;
  } else if (source->channels().empty()) {
    a.outcome = "GPU(s) " + indices(choice) + " (" + choice.how + ") offer neither energy nor power";
  } else {
    a.found = true;
    a.outcome = "found: gpu " + indices(choice) + ", " + choice.how;
  }
  return source;
}

}  // namespace joule::energy
