#pragma once
// SIGINT, SIGTERM and SIGHUP all ask a run to stop between steps. Slurm sends SIGTERM at the time
// limit and SIGKILL after its KillWait (`#SBATCH --signal=TERM@120` sends it two minutes early);
// a closed terminal or launcher sends SIGHUP. The command keeps what is due — the run log's
// finished trials, a checkpoint where train.checkpoint is set — and exits with 128 + the
// signal's number (130, 143, 129), as a shell reports a process the signal ended. A SIGINT or
// SIGTERM after any stop signal ends the process at once (the default action), even while it
// writes the checkpoint it stopped for: the user means it. SIGHUP never does: a closed terminal delivers it twice (the shell re-sends it to its jobs, and the kernel to
// the terminal's foreground group when the shell exits), so a second SIGHUP, or a SIGHUP after
// another signal, is only noted, and the run still stops between steps and keeps what is due.
// And every command ignores SIGXFSZ, so that a write past `ulimit -f` fails with EFBIG and is
// reported by the writer (io::commit_file), naming the file and the limit, its temporary and lock
// removed, instead of the process being killed without a word.
#include <string>

namespace joule::apps {

void catch_stop_signals();
void ignore_file_size_signal();
// 0, or the first stop signal received.
int stop_signal();
inline bool stop_requested() { return stop_signal() != 0; }
// 128 + stop_signal().
int interrupted_status();
// "SIGTERM (the batch system's time limit, or kill)" and the like.
std::string stop_signal_text();

}  // namespace joule::apps
