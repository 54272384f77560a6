#pragma once
// An input file opened once and read only through that one descriptor (issue 64: "checked in a
// child, then used by name"). Every file joule reads that another user may own or control (a
// dataset, a checkpoint, a run log, a configuration, an image) is opened here:
//   - O_RDONLY | O_CLOEXEC | O_NONBLOCK, so that a FIFO's open cannot wait for a writer, then
//     O_NONBLOCK cleared;
//   - fstat: anything but a regular file (a FIFO, a device, a folder, a socket) is refused before a
//     byte is read, naming the file and what it is;
//   - its identity (device, inode, size, modification and status-change times) is taken then.
// HDF5 opens files by name, so readers give it proc_path(), "/proc/self/fd/N": the kernel resolves
// it through the descriptor to the inode opened here, whatever is renamed over the name meanwhile
// (io::read_in_child's forked reader inherits the descriptor, so the child checks this very file and
// the parent then reads the same one). Where /proc is not mounted, proc_path() is the path, and
// H5File checks that what HDF5 opened is this inode. A reader calls require_unchanged() after its
// last read: the inode's status-change time (st_ctim, nanoseconds) moves with every write, truncate,
// chmod, link or rename of it, and no user but root can set it back, so an owner who rewrites the
// file and restores its size and modification time is still found.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::io {

// An input that cannot be used: "PATH: why". Readers turn it into their own error types.
class InputError : public std::runtime_error {
 public:
  explicit InputError(std::string const& what, int system_error = 0)
      : std::runtime_error(what), system_error_(system_error) {}
  int system_error() const { return system_error_; }  // errno of a failed open or read, else 0

 private:
  int system_error_;
};

struct FileIdentity {
  std::uint64_t device = 0, inode = 0, size = 0;
  std::int64_t modified_s = 0, modified_ns = 0;  // st_mtim
  std::int64_t changed_s = 0, changed_ns = 0;    // st_ctim
  bool same_inode(FileIdentity const& o) const { return device == o.device && inode == o.inode; }
  // The same inode, not written or otherwise changed since (size, mtime and ctime as they were).
  bool unchanged(FileIdentity const& o) const {
    return same_inode(o) && size == o.size && modified_s == o.modified_s && modified_ns == o.modified_ns &&
           changed_s == o.changed_s && changed_ns == o.changed_ns;
  }
};

// "a FIFO (named pipe)", "a character device", ... for a st_mode that is not a regular file.
char const* file_kind_text(unsigned mode);

class InputFile {
 public:
  // `kind` completes the refusal of a non-regular file: "joule reads KIND only from regular files".
  // Throws InputError: "PATH: cannot open it (No such file or directory)", or "PATH: is a FIFO (named
  // pipe), not a regular file; joule reads KIND only from regular files (nothing of it was read)".
  InputFile(std::string path, std::string const& kind);
  ~InputFile();
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(InputFile const&) = delete;
  InputFile& operator=(InputFile const&) = delete;

  std::string const& path() const { return path_; }  // as given: what messages name
  int fd() const { return fd_; }
  // "/proc/self/fd/N" (the same inode however the name changes), or path() where /proc is not mounted.
  std::string const& proc_path() const { return proc_path_; }
  bool through_proc() const { return proc_path_ != path_; }
  FileIdentity const& identity() const { return identity_; }  // when it was opened
  FileIdentity current() const;                                // fstat now
  // Throws InputError "PATH: the file changed while joule read it (...); nothing of it was used"
  // unless the file is as it was when opened (FileIdentity::unchanged).
  void require_unchanged() const;
  // What changed between `before` and `now`, in words ("its status-change time went from ... to ...;
  // its size from 100 to 120 bytes"); "" when nothing did.
  static std::string change_text(FileIdentity const& before, FileIdentity const& now);

  // The file's bytes from its start (pread: the descriptor's offset is left alone, so the same file
  // can be read again), at most max_bytes + 1 of them: more than max_bytes means the file is larger
  // than the caller's limit. Throws InputError naming the file on a read error.
  std::string read_at_most(std::size_t max_bytes) const;
  void read_at_most(std::size_t max_bytes, std::vector<std::uint8_t>& out) const;

 private:
  void close_quietly() noexcept;
  std::string path_, proc_path_;
  int fd_ = -1;
  FileIdentity identity_;
};

// Shared by the readers that keep a file for later reads (a dataset read batch after batch).
using SharedInput = std::shared_ptr<InputFile const>;

}  // namespace joule::io
