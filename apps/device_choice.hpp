#pragma once
// Which GPU a process takes (CUDA builds). Launched with every GPU of the node visible to every
// rank (as NCCL wants, for CUDA IPC between ranks: apps/slurm/four-gh200-per-node.sbatch), each
// process takes the GPU of its local rank: local_rank % GPUs it sees. joule gives Kokkos that id
// explicitly (KOKKOS_DEVICE_ID, before Kokkos starts), so the rule is the same with every Kokkos
// (3.x takes GPU 0 unless told) and the choice can be named in `joule info` and the run log.
// A user's own device setting (KOKKOS_DEVICE_ID, --kokkos-device-id, KOKKOS_NUM_DEVICES, ...) is
// left as it is. Kokkos-free: the rule is a pure function (tests/test_device_choice.cpp).
#include <optional>
#include <string>

namespace joule::apps {

struct DeviceChoiceInput {
  int local_rank = 0, local_size = 1;  // energy::local_process_from_environment()
  int visible = 0;                     // the GPUs this process sees (CUDA's count); 0: none
  std::optional<std::string> cuda_visible_devices;  // CUDA_VISIBLE_DEVICES as set; nullopt: unset
  std::string user_setting;  // the user's own device setting, as given ("KOKKOS_DEVICE_ID=2"); "": none
};

struct DeviceChoice {
  std::optional<int> device;  // the id to give Kokkos; nullopt: joule gives none (the user's setting, or no GPU)
  std::string how;            // why, in words: "local rank 1 of 4, GPU 1 of the 4 this process sees"
};

DeviceChoice choose_device(DeviceChoiceInput const& in);

// The user's own device setting: a --kokkos-* device flag among `args` (the --kokkos-* arguments
// joule passes to Kokkos, argv[0] first) or one of Kokkos' device variables in the environment;
// "" when there is none.
std::string user_device_setting(int argc, char const* const* args);

// What this process runs on, for `joule info` and the run log (/@gpu): set once Kokkos has started
// ("GPU 1 (PCI 0000:02:00.0): local rank 1 of 4, ..."; on a host build "no GPU (OpenMP build)");
// "" before.
void record_device(std::string text);
std::string const& device_text();

}  // namespace joule::apps
