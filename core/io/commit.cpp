#include "core/io/commit.hpp"

#include "core/detail/bytes_text.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <string>

namespace joule::io {

namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "an unknown host";
  return name;
}

}  // namespace

std::string temporary_path(std::string const& path) { return path + ".tmp"; }

std::string folder_of(std::string const& path) {
  auto const slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

long long free_bytes(std::string const& path) {
  struct statvfs s;
  if (statvfs(folder_of(path).c_str(), &s) != 0) return -1;
  return (long long)s.f_bavail * (long long)s.f_frsize;
}

std::string free_space_text(std::string const& path) {
  long long const free = free_bytes(path);
  std::string const folder = folder_of(path);
  return free < 0 ? "free space in " + folder + " unknown" : detail::bytes_text(double(free)) + " free in " + folder;
}

void require_free_space(std::string const& role, std::string const& path, std::uint64_t bytes, std::string const& what) {
  long long const free = free_bytes(path);
  if (free >= 0 && std::uint64_t(free) < bytes)
    throw WriteError(role + " " + path + ": a " + what + " takes " + detail::bytes_text(double(bytes)) + "; " +
                     free_space_text(path) + " (free some, or write it elsewhere)");
}

bool sync_path(std::string const& path, bool folder) {
  int const fd = ::open(path.c_str(), folder ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return folder;  // a folder that cannot be opened is not synced: best effort
  bool const ok = ::fsync(fd) == 0 || (folder && (errno == EINVAL || errno == EROFS));
  ::close(fd);
  return ok;
}

void commit_file(std::string const& path, std::string const& what,
                 std::function<void(std::string const& temporary)> const& write, CommitChecks const& checks) {
  std::string const temporary = temporary_path(path);
  auto const fail = [&](std::string const& why) {
    std::remove(temporary.c_str());
    struct stat st;
    bool const had_one = ::stat(path.c_str(), &st) == 0;
    throw WriteError("cannot write the " + what + " " + path + ": " + why + "; " + free_space_text(path) + "; " +
                     (had_one ? "the previous " + what + " there is unchanged" : "nothing was written there"));
  };
  if (checks.expected_bytes > 0) {
    long long const free = free_bytes(path);
    if (free >= 0 && std::uint64_t(free) < checks.expected_bytes)
      fail("it takes " + detail::bytes_text(double(checks.expected_bytes)) + ", more than is free");
  }
  try {
    write(temporary);
  } catch (std::exception const& e) {
    fail(e.what());
  } catch (...) {
    fail("unknown error");
  }
  int const saved = errno;
  if (!sync_path(temporary, false)) fail(std::string("cannot sync it to the disk (") + std::strerror(errno) + ")");
  errno = saved;
  if (checks.verify) {
    try {
      checks.verify(temporary);
    } catch (std::exception const& e) {
      fail(std::string("it did not read back: ") + e.what());
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    fail("cannot rename " + temporary + " to it (" + std::strerror(errno) + ")");
  sync_path(folder_of(path), true);
}

// ---- OutputLock --------------------------------------------------------------------------------

OutputLock::OutputLock(std::string const& role, std::string const& path,
                       std::function<void(std::string const&)> const& notice)
    : lock_path_(path + ".lock") {
  for (int attempt = 0; attempt < 100; ++attempt) {
    int const fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw WriteError(role + " " + path + ": cannot create its lock file " + lock_path_ + " (" + std::strerror(errno) +
                       ")");
    auto const holder = [&] {
      char text[512] = {};
      ssize_t const n = ::pread(fd, text, sizeof text - 1, 0);
      std::string s = n > 0 ? std::string(text, std::size_t(n)) : "";
      while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
      return s;
    };
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int const error = errno;
      std::string const who = holder();
      ::close(fd);
      if (error == EWOULDBLOCK)
        throw WriteError(role + " " + path + " is being written by another job (" +
                         (who.empty() ? "a process that has not said which" : who) +
                         "; its lock is " + lock_path_ + "): two jobs must not write one file; give this one another path");
      throw WriteError(role + " " + path + ": cannot lock " + lock_path_ + " (" + std::strerror(error) + ")");
    }
    // The file locked must still be the one at the path: a releasing holder unlinks it, and a
    // job that opened it before the unlink would otherwise hold a lock nobody else sees.
    struct stat held, named;
    if (::fstat(fd, &held) != 0 || ::stat(lock_path_.c_str(), &named) != 0 || held.st_ino != named.st_ino ||
        held.st_dev != named.st_dev) {
      ::close(fd);
      continue;
    }
    std::string const previous = holder();
    if (!previous.empty() && notice)
      notice(role + " " + path + ": taking over the lock left by " + previous + " (that process is gone)");
    std::time_t const now = std::time(nullptr);
    char when[32] = {};
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
    std::string const me = "process " + std::to_string(::getpid()) + " on " + host_name() + ", since " + when;
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
      // The lock holds without the text; others are told less about who holds it.
    }
    fd_ = fd;
    return;
  }
  throw WriteError(role + " " + path + ": cannot lock " + lock_path_ + " (it keeps being replaced)");
}

void OutputLock::release() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // while still holding it (see the constructor's inode check)
  ::close(fd_);
  fd_ = -1;
}

OutputLock::~OutputLock() { release(); }

OutputLock::OutputLock(OutputLock&& other) noexcept : fd_(other.fd_), lock_path_(std::move(other.lock_path_)) {
  other.fd_ = -1;
}

OutputLock& OutputLock::operator=(OutputLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    lock_path_ = std::move(other.lock_path_);
    other.fd_ = -1;
  }
  return *this;
}

}  // namespace joule::io
