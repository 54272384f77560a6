#include "core/io/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <time.h>
#include <utility>

namespace joule::io {

namespace {

FileIdentity identity_of(struct stat const& st) {
  FileIdentity id;
  id.device = std::uint64_t(st.st_dev);
  id.inode = std::uint64_t(st.st_ino);
  id.size = std::uint64_t(st.st_size);
  id.modified_s = std::int64_t(st.st_mtim.tv_sec);
  id.modified_ns = std::int64_t(st.st_mtim.tv_nsec);
  id.changed_s = std::int64_t(st.st_ctim.tv_sec);
  id.changed_ns = std::int64_t(st.st_ctim.tv_nsec);
  return id;
}

long long nanoseconds(struct timespec const& t) { return (long long)t.tv_sec * 1000000000LL + t.tv_nsec; }

// The kernel stamps a file's status-change time from a coarse clock (CLOCK_REALTIME_COARSE, one
// tick: 1 to 10 ms), so a change made in the same tick as the change before it leaves ctime as it
// was. Where the file last changed in the current tick, this waits for the next tick and looks
// again: every later change then has a later ctime. (A ctime far ahead of this clock, from a
// server's clock or one set back, is left as it is: no wait helps there.)
void settle(int fd, struct stat& st) {
  struct timespec res {};
  long long tick = ::clock_getres(CLOCK_REALTIME_COARSE, &res) == 0 ? nanoseconds(res) : 0;
  if (tick <= 0 || tick > 100000000LL) tick = 10000000LL;
  for (int tries = 0; tries < 16; ++tries) {
    struct timespec now {};
    if (::clock_gettime(CLOCK_REALTIME_COARSE, &now) != 0) return;
    long long const ahead = nanoseconds(st.st_ctim) - nanoseconds(now);
    if (ahead < 0 || ahead > 2 * tick) return;
    struct timespec pause {0, long(tick)};
    ::nanosleep(&pause, nullptr);
    if (::fstat(fd, &st) != 0) return;
  }
}

std::string time_text(std::int64_t s, std::int64_t ns) {
  std::time_t const t = std::time_t(s);
  std::tm local{};
  char date[32] = "?";
  if (::localtime_r(&t, &local)) std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &local);
  char text[64];
  std::snprintf(text, sizeof text, "%s.%09lld", date, (long long)ns);
  return text;
}

template <class Buffer>
void read_into(InputFile const& in, std::size_t max_bytes, Buffer& out) {
  out.clear();
  std::size_t const limit = max_bytes == SIZE_MAX ? max_bytes : max_bytes + 1;
  // The size fstat gave at the open, as a first guess (the file may have grown or shrunk since).
  std::size_t capacity = std::min<std::size_t>(limit, std::size_t(in.identity().size) + 1);
  out.resize(std::max<std::size_t>(capacity, 1));
  std::size_t done = 0;
  for (;;) {
    if (done == out.size()) {
      if (done >= limit) break;
      out.resize(std::min(limit, std::max<std::size_t>(2 * out.size(), 1 << 16)));
    }
    ssize_t const n = ::pread(in.fd(), &out[done], out.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int const error = errno;
      out.clear();
      throw InputError(in.path() + ": cannot read it (" + std::strerror(error) + ")", error);
    }
    if (n == 0) break;
    done += std::size_t(n);
  }
  out.resize(done);
}

}  // namespace

char const* file_kind_text(unsigned mode) {
  return S_ISFIFO(mode)   ? "a FIFO (named pipe)"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISDIR(mode)  ? "a folder"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISREG(mode)  ? "a regular file"
                          : "not a regular file";
}

