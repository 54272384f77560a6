#pragma once
// A private folder for a command's own intermediate files: what it writes only to read back itself
// (`joule bench`'s generated dataset, the energy tool's profile the energy suite reads). A fixed or
// guessable name in a shared folder (/tmp/joule-bench-offload-<pid>.h5) lets another user plant a
// file, a link or a folder there first: the command then fails, or its file becomes theirs. A
// ScratchFolder is made under $TMPDIR (/tmp where unset) with a random name (getrandom), created
// exclusively (mkdirat, mode 0700) relative to the opened parent (io::FolderHandle: the parent is
// checked as every output's folder is), then checked (this user's, 0700, empty): nobody else can
// know its name before it exists, nor put anything in it after. Files in it are written with the
// usual writers (io::commit_file). It is removed with everything in it when the object dies (at
// the end, on an error, on an exception), relative to the descriptors held and never through a link.
#include "core/io/commit.hpp"

#include <string>

namespace joule::io {

// The folder ScratchFolder makes its folders in: $TMPDIR where set and not empty, else /tmp.
std::string scratch_root();

class ScratchFolder {
 public:
  // Makes scratch_root()/PREFIXxxxxxxxxxxxx ("joule-bench-" + 12 random characters). Throws
  // WriteError naming the folder and why (no such folder, not writable, unsafe: FolderHandle::open).
  explicit ScratchFolder(std::string const& prefix);
  ~ScratchFolder();  // removes it and what is in it; a failure is a warning on stderr, never a throw
  ScratchFolder(ScratchFolder const&) = delete;
  ScratchFolder& operator=(ScratchFolder const&) = delete;
  // Its path (for writers and messages).
  std::string const& path() const { return path_; }
  // path() + "/" + name.
  std::string file(std::string const& name) const { return path_ + "/" + name; }

 private:
  FolderHandle parent_;
  int fd_ = -1;  // the folder itself (O_DIRECTORY)
  std::string name_, path_;
};

}  // namespace joule::io
