#include "core/io/scratch_folder.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace joule::io {

namespace {

std::string random_name(std::size_t length) {
  static char const kLetters[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::vector<unsigned char> bytes(length);
  std::size_t got = 0;
  while (got < length) {
    ssize_t const n = ::getrandom(bytes.data() + got, length - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw WriteError(std::string("cannot draw a random name (getrandom: ") + std::strerror(errno) + ")");
    got += std::size_t(n);
  }
  std::string name;
  for (unsigned char b : bytes) name += kLetters[b % (sizeof kLetters - 1)];  // a slight bias: a name, not a key
  return name;
}

// Removes everything in the open folder `dir`, relative to it: a folder in it is opened with
// O_NOFOLLOW (a link is removed, never followed) and emptied first. Returns the first error ("" if none).
std::string remove_contents(int dir, std::string const& shown, int depth) {
  if (depth > 64) return shown + ": folders nested too deep";
  int const listing_fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing_fd < 0) return shown + ": " + std::strerror(errno);
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    return shown + ": " + std::strerror(errno);
  }
  std::vector<std::string> names;
  while (dirent const* e = ::readdir(listing))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  ::closedir(listing);
  std::string first_error;
  auto const note = [&](std::string const& error) {
    if (first_error.empty()) first_error = error;
  };
  for (auto const& name : names) {
    std::string const here = shown + "/" + name;
    struct stat st;
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) note(here + ": " + std::strerror(errno));
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      int const sub = ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        note(here + ": " + std::strerror(errno));
        continue;
      }
      note(remove_contents(sub, here, depth + 1));
      ::close(sub);
      if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) note(here + ": " + std::strerror(errno));
    } else if (::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) {
      note(here + ": " + std::strerror(errno));
    }
  }
  return first_error;
}

}  // namespace

std::string scratch_root() {
  char const* tmpdir = std::getenv("TMPDIR");
  std::string root = tmpdir && *tmpdir ? std::string(tmpdir) : std::string("/tmp");
  while (root.size() > 1 && root.back() == '/') root.pop_back();  // "/tmp/" names /tmp
  return root;
}

ScratchFolder::ScratchFolder(std::string const& prefix) : parent_(FolderHandle::open(scratch_root())) {
  std::string const root = parent_.path();
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    std::string const candidate = prefix + random_name(12);
    if (::mkdirat(parent_.fd(), candidate.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;
      throw WriteError("cannot create a scratch folder in " + escaped_text(root) + " (" + std::strerror(errno) +
                       "; $TMPDIR names the folder, /tmp where unset)");
    }
    // Opened once by name, then checked: made by this user, private, empty (the one just made,
    // even if another user could rename it and put another in its place meanwhile).
    int const fd = ::openat(parent_.fd(), candidate.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    bool ok = fd >= 0 && ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 07077) == 0;
    if (ok && (st.st_mode & 0700) != 0700) ok = ::fchmod(fd, 0700) == 0;  // a umask that took the owner's bits
    if (ok) {
      DIR* listing = ::fdopendir(::dup(fd));
      if (listing != nullptr) {
        while (dirent const* e = ::readdir(listing))
          if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ok = false;
        ::closedir(listing);
      }
    }
    if (!ok) {
      if (fd >= 0) ::close(fd);
      throw WriteError("the scratch folder " + escaped_text(root + "/" + candidate) +
                       " was replaced by another as it was made (another user can change " + escaped_text(root) + ")");
    }
    fd_ = fd;
    name_ = candidate;
  }
  if (fd_ < 0) throw WriteError("cannot create a scratch folder in " + escaped_text(root) + " (names taken)");
  path_ = (root == "/" ? "" : root) + "/" + name_;
}

ScratchFolder::~ScratchFolder() {
  if (fd_ < 0) return;
  std::string error = remove_contents(fd_, path_, 0);
  // By name only while the name is still this folder's; rmdir removes nothing but an empty folder.
  struct stat mine, named;
  bool const same = ::fstat(fd_, &mine) == 0 &&
                    ::fstatat(parent_.fd(), name_.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
                    mine.st_ino == named.st_ino && mine.st_dev == named.st_dev;
  ::close(fd_);
  if (same && ::unlinkat(parent_.fd(), name_.c_str(), AT_REMOVEDIR) != 0 && error.empty())
    error = path_ + ": " + std::strerror(errno);
  if (!error.empty())
    std::fprintf(stderr, "joule: warning: the scratch folder %s was not removed whole (%s)\n",
                 escaped_text(path_).c_str(), escaped_text(error).c_str());
}

}  // namespace joule::io
