#pragma once
// What a command reads and what it writes, checked before it does any work:
//  - no output is the same file as an input or another output (through symlinks and hard links
//    too: std::filesystem::equivalent when both exist, weakly_canonical paths otherwise), so
//    `joule train --checkpoint data.h5 --data data.h5` no longer replaces the dataset;
//  - every output's folder exists (or, for outputs whose command makes it, the nearest existing
//    folder above it), is safe (io::FolderHandle: no other user can change it under joule) and is
//    writable, proven by making and removing a private temporary there (no guessable name), and the
//    output path is not a folder, a device, a FIFO, a socket or a symbolic link to one (every
//    output is written through an io::Temporary and renamed, which replaces only a regular file);
//    so a bad destination is found at once, not at the first checkpoint (with checkpoint_every 0:
//    after the whole run).
// Messages name the flag (or configuration field) and the path: "--checkpoint data.h5 and --data
// data.h5 are the same file: ...", "--checkpoint out/ckpt.h5: the folder out does not exist".
#include "core/io/commit.hpp"
#include "parallel/communicator.hpp"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace joule::apps {

struct OutputOptions {
  bool creates_folder = false;  // the command creates a missing folder (create_directories)
};

class FilePlan {
 public:
  // `role` is how the user named the path: "--data", "data.path (from cfg.json)". Empty paths are ignored.
  void input(std::string role, std::string path);
  void output(std::string role, std::string path, OutputOptions options = {});
  // The output `output_role` may be the same file as the input `input_role`: the command reads it
  // whole before it writes (`joule train --resume ckpt.h5 --checkpoint ckpt.h5` continues a run).
  void allow_same(std::string output_role, std::string input_role);

  // "" when no output is the same file as an input or as another output, else the first clash.
  std::string clash() const;
  // "" when every output can be written where it is meant to go, else the first problem.
  std::string probe() const;
  // clash(), then probe().
  std::string check() const;
  // Takes every output's lock (io::OutputLock: one job at a time writes a file) into `held`, which
  // the command keeps to its end; "" when all were taken, else the first refusal (none is held).
  // After check(): a stale lock taken over is announced on stderr.
  std::string lock(std::vector<io::OutputLock>& held) const;

 private:
  struct Use {
    std::string role, path;
    OutputOptions options;
  };
  bool allowed(Use const& out, Use const& in) const;
  std::vector<Use> inputs_, outputs_;
  std::vector<std::pair<std::string, std::string>> allowed_;
};

// Whether `a` and `b` name the same file (both existing: the same inode; otherwise the same
// absolute path once every symlink that exists is resolved).
bool same_file(std::string const& a, std::string const& b);

// "" when a file can be written in `folder` (an io::Temporary is made there and removed: a random
// name, created exclusively, nothing followed), else why not.
std::string probe_folder(std::string const& folder);

// Runs `check` on world rank 0 only (under mpirun only rank 0 writes outputs) and gives every rank
// the same verdict: "" to go on, or rank 0's message. `world` null: a single process.
std::string check_on_root(parallel::Communicator* world, std::function<std::string()> const& check);

// Stops a command whose check failed, on every rank alike: a single process throws `problem`
// (joule prints "joule: error: ..." and exits 1); under mpirun rank 0 prints it once and every
// rank returns 1 together (all are at the same point, so MPI finalises cleanly).
int refuse(parallel::Communicator* world, std::string const& problem);

}  // namespace joule::apps
