#pragma once
// The HDF5 run log of the energy-aware scheduler: `joule tune` writes one per run (header, every
// trial as it finishes, the best configuration, the Pareto front, the training run), `joule
// inspect` and `--resume` read it back. This is the one module that knows the log's layout;
// docs/run-log.md documents it.
//
// Crash safety: every change (create, each trial, best, Pareto front, train, a resume) is one
// commit: the log is copied into an io::Temporary beside PATH, changed there, flushed, closed,
// synced and renamed over PATH. rename() is atomic, so a run killed at any moment (SIGKILL
// included) leaves the log as it was before or after the change, never a mix, and every finished
// trial is in it; the temporary such a kill leaves is removed by the next job that locks the
// output (io::OutputLock). Creating a log replaces no file. The log itself is never open for writing, so
// `joule inspect` can read it while `joule tune` runs (HDF5 would lock a file open for writing).
// Each group also gets a `complete` attribute, written last; readers ignore trials without it.
//
// Every problem (not HDF5, not a joule log, damaged, mismatching on resume) is a RunLogError whose
// message names the file and what is wrong; HDF5's own error printing stays off.
#include "runlog/trial.hpp"
#include "core/io/input_file.hpp"

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace joule::scheduler {

// The root `format` attribute: how a joule run log is recognised (and its layout version).
inline constexpr char const* kRunLogFormat = "joule-run-log-v1";

class RunLogError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// RunLogWriter::create with replace = false found a file at its path, before or at the rename (a
// caller that picks a free name, as the energy tool does, takes the next one).
class RunLogExists : public RunLogError {
 public:
  using RunLogError::RunLogError;
};

// Root attributes: what ran, where, and how energy was obtained.
struct RunHeader {
  std::string joule_version, git_commit, kokkos_version, execution_space, host;
  std::string energy_source;  // description of the sources behind the total
  std::string energy_kind;    // "measured" or "model"
  std::string energy_regions;  // how region edges were taken (energy::edges_description); "" in older logs
  std::string objective, strategy;
  // "offline" (joule tune: separate trials, then a training run), "in_flight" (joule train
  // --tune: the trials are steps of the training run), or "profile" (the energy tool profiled a
  // Kokkos program: no search, no trials, a /profile group); older logs: offline.
  std::string tuning = "offline";
  std::string config_json;  // the full configuration as JSON text
  // train.precision, the GEMM path and the attention it takes on this build (gemm_path(),
  // attention_path()); "" in logs before issue 29.
  std::string precision, gemm_path, attention_path;
  // Where the host threads ran (core/train/host_cores.hpp: host_cores_text()): "" when no CPUs were
  // set aside for the host optimizer, and in logs before issue 42.
  std::string host_cores;
  // How many host threads Kokkos got and why, where joule measured the other work on the machine as
  // the run started (apps/environment.hpp: ThreadChoice::record): "" where it did not (a count set,
  // JOULE_SHARE_CPUS=off, a command that does not measure), and in logs older than /@host_threads.
  std::string host_threads;
  // The GPU each process took (apps/device_choice.hpp), one line per rank ("rank 1: GPU 1 (PCI
  // ...): local rank 1 of 4, ..."; a single process's line alone); "" in logs older than /@gpu.
  std::string gpu;
  std::string created;      // ISO 8601 UTC; filled in by RunLogWriter::create when empty
  int world_size = 1;
  double device_memory_budget_bytes = 0;  // 0: none given
  std::vector<std::string> resumed;       // ISO times of each --resume (written by the writer)

  bool energy_is_model() const { return energy_kind == "model"; }
};

// A Kokkos program the energy tool (apps/energy_tool, docs/energy-tool.md) profiled, whole: its
// regions (push/pop, nested, inclusive) and its kernels, deep copies and fences, each by the run
// log's region schema, the energy outside any region, and the power trace.
struct ProfileRecord {
  std::string program;         // its command line
  int rank = -1;               // the launcher's rank (-1: none set)
  double sample_rate_hz = 0;
  double seconds = 0, energy_j = 0;                  // the whole program, by the total rule
  double outside_seconds = 0, outside_energy_j = 0;  // outside any region (program less top-level regions)
  double tool_seconds = 0;     // spent inside the tool's own callbacks
  long long tool_edges = 0;    // how many callbacks that was
  double resolution_s = 0;     // the total's sensors' resolution: shorter calls are below_resolution
  std::vector<RegionMeasure> regions, region_paths;  // the program's regions, by name and by call path (TrialRecord)
  // Kernels by name; deep copies "deep_copy DST <- SRC"; fences "fence NAME" (kind_of_operation)
  std::vector<RegionMeasure> kernels;
  PowerTrace power;
};

// Everything a log holds. Trials are the complete ones, in index order.
struct RunLogContents {
  std::string path;
  RunHeader header;
  std::vector<TrialRecord> trials;
  int best = -1;            // trial index of /best; -1: not written (run stopped before the end)
  std::optional<ChoiceRecord> choice;  // how /best was chosen; absent in logs before issue 41
  std::vector<int> pareto;  // trial indices of /pareto, as written
  std::optional<TrainRecord> train;
  std::optional<ProfileRecord> profile;  // tuning "profile" only
  std::vector<std::string> incomplete;  // trial groups without their `complete` mark (ignored)

  // The trial with this index, or nullptr.
  TrialRecord const* trial(int index) const;
};

// Reads a whole log. Throws RunLogError (never an HDF5 error) for a missing file, one that is not
// a regular file or not HDF5, an HDF5 file that is not a joule run log, a damaged one, or one that
// changed while it was read. The file is opened once and read through that descriptor, in a child
// process first (io::read_in_child), then here.
RunLogContents read_run_log(std::string const& path);

// True when path is an HDF5 file whose root `format` is kRunLogFormat; never throws. The second
// form reads a file already opened (io::InputFile): a command that goes on to read it otherwise
// (a checkpoint given to --resume) reads that one file.
bool is_run_log(std::string const& path);
bool is_run_log(io::InputFile const& file);

// Writes one run's log. Cheap to hold: files are open only inside the calls below, each of which
// is one commit (see above). Moving is allowed; after close() (or a move) further writes throw.
class RunLogWriter {
 public:
  // Creates the log and writes the header; replace = false: only where no file is (the energy
  // tool's profiles, which never replace a file).
  static RunLogWriter create(std::string const& path, RunHeader const& header, bool replace = true);
  // Opens an existing log to append to it. Checks that it was made with the same configuration
  // (compared as JSON values, not text), objective, world size and energy kind as `expected`,
  // else throws a RunLogError naming the difference. Trials without `complete` are removed; the
  // finished ones are returned in *finished (if given) so the caller can skip them. The resume
  // time is added to the header's `resumed` list.
  static RunLogWriter resume(std::string const& path, RunHeader const& expected,
                             std::vector<TrialRecord>* finished = nullptr);

  RunLogWriter(RunLogWriter&& other) noexcept;
  RunLogWriter& operator=(RunLogWriter&& other) noexcept;
  RunLogWriter(RunLogWriter const&) = delete;
  RunLogWriter& operator=(RunLogWriter const&) = delete;
  ~RunLogWriter() = default;  // nothing is held open between calls

  // Adds /trials/NNNN (NNNN = trial.index, zero-padded to 4 digits); on disk when this returns.
  // Throws if the record is inconsistent (index < 0, power trace of the wrong size) or a
  // complete trial with that index is already in the log; the log is then unchanged.
  void append_trial(TrialRecord const& trial);
  // Replace /best, /pareto, /train (each may be written again, e.g. after a resume).
  void write_best(TrialRecord const& best, ChoiceRecord const* choice = nullptr);
  void write_pareto(std::vector<TrialRecord> const& front);
  void write_train(TrainRecord const& train);
  // Replace /profile (a log whose header says tuning "profile").
  void write_profile(ProfileRecord const& profile);
  // Ends writing; later calls throw. Safe to call at any time and more than once.
  void close() {
    open_ = false;
    log_.reset();
  }

  bool is_open() const { return open_; }
  std::string const& path() const { return path_; }

 private:
  enum class Start { empty, from_log };
  RunLogWriter(std::string path, std::string run_id) : path_(std::move(path)), run_id_(std::move(run_id)) {}
  void require_open(char const* what) const;
  // One atomic change: change(H5File&) is applied to a temporary (empty, or a copy of the log),
  // which then replaces the log (or, Start::empty, takes its path where nothing is). On any
  // error the log is left as it was.
  template <class Change>
  void commit(std::string const& what, Start start, Change const& change, bool replace = true);

  std::string path_;
  std::string run_id_;  // the root `run_id`, checked by every commit: a log replaced by another run is noticed
  bool open_ = true;
  // The log as this writer last read (resume) or wrote it, held open: the next commit copies this
  // file, and only while the file at the path is still it, unchanged (a file renamed there, or
  // written, by anyone else is refused before HDF5 reads it).
  std::shared_ptr<io::InputFile const> log_;
};

namespace detail {
// For the crash-safety test only: called inside every commit with the temporary file still open
// and the change not yet flushed, so a test can kill the writer at its most delicate moment.
extern void (*run_log_before_commit)(std::string const& temporary_path);
}  // namespace detail

}  // namespace joule::scheduler
