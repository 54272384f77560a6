#include "device_choice.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

namespace joule::apps {

DeviceChoice choose_device(DeviceChoiceInput const& in) {
  if (!in.user_setting.empty()) return {std::nullopt, "as you set it (" + in.user_setting + ")"};
  std::string const shown =
      in.cuda_visible_devices ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", *in.cuda_visible_devices) : std::string();
  if (in.visible <= 0) return {std::nullopt, "no GPU visible to this process" + shown};
  int const rank = in.local_rank < 0 ? 0 : in.local_rank;
  if (in.visible == 1) {
    std::string how = "the one GPU this process sees" + shown;
    if (in.local_size > 1) how += fmt::format(", local rank {} of {}", rank, in.local_size);
    return {0, how};
  }
  int const device = rank % in.visible;
  std::string how = fmt::format("local rank {} of {}: GPU {} of the {} this process sees{}", rank, in.local_size, device,
                                in.visible, shown);
  if (rank >= in.visible)
    how += fmt::format(", shared with local rank {} (more local ranks than GPUs)", device);
  else if (in.local_size > in.visible && rank + in.visible < in.local_size)
    how += fmt::format(", shared with local rank {} (more local ranks than GPUs)", rank + in.visible);
  return {device, how};
}

namespace {
// Kokkos' device flags (every spelling apps/environment.cpp checks) and variables.
constexpr std::string_view kDeviceFlags[] = {"--kokkos-device-id", "--kokkos-device",     "--device-id",
                                             "--device",           "--kokkos-num-devices", "--kokkos-ndevices",
                                             "--ndevices",         "--kokkos-skip-device", "--kokkos-map-device-id-by",
                                             "--kokkos-visible-devices"};
constexpr char const* kDeviceVariables[] = {"KOKKOS_DEVICE_ID", "KOKKOS_NUM_DEVICES", "KOKKOS_SKIP_DEVICE",
                                            "KOKKOS_MAP_DEVICE_ID_BY", "KOKKOS_VISIBLE_DEVICES"};
std::string& recorded() {
  static std::string text;
  return text;
}
}  // namespace

std::string user_device_setting(int argc, char const* const* args) {
  for (int i = 1; i < argc && args[i]; ++i) {
    std::string_view const arg = args[i];
    for (auto const flag : kDeviceFlags)
      if (arg.substr(0, flag.size()) == flag && (arg.size() == flag.size() || arg[flag.size()] == '='))
        return std::string(arg);
  }
  for (char const* name : kDeviceVariables)
    if (char const* value = std::getenv(name)) return std::string(name) + "=" + value;
  return "";
}

void record_device(std::string text) { recorded() = std::move(text); }
std::string const& device_text() { return recorded(); }

}  // namespace joule::apps
