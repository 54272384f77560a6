// The PCI bus id of the CUDA device Kokkos runs on, so that NVML reads that device and no other
// (NVML numbers every GPU of the node; CUDA only those CUDA_VISIBLE_DEVICES shows). The one place
// in energy/ that asks the CUDA runtime which device this is; host builds answer "".
#include "energy/source.hpp"

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace joule::energy {

std::string kokkos_device_pci_bus_id() {
#if defined(KOKKOS_ENABLE_CUDA)
  // Before Kokkos::initialize (or after finalize) there is no device of Kokkos' to ask about.
  if (!Kokkos::is_initialized()) return "";
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, Kokkos::Cuda().cuda_device()) != cudaSuccess) return "";
  return bus_id;
#else
  return "";
#endif
}

SourceOptions SourceOptions::from_environment() {
  SourceOptions o = from_environment_variables();
  // The device Kokkos runs on, exactly, on CUDA builds; else the one Kokkos' rule would pick.
  o.cuda_pci_bus_id = kokkos_device_pci_bus_id();
  o.cuda_device_by_local_rank = o.cuda_pci_bus_id.empty();
  return o;
}

}  // namespace joule::energy
