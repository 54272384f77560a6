#pragma once
// What run_log.cpp (writing, resuming) and run_log_read.cpp (reading) share about the file: its
// layout's names, opening it with a message for each way it is not a run log, and the readers a
// resumed log needs. Internal to joule_run_log.
#include "core/io/h5file.hpp"
#include "runlog/run_log.hpp"

#include <functional>
#include <string>
#include <vector>

namespace joule::scheduler::detail {

using io::H5File;

std::string trial_group(int index);  // "/trials/0007"
std::string join(std::vector<std::string> const& parts, char const* separator);
// "PATH: WHAT" as a RunLogError.
[[noreturn]] void fail(std::string const& path, std::string const& what);
// A problem of the layout, thrown as H5Error like H5File's own, so that one handler turns both
// into "FILE: damaged run log: WHAT".
[[noreturn]] void damaged(H5File const& f, std::string const& what);
std::string without_path(std::string const& message, std::string const& path);  // "PATH: " taken off

// The log opened once (io::InputFile): RunLogError where it is missing ("no such file"), not a
// regular file (naming what it is), or not HDF5. Every read of it goes through this descriptor.
io::InputFile open_run_log(std::string const& path);
H5File open_existing(io::InputFile const& in);  // RunLogError where HDF5 cannot open it
void require_format(H5File const& f);           // RunLogError unless its 'format' is kRunLogFormat
// Runs `read` in a child process first (io::read_in_child): a log that crashes the HDF5 library
// is a RunLogError naming the file, not a crash of joule. `read` opens `in`, as the caller's own
// reads after it do, and the caller ends with require_log_unchanged(in).
void read_in_child_first(io::InputFile const& in, std::function<void()> const& read);
void require_log_unchanged(io::InputFile const& in);  // RunLogError "PATH: the file changed while joule read it ..."

RunHeader read_header(H5File const& f);
// The complete trials, in index order; the groups of incomplete ones in `incomplete`.
std::vector<TrialRecord> read_trials(H5File const& f, std::vector<std::string>* incomplete);
bool is_complete(H5File const& f, std::string const& group);  // its writer finished it

}  // namespace joule::scheduler::detail