InputFile::InputFile(std::string path, std::string const& kind) : path_(std::move(path)) {
  // First an O_PATH descriptor, which opens nothing (a device's driver is not called, a FIFO does
  // not wait): the file is looked at through it and only a regular file is opened for reading,
  // through /proc/self/fd/N, the same inode. Without /proc: opened by the path with O_NONBLOCK (a
  // FIFO with no writer, or a device that blocks in open, returns at once) and O_NOCTTY, and
  // refused below; a regular file ignores the flag, which is cleared all the same.
  int looked = -1;
  do looked = ::open(path_.c_str(), O_PATH | O_CLOEXEC);
  while (looked < 0 && errno == EINTR);
  if (looked < 0) {
    int const error = errno;
    throw InputError(path_ + ": cannot open it (" + std::strerror(error) + ")", error);
  }
  struct stat first {};
  if (::fstat(looked, &first) == 0 && !S_ISREG(first.st_mode)) {
    ::close(looked);
    throw InputError(path_ + ": is " + file_kind_text(unsigned(first.st_mode)) + ", not a regular file; joule reads " +
                     kind + " only from regular files (nothing of it was read)");
  }
  std::string const looked_through = "/proc/self/fd/" + std::to_string(looked);
  do fd_ = ::open(looked_through.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0 && errno == ENOENT) {  // no /proc
    do fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    while (fd_ < 0 && errno == EINTR);
  }
  int const open_error = errno;
  ::close(looked);
  if (fd_ < 0) throw InputError(path_ + ": cannot open it (" + std::strerror(open_error) + ")", open_error);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int const error = errno;
    close_quietly();
    throw InputError(path_ + ": cannot examine it (" + std::strerror(error) + ")", error);
  }
  if (!S_ISREG(st.st_mode)) {
    close_quietly();
    throw InputError(path_ + ": is " + file_kind_text(unsigned(st.st_mode)) + ", not a regular file; joule reads " +
                     kind + " only from regular files (nothing of it was read)");
  }
  int const flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  settle(fd_, st);
  identity_ = identity_of(st);
  // /proc/self/fd/N resolves to this descriptor's inode; where /proc is not mounted (or is another
  // process's view, as in some chroots) it names nothing or another file: the path is used then.
  std::string const through = "/proc/self/fd/" + std::to_string(fd_);
  struct stat seen {};
  proc_path_ = ::stat(through.c_str(), &seen) == 0 && identity_of(seen).same_inode(identity_) ? through : path_;
}

InputFile::~InputFile() { close_quietly(); }

void InputFile::close_quietly() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), proc_path_(std::move(other.proc_path_)), fd_(other.fd_), identity_(other.identity_) {
  other.fd_ = -1;
}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    close_quietly();
    path_ = std::move(other.path_);
    proc_path_ = std::move(other.proc_path_);
    fd_ = other.fd_;
    identity_ = other.identity_;
    other.fd_ = -1;
  }
  return *this;
}

FileIdentity InputFile::current() const {
  struct stat st {};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0)
    throw InputError(path_ + ": cannot examine it again (" + std::strerror(fd_ < 0 ? EBADF : errno) + ")");
  return identity_of(st);
}

std::string InputFile::change_text(FileIdentity const& before, FileIdentity const& now) {
  std::string text;
  auto const add = [&](std::string const& part) { text += (text.empty() ? "" : "; ") + part; };
  if (!now.same_inode(before))
    add("it is another file (device " + std::to_string(now.device) + ", inode " + std::to_string(now.inode) +
        "; it was device " + std::to_string(before.device) + ", inode " + std::to_string(before.inode) + ")");
  if (now.changed_s != before.changed_s || now.changed_ns != before.changed_ns)
    add("its status-change time (ctime) went from " + time_text(before.changed_s, before.changed_ns) + " to " +
        time_text(now.changed_s, now.changed_ns));
  if (now.size != before.size)
    add("its size from " + std::to_string(before.size) + " to " + std::to_string(now.size) + " bytes");
  if (now.modified_s != before.modified_s || now.modified_ns != before.modified_ns)
    add("its modification time from " + time_text(before.modified_s, before.modified_ns) + " to " +
        time_text(now.modified_s, now.modified_ns));
  return text;
}

void InputFile::require_unchanged() const {
  FileIdentity const now = current();
  if (now.unchanged(identity_)) return;
  throw InputError(path_ + ": the file changed while joule read it (" + change_text(identity_, now) +
                   "): it was written, replaced or had its status changed meanwhile; nothing of it was used");
}

std::string InputFile::read_at_most(std::size_t max_bytes) const {
  std::string out;
  read_into(*this, max_bytes, out);
  return out;
}

void InputFile::read_at_most(std::size_t max_bytes, std::vector<std::uint8_t>& out) const {
  read_into(*this, max_bytes, out);
}

}  // namespace joule::io
