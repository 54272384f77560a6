#include "support/test_paths.hpp"

// Defined for this file alone (tests/CMakeLists.txt).
namespace joule::test {

std::string const& source_dir() {
  static std::string const dir = JOULE_TEST_SOURCE_DIR;
  return dir;
}

std::string const& fake_nvml_library() {
  static std::string const path = JOULE_TEST_FAKE_NVML_LIBRARY;
  return path;
}

}  // namespace joule::test
