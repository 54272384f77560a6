#pragma once
// Why a write to standard output failed, for the error that says so: a full disk, a closed pipe,
// an I/O error, or a file past `ulimit -f` (joule ignores SIGXFSZ, so that write fails with EFBIG
// instead of killing the process): then the limit is named too.
#include "core/detail/bytes_text.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace joule::apps {

// "File too large; this process's file-size limit (ulimit -f) is 1.0 KiB", "No space left on
// device"; error 0 (a stream's error flag without errno): "a write failed".
inline std::string output_error_text(int error) {
  if (error == 0) return "a write failed";
  std::string text = std::strerror(error);
  struct rlimit limit;
  if (error == EFBIG && ::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    text += "; this process's file-size limit (ulimit -f) is " + detail::bytes_text(double(limit.rlim_cur));
  return text;
}

}  // namespace joule::apps
