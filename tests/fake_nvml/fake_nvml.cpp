// A stand-in for libnvidia-ml.so.1, exporting the NVML functions joule calls, so the tests run
// joule's real dlopen path. Behaviour is set through the environment when nvmlInit_v2 runs:
//   FAKE_NVML_DEVICES        number of GPUs (default 1, at most 8). GPU i has the UUID
//                            "GPU-fake-000i" and the PCI bus id "00000009:<0x0A + i>:00.0" (domain
//                            9 as on GH200, upper-case hex as NVML writes it); its MIG instance
//                            "MIG-fake-000i" resolves to it
//   FAKE_NVML_INIT_ERROR     nvmlInit_v2 answers this NVML error code (e.g. 9: Driver Not Loaded)
//   FAKE_NVML_MJ_PER_READ    the energy counter grows by this many mJ per read (default 500)
//   FAKE_NVML_ENERGY=0       the energy counter answers NOT_SUPPORTED
//   FAKE_NVML_POWER_MW       GPU-scope power (default 150000)
//   FAKE_NVML_C2C=1          C2C mode enabled (Grace Hopper)
//   FAKE_NVML_MODULE_MW      module-scope power; unset: module scope answers NOT_SUPPORTED
//   FAKE_NVML_LOST_AFTER     after this many energy reads, every call answers GPU_IS_LOST
//   FAKE_NVML_LIMIT_MW       the power limit at start (default 700000), range [100000, 700000]
//   FAKE_NVML_SET_DENIED=1   setting a limit answers NO_PERMISSION
//   FAKE_NVML_LIMIT_FILE     every limit set is appended here ("<device> <mW>"), so a test can
//                            check what a process left behind after it exited
// GPU-scope power is capped at the GPU's current limit, so a lower limit reads as less power.
#include <cstddef>
#include <cstdlib>
#include <cstdio>
#include <cstring>

