#pragma once
// How joule writes a file so that a fault never costs the last good one, and nothing in a shared
// folder can turn the write against its user. Every output (checkpoints, run logs, datasets,
// caption tables, the energy tool's files) is written into a Temporary: a private folder (mode
// 0700, a random name, created exclusively) beside PATH holding one file, so no link or file that
// anybody planted can be at the path written, and nobody else can put one there. Every step after
// the output's folder is opened works on descriptors, not paths (FolderHandle), so nothing renamed
// or swapped in meanwhile can redirect it. It is flushed to the disk (fsync), checked, and only then
// renamed over PATH (rename is atomic; the folder is synced after it). The rename replaces nothing but a regular file (or a symbolic link, itself,
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
#include <vector>

namespace joule::io {

class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A writer that replaces nothing (CommitChecks::replace = false) found a file at its path, before
// or while it wrote: a caller that picks a free name (the energy tool) takes the next one.
class OutputExists : public WriteError {
 public:
  using WriteError::WriteError;
};

// The folder holding `path` ("." for a bare name, "/" for a file at the root), and its last part.
std::string folder_of(std::string const& path);
std::string name_of(std::string const& path);

// Why an existing `path` must not be replaced by a written file ("is a character device, not a
// regular file; ...", "is a file of user 4343 (bob); ..."), or "" when it may be: it does not
// exist, it is a regular file of this user's (of anybody's with JOULE_REPLACE_OTHERS_FILES=1), or
// a symbolic link to a regular file or to nothing (the link itself is replaced, never its target).
std::string output_target_problem(std::string const& path);

// Folders are opened once and everything after is relative to the descriptor (openat, mkdirat,
// renameat2), so a path that changes between a check and a write cannot redirect the write.
// A FolderHandle is an open folder (O_PATH) and the path it was opened by (for messages).
class FolderHandle {
 public:
  FolderHandle() = default;
  // Opens `folder` component by component (O_DIRECTORY | O_NOFOLLOW), from "/" or the working
  // directory. Every folder on the way, the first and the last included, must be one that no other
  // user can change (folder_trust_problem): else WriteError naming it and why, unless
  // JOULE_ACCEPT_SHARED_FOLDER=1 accepts the risk (a warning, once per folder, on stderr). A
  // symbolic link on the way is followed only where the kernel's protected_symlinks rule would
  // follow it: not when it lies in a folder others can write and belongs neither to this user nor
  // to that folder's owner. A folder whose output's lock this process holds (OutputLock) is not
  // walked again: the descriptor opened with the lock is reused, so a job's writes all land in the
  // folder it started with, whatever is renamed on the path meanwhile.
  static FolderHandle open(std::string const& folder);
  // The same, creating missing folders (mode 0755 less the umask: never writable by others) one
  // at a time, each synced into its parent; never through a link.
  static FolderHandle open_or_create(std::string const& folder);
  ~FolderHandle();
  FolderHandle(FolderHandle&& other) noexcept;
  FolderHandle& operator=(FolderHandle&& other) noexcept;
  FolderHandle(FolderHandle const&) = delete;
  FolderHandle& operator=(FolderHandle const&) = delete;
  int fd() const { return fd_; }
  std::string const& path() const { return path_; }
  // fsync of the folder's entries (best effort where the file system refuses it on a folder).
  void sync() const;

