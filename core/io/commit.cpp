#include "core/io/commit.hpp"

#include "core/detail/bytes_text.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace joule::io {

namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "an unknown host";
  return name;
}

}  // namespace

std::string folder_of(std::string const& path) {
  auto const slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(std::string const& path) {
  auto const slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

namespace {
std::string kind_of(struct stat const& st) {
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  return S_ISREG(st.st_mode) ? "a regular file" : "not a regular file";
}
}  // namespace

std::string output_target_problem(std::string const& path) {
  struct stat l;
  if (::lstat(path.c_str(), &l) != 0)  // nothing there (or no folder: the writer's own error says so)
    return errno == ENOENT || errno == ENOTDIR ? "" : std::string("cannot be inspected (") + std::strerror(errno) + ")";
  if (S_ISREG(l.st_mode)) return "";
  if (S_ISLNK(l.st_mode)) {
    struct stat t;
    if (::stat(path.c_str(), &t) != 0 || S_ISREG(t.st_mode)) return "";  // the link is replaced, not followed
    return "is a symbolic link to " + kind_of(t) +
           "; joule writes regular files only and replaces nothing else (remove the link, or give another path)";
  }
  return "is " + kind_of(l) +
         ", not a regular file; joule writes regular files only and replaces nothing else (give the path of a file)";
}

std::string temporary_prefix(std::string const& target) {
  return "." + name_of(target).substr(0, 100) + ".joule-";  // 100: the folder's name stays under NAME_MAX
}

Temporary::Temporary(std::string const& target) {
  std::string folder = folder_of(target) + "/" + temporary_prefix(target) + "XXXXXX";
  if (::mkdtemp(folder.data()) == nullptr)
    throw WriteError("cannot create a temporary folder in " + folder_of(target) + " (" + std::strerror(errno) + ")");
  folder_ = folder;
  file_ = folder + "/" + name_of(target);
}

Temporary::~Temporary() {
  if (folder_.empty()) return;
  ::unlink(file_.c_str());
  ::rmdir(folder_.c_str());
}

void Temporary::commit_to(std::string const& target, bool replace) {
  std::string const problem = output_target_problem(target);
  if (!problem.empty()) throw WriteError(problem);
  struct stat st;
  bool const exists = ::lstat(target.c_str(), &st) == 0;
  if (exists && !replace) throw WriteError("a file appeared there while it was being written; it is left as it is");
  if (exists) {
    if (std::rename(file_.c_str(), target.c_str()) != 0)
      throw WriteError("cannot rename " + file_ + " to it (" + std::strerror(errno) + ")");
  } else if (::renameat2(AT_FDCWD, file_.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0) {
    int error = errno;
    if (error == EINVAL || error == ENOSYS) {  // no RENAME_NOREPLACE on this file system: a hard link is as exclusive
      error = ::link(file_.c_str(), target.c_str()) == 0 ? 0 : errno;
      if (error == 0) ::unlink(file_.c_str());
    }
    if (error == EEXIST) throw WriteError("something appeared there while it was being written; it is left as it is");
    if (error != 0) throw WriteError("cannot rename " + file_ + " to it (" + std::strerror(error) + ")");
  }
  sync_path(folder_of(target), true);
  ::rmdir(folder_.c_str());
  folder_.clear();
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

namespace {
// A write past `ulimit -f` fails with EFBIG (SIGXFSZ is ignored, apps/stop_signals.hpp): say the limit.
std::string file_size_limit_note(std::string const& why) {
  struct rlimit limit;
  if (why.find(std::strerror(EFBIG)) == std::string::npos || ::getrlimit(RLIMIT_FSIZE, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY)
    return "";
  return "; this process's file-size limit (ulimit -f) is " + detail::bytes_text(double(limit.rlim_cur));
}
}  // namespace

void commit_file(std::string const& path, std::string const& what,
                 std::function<void(std::string const& temporary)> const& write, CommitChecks const& checks) {
  struct stat st;
  bool const had_one = ::lstat(path.c_str(), &st) == 0;
  auto const fail = [&](std::string const& why) {
    throw WriteError("cannot write the " + what + " " + path + ": " + why + file_size_limit_note(why) + "; " +
                     free_space_text(path) + "; " +
                     (had_one ? "the previous " + what + " there is unchanged" : "nothing was written there"));
  };
  if (std::string const problem = output_target_problem(path); !problem.empty())
    throw WriteError("cannot write the " + what + " " + path + ": it " + problem);
  if (had_one && !checks.replace) fail("a file is already there, and this writer replaces none");
  if (checks.expected_bytes > 0) {
    long long const free = free_bytes(path);
    if (free >= 0 && std::uint64_t(free) < checks.expected_bytes)
      fail("it takes " + detail::bytes_text(double(checks.expected_bytes)) + ", more than is free");
  }
  std::unique_ptr<Temporary> temporary;
  try {
    temporary = std::make_unique<Temporary>(path);
  } catch (WriteError const& e) {
    fail(e.what());
  }
  try {
    write(temporary->path());
  } catch (std::exception const& e) {
    fail(e.what());
  } catch (...) {
    fail("unknown error");
  }
  int const saved = errno;
  if (!sync_path(temporary->path(), false)) fail(std::string("cannot sync it to the disk (") + std::strerror(errno) + ")");
  errno = saved;
  if (checks.verify) {
    try {
      checks.verify(temporary->path());
    } catch (std::exception const& e) {
      fail(std::string("it did not read back: ") + e.what());
    }
  }
  try {
    temporary->commit_to(path, checks.replace);
  } catch (WriteError const& e) {
    fail(e.what());
  }
}

// ---- OutputLock --------------------------------------------------------------------------------

namespace {
// Removes the Temporary folders of `target` that this user owns (a folder whose name has the
// prefix, not a link, holding at most the one file of that name, itself no folder); returns them.
std::vector<std::string> remove_left_temporaries(std::string const& target) {
  std::vector<std::string> removed;
  std::string const folder = folder_of(target), prefix = temporary_prefix(target), name = name_of(target);
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) return removed;
  while (dirent const* entry = ::readdir(dir)) {
    std::string const found = entry->d_name;
    if (found.size() != prefix.size() + 6 || found.compare(0, prefix.size(), prefix) != 0) continue;
    int const fd = ::openat(::dirfd(dir), found.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st, inner;
    bool ok = ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid();
    if (ok && ::fstatat(fd, name.c_str(), &inner, AT_SYMLINK_NOFOLLOW) == 0)
      ok = !S_ISDIR(inner.st_mode) && ::unlinkat(fd, name.c_str(), 0) == 0;
    ::close(fd);
    if (ok && ::unlinkat(::dirfd(dir), found.c_str(), AT_REMOVEDIR) == 0) removed.push_back(folder + "/" + found);
  }
  ::closedir(dir);
  return removed;
}
}  // namespace

OutputLock::OutputLock(std::string const& role, std::string const& path,
                       std::function<void(std::string const&)> const& notice)
    : lock_path_(path + ".lock") {
  for (int attempt = 0; attempt < 100; ++attempt) {
    // Never through a link, and never blocking on something that is not a file (O_NONBLOCK).
    int const fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0 && errno == ELOOP)
      throw WriteError(role + " " + path + ": its lock path " + lock_path_ +
                       " is a symbolic link; joule never writes through one (remove it if it is not yours)");
    if (fd < 0)
      throw WriteError(role + " " + path + ": cannot create its lock file " + lock_path_ + " (" + std::strerror(errno) +
                       ")");
    if (struct stat st; ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw WriteError(role + " " + path + ": its lock path " + lock_path_ + " is " + kind_of(st) +
                       ", not a regular file (remove it if it is not yours)");
    }
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
    // Held: no other job writes this output, so its temporaries that are still there were left by a
    // process that died (killed in the middle of a write).
    for (auto const& left : remove_left_temporaries(path))
      if (notice) notice(role + " " + path + ": removed " + left + ", a temporary left by an interrupted write");
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