namespace {
constexpr int kSuccess = 0, kInvalid = 2, kNotSupported = 3, kNoPermission = 4, kNotFound = 6, kDriverNotLoaded = 9,
              kGpuLost = 15;
constexpr int kMaxDevices = 8;
constexpr std::size_t kMigHandle = 0x100;  // MIG instance handles: kMigHandle + GPU index
int g_devices = 1, g_energy = 1, g_c2c = 0, g_lost_after = -1;
long long g_mj_per_read = 500, g_power_mw = 150000, g_module_mw = -1;
unsigned long long g_energy_mj[kMaxDevices];  // per device
int g_reads = 0;
long long g_limit_mw[kMaxDevices];
int g_set_denied = 0;

long long env(char const* name, long long fallback) {
  char const* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}
bool lost() { return g_lost_after >= 0 && g_reads > g_lost_after; }
std::size_t index_of(void* device) { return (reinterpret_cast<std::size_t>(device) - 1) % kMaxDevices; }

struct PciInfo {  // nvml.h's nvmlPciInfo_t
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

struct FieldValue {
  unsigned int fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType, nvmlReturn;
  union {
    double dVal;
    unsigned int uiVal;
    unsigned long long ullVal;
  } value;
};
}  // namespace

extern "C" {
int nvmlInit_v2() {
  if (int const error = int(env("FAKE_NVML_INIT_ERROR", 0))) return error;
  g_devices = int(env("FAKE_NVML_DEVICES", 1));
  if (g_devices > kMaxDevices) g_devices = kMaxDevices;
  if (g_devices < 0) g_devices = 0;
  g_energy = int(env("FAKE_NVML_ENERGY", 1));
  g_c2c = int(env("FAKE_NVML_C2C", 0));
  g_mj_per_read = env("FAKE_NVML_MJ_PER_READ", 500);
  g_power_mw = env("FAKE_NVML_POWER_MW", 150000);
  g_module_mw = env("FAKE_NVML_MODULE_MW", -1);
  g_lost_after = int(env("FAKE_NVML_LOST_AFTER", -1));
  g_reads = 0;
  for (auto& e : g_energy_mj) e = 1000000;
  // Limits belong to the "hardware": set at the first init only, like a real driver keeps them.
  static bool limits_known = false;
  if (!limits_known)
    for (auto& l : g_limit_mw) l = env("FAKE_NVML_LIMIT_MW", 700000);
  limits_known = true;
  g_set_denied = int(env("FAKE_NVML_SET_DENIED", 0));
  return kSuccess;
}
int nvmlShutdown() { return kSuccess; }
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = unsigned(g_devices);
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (int(index) >= g_devices) return kInvalid;
  *device = reinterpret_cast<void*>(std::size_t(index) + 1);
  return kSuccess;
}
int nvmlDeviceGetName(void*, char* name, unsigned length) {
  std::strncpy(name, "Fake H200", length);
  return kSuccess;
}
int nvmlDeviceGetPciInfo_v3(void* device, PciInfo* pci) {
  std::size_t const i = index_of(device);
  std::memset(pci, 0, sizeof *pci);
  pci->domain = 9;
  pci->bus = unsigned(0x0A + i);
  pci->pciDeviceId = 0x233010DE;
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
  std::snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
  return kSuccess;
}
int nvmlDeviceGetUUID(void* device, char* uuid, unsigned length) {
  std::snprintf(uuid, length, "GPU-fake-%04zu", index_of(device));
  return kSuccess;
}
int nvmlDeviceGetHandleByUUID(char const* uuid, void** device) {
  for (int i = 0; i < g_devices; ++i) {
    char gpu[32], mig[32];
    std::snprintf(gpu, sizeof gpu, "GPU-fake-%04d", i);
    std::snprintf(mig, sizeof mig, "MIG-fake-%04d", i);
    if (std::strcmp(uuid, gpu) == 0) *device = reinterpret_cast<void*>(std::size_t(i) + 1);
    else if (std::strcmp(uuid, mig) == 0) *device = reinterpret_cast<void*>(kMigHandle + std::size_t(i));
    else continue;
    return kSuccess;
  }
  return kNotFound;
}
int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void* mig, void** device) {
  std::size_t const h = reinterpret_cast<std::size_t>(mig);
  if (h < kMigHandle || h >= kMigHandle + std::size_t(g_devices)) return kInvalid;
  *device = reinterpret_cast<void*>(h - kMigHandle + 1);
  return kSuccess;
}
int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* mj) {
  if (!g_energy) return kNotSupported;
  ++g_reads;
  if (lost()) return kGpuLost;
  auto& counter = g_energy_mj[index_of(device)];
  counter += g_mj_per_read;
  *mj = counter;
  return kSuccess;
}
int nvmlDeviceGetFieldValues(void* device, int count, FieldValue* values) {
  if (lost()) return kGpuLost;
  for (int i = 0; i < count; ++i) {
    FieldValue& v = values[i];
    v.valueType = 1;  // unsigned int
    if (v.fieldId != 186) {
      v.nvmlReturn = kNotSupported;
    } else if (v.scopeId == 0) {
      v.nvmlReturn = kSuccess;
      long long const limit = g_limit_mw[index_of(device)];
      v.value.uiVal = unsigned(g_power_mw < limit ? g_power_mw : limit);
    } else if (v.scopeId == 1 && g_module_mw >= 0) {
      v.nvmlReturn = kSuccess;
      v.value.uiVal = unsigned(g_module_mw);
    } else {
      v.nvmlReturn = kNotSupported;
    }
  }
  return kSuccess;
}
int nvmlDeviceGetC2cModeInfoV(void*, unsigned* info) {
  *info = unsigned(g_c2c);
  return kSuccess;
}
int nvmlDeviceGetClockInfo(void*, int type, unsigned* mhz) {
  if (lost()) return kGpuLost;
  *mhz = type == 1 ? 1980 : 2619;
  return kSuccess;
}
int nvmlDeviceGetPowerManagementLimit(void* device, unsigned* mw) {
  *mw = unsigned(g_limit_mw[index_of(device)]);
  return kSuccess;
}
int nvmlDeviceGetPowerManagementLimitConstraints(void*, unsigned* min_mw, unsigned* max_mw) {
  *min_mw = 100000;
  *max_mw = 700000;
  return kSuccess;
}
int nvmlDeviceSetPowerManagementLimit(void* device, unsigned mw) {
  if (g_set_denied) return kNoPermission;
  if (mw < 100000 || mw > 700000) return kInvalid;
  std::size_t const d = index_of(device);
  g_limit_mw[d] = mw;
  if (char const* path = std::getenv("FAKE_NVML_LIMIT_FILE"))
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "%zu %u\n", d, mw);
      std::fclose(f);
    }
  return kSuccess;
}
char const* nvmlErrorString(int r) {
  switch (r) {
    case kSuccess: return "Success";
    case kNotSupported: return "Not Supported";
    case kGpuLost: return "GPU is lost";
    case kNoPermission: return "Insufficient Permissions";
    case kNotFound: return "Not Found";
    case kDriverNotLoaded: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
}
