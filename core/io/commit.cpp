#include "core/io/commit.hpp"

#include "core/detail/bytes_text.hpp"
#include "core/environment.hpp"

#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <sys/random.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
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

// ---- Who may change what ----------------------------------------------------------------------

namespace {

std::string octal_mode(unsigned mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", mode & 07777);
  return text;
}

// "user 4343" or "user 4343 (alice)".
std::string user_text(uid_t uid) {
  std::vector<char> buffer(1 << 14);
  struct passwd pw, *found = nullptr;
  std::string text = "user " + std::to_string(uid);
  if (::getpwuid_r(uid, &pw, buffer.data(), buffer.size(), &found) == 0 && found != nullptr)
    text += " (" + escaped_text(found->pw_name) + ")";
  return text;
}

bool variable_is_one(char const* name) {
  char const* v = std::getenv(name);
  return v && std::string(v) == "1";
}

bool shared_folders_accepted() { return variable_is_one(core_environment::kAcceptSharedFolderName); }
bool others_files_accepted() { return variable_is_one(core_environment::kReplaceOthersFilesName); }

// One warning per folder for an accepted shared folder.
void warn_accepted(std::string const& folder, std::string const& problem) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(folder).second) return;
  std::fprintf(stderr,
               "joule: warning: the folder %s %s; writing there anyway (JOULE_ACCEPT_SHARED_FOLDER=1): another "
               "user may remove or replace what joule writes there\n",
               escaped_text(folder).c_str(), problem.c_str());
}

// Why a regular file of user `owner` at an output's name must not be replaced by this process, or "".
// Replacing it would hand root's (or this user's) data to a name that user chose in advance, and
// the replacement would once have become theirs (Temporary::commit_to gave it the old owner).
std::string others_file_problem(uid_t owner) {
  if (owner == ::geteuid() || others_files_accepted()) return "";
  return "is a file of " + user_text(owner) +
         "; joule replaces only files of its own user, so that nobody can choose in advance where this "
         "user's data goes (remove it, give another path, or replace it anyway with "
         "JOULE_REPLACE_OTHERS_FILES=1: the new file is then this user's, not theirs)";
}

constexpr char kTrustAdvice[] =
    ": joule writes only in folders that other users cannot change under it (give a folder of your own, add the "
    "sticky bit: chmod +t, or accept the risk: JOULE_ACCEPT_SHARED_FOLDER=1)";

// The folders of the outputs whose locks this process holds, each opened once when its lock was
// taken (OutputLock): every later write of the job there (checkpoints, logs) goes through the same
// descriptor, so renaming or replacing a folder on the path mid-run cannot redirect it. By the path
// as the job gave it; a holder count per path.
struct Pin {
  int fd = -1;
  int holders = 0;
};
std::mutex pins_mutex;
std::map<std::string, Pin> pins;

// A descriptor of its own (dup) for a pinned folder, or -1.
int pinned_folder(std::string const& folder) {
  std::lock_guard<std::mutex> lock(pins_mutex);
  auto const it = pins.find(folder);
  return it == pins.end() ? -1 : ::fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
}

void pin_folder(FolderHandle const& folder) {
  std::lock_guard<std::mutex> lock(pins_mutex);
  Pin& pin = pins[folder.path()];
  if (pin.holders++ == 0) pin.fd = ::fcntl(folder.fd(), F_DUPFD_CLOEXEC, 0);
}

void unpin_folder(std::string const& folder) {
  std::lock_guard<std::mutex> lock(pins_mutex);
  auto const it = pins.find(folder);
  if (it == pins.end() || --it->second.holders > 0) return;
  if (it->second.fd >= 0) ::close(it->second.fd);
  pins.erase(it);
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
  if (S_ISREG(l.st_mode)) return others_file_problem(l.st_uid);
  if (S_ISLNK(l.st_mode)) {
    struct stat t;
    if (::stat(path.c_str(), &t) != 0 || S_ISREG(t.st_mode)) return "";  // the link is replaced, not followed
    return "is a symbolic link to " + kind_of(t) +
           "; joule writes regular files only and replaces nothing else (remove the link, or give another path)";
  }
  return "is " + kind_of(l) +
         ", not a regular file; joule writes regular files only and replaces nothing else (give the path of a file)";
}

// ---- FolderHandle ------------------------------------------------------------------------------

namespace {

bool writable_by_others(struct stat const& st) { return (st.st_mode & (S_IWGRP | S_IWOTH)) != 0; }

std::vector<std::string> components(std::string const& path) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t const slash = path.find('/', begin);
    std::size_t const end = slash == std::string::npos ? path.size() : slash;
    if (end > begin) parts.push_back(path.substr(begin, end - begin));
    if (slash == std::string::npos) break;
    begin = slash + 1;
  }
  return parts;
}

