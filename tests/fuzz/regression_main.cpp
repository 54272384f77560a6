// The fuzz targets' regression driver, built by every ordinary build (g++ included) and run by
// ctest: `fuzz_regression TARGET FOLDER...` first writes the target's seeds to a temporary folder
// and requires each to be accepted (so the target reaches the reader's success path), then feeds
// every file under each FOLDER (the inputs that once crashed, hung or leaked an unexpected
// exception, tests/fuzz/corpus/TARGET) to the same entry point: each must be accepted or rejected
// with the reader's own error type. A crash fails the test by itself.
// `fuzz_regression --seeds TARGET FOLDER` only writes the seeds (a starting corpus for libFuzzer).
#include "targets.hpp"

#include <Kokkos_Core.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace joule::fuzz;

namespace {

std::vector<std::uint8_t> read_bytes(fs::path const& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

int usage() {
  std::fprintf(stderr, "usage: fuzz_regression TARGET FOLDER...\n       fuzz_regression --seeds TARGET FOLDER\n"
                       "targets: config, dataset, checkpoint, run_log\n");
  return 2;
}

int run(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--seeds") {
    if (argc != 4 || !target_named(argv[2])) return usage();
    fs::create_directories(argv[3]);
    for (auto const& p : write_seeds(argv[2], argv[3])) std::printf("wrote %s\n", p.c_str());
    return 0;
  }
  if (argc < 3 || !target_named(argv[1])) return usage();
  std::string const name = argv[1];
  Target const target = target_named(name);
  int failures = 0;

  fs::path const seeds = fs::temp_directory_path() / ("joule-fuzz-seeds-" + std::to_string(getpid()));
  fs::create_directories(seeds);
  for (auto const& p : write_seeds(name, seeds.string())) {
    auto const bytes = read_bytes(p);
    if (target(bytes.data(), bytes.size()) != Outcome::accepted) {
      std::printf("FAIL seed %s was rejected: %s\n", p.c_str(), last_rejection().c_str());
      ++failures;
    }
  }
  fs::remove_all(seeds);

  std::vector<fs::path> inputs;
  for (int i = 2; i < argc; ++i) {
    if (!fs::is_directory(argv[i])) {
      std::printf("FAIL %s is not a folder\n", argv[i]);
      return 1;
    }
    for (auto const& entry : fs::recursive_directory_iterator(argv[i]))
      if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') inputs.push_back(entry.path());
  }
  std::sort(inputs.begin(), inputs.end());
  int accepted = 0, rejected = 0;
  for (auto const& path : inputs) {
    auto const bytes = read_bytes(path);
    try {
      if (target(bytes.data(), bytes.size()) == Outcome::accepted) {
        ++accepted;
        std::printf("accepted %s\n", path.filename().c_str());
      } else {
        ++rejected;
        std::printf("rejected %s: %s\n", path.filename().c_str(), last_rejection().c_str());
      }
    } catch (std::exception const& e) {
      ++failures;
      std::printf("FAIL %s: an exception that is not the reader's error: %s\n", path.c_str(), e.what());
    }
  }
  std::printf("%s: %zu inputs, %d accepted, %d rejected with the reader's error, %d failures\n", name.c_str(),
              inputs.size(), accepted, rejected, failures);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("OMP_NUM_THREADS", "1", 0);
  setenv("OMP_PROC_BIND", "false", 0);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  // Inputs on which the HDF5 library hangs are given up on after 3 s, not the default 60 s: all
  // the other inputs of a target, seeds included, take under 1 s together (under ASan too), and
  // each hang input costs this wait once or twice per run.
  setenv("JOULE_READ_TIMEOUT", "3", 0);
  Kokkos::initialize();
  int result = 0;
  try {
    result = run(argc, argv);
  } catch (std::exception const& e) {
    std::printf("FAIL: %s\n", e.what());
    result = 1;
  }
  shutdown();
  Kokkos::finalize();
  if (result == 0) std::printf("PASS\n");
  return result;
}
