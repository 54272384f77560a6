#pragma once
// One number through a printf format ("%.1f J"): the energy texts' figures (probe, report).
#include <cstdio>
#include <string>

namespace joule::energy::detail {

inline std::string number_text(char const* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

}  // namespace joule::energy::detail
