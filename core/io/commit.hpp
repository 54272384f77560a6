#pragma once
// How joule writes a file so that a fault never costs the last good one, and nothing in a shared
// folder can turn the write against its user. Every output (checkpoints, run logs, datasets,
// caption tables, the energy tool's files) is written into a Temporary: a private folder (mode
// 0700, a random name, created exclusively) beside PATH holding one file, so no link or file that
// anybody planted can be at the path written, and nobody else can put one there. It is flushed
// to the disk (fsync), checked, and only then renamed over PATH (rename is atomic; the folder is
// synced after it). The rename replaces nothing but a regular file (or a symbolic link, itself,
// never what it points to): a PATH that is a folder, a device, a FIFO, a socket or a link to one
// is refused before any work. Any error on the way (ENOSPC, EDQUOT, EIO, a short write, an HDF5
// error, a failed check) removes the temporary, leaves PATH exactly as it was and throws
// WriteError naming the file, the error and the space free in its folder. And one job at a time
// writes an output: OutputLock, an advisory lock beside it, taken before the first step, never
// through a link. docs/outputs.md states the guarantees.
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace joule::io {

class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The folder holding `path` ("." for a bare name, "/" for a file at the root), and its last part.
std::string folder_of(std::string const& path);
std::string name_of(std::string const& path);

// Why an existing `path` must not be replaced by a written file ("is a character device, not a
// regular file; ..."), or "" when it may be: it does not exist, it is a regular file, or a
// symbolic link to one or to nothing (the link itself is replaced, never its target).
std::string output_target_problem(std::string const& path);

// The file a writer fills before the rename: FOLDER/.NAME.joule-XXXXXX/NAME, beside `target`, in
// a folder made by mkdtemp (0700). Removed with its folder when the object dies uncommitted.
class Temporary {
 public:
  explicit Temporary(std::string const& target);  // throws WriteError
  ~Temporary();
  Temporary(Temporary const&) = delete;
  Temporary& operator=(Temporary const&) = delete;
  std::string const& path() const { return file_; }
  // Renames the file to `target` (replace = false: only where nothing is, atomically: renameat2's
  // RENAME_NOREPLACE, or link + unlink), syncs target's folder and removes the private folder.
  // Throws WriteError (naming the cause only: the caller names the file) and leaves target as it was.
  void commit_to(std::string const& target, bool replace = true);

 private:
  std::string folder_, file_;
};
// The prefix of every Temporary's folder for `target` (".NAME.joule-"), for finding ones that a
// killed process left (OutputLock removes them once it holds the output).
std::string temporary_prefix(std::string const& target);

struct CommitChecks {
  // Bytes the new file will take, if known (0: unknown): refused before writing when the folder
  // has less free (the temporary and the old file coexist until the rename).
  std::uint64_t expected_bytes = 0;
  // Reads the written temporary back; throws if it is not what was meant (e.g. io::verify_h5, h5file.hpp).
  std::function<void(std::string const& temporary)> verify;
  // false: never replace an existing file (the energy tool's output): fails if one is there.
  bool replace = true;
};

// Writes `path` through a Temporary: `write(temporary)` creates and fills it (and closes it,
// reporting errors: H5File::close, a checked stream), then it is synced, verified and renamed.
// `what` names the file for people ("checkpoint", "dataset"). Throws WriteError; the temporary
// is never left behind and `path` is either the old file or the complete new one.
void commit_file(std::string const& path, std::string const& what,
                 std::function<void(std::string const& temporary)> const& write, CommitChecks const& checks = {});

// Bytes an unprivileged writer may still use in the folder holding `path` (statvfs f_bavail);
// -1 when it cannot be told.
long long free_bytes(std::string const& path);
// "1.2 MiB free in /scratch/run" (or "free space in /scratch/run unknown").
std::string free_space_text(std::string const& path);
// Throws WriteError before any work when `bytes` do not fit in the folder of `path`: "ROLE PATH:
// a WHAT takes 3.1 MiB; 1.0 MiB free in DIR". `role` is how the user named it ("--checkpoint").
void require_free_space(std::string const& role, std::string const& path, std::uint64_t bytes, std::string const& what);

// Pushes a file, or a folder's entries after a rename, to the disk; false if fsync failed (on a
// folder, not every file system supports it: that is not reported).
bool sync_path(std::string const& path, bool folder);

// One writer per output: an advisory lock (flock) on PATH.lock, held while the object lives.
// A second job on the same output gets WriteError at once naming the holder's process id and host
// (written into the lock file); a lock left by a process that is gone is free (the kernel drops
// flock with the process) and is taken over with `notice` saying so, as are the temporaries such a
// process left (removed). The lock file is removed on release. A lock path that is a symbolic link
// or not a regular file is refused (O_NOFOLLOW): nothing is written through it. `role` names the
// output for messages ("--checkpoint").
class OutputLock {
 public:
  OutputLock() = default;
  OutputLock(std::string const& role, std::string const& path, std::function<void(std::string const&)> const& notice = {});
  ~OutputLock();
  OutputLock(OutputLock&& other) noexcept;
  OutputLock& operator=(OutputLock&& other) noexcept;
  OutputLock(OutputLock const&) = delete;
  OutputLock& operator=(OutputLock const&) = delete;
  std::string const& lock_path() const { return lock_path_; }

 private:
  void release();
  int fd_ = -1;
  std::string lock_path_;
};

}  // namespace joule::io
