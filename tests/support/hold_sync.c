// Holds a process at the moment it syncs a chosen file, for tests (LD_PRELOAD): a writer that has
// written its temporary and not yet renamed it (io::Temporary syncs before the rename) waits there
// while the test lets another process take the same name, so a lost race happens every time.
//
//   JOULE_HOLD_PATH   a substring of the paths (from /proc/self/fd) whose first fsync is held
//                     ("/.race.h5.joule-": the temporary of race.h5); unset or empty: nothing is
//   JOULE_HOLD_READY  a file created when the hold begins (the test waits for it)
//   JOULE_HOLD_UNTIL  the hold ends when this file exists (polled every 10 ms; after 10 minutes
//                     the hold ends anyway, so a broken test cannot hang)
//
// Intercepted: fsync and fdatasync, each held once per process at most.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_held = 0;

static void maybe_hold(int fd) {
  if (g_held) return;
  char const* pattern = getenv("JOULE_HOLD_PATH");
  if (!pattern || !*pattern) return;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t const n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return;
  path[n] = '\0';
  if (!strstr(path, pattern)) return;
  g_held = 1;
  char const* ready = getenv("JOULE_HOLD_READY");
  char const* until = getenv("JOULE_HOLD_UNTIL");
  if (ready && *ready) {
    int const r = open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (r >= 0) close(r);
  }
  if (!until || !*until) return;
  struct timespec const tick = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 60000 && access(until, F_OK) != 0; ++i) nanosleep(&tick, NULL);
}

typedef int (*sync_fn)(int);

int fsync(int fd) {
  static sync_fn real = NULL;
  if (!real) real = (sync_fn)dlsym(RTLD_NEXT, "fsync");
  maybe_hold(fd);
  return real(fd);
}

int fdatasync(int fd) {
  static sync_fn real = NULL;
  if (!real) real = (sync_fn)dlsym(RTLD_NEXT, "fdatasync");
  maybe_hold(fd);
  return real(fd);
}
