// Which GPU a process takes (apps/device_choice.hpp, issue 65): local rank modulo the GPUs it
// sees, the user's own setting left alone, one visible GPU taken whatever the rank.
#include "device_choice.hpp"

#include "support/catch.hpp"

#include <cstdlib>

using joule::apps::choose_device;
using joule::apps::DeviceChoiceInput;

namespace {
DeviceChoiceInput ranks(int local_rank, int local_size, int visible) {
  DeviceChoiceInput in;
  in.local_rank = local_rank;
  in.local_size = local_size;
  in.visible = visible;
  return in;
}
}  // namespace

TEST_CASE("device choice: each local rank takes the GPU of its number among the node's", "[device_choice]") {
  for (int r = 0; r < 4; ++r) {
    auto const c = choose_device(ranks(r, 4, 4));
    REQUIRE(c.device == r);
    CHECK(c.how.find("local rank " + std::to_string(r) + " of 4") != std::string::npos);
    CHECK(c.how.find("shared") == std::string::npos);
  }
  CHECK(choose_device(ranks(0, 1, 4)).device == 0);  // one process on a node of 4: the first
}

TEST_CASE("device choice: more local ranks than GPUs wrap round and say they share", "[device_choice]") {
  auto const c5 = choose_device(ranks(5, 8, 4));
  REQUIRE(c5.device == 1);
  CHECK(c5.how.find("shared with local rank 1") != std::string::npos);
  auto const c1 = choose_device(ranks(1, 8, 4));  // the first of the pair says so too
  REQUIRE(c1.device == 1);
  CHECK(c1.how.find("shared with local rank 5") != std::string::npos);
  CHECK(choose_device(ranks(7, 8, 4)).device == 3);
  CHECK(choose_device(ranks(4, 6, 4)).device == 0);
  CHECK(choose_device(ranks(3, 6, 4)).how.find("shared") == std::string::npos);  // rank 7 does not exist
}

TEST_CASE("device choice: a process that sees one GPU takes it, whatever its local rank", "[device_choice]") {
  auto in = ranks(3, 4, 1);  // --gpus-per-task=1: CUDA_VISIBLE_DEVICES names its own
  in.cuda_visible_devices = "3";
  auto const c = choose_device(in);
  REQUIRE(c.device == 0);
  CHECK(c.how.find("CUDA_VISIBLE_DEVICES=3") != std::string::npos);
}

TEST_CASE("device choice: a CUDA_VISIBLE_DEVICES subset is numbered from 0", "[device_choice]") {
  auto in = ranks(3, 4, 2);  // two of the node's GPUs shown: ids 0 and 1 in CUDA's numbering
  in.cuda_visible_devices = "2,3";
  auto const c = choose_device(in);
  REQUIRE(c.device == 1);
  CHECK(c.how.find("GPU 1 of the 2 this process sees (CUDA_VISIBLE_DEVICES=2,3)") != std::string::npos);
}

TEST_CASE("device choice: the user's own setting is left alone", "[device_choice]") {
  auto in = ranks(2, 4, 4);
  in.user_setting = "KOKKOS_DEVICE_ID=3";
  auto const c = choose_device(in);
  CHECK_FALSE(c.device.has_value());
  CHECK(c.how == "as you set it (KOKKOS_DEVICE_ID=3)");
}

TEST_CASE("device choice: no GPU visible gives no id", "[device_choice]") {
  auto in = ranks(0, 1, 0);
  in.cuda_visible_devices = "";
  auto const c = choose_device(in);
  CHECK_FALSE(c.device.has_value());
  CHECK(c.how.find("no GPU visible") != std::string::npos);
}

TEST_CASE("device choice: the user's device flags and variables are found", "[device_choice]") {
  ::unsetenv("KOKKOS_DEVICE_ID");
  ::unsetenv("KOKKOS_NUM_DEVICES");
  ::unsetenv("KOKKOS_SKIP_DEVICE");
  ::unsetenv("KOKKOS_MAP_DEVICE_ID_BY");
  char const* none[] = {"joule", "--kokkos-threads=2", "--kokkos-devices-are-not-a-flag=1"};
  CHECK(joule::apps::user_device_setting(3, none).empty());
  char const* flag[] = {"joule", "--kokkos-threads=2", "--kokkos-device-id=1"};
  CHECK(joule::apps::user_device_setting(3, flag) == "--kokkos-device-id=1");
  char const* old[] = {"joule", "--kokkos-ndevices=2,1"};
  CHECK(joule::apps::user_device_setting(2, old) == "--kokkos-ndevices=2,1");
  ::setenv("KOKKOS_NUM_DEVICES", "2", 1);
  CHECK(joule::apps::user_device_setting(2, none) == "KOKKOS_NUM_DEVICES=2");
  ::unsetenv("KOKKOS_NUM_DEVICES");
  ::setenv("KOKKOS_DEVICE_ID", "0", 1);
  CHECK(joule::apps::user_device_setting(1, none) == "KOKKOS_DEVICE_ID=0");
  ::unsetenv("KOKKOS_DEVICE_ID");
}
