#pragma once
// Reading small sysfs-style files, distinguishing "not there", "not allowed", "not a number" and
// "does not answer".
#include "energy/detail/bounded_read.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

namespace joule::energy::detail {

// Every sensor file is read within a deadline (bounded_read.hpp): a stalled one is dropped.
inline FileRead read_file(std::string const& path) { return read_file_within(path); }

// A sensor file that holds a negative number (error of read_uint; the number stays in text). No
// meter joule reads (power in microwatts, energy counters in microjoules, intervals) goes below 0:
// strtoull would take "-5" for 2^64 - 5, a reading of exawatts.
inline constexpr int kNegativeReading = EDOM;

// The file's content as an unsigned integer; ok = false if it is not one (error EINVAL), or if it
// is a negative number (error kNegativeReading).
inline FileRead read_uint(std::string const& path, unsigned long long& value) {
  FileRead r = read_file(path);
  if (!r.ok) return r;
  auto const first = r.text.find_first_not_of(" \t\n\v\f\r");  // strtoull skips these before a sign
  if (first != std::string::npos && r.text[first] == '-') {  // value is left as it was
    r.ok = false;
    r.error = kNegativeReading;
    return r;
  }
  char* end = nullptr;
  errno = 0;
  value = std::strtoull(r.text.c_str(), &end, 10);
  if (r.text.empty() || *end != '\0' || errno) {
    r.ok = false;
    r.error = EINVAL;
  }
  return r;
}

inline std::string describe_error(int error) {
  switch (error) {
    case ENOENT: return "does not exist";
    case EACCES: return "permission denied";
    case EINVAL: return "does not hold a number";
    case ETIMEDOUT:
      return "did not answer within " + std::to_string(int(kSensorReadDeadlineS)) + " s (a stalled sensor: no longer read)";
    case kNegativeReading: return "holds a negative reading";
    default: return std::string("error ") + std::to_string(error);
  }
}

// describe_error, with the value a negative reading held: "holds a negative reading (-5000000)".
inline std::string describe_read(FileRead const& r) {
  if (!r.ok && r.error == kNegativeReading) return describe_error(r.error) + " (" + r.text + ")";
  return describe_error(r.error);
}

}  // namespace joule::energy::detail
