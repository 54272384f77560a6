#pragma once
// Fuzz targets for joule's readers of untrusted input, shared by the libFuzzer executables
// (tests/fuzz/CMakeLists.txt, clang, JOULE_FUZZ=ON) and by the regression driver that every
// ordinary build runs over tests/fuzz/corpus/ (tests/fuzz/regression_main.cpp).
//
// Each target hands one input to the library function joule itself uses for it:
//   config      parse_config(text)                      (joule train --config, data info)
//   dataset     Dataset::open(file) + read()            (HDF5 bytes written to a temporary file)
//   checkpoint  Trainer::resume(file)                   (on a tiny model and dataset)
//   run_log     read_run_log(file) + is_run_log(file)   (joule inspect, tune --resume)
// The error type each documents (ConfigError, DatasetError, TrainingError, RunLogError) means
// "rejected"; anything else escapes and is a finding: an abort under libFuzzer, a failure in the
// regression driver. So are crashes, sanitizer reports and hangs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace joule::fuzz {

enum class Outcome { accepted, rejected };

using Target = Outcome (*)(std::uint8_t const* data, std::size_t size);

// The names above; nullptr for another name.
Target target_named(std::string const& name);
std::vector<std::string> target_names();

// Writes valid inputs for a target into `folder` (a starting corpus; each must be accepted).
// Returns their paths.
std::vector<std::string> write_seeds(std::string const& target, std::string const& folder);

// The message of the last rejection (for the regression driver's output).
std::string const& last_rejection();

// Frees the checkpoint target's trainer (before Kokkos::finalize).
void shutdown();

}  // namespace joule::fuzz
