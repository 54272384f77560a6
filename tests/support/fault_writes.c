// A write-failure injector for tests (LD_PRELOAD): a full disk, an exhausted quota or an I/O error
// at a chosen byte of a chosen file, in any program (joule, python3 + h5py) without a small file
// system to mount. Every writer's fault test runs a real command with it at several moments of
// its write and then checks that the previous file is bitwise unchanged.
//
//   JOULE_FAULT_PATH         a substring of the paths whose writes fail (from /proc/self/fd);
//                            ending in '$': the end of those paths ("/ckpt.h5$" is the file and
//                            its temporary .ckpt.h5.joule-XXXXXX/ckpt.h5, not ckpt.h5.lock, whose
//                            text's length follows the process id's digits); unset or empty:
//                            nothing fails
//   JOULE_FAULT_AFTER_BYTES  bytes accepted by those files (all together, this process) before
//                            writes fail; the write that crosses the limit is short, as on a disk
//                            that fills up (default 0)
//   JOULE_FAULT_ERRNO        ENOSPC (default), EDQUOT or EIO: the error of the failing writes;
//                            fsync/fdatasync of such a file fail with it too once the limit is hit
//   JOULE_FAULT_COUNT_TO     a file: at exit, the bytes written to the matching files are written
//                            there (a run with a large limit finds the moments to fail at: the
//                            bytes written are fewer than the file's size, which has gaps)
//
// Intercepted: write, pwrite, pwrite64, writev, fsync, fdatasync (HDF5's sec2 driver uses pwrite,
// libstdc++'s file streams and CPython use write/writev). Not intercepted: mmap'ed writes.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long long g_budget = -1;  // bytes left; -1: not read yet
static int g_errno = ENOSPC;
static int g_hit = 0;  // a write has failed (later fsyncs fail too)
static long long g_written = 0;  // bytes accepted for matching files

static void load_settings(void) {
  if (g_budget >= 0) return;
  char const* after = getenv("JOULE_FAULT_AFTER_BYTES");
  g_budget = after && *after ? atoll(after) : 0;
  if (g_budget < 0) g_budget = 0;
  char const* e = getenv("JOULE_FAULT_ERRNO");
  if (e && strcmp(e, "EDQUOT") == 0) g_errno = EDQUOT;
  else if (e && strcmp(e, "EIO") == 0) g_errno = EIO;
  else g_errno = ENOSPC;
}

// Whether writes to `fd` are subject to the fault: a regular file whose path contains the pattern.
static int targeted(int fd) {
  char const* pattern = getenv("JOULE_FAULT_PATH");
  if (!pattern || !*pattern) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  size_t const length = strlen(pattern);
  if (pattern[length - 1] == '$')  // anchored at the end
    return (size_t)n >= length - 1 && strncmp(path + n - (length - 1), pattern, length - 1) == 0;
  return strstr(path, pattern) != NULL;
}

// How many of `count` bytes may be written to `fd` now; -1 (errno set): none.
static ssize_t allowed(int fd, size_t count) {
  if (!targeted(fd)) return (ssize_t)count;
  load_settings();
  if (count == 0) return 0;
  if (g_budget <= 0) {
    g_hit = 1;
    errno = g_errno;
    return -1;
  }
  ssize_t n = (long long)count <= g_budget ? (ssize_t)count : (ssize_t)g_budget;
  g_budget -= n;
  g_written += n;
  return n;
}

__attribute__((destructor)) static void report_count(void) {
  char const* to = getenv("JOULE_FAULT_COUNT_TO");
  if (!to || !*to) return;
  FILE* f = fopen(to, "w");
  if (!f) return;
  fprintf(f, "%lld\n", g_written);
  fclose(f);
}

typedef ssize_t (*write_fn)(int, void const*, size_t);
typedef ssize_t (*pwrite_fn)(int, void const*, size_t, off_t);
typedef ssize_t (*pwrite64_fn)(int, void const*, size_t, off64_t);
typedef ssize_t (*writev_fn)(int, struct iovec const*, int);
typedef int (*sync_fn)(int);
#define REAL(name, type) \
  static type real_##name; \
  if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, void const* buf, size_t count) {
  REAL(write, write_fn);
  ssize_t n = allowed(fd, count);
  return n < 0 ? -1 : real_write(fd, buf, (size_t)n);
}

ssize_t pwrite(int fd, void const* buf, size_t count, off_t offset) {
  REAL(pwrite, pwrite_fn);
  ssize_t n = allowed(fd, count);
  return n < 0 ? -1 : real_pwrite(fd, buf, (size_t)n, offset);
}

ssize_t pwrite64(int fd, void const* buf, size_t count, off64_t offset) {
  REAL(pwrite64, pwrite64_fn);
  ssize_t n = allowed(fd, count);
  return n < 0 ? -1 : real_pwrite64(fd, buf, (size_t)n, offset);
}

ssize_t writev(int fd, struct iovec const* iov, int iovcnt) {
  REAL(writev, writev_fn);
  size_t total = 0;
  for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
  ssize_t n = allowed(fd, total);
  if (n < 0) return -1;
  if ((size_t)n == total) return real_writev(fd, iov, iovcnt);
  // A short write: the first n bytes, as a filling disk would take them.
  REAL(write, write_fn);
  ssize_t done = 0;
  for (int i = 0; i < iovcnt && done < n; ++i) {
    size_t part = iov[i].iov_len < (size_t)(n - done) ? iov[i].iov_len : (size_t)(n - done);
    ssize_t w = real_write(fd, iov[i].iov_base, part);
    if (w < 0) return done > 0 ? done : -1;
    done += w;
    if ((size_t)w < part) break;
  }
  return done;
}

int fsync(int fd) {
  REAL(fsync, sync_fn);
  if (g_hit && targeted(fd)) {
    errno = g_errno;
    return -1;
  }
  return real_fsync(fd);
}

int fdatasync(int fd) {
  REAL(fdatasync, sync_fn);
  if (g_hit && targeted(fd)) {
    errno = g_errno;
    return -1;
  }
  return real_fdatasync(fd);
}
