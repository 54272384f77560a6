#pragma once
// Which NVML device is this process's GPU. NVML numbers every GPU of the node, whatever
// CUDA_VISIBLE_DEVICES hides, so a process must not read "GPU g by local rank": on a shared node
// that is another job's GPU. The NVML device is found from the CUDA device the process runs on:
// by its PCI bus id when known (exact), else by its CUDA ordinal mapped through
// CUDA_VISIBLE_DEVICES. The energy source and the power limiter share this, so they act on the
// same device. The selection itself is pure (tests call it without a library); list_nvml_devices
// asks a loaded NVML for what it needs.
#include "energy/source.hpp"

#include <optional>
#include <string>
#include <vector>

namespace joule::energy::detail {

struct NvmlDeviceInfo {
  unsigned index = 0;
  std::string uuid;                    // "GPU-…" from nvmlDeviceGetUUID; empty if NVML did not say
  std::string bus_id;                  // "00000009:01:00.0" from nvmlDeviceGetPciInfo_v3; empty if unknown
  std::vector<std::string> mig_uuids;  // MIG instances (named in CUDA_VISIBLE_DEVICES) NVML places on it
};

struct NvmlSelection {
  int index = -1;   // the NVML index; -1: none, and `error` says why
  std::string how;  // how it was found, for the probe
  std::string error;
};

// "0009:0A:00.0", "00000009:0a:00.0" and "9:a:0.0" all become "00000009:0a:00.0"; "" if `id` is
// not a PCI bus id ([domain:]bus:device.function, hexadecimal).
std::string normalize_pci_bus_id(std::string const& id);

// The number of devices CUDA makes visible: every NVML device without CUDA_VISIBLE_DEVICES, else
// its entries up to the first one that names no device (CUDA ignores that one and the rest).
int visible_cuda_devices(std::optional<std::string> const& visible_devices,
                         std::vector<NvmlDeviceInfo> const& devices);

// The NVML device of the CUDA device with ordinal `cuda_device`, or of PCI bus id `pci_bus_id`
// when that is given (it wins: it names the device itself). CUDA_VISIBLE_DEVICES entries are NVML
// indices (assumes CUDA numbers devices in PCI bus order like NVML: CUDA_DEVICE_ORDER=PCI_BUS_ID,
// or the default FASTEST_FIRST on a node of identical GPUs, which breaks ties by bus order) or
// GPU-/MIG- UUIDs, possibly abbreviated to a unique prefix.
NvmlSelection select_nvml_device(std::optional<std::string> const& visible_devices, int cuda_device,
                                 std::vector<NvmlDeviceInfo> const& devices, std::string const& pci_bus_id = "");

// The NVML devices `options` ask for: one, from cuda_pci_bus_id, cuda_device or (when
// cuda_device_by_local_rank) local_rank % visible devices, Kokkos' rule; with none of them (options
// built by hand) every GPU g with g % local_size == local_rank. Empty indices: `error` says why.
struct NvmlChoice {
  std::vector<unsigned> indices;
  std::string how;
  std::string error;
};
NvmlChoice choose_nvml_devices(SourceOptions const& options, std::vector<NvmlDeviceInfo> const& devices);

// Every device of an NVML already initialised through `library` (a dlopen handle), with UUIDs and
// bus ids as far as this NVML provides them; MIG UUIDs among `visible_devices` are resolved to
// their GPU. Empty when the device count cannot be read.
std::vector<NvmlDeviceInfo> list_nvml_devices(void* library, std::optional<std::string> const& visible_devices);

}  // namespace joule::energy::detail
