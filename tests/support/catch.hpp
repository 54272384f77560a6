#pragma once
// Catch2 v2 (Debian 12's, one header) or v3 (a compiled library; what many GH200 systems have):
// the tests include this header and use the names below, the same under both.
// JOULE_CATCH2_MAJOR comes from tests/CMakeLists.txt (the version find_package found).
#if JOULE_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include <string>

// A test case that cannot check its subject here (root writes in a read-only folder, say) says so
// and is counted by ctest as skipped, never as passed: every Catch2 test's entry has
// SKIP_REGULAR_EXPRESSION "joule test skipped: " (joule_add_test, tests/CMakeLists.txt). Catch2 v2
// has no SKIP; a warning is printed under both. Only in a test case of its own, before any check:
// the rest of the case does not run.
#define JOULE_SKIP(reason)                      \
  do {                                          \
    WARN("joule test skipped: " << reason);     \
    return;                                     \
  } while (false)

namespace joule::test {

#if JOULE_CATCH2_MAJOR >= 3
using Catch::Approx;
inline auto Contains(std::string const& text) { return Catch::Matchers::ContainsSubstring(text); }
#else
using Catch::Detail::Approx;
inline auto Contains(std::string const& text) { return Catch::Matchers::Contains(text); }
#endif
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

}  // namespace joule::test
