/* fault_inject: an LD_PRELOAD library that turns one chosen file-system call of a process into
 * a crash or a full disk, for the crash-consistency tests (tests/fault/).
 *
 * Every call that changes a file's bytes or its name is an "event": pwrite, pwrite64, pwritev,
 * write and writev to a descriptor other than 0-2, fsync, fdatasync, ftruncate, rename. Events
 * are numbered from 1 in the order the process makes them.
 *
 *   FP4D_FAULT_KILL_AT=N     the process kills itself (SIGKILL) just before event N: what a
 *                            killed process leaves on disk is everything before N, nothing after.
 *   FP4D_FAULT_ENOSPC_AT=N   from event N on, every write-like event fails with ENOSPC (as a
 *                            full disk answers); fsync and rename still succeed.
 *   FP4D_FAULT_COUNT_FILE=P  at a normal exit, the number of events is written to P (the test
 *                            learns how many crash points a run has).
 *   FP4D_FAULT_LOG=P         every event is appended to P as one line: the process id, the
 *                            event's number, the call, the descriptor and the file it names
 *                            (which write a crash point is).
 *
 * Calls go to the next definition (libc) through dlsym(RTLD_NEXT). HDF5's sec2 driver writes
 * with pwrite through the PLT, so every byte of a trace passes here. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static atomic_long events;
static long kill_at = -1, enospc_at = -1;
static int log_fd = -1;

__attribute__((constructor)) static void fault_init(void) {
  const char* k = getenv("FP4D_FAULT_KILL_AT");
  const char* e = getenv("FP4D_FAULT_ENOSPC_AT");
  if (k) kill_at = atol(k);
  if (e) enospc_at = atol(e);
  const char* l = getenv("FP4D_FAULT_LOG");
  /* Raw system calls: the log's own writes must not be events. */
  if (l) log_fd = (int)syscall(SYS_openat, AT_FDCWD, l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

__attribute__((destructor)) static void fault_report(void) {
  const char* p = getenv("FP4D_FAULT_COUNT_FILE");
  if (!p) return;
  FILE* f = fopen(p, "w");
  if (!f) return;
  fprintf(f, "%ld\n", (long)atomic_load(&events));
  fclose(f);
}

static void log_event(long n, const char* call, int fd, const char* name) {
  char self[64], target[512], line[1200];
  if (!name) {
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    const ssize_t k = readlink(self, target, sizeof target - 1);
    target[k > 0 ? k : 0] = 0;
    name = target;
  }
  const int len = snprintf(line, sizeof line, "%ld %ld %s %d %s\n", (long)getpid(), n, call, fd, name);
  if (len > 0) syscall(SYS_write, log_fd, line, (size_t)(len < (int)sizeof line ? len : (int)sizeof line - 1));
}

/* Returns 1 when this write-like event must fail with ENOSPC; kills the process at kill_at. */
static int fault_event(int writes, const char* call, int fd, const char* name) {
  const long n = atomic_fetch_add(&events, 1) + 1;
  if (log_fd >= 0) log_event(n, call, fd, name);
  if (n == kill_at) kill(getpid(), SIGKILL);
  return writes && enospc_at > 0 && n >= enospc_at;
}

#define NEXT(name)                                  \
  static __typeof__(&name) next_##name;              \
  if (!next_##name) next_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  NEXT(pwrite);
  if (fault_event(1, "pwrite", fd, NULL)) return errno = ENOSPC, -1;
  return next_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  NEXT(pwrite64);
  if (fault_event(1, "pwrite64", fd, NULL)) return errno = ENOSPC, -1;
  return next_pwrite64(fd, buf, n, off);
}

ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  NEXT(pwritev);
  if (fault_event(1, "pwritev", fd, NULL)) return errno = ENOSPC, -1;
  return next_pwritev(fd, iov, cnt, off);
}

ssize_t write(int fd, const void* buf, size_t n) {
  NEXT(write);
  if (fd > 2 && fault_event(1, "write", fd, NULL)) return errno = ENOSPC, -1;
  return next_write(fd, buf, n);
}

ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  NEXT(writev);
  if (fd > 2 && fault_event(1, "writev", fd, NULL)) return errno = ENOSPC, -1;
  return next_writev(fd, iov, cnt);
}

int fsync(int fd) {
  NEXT(fsync);
  fault_event(0, "fsync", fd, NULL);
  return next_fsync(fd);
}

int fdatasync(int fd) {
  NEXT(fdatasync);
  fault_event(0, "fdatasync", fd, NULL);
  return next_fdatasync(fd);
}

int ftruncate(int fd, off_t len) {
  NEXT(ftruncate);
  if (fault_event(1, "ftruncate", fd, NULL)) return errno = ENOSPC, -1;
  return next_ftruncate(fd, len);
}

int rename(const char* from, const char* to) {
  NEXT(rename);
  fault_event(0, "rename", -1, from);
  return next_rename(from, to);
}
