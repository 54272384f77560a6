#pragma once
// Reading small sysfs-style files, distinguishing "not there", "not allowed" and "not a number".
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace joule::energy::detail {

struct FileRead {
  bool ok = false;
  int error = 0;  // errno when !ok (ENOENT, EACCES, ...); EINVAL for unparsable content
  std::string text;
};

inline FileRead read_file(std::string const& path) {
  FileRead r;
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) {
    r.error = errno;
    return r;
  }
  char buf[256];
  std::size_t const n = std::fread(buf, 1, sizeof(buf) - 1, f);
  bool const failed = std::ferror(f);
  r.error = failed ? errno : 0;
  std::fclose(f);
  if (failed) return r;
  buf[n] = '\0';
  r.text = buf;
  while (!r.text.empty() && (r.text.back() == '\n' || r.text.back() == ' ')) r.text.pop_back();
  r.ok = true;
  return r;
}

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
    default: return std::string("error ") + std::to_string(error);
  }
}

}  // namespace joule::energy::detail
