#include "energy/detail/nvml_select.hpp"

#include "energy/detail/dl_symbol.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace joule::energy::detail {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string const& s) {
  auto const b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool starts_with(std::string const& s, std::string const& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// CUDA_VISIBLE_DEVICES' entries, as CUDA splits them.
std::vector<std::string> split_entries(std::string const& visible) {
  std::vector<std::string> entries;
  if (trim(visible).empty()) return entries;
  std::size_t start = 0;
  while (true) {
    auto const comma = visible.find(',', start);
    entries.push_back(trim(visible.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return entries;
}

bool parse_hex(std::string const& s, unsigned long max, unsigned long& value) {
  if (s.empty() || s.size() > 8 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
    return false;
  value = std::strtoul(s.c_str(), nullptr, 16);
  return value <= max;
}

// One CUDA_VISIBLE_DEVICES entry: the position in `devices` it names, or -1 and why not.
int resolve_entry(std::string const& entry, std::vector<NvmlDeviceInfo> const& devices, std::string& why) {
  if (!entry.empty() &&
      std::all_of(entry.begin(), entry.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    unsigned long const index = std::strtoul(entry.c_str(), nullptr, 10);
    for (std::size_t i = 0; i < devices.size(); ++i)
      if (devices[i].index == index) return int(i);
    why = "names no GPU (NVML sees " + std::to_string(devices.size()) + ")";
    return -1;
  }
  std::string const want = lower(entry);
  bool const mig = starts_with(want, "mig-");
  if (!mig && !starts_with(want, "gpu-")) {
    why = "is neither a device index nor a GPU-/MIG- UUID";
    return -1;
  }
  // CUDA accepts a UUID abbreviated to a unique prefix.
  int found = -1, matches = 0;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    bool match = false;
    if (mig)
      for (auto const& u : devices[i].mig_uuids) match = match || starts_with(lower(u), want);
    else
      match = !devices[i].uuid.empty() && starts_with(lower(devices[i].uuid), want);
    if (match) {
      found = int(i);
      ++matches;
    }
  }
  if (matches == 1) return found;
  why = matches > 1 ? "matches the UUIDs of several GPUs"
        : mig       ? "matches no MIG instance NVML knows"
                    : "matches no GPU's UUID";
  return -1;
}

}  // namespace

std::string normalize_pci_bus_id(std::string const& id) {
  std::string const s = trim(id);
  auto const dot = s.rfind('.');
  auto const last_colon = s.rfind(':');
  if (dot == std::string::npos || last_colon == std::string::npos || dot < last_colon) return "";
  auto const first_colon = s.find(':');
  unsigned long domain = 0, bus = 0, device = 0, function = 0;
  bool const has_domain = first_colon != last_colon;
  if (has_domain &&
      (s.find(':', first_colon + 1) != last_colon || !parse_hex(s.substr(0, first_colon), 0xffffffffUL, domain)))
    return "";
  std::size_t const bus_start = has_domain ? first_colon + 1 : 0;
  if (!parse_hex(s.substr(bus_start, last_colon - bus_start), 0xff, bus) ||
      !parse_hex(s.substr(last_colon + 1, dot - last_colon - 1), 0x1f, device) ||
      !parse_hex(s.substr(dot + 1), 7, function))
    return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08lx:%02lx:%02lx.%lx", domain, bus, device, function);
  return buf;
}

int visible_cuda_devices(std::optional<std::string> const& visible_devices,
                         std::vector<NvmlDeviceInfo> const& devices) {
  if (!visible_devices) return int(devices.size());
  int count = 0;
  std::string why;
  for (auto const& e : split_entries(*visible_devices)) {
    if (resolve_entry(e, devices, why) < 0) break;
    ++count;
  }
  return count;
}

NvmlSelection select_nvml_device(std::optional<std::string> const& visible_devices, int cuda_device,
                                 std::vector<NvmlDeviceInfo> const& devices, std::string const& pci_bus_id) {
  NvmlSelection s;
  if (devices.empty()) {
    s.error = "NVML sees no GPU";
    return s;
  }
  if (!pci_bus_id.empty()) {
    std::string const want = normalize_pci_bus_id(pci_bus_id);
    if (want.empty()) {
      s.error = "'" + pci_bus_id + "' is not a PCI bus id";
      return s;
    }
    std::string known;
    for (auto const& d : devices) {
      if (normalize_pci_bus_id(d.bus_id) == want) {
        s.index = int(d.index);
        s.how = "PCI bus id " + d.bus_id + " of this process's CUDA device";
        return s;
      }
      known += (known.empty() ? "" : ", ") + (d.bus_id.empty() ? std::string("?") : d.bus_id);
    }
    s.error = "no GPU NVML knows has the CUDA device's PCI bus id " + pci_bus_id + " (NVML's: " + known + ")";
    return s;
  }
  if (cuda_device < 0) {
    s.error = "no CUDA device given";
    return s;
  }
  std::string const cuda = "CUDA device " + std::to_string(cuda_device);
  if (!visible_devices) {
    if (cuda_device < int(devices.size())) {
      s.index = int(devices[std::size_t(cuda_device)].index);
      s.how = cuda + " (no CUDA_VISIBLE_DEVICES: NVML index " + std::to_string(s.index) + ", both in PCI bus order)";
    } else {
      s.error = cuda + " does not exist: NVML sees " + std::to_string(devices.size()) + " GPU(s)";
    }
    return s;
  }
  std::string const named = "CUDA_VISIBLE_DEVICES=" + *visible_devices;
  auto const entries = split_entries(*visible_devices);
  if (entries.empty()) {
    s.error = named + " (empty): this process sees no GPU";
    return s;
  }
  for (std::size_t i = 0; i < entries.size() && int(i) <= cuda_device; ++i) {
    std::string why;
    int const d = resolve_entry(entries[i], devices, why);
    if (d < 0) {
      // CUDA stops at an entry that names no device: the ones after it are not visible either.
      s.error = named + ": entry '" + entries[i] + "' " + why +
                (i == 0 ? std::string(", so this process sees no GPU")
                        : ", so CUDA sees only the " + std::to_string(i) + " device(s) before it and " + cuda +
                              " is not among them");
      return s;
    }
    if (int(i) == cuda_device) {
      s.index = int(devices[std::size_t(d)].index);
      s.how = cuda + " = entry '" + entries[i] + "' of " + named;
      return s;
    }
  }
  s.error = cuda + " does not exist: " + named + " makes " + std::to_string(entries.size()) + " visible";
  return s;
}

NvmlChoice choose_nvml_devices(SourceOptions const& options, std::vector<NvmlDeviceInfo> const& devices) {
  NvmlChoice c;
  int const rank = options.local_rank < 0 ? 0 : options.local_rank;
  auto take = [&](NvmlSelection const& s, std::string const& prefix) {
    if (s.index >= 0) c.indices.push_back(unsigned(s.index));
    c.how = prefix + s.how;
    c.error = s.error.empty() ? "" : prefix + s.error;
  };
  if (!options.cuda_pci_bus_id.empty()) {
    take(select_nvml_device(options.cuda_visible_devices, -1, devices, options.cuda_pci_bus_id), "");
  } else if (options.cuda_device >= 0) {
    take(select_nvml_device(options.cuda_visible_devices, options.cuda_device, devices), "");
  } else if (options.cuda_device_by_local_rank) {
    // Kokkos' rule: local rank mod the number of visible devices.
    int const count = visible_cuda_devices(options.cuda_visible_devices, devices);
    int const ordinal = count > 0 ? rank % count : 0;
    take(select_nvml_device(options.cuda_visible_devices, ordinal, devices),
         count > 0 ? "local rank " + std::to_string(rank) + " mod " + std::to_string(count) + " visible device(s): "
                   : "");
  } else {
    // Options built by hand, without a CUDA device: the GPUs of this local rank, as before.
    int const size = options.local_size < 1 ? 1 : options.local_size;
    for (auto const& d : devices)
      if (int(d.index) % size == rank) c.indices.push_back(d.index);
    c.how = "GPUs g with g mod " + std::to_string(size) + " = local rank " + std::to_string(rank) +
            " (no CUDA device given)";
    if (c.indices.empty())
      c.error = "no GPU for local rank " + std::to_string(rank) + " of " + std::to_string(size) + " (NVML sees " +
                std::to_string(devices.size()) + ")";
  }
  return c;
}

std::vector<NvmlDeviceInfo> list_nvml_devices(void* library, std::optional<std::string> const& visible_devices) {
  // nvml.h: nvmlPciInfo_t (the layout nvmlDeviceGetPciInfo_v3 fills) and the UUID buffer size.
  struct PciInfo {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
  };
  constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
  using Device = void*;
  int (*count)(unsigned*) = nullptr;
  int (*by_index)(unsigned, Device*) = nullptr;
  int (*pci_info)(Device, PciInfo*) = nullptr;
  int (*uuid_of)(Device, char*, unsigned) = nullptr;
  int (*by_uuid)(char const*, Device*) = nullptr;
  int (*mig_parent)(Device, Device*) = nullptr;
  std::vector<NvmlDeviceInfo> devices;
  unsigned n = 0;
  if (!bind_symbol(library, "nvmlDeviceGetCount_v2", count) ||
      !bind_symbol(library, "nvmlDeviceGetHandleByIndex_v2", by_index) || count(&n) != 0)
    return devices;
  bind_symbol(library, "nvmlDeviceGetPciInfo_v3", pci_info);
  bind_symbol(library, "nvmlDeviceGetUUID", uuid_of);
  bind_symbol(library, "nvmlDeviceGetHandleByUUID", by_uuid);
  bind_symbol(library, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig_parent);
  std::vector<Device> handles;
  for (unsigned i = 0; i < n; ++i) {
    Device h = nullptr;
    if (by_index(i, &h) != 0) continue;  // e.g. a GPU this process may not see: it cannot be ours
    NvmlDeviceInfo d;
    d.index = i;
    PciInfo pci{};
    if (pci_info && pci_info(h, &pci) == 0) d.bus_id.assign(pci.busId, strnlen(pci.busId, sizeof pci.busId));
    char uuid[kUuidBufferSize] = {};
    if (uuid_of && uuid_of(h, uuid, sizeof uuid) == 0) d.uuid.assign(uuid, strnlen(uuid, sizeof uuid));
    devices.push_back(std::move(d));
    handles.push_back(h);
  }
  // A MIG instance's energy is its GPU's: find the GPU of every MIG UUID CUDA_VISIBLE_DEVICES names.
  if (visible_devices && by_uuid && mig_parent)
    for (auto const& e : split_entries(*visible_devices)) {
      if (!starts_with(lower(e), "mig-")) continue;
      Device mig = nullptr, parent = nullptr;
      if (by_uuid(e.c_str(), &mig) != 0 || mig_parent(mig, &parent) != 0) continue;
      for (std::size_t i = 0; i < handles.size(); ++i)
        if (handles[i] == parent) devices[i].mig_uuids.push_back(e);
    }
  return devices;
}

}  // namespace joule::energy::detail
