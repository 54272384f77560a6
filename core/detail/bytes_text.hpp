#pragma once
// Byte counts for people: "512 bytes", "1.5 MiB", "3.2 TiB" (binary units).
#include <cstdio>
#include <string>

namespace joule::detail {

inline std::string bytes_text(double bytes) {
  char const* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char text[48];
  std::snprintf(text, sizeof text, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return text;
}

}  // namespace joule::detail
