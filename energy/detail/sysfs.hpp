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

// The file's content as an unsigned integer; ok = false (error EINVAL) if it is not one.
inline FileRead read_uint(std::string const& path, unsigned long long& value) {
  FileRead r = read_file(path);
  if (!r.ok) return r;
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
    default: return std::string("error ") + std::to_string(error);
  }
}

}  // namespace joule::energy::detail