int open_root(bool absolute) {
  return ::open(absolute ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
}

// Whether the folder open at `fd` (O_PATH) has a POSIX access ACL (the xattr is read through
// /proc, as an O_PATH descriptor takes no fgetxattr).
bool has_access_acl(int fd) {
  std::string const through = "/proc/self/fd/" + std::to_string(fd);
  return ::getxattr(through.c_str(), "system.posix_acl_access", nullptr, 0) >= 0;
}

// Walks `folder` from "/" or ".", one component at a time; `create`: makes missing ones. Every
// folder on the way, the start and the end included, must be one that no other user can change
// (folder_trust_problem): a folder is opened by its name in the one before, so that name means the
// same folder only while nobody else can rename entries there. Once a folder is open, renames
// above it change nothing for what is reached through it.
int walk(std::string const& folder, bool create) {
  auto const fail = [&](std::string const& why) -> int {
    throw WriteError("cannot open the folder " + escaped_text(folder) + ": " + why);
  };
  auto const trusted = [&](int fd, std::string const& here) {
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int const error = errno;
      ::close(fd);
      fail("cannot inspect " + escaped_text(here) + " (" + std::strerror(error) + ")");
    }
    std::string const problem = folder_trust_problem(st.st_mode, st.st_gid, st.st_uid, has_access_acl(fd));
    if (problem.empty()) return;
    std::string const shown = here.empty() ? "the working directory" : "the folder " + escaped_text(here);
    if (!shared_folders_accepted()) {
      ::close(fd);
      throw WriteError(shown + (here == folder || here.empty() ? " " : ", on the way to " + escaped_text(folder) + ", ") +
                       problem + kTrustAdvice);
    }
    warn_accepted(here.empty() ? "." : here, problem);
  };
  bool const absolute = !folder.empty() && folder[0] == '/';
  int fd = open_root(absolute);
  if (fd < 0) fail(std::strerror(errno));
  trusted(fd, absolute ? "/" : "");
  std::vector<std::string> todo = components(folder);
  std::reverse(todo.begin(), todo.end());
  std::string walked = folder.empty() || folder[0] != '/' ? "" : "/";
  int links = 0;
  while (!todo.empty()) {
    std::string const part = todo.back();
    todo.pop_back();
    if (part == ".") continue;
    std::string const here = walked.empty() ? part : walked + (walked.back() == '/' ? "" : "/") + part;
    int next = ::openat(fd, part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && create) {
      // 0755 less the umask: a folder joule makes is never one that others may write (it would
      // then refuse it, shared_folder_problem).
      if (::mkdirat(fd, part.c_str(), 0755) != 0 && errno != EEXIST) {
        int const error = errno;
        ::close(fd);
        fail("cannot create " + escaped_text(here) + " (" + std::strerror(error) + ")");
      }
      if (int const sync_fd = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); sync_fd >= 0) {
        ::fsync(sync_fd);  // the new folder's entry reaches the disk with its parent
        ::close(sync_fd);
      }
      next = ::openat(fd, part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (next < 0) {
      int const error = errno;
      struct stat link;
      if ((error == ELOOP || error == ENOTDIR) && ::fstatat(fd, part.c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(link.st_mode)) {
        struct stat parent;
        if (::fstat(fd, &parent) != 0) parent = {};
        if (writable_by_others(parent) && link.st_uid != ::geteuid() && link.st_uid != parent.st_uid) {
          ::close(fd);
          fail(escaped_text(here) + " is a symbolic link of " + user_text(link.st_uid) +
               " in a folder that others can write (mode " + octal_mode(parent.st_mode) +
               "); joule follows no such link (the rule of the kernel's protected_symlinks)");
        }
        if (++links > 40) {
          ::close(fd);
          fail("too many symbolic links");
        }
        std::string target(4096, '\0');
        ssize_t const n = ::readlinkat(fd, part.c_str(), target.data(), target.size());
        if (n <= 0) {
          ::close(fd);
          fail("cannot read the link " + escaped_text(here));
        }
        target.resize(std::size_t(n));
        auto more = components(target);
        for (auto it = more.rbegin(); it != more.rend(); ++it) todo.push_back(*it);
        if (target[0] == '/') {
          ::close(fd);
          fd = open_root(true);
          if (fd < 0) fail(std::strerror(errno));
          trusted(fd, "/");
        }
        walked = here;
        continue;
      }
      ::close(fd);
      if (error == ENOENT) fail(escaped_text(here) + " does not exist");
      if (error == ENOTDIR) fail(escaped_text(here) + " is not a folder");
      fail(escaped_text(here) + ": " + std::strerror(error));
    }
    ::close(fd);
    fd = next;
    walked = here;
    trusted(fd, here);
  }
  return fd;
}

}  // namespace

namespace {
// Whether `group` is this user's private group: its name is the user's and nobody else is listed
// in it (a user whose primary group it is not is not in it either: such groups are made per user).
bool private_group(gid_t group) {
  static std::mutex mutex;
  static std::map<gid_t, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(group); it != known.end()) return it->second;
  bool result = false;
  std::vector<char> buffer(1 << 16);
  struct passwd pw, *user = nullptr;
  struct group gr, *found = nullptr;
  if (::getpwuid_r(::geteuid(), &pw, buffer.data(), buffer.size() / 2, &user) == 0 && user != nullptr &&
      ::getgrgid_r(group, &gr, buffer.data() + buffer.size() / 2, buffer.size() / 2, &found) == 0 && found != nullptr &&
      std::strcmp(found->gr_name, user->pw_name) == 0 && user->pw_gid == group) {
    result = true;
    for (char** member = found->gr_mem; member && *member; ++member) result = result && std::strcmp(*member, user->pw_name) == 0;
  }
  known[group] = result;
  return result;
}
}  // namespace

