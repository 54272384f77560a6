#pragma once
// Sensor files that can stall. hwmon and RAPL reads go through firmware or a BMC and may block:
// Grace's power meters answer one read per 50 ms, and a BMC-backed sensor can hang for good. A
// read here runs on a helper thread and the caller waits at most the deadline. A read that does
// not finish in time is abandoned — its thread stays blocked, detached, until the read returns or
// the process ends (it never delays the exit) — and its path is marked stalled: every later read
// of it fails at once with ETIMEDOUT, without another thread. So no sensor can hang joule, `joule
// energy probe`, or a program with the energy tool loaded: each stalled file costs one deadline.
#include <string>

namespace joule::energy::detail {

// 40 times the slowest healthy read (Grace's 50 ms rate limit); long enough that a loaded machine
// never drops a healthy sensor.
inline constexpr double kSensorReadDeadlineS = 2.0;

struct FileRead {
  bool ok = false;
  int error = 0;  // errno when !ok (ENOENT, EACCES, ...); EINVAL for unparsable content; ETIMEDOUT: stalled
  std::string text;
};

// The first 255 bytes of `path` (trailing newlines and spaces cut), read on the helper thread
// within `deadline_s`.
FileRead read_file_within(std::string const& path, double deadline_s = kSensorReadDeadlineS);

// Whether a read of `path` has stalled before (for tests and notes).
bool read_stalled(std::string const& path);

}  // namespace joule::energy::detail
