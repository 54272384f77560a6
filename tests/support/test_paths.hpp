#pragma once
// Where the tests find the checkout's files (golden files, configurations, docs, fuzz corpora,
// scripts) and the build's fake NVML. The paths are compiled into one object (test_paths.cpp),
// not into each test unit: a path on every unit's command line made a clone at another path miss
// the compiler cache everywhere (cmake/ccache_launcher.sh), so CI, which compiles a fresh clone,
// rebuilt the whole suite. relocatable_compiles (tests/scripts/) keeps it so.
#include <string>

namespace joule::test {

std::string const& source_dir();  // the checkout's root, no trailing slash

// source_path("docs/run-log.md"): a file of the checkout by its path from the root
inline std::string source_path(std::string const& relative) { return source_dir() + "/" + relative; }

std::string const& fake_nvml_library();  // tests/fake_nvml, built beside the tests

}  // namespace joule::test