std::string shared_folder_problem(unsigned mode, unsigned group, bool access_acl) {
  if ((mode & (S_IWGRP | S_IWOTH)) == 0 || (mode & S_ISVTX) != 0) return "";
  // With an access ACL the group bits are its mask: a write bit there lets the ACL's named users
  // and groups write, whoever the owning group is.
  if (access_acl && (mode & S_IWOTH) == 0)
    return "is writable by other users through its access ACL (mode " + octal_mode(mode) +
           "+, the mask lets its entries write) and has no sticky bit, so another user may rename or remove what is "
           "in it, joule's files included";
  if ((mode & S_IWOTH) == 0 && private_group(gid_t(group))) return "";
  return std::string("is writable by ") + ((mode & S_IWOTH) ? "every user" : "its group") + " (mode " +
         octal_mode(mode) +
         ") and has no sticky bit, so another user may rename or remove what is in it, joule's files included";
}

std::string folder_trust_problem(unsigned mode, unsigned group, unsigned owner, bool access_acl) {
  if (owner != 0 && owner != ::geteuid())
    return "belongs to " + user_text(uid_t(owner)) +
           ", who may rename, remove or replace what is in it (a link in place of a folder, joule's files included)";
  return shared_folder_problem(mode, group, access_acl);
}

FolderHandle FolderHandle::open(std::string const& folder) {
  FolderHandle h;
  h.path_ = folder.empty() ? "." : folder;
  h.fd_ = pinned_folder(h.path_);  // an output's folder, held since its lock was taken
  if (h.fd_ < 0) h.fd_ = walk(h.path_, false);
  return h;
}

FolderHandle FolderHandle::open_or_create(std::string const& folder) {
  if (!folder.empty()) ::close(walk(folder, true));
  return open(folder);
}

FolderHandle::~FolderHandle() {
  if (fd_ >= 0) ::close(fd_);
}