 private:
  int fd_ = -1;
  std::string path_;
};

// Why a folder with this mode and group is unsafe to write in, or "": writable by other users
// without the sticky bit, so another user may rename or remove what is in it. The world write bit
// counts always; the group write bit unless the group is this user's own private group (named as
// the user, no other member: the umask 002 convention of many distributions). As from stat.
// With `access_acl` (the folder has a POSIX access ACL), the group bits are the ACL's mask: a write
// bit there makes it shared whatever its group.
std::string shared_folder_problem(unsigned mode, unsigned group, bool access_acl = false);
// Why no output may be written through a folder with this mode, group and owner, or "": it belongs
// to a user other than root and this one (who may rename what is in it: "/tmp/run1" of another
// user, holding a link where a folder of this user's is expected), or shared_folder_problem. A
// sticky folder is safe only when root or this user owns it. As from stat.
std::string folder_trust_problem(unsigned mode, unsigned group, unsigned owner, bool access_acl = false);

// A random token for this process (128 bits, hex), written into the lock files it holds and into
// the marker of each temporary it makes: a later run removes only temporaries whose token a stale
// lock of its own user records (never by the shape of a name alone).
std::string const& process_token();

// The file a writer fills before the rename: FOLDER/.NAME.joule-XXXXXXXXXXXX/NAME, beside `target`,
// in a private folder (0700, a random name, created exclusively by mkdirat, then opened with
// O_NOFOLLOW and checked: this user's, 0700, empty) that also holds a marker with process_token().
// The writer reaches the file through the open folder's descriptor (/proc/self/fd/N/NAME), so a
// folder renamed or swapped by another user after it was made cannot redirect the write.
// Removed with its folder when the object dies uncommitted.
class Temporary {
 public:
  explicit Temporary(std::string const& target);  // throws WriteError
  ~Temporary();
  Temporary(Temporary const&) = delete;
  Temporary& operator=(Temporary const&) = delete;
  // The path a writer opens (/proc/self/fd/N/NAME, or shown() where /proc is not mounted).
  std::string const& path() const { return file_; }
  // The temporary's name in its folder, for messages: FOLDER/.NAME.joule-XXXXXXXXXXXX/NAME.
  std::string const& shown() const { return shown_; }
  // Replaces path() by shown() in a message (a writer's error names the path it was given).
  std::string shown_in(std::string text) const;
  // Renames the file to `target` (the path given to the constructor), relative to the output
  // folder's descriptor: replace = false only where nothing is, atomically (renameat2's
  // RENAME_NOREPLACE, or link + unlink); replace = true swaps the new file in with RENAME_EXCHANGE
  // and puts back anything but a regular file or a link that turned up there meanwhile. A replaced
  // regular file of this user's gives the new file its permission bits (and its group, where the
  // user belongs to it). A regular file of another user is refused (output_target_problem), or
  // with JOULE_REPLACE_OTHERS_FILES=1 replaced by a file that stays this user's, its permission
  // bits less any write bit for others. Syncs the output folder and removes the private folder. Throws WriteError (naming
  // the cause only: the caller names the file; OutputExists where a file is in the way of a
  // writer that replaces none) and leaves target as it was.
  void commit_to(std::string const& target, bool replace = true);

 private:
  void remove();
  FolderHandle out_;          // the output's folder
  int dir_ = -1;              // the private folder
  std::string dir_name_, name_, file_, shown_;
};
// The prefix of every Temporary's folder for `target` (".NAME.joule-"; a name over 100 bytes is
// cut and a hash of the whole name added, so two long names never share it).
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
// Only this user's lock files count: a lock file that another user made (in advance, or left by a
// colleague's killed job), or holds, is skipped, and the next name in the chain PATH.lock.1 ...
// PATH.lock.7 is used; every lock file of this user in the chain is locked, so two of this user's
// jobs always meet on one. Lock files are created 0600 with O_EXCL | O_NOFOLLOW, relative to the
// folder's descriptor. A second job on the same output gets WriteError at once naming the holder
// (the text it wrote, control characters escaped); a lock left by a process that is gone is free
// (the kernel drops flock with the process) and is taken over with `notice` saying so, and the
// temporaries that process left (their marker holds the token its lock file records) are removed.
// The lock file is removed on release. A lock path of this user's that is a symbolic link or not a
// regular file, or that has more than one name (a hard link), is refused: nothing is written through
// it, and its text, mode and length are left as they are. While the lock is held its folder is
// pinned (FolderHandle::open). `role` names the output ("--checkpoint").
class OutputLock {
 public:
  OutputLock() = default;
  OutputLock(std::string const& role, std::string const& path, std::function<void(std::string const&)> const& notice = {});
  ~OutputLock();
  OutputLock(OutputLock&& other) noexcept;
  OutputLock& operator=(OutputLock&& other) noexcept;
  OutputLock(OutputLock const&) = delete;
  OutputLock& operator=(OutputLock const&) = delete;
  // The lock file this job made or took over (the one that names it).
  std::string const& lock_path() const { return lock_path_; }

 private:
  void release();
  FolderHandle folder_;
  std::vector<int> fds_;                // every lock file of this user's chain, locked
  std::vector<std::string> names_;      // their names in the folder
  std::string lock_path_;
  bool pinned_ = false;                 // its folder is pinned (FolderHandle::open reuses its descriptor)
};

// Control characters (and bytes past ASCII that do not form UTF-8) as \xNN: text read from a
// file another user may write, safe to print to a terminal.
std::string escaped_text(std::string const& text);

}  // namespace joule::io
