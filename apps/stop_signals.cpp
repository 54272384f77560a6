#include "stop_signals.hpp"

#include <signal.h>

#include <atomic>

namespace joule::apps {

namespace {

std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) return;
  // A hang-up never escalates: a closed terminal sends two (the shell's and the kernel's), and
  // neither is the user asking twice. The run goes on to stop between steps as the first asked.
  if (sig == SIGHUP) return;
  // A second SIGINT or SIGTERM: the user means it (async-signal-safe: sigaction and raise).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

}  // namespace

void catch_stop_signals() {
  struct sigaction act {};
  act.sa_handler = on_stop_signal;
  sigemptyset(&act.sa_mask);
  act.sa_flags = SA_RESTART;  // reads and writes in progress go on; the run stops between steps
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &act, nullptr);
}

void ignore_file_size_signal() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGXFSZ, &ignore, nullptr);
}

int stop_signal() { return g_signal.load(); }

int interrupted_status() { return 128 + stop_signal(); }

std::string stop_signal_text() {
  switch (stop_signal()) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM (a batch system's time limit, or kill)";
    case SIGHUP: return "SIGHUP (its terminal or launcher went away)";
    default: return "no signal";
  }
}

}  // namespace joule::apps