FolderHandle::FolderHandle(FolderHandle&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

FolderHandle& FolderHandle::operator=(FolderHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

void FolderHandle::sync() const {
  int const fd = ::openat(fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// ---- Temporary ---------------------------------------------------------------------------------

namespace {

constexpr char kMarkerName[] = ".joule-temporary";

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> data(bytes);
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t const n = ::getrandom(data.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw WriteError(std::string("cannot draw a random name (getrandom: ") + std::strerror(errno) + ")");
    got += std::size_t(n);
  }
  static char const digits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char c : data) {
    text += digits[c >> 4];
    text += digits[c & 15];
  }
  return text;
}

std::string marker_text(std::string const& name) {
  return "joule temporary\ntarget " + name + "\ntoken " + process_token() + "\n";
}

std::uint64_t fnv1a(std::string const& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::string const& process_token() {
  static std::string const token = random_hex(16);
  return token;
}

std::string temporary_prefix(std::string const& target) {
  std::string const name = name_of(target);
  if (name.size() <= 100) return "." + name + ".joule-";  // the folder's name stays under NAME_MAX
  char hash[20];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a(name));
  return "." + name.substr(0, 100) + "~" + hash + ".joule-";
}

Temporary::Temporary(std::string const& target) : out_(FolderHandle::open(folder_of(target))), name_(name_of(target)) {
  std::string const prefix = temporary_prefix(target);
  for (int attempt = 0; attempt < 100 && dir_ < 0; ++attempt) {
    std::string const candidate = prefix + random_hex(6);
    if (::mkdirat(out_.fd(), candidate.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;
      throw WriteError("cannot create a temporary folder in " + escaped_text(out_.path()) + " (" + std::strerror(errno) +
                       ")");
    }
    // Opened by name once, then checked: made by this user, private and empty, so it is the one
    // just made even if another user renamed it and put another in its place in between.
    int const fd = ::openat(out_.fd(), candidate.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    bool ok = fd >= 0 && ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 07777) == 0700;
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
      throw WriteError("the temporary folder " + escaped_text(out_.path() + "/" + candidate) +
                       " was replaced by another as it was made (another user can change " + escaped_text(out_.path()) +
                       "); nothing was written");
    }
    dir_ = fd;
    dir_name_ = candidate;
  }
  if (dir_ < 0) throw WriteError("cannot create a temporary folder in " + escaped_text(out_.path()) + " (names taken)");
  shown_ = (out_.path() == "." ? "" : out_.path() + "/") + dir_name_ + "/" + name_;
  int const marker = ::openat(dir_, kMarkerName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  std::string const text = marker_text(name_);
  bool const written = marker >= 0 && ::write(marker, text.data(), text.size()) == ssize_t(text.size());
  if (marker >= 0) ::close(marker);
  if (!written) {
    int const error = errno;
    remove();
    throw WriteError("cannot create a temporary in " + escaped_text(out_.path()) + " (" + std::strerror(error) + ")");
  }
  std::string const through = "/proc/self/fd/" + std::to_string(dir_);
  struct stat proc;
  file_ = ::stat(through.c_str(), &proc) == 0 ? through + "/" + name_ : shown_;  // no /proc: by path
}

void Temporary::remove() {
  if (dir_ < 0) return;
  ::unlinkat(dir_, name_.c_str(), 0);
  ::unlinkat(dir_, kMarkerName, 0);
  struct stat mine, named;
  bool const same = ::fstat(dir_, &mine) == 0 &&
                    ::fstatat(out_.fd(), dir_name_.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
                    mine.st_ino == named.st_ino && mine.st_dev == named.st_dev;
  ::close(dir_);
  dir_ = -1;
  // By name, only if the name is still this folder's (another user may have renamed it and put
  // another there), and rmdir removes nothing but an empty folder.
  if (same) ::unlinkat(out_.fd(), dir_name_.c_str(), AT_REMOVEDIR);
}

Temporary::~Temporary() { remove(); }

std::string Temporary::shown_in(std::string text) const {
  if (file_ == shown_) return text;
  for (std::size_t at = text.find(file_); at != std::string::npos; at = text.find(file_, at + shown_.size()))
    text.replace(at, file_.size(), shown_);
  return text;
}

namespace {
// What is at `name` in `folder` may be replaced: a regular file, or a link (to a regular file, or
// to nothing). "" if so, else what it is.
std::string replaceable(int folder, std::string const& name) {
  struct stat l;
  if (::fstatat(folder, name.c_str(), &l, AT_SYMLINK_NOFOLLOW) != 0) return "";
  if (S_ISREG(l.st_mode)) return "";
  if (S_ISLNK(l.st_mode)) {
    struct stat t;
    if (::fstatat(folder, name.c_str(), &t, 0) != 0 || S_ISREG(t.st_mode)) return "";
    return "a symbolic link to " + kind_of(t);
  }
  return kind_of(l);
}
}  // namespace

void Temporary::commit_to(std::string const& target, bool replace) {
  if (dir_ < 0) throw WriteError("the temporary was already committed or removed");
  if (name_of(target) != name_) throw WriteError("a temporary is committed to the target it was made for");
  int const out = out_.fd();
  // The written file: this user's regular file (the folder is private: nobody else put it there).
  int const file = ::openat(dir_, name_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat mine;
  if (file < 0 || ::fstat(file, &mine) != 0 || !S_ISREG(mine.st_mode)) {
    if (file >= 0) ::close(file);
    throw WriteError("the writer left no regular file in " + escaped_text(shown_));
  }
  struct stat old;
  bool const exists = ::fstatat(out, name_.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0;
  if (exists && !replace) {
    ::close(file);
    throw OutputExists("a file appeared there while it was being written; it is left as it is");
  }
  if (exists && S_ISREG(old.st_mode) && old.st_uid != mine.st_uid) {
    // Another user's file at the name (made in advance where this user writes): refused, or with
    // JOULE_REPLACE_OTHERS_FILES=1 replaced by a file that stays this user's, its mode less any
    // write bit for others (never a new file handed to that user, nor one they may edit in place).
    if (std::string const problem = others_file_problem(old.st_uid); !problem.empty()) {
      ::close(file);
      throw WriteError("it " + problem);
    }
    (void)!::fchmod(file, old.st_mode & 0755);
  } else if (exists && S_ISREG(old.st_mode)) {  // this user's file: the new one takes its group and mode
    if (old.st_gid != mine.st_gid) (void)!::fchown(file, uid_t(-1), old.st_gid);
    (void)!::fchmod(file, old.st_mode & 0777);
  }
  bool const synced = ::fsync(file) == 0;
  int const sync_error = errno;
  ::close(file);
  if (!synced && sync_error != EINVAL)
    throw WriteError(std::string("cannot sync it to the disk (") + std::strerror(sync_error) + ")");

  bool placed = false;
  if (exists) {
    if (std::string const what = replaceable(out, name_); !what.empty())
      throw WriteError("it is " + what + "; joule replaces only a regular file or a link, and left it as it is");
    // Swapped in atomically; what came out is checked where nobody else can reach it, and put back
    // unless it is a regular file or a link (a FIFO or folder that turned up after the check).
    if (::renameat2(dir_, name_.c_str(), out, name_.c_str(), RENAME_EXCHANGE) == 0) {
      struct stat came;
      if (::fstatat(dir_, name_.c_str(), &came, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(came.st_mode) &&
          !S_ISLNK(came.st_mode)) {
        ::renameat2(dir_, name_.c_str(), out, name_.c_str(), RENAME_EXCHANGE);
        throw WriteError("it became " + kind_of(came) + " while it was being written; it is put back as it was");
      }
      if (S_ISREG(came.st_mode) && came.st_uid != mine.st_uid) {
        if (std::string const problem = others_file_problem(came.st_uid); !problem.empty()) {
          ::renameat2(dir_, name_.c_str(), out, name_.c_str(), RENAME_EXCHANGE);
          throw WriteError("it became a file of another user while it was being written; it is put back as it was (it " +
                           problem + ")");
        }
      }
      placed = true;
    } else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
      // No RENAME_EXCHANGE here (NFS, some FUSE): a plain rename, checked just before.
      if (::renameat(dir_, name_.c_str(), out, name_.c_str()) != 0)
        throw WriteError("cannot rename " + escaped_text(shown_) + " to it (" + std::strerror(errno) + ")");
      placed = true;
    } else if (errno != ENOENT) {
      throw WriteError("cannot rename " + escaped_text(shown_) + " to it (" + std::strerror(errno) + ")");
    }  // ENOENT: the old file went away meanwhile; placed as a new one below
  }
  if (!placed) {
    if (::renameat2(dir_, name_.c_str(), out, name_.c_str(), RENAME_NOREPLACE) != 0) {
      int error = errno;
      if (error == EINVAL || error == ENOSYS || error == EOPNOTSUPP) {
        // No RENAME_NOREPLACE (NFS): a hard link is as exclusive. Where links between folders are
        // refused too (AFS), a plain rename after a last look: a file that appears in between is replaced.
        if (::linkat(dir_, name_.c_str(), out, name_.c_str(), 0) == 0) {
          error = 0;
          if (::unlinkat(dir_, name_.c_str(), 0) != 0) {
            // The output is in place; the second name stays in the private folder (its marker lets
            // a later run of this user remove it), never counted as a failed write.
          }
        } else if (errno == EEXIST) {
          error = EEXIST;
        } else {
          struct stat now;
          error = ::fstatat(out, name_.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 ? EEXIST
                  : ::renameat(dir_, name_.c_str(), out, name_.c_str()) == 0  ? 0
                                                                               : errno;
        }
      }
      if (error == EEXIST) {
        if (replace) throw WriteError("something appeared there while it was being written; it is left as it is");
        throw OutputExists("something appeared there while it was being written; it is left as it is");
      }
      if (error != 0) throw WriteError("cannot rename " + escaped_text(shown_) + " to it (" + std::strerror(error) + ")");
    }
  }
  if (exists) ::unlinkat(dir_, name_.c_str(), 0);  // the old file, swapped out
  out_.sync();
  remove();
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
  std::unique_ptr<Temporary> temporary;
  auto const message = [&](std::string const& why) {
    std::string const text = temporary ? temporary->shown_in(why) : why;
    return "cannot write the " + what + " " + path + ": " + text + file_size_limit_note(text) + "; " +
           free_space_text(path) + "; " +
           (had_one ? "the previous " + what + " there is unchanged" : "nothing was written there");
  };
  auto const fail = [&](std::string const& why) { throw WriteError(message(why)); };
  if (std::string const problem = output_target_problem(path); !problem.empty())
    throw WriteError("cannot write the " + what + " " + path + ": it " + problem);
  if (had_one && !checks.replace) throw OutputExists(message("a file is already there, and this writer replaces none"));
  if (checks.expected_bytes > 0) {
    long long const free = free_bytes(path);
    if (free >= 0 && std::uint64_t(free) < checks.expected_bytes)
      fail("it takes " + detail::bytes_text(double(checks.expected_bytes)) + ", more than is free");
  }
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
  if (checks.verify) {
    try {
      checks.verify(temporary->path());
    } catch (std::exception const& e) {
      fail(std::string("it did not read back: ") + e.what());
    }
  }
  try {
    temporary->commit_to(path, checks.replace);  // synced before the rename
  } catch (OutputExists const& e) {
    throw OutputExists(message(e.what()));
  } catch (WriteError const& e) {
    fail(e.what());
  }
}

// ---- OutputLock --------------------------------------------------------------------------------

std::string escaped_text(std::string const& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    unsigned char const c = static_cast<unsigned char>(text[i]);
    std::size_t length = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(text[i + k]) >> 6) == 2;
    if (length == 1 && (c < 0x20 || c == 0x7f)) valid = false;
    if (valid && length == 2 && c < 0xc2) valid = false;  // overlong
    if (valid && length > 1) {
      // C1 controls (U+0080..U+009F) are escaped too: some terminals act on them.
      unsigned const second = static_cast<unsigned char>(text[i + 1]);
      if (length == 2 && c == 0xc2 && second < 0xa0) valid = false;
    }
    if (!valid) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
      ++i;
      continue;
    }
    out.append(text, i, length);
    i += length;
  }
  return out;
}

namespace {

constexpr int kLockChain = 8;  // PATH.lock, PATH.lock.1 ... PATH.lock.7

std::string lock_name(std::string const& name, int index) {
  return index == 0 ? name + ".lock" : name + ".lock." + std::to_string(index);
}

// What a lock file says: its first line names the holder; a line "token T" the holder's process_token().
struct LockText {
  std::string holder, token;
};

LockText read_lock_text(int fd) {
  char text[4096];
  ssize_t const n = ::pread(fd, text, sizeof text, 0);
  LockText t;
  if (n <= 0) return t;
  std::string const all(text, std::size_t(n));
  std::size_t const end = all.find('\n');
  t.holder = all.substr(0, end);
  while (!t.holder.empty() && t.holder.back() == ' ') t.holder.pop_back();
  for (std::size_t at = end; at != std::string::npos && at + 1 < all.size(); at = all.find('\n', at + 1)) {
    std::size_t const next = all.find('\n', at + 1);
    std::string const line = all.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (line.rfind("token ", 0) == 0) t.token = line.substr(6);
  }
  return t;
}

// Removes the temporaries of `target` in `folder` that a process whose token is in `tokens` made:
// this user's private folders (0700, not links) whose marker names the target and the token and
// that hold nothing but the marker and the file NAME (not a folder). Returns them.
std::vector<std::string> remove_left_temporaries(FolderHandle const& folder, std::string const& target,
                                                 std::set<std::string> const& tokens) {
  std::vector<std::string> removed;
  if (tokens.empty()) return removed;
  std::string const prefix = temporary_prefix(target), name = name_of(target);
  int const list_fd = ::openat(folder.fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* dir = list_fd >= 0 ? ::fdopendir(list_fd) : nullptr;
  if (dir == nullptr) {
    if (list_fd >= 0) ::close(list_fd);
    return removed;
  }
  std::vector<std::string> candidates;
  while (dirent const* entry = ::readdir(dir)) {
    std::string const found = entry->d_name;
    if (found.size() == prefix.size() + 12 && found.compare(0, prefix.size(), prefix) == 0) candidates.push_back(found);
  }
  ::closedir(dir);
  for (auto const& found : candidates) {
    int const fd = ::openat(folder.fd(), found.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    bool ok = ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 07777) == 0700;
    if (ok) {  // the marker: this user's regular file naming the target and a stale holder's token
      int const m = ::openat(fd, kMarkerName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      struct stat ms;
      char text[1024];
      ssize_t const n = m >= 0 && ::fstat(m, &ms) == 0 && S_ISREG(ms.st_mode) && ms.st_uid == ::geteuid()
                            ? ::read(m, text, sizeof text)
                            : -1;
      if (m >= 0) ::close(m);
      std::string const marker = n > 0 ? std::string(text, std::size_t(n)) : "";
      ok = false;
      for (auto const& token : tokens)
        ok = ok || marker == "joule temporary\ntarget " + name + "\ntoken " + token + "\n";
    }
    if (ok) {  // nothing in it but the marker and the file
      int const list = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      DIR* inside = list >= 0 ? ::fdopendir(list) : nullptr;
      if (inside == nullptr) {
        if (list >= 0) ::close(list);
        ok = false;
      } else {
        while (dirent const* e = ::readdir(inside)) {
          std::string const n = e->d_name;
          if (n == "." || n == ".." || n == kMarkerName) continue;
          struct stat inner;
          ok = ok && n == name && ::fstatat(fd, n.c_str(), &inner, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(inner.st_mode);
        }
        ::closedir(inside);
      }
    }
    if (ok) {
      ::unlinkat(fd, name.c_str(), 0);
      ::unlinkat(fd, kMarkerName, 0);
    }
    ::close(fd);
    if (ok && ::unlinkat(folder.fd(), found.c_str(), AT_REMOVEDIR) == 0)
      removed.push_back((folder.path() == "." ? "" : folder.path() + "/") + found);
  }
  return removed;
}

}  // namespace

OutputLock::OutputLock(std::string const& role, std::string const& path,
                       std::function<void(std::string const&)> const& notice) {
  std::string const name = name_of(path), shown_folder = path.substr(0, path.size() - name.size());
  auto const shown = [&](std::string const& lock) { return escaped_text(shown_folder + lock); };
  auto const refuse = [&](std::string const& why) -> void {
    release();
    throw WriteError(role + " " + escaped_text(path) + ": " + why);
  };
  try {
    folder_ = FolderHandle::open(folder_of(path));
  } catch (WriteError const& e) {
    throw WriteError(role + " " + escaped_text(path) + ": " + e.what());
  }
  uid_t const me = ::geteuid();
  std::vector<std::string> others;  // lock files of other users, skipped
  for (int attempt = 0; attempt < 100; ++attempt) {
    bool replaced = false;
    int first_absent = -1;
    others.clear();
    for (int index = 0; index < kLockChain && !replaced; ++index) {
      std::string const lock = lock_name(name, index);
      bool held_already = false;
      for (auto const& n : names_) held_already = held_already || n == lock;
      if (held_already) continue;
      // Never through a link, never blocking on something that is not a file (O_NONBLOCK).
      int const fd = ::openat(folder_.fd(), lock.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      struct stat st;
      if (fd < 0) {
        int const error = errno;
        if (error == ENOENT) {
          if (first_absent < 0) first_absent = index;
          continue;
        }
        if (::fstatat(folder_.fd(), lock.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (first_absent < 0) first_absent = index;  // went away between the two looks
          continue;
        }
        if (st.st_uid != me) {  // another user's: not this user's lock, whatever it is
          others.push_back(lock);
          continue;
        }
        if (S_ISLNK(st.st_mode))
          refuse("its lock path " + shown(lock) + " is a symbolic link; joule never writes through one (remove it if it is not yours)");
        refuse("cannot open its lock file " + shown(lock) + " (" + std::strerror(error) + ")");
      }
      if (::fstat(fd, &st) != 0 || st.st_uid != me) {
        ::close(fd);
        others.push_back(lock);
        continue;
      }
      if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        refuse("its lock path " + shown(lock) + " is " + kind_of(st) + ", not a regular file (remove it if it is not yours)");
      }
      // A second name of another file (a hard link another user made to a file of this user's,
      // where fs.protected_hardlinks is 0): its text, mode and length are never touched.
      if (st.st_nlink != 1) {
        ::close(fd);
        refuse("its lock file " + shown(lock) + " has " + std::to_string(st.st_nlink) +
               " names (hard links): it may be another file of this user's under a name someone else chose, and "
               "joule never writes to one (remove it if it is not yours)");
      }
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int const error = errno;
        std::string const who = read_lock_text(fd).holder;
        ::close(fd);
        if (error == EWOULDBLOCK)
          refuse("is being written by another job (" +
                 (who.empty() ? std::string("a process that has not said which") : escaped_text(who)) +
                 "; its lock is " + shown(lock) + "): two jobs must not write one file; give this one another path");
        refuse("cannot lock " + shown(lock) + " (" + std::strerror(error) + ")");
      }
      // The file locked must still be the one at the name: a releasing holder unlinks it, and a
      // job that opened it before the unlink would otherwise hold a lock nobody else sees.
      struct stat named;
      if (::fstatat(folder_.fd(), lock.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 || named.st_ino != st.st_ino ||
          named.st_dev != st.st_dev) {
        ::close(fd);
        replaced = true;
        break;
      }
      fds_.push_back(fd);
      names_.push_back(lock);
    }
    if (replaced) continue;
    if (!fds_.empty()) break;
    if (first_absent < 0)
      refuse("every lock name of the chain " + shown(lock_name(name, 0)) + " ... " + shown(lock_name(name, kLockChain - 1)) +
             " is another user's file; joule uses only its own user's locks (remove them, or write elsewhere)");
    // None of this user's: made at the first free name, exclusively, then the chain walked again
    // (two jobs that made one each at once then meet on each other's).
    std::string const lock = lock_name(name, first_absent);
    int const fd = ::openat(folder_.fd(), lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      refuse("cannot create its lock file " + shown(lock) + " (" + std::strerror(errno) + ")");
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    fds_.push_back(fd);
    names_.push_back(lock);
  }
  if (fds_.empty()) refuse("cannot lock " + shown(lock_name(name, 0)) + " (it keeps being replaced)");
  // Held: no other job of this user writes this output, so what a holder wrote into a lock file is
  // stale (that process is gone), and so are the temporaries it left (killed in a write).
  std::set<std::string> tokens;
  for (std::size_t k = 0; k < fds_.size(); ++k) {
    LockText const previous = read_lock_text(fds_[k]);
    if (!previous.token.empty()) tokens.insert(previous.token);
    if (!previous.holder.empty() && notice)
      notice(role + " " + escaped_text(path) + ": taking over the lock left by " + escaped_text(previous.holder) +
             " (that process is gone)");
  }
  for (auto const& left : remove_left_temporaries(folder_, path, tokens))
    if (notice) notice(role + " " + escaped_text(path) + ": removed " + escaped_text(left) + ", a temporary left by an interrupted write");
  if (!others.empty() && notice)
    notice(role + " " + escaped_text(path) + ": skipped " + shown(others.front()) +
           (others.size() > 1 ? " and " + std::to_string(others.size() - 1) + " more" : "") +
           ", another user's lock file; this job's lock is " + shown(names_.front()));
  std::time_t const now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  std::string const me_text = "process " + std::to_string(::getpid()) + " on " + host_name() + ", since " + when +
                              "\ntoken " + process_token() + "\n";
  for (int fd : fds_) {
    (void)::fchmod(fd, 0600);  // the token is this user's only
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me_text.data(), me_text.size(), 0) != ssize_t(me_text.size())) {
      // The lock holds without the text; others are told less about who holds it.
    }
  }
  lock_path_ = shown_folder + names_.front();
  pin_folder(folder_);  // the job's later writes of this output go through this folder's descriptor
  pinned_ = true;
}

void OutputLock::release() {
  if (pinned_) unpin_folder(folder_.path());
  pinned_ = false;
  for (std::size_t k = 0; k < fds_.size(); ++k) {
    // Removed while still held (see the constructor's inode check), and only if it is still the one held.
    struct stat held, named;
    if (::fstat(fds_[k], &held) == 0 && ::fstatat(folder_.fd(), names_[k].c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        held.st_ino == named.st_ino && held.st_dev == named.st_dev)
      ::unlinkat(folder_.fd(), names_[k].c_str(), 0);
    ::close(fds_[k]);
  }
  fds_.clear();
  names_.clear();
}

OutputLock::~OutputLock() { release(); }

OutputLock::OutputLock(OutputLock&& other) noexcept
    : folder_(std::move(other.folder_)),
      fds_(std::move(other.fds_)),
      names_(std::move(other.names_)),
      lock_path_(std::move(other.lock_path_)),
      pinned_(other.pinned_) {
  other.fds_.clear();
  other.names_.clear();
  other.pinned_ = false;
}

OutputLock& OutputLock::operator=(OutputLock&& other) noexcept {
  if (this != &other) {
    release();
    folder_ = std::move(other.folder_);
    fds_ = std::move(other.fds_);
    names_ = std::move(other.names_);
    lock_path_ = std::move(other.lock_path_);
    pinned_ = other.pinned_;
    other.fds_.clear();
    other.names_.clear();
    other.pinned_ = false;
  }
  return *this;
}

}  // namespace joule::io
