/* Every way a program can take SIGBUS, SIGSEGV or SIGSYS away from
 * tiermem's fault handling, under the preload library (issue 30.2 and
 * 30.10): run by scripts/ctest.sh with TIERMEM_NEAR far below the
 * footprint, in-context (the default fault path: tiermem's SIGBUS handler
 * serves the faults, its seccomp filter's SIGSYS the system calls).
 *
 * For each way of setting a disposition (every glibc entry point, the
 * compat sigvec, syscall(SYS_rt_sigaction)), the program installs its own
 * crash handler for SIGSEGV and SIGBUS; tiered memory must keep working,
 * and the program's handler must still get its own faults (a write to a
 * read-only page of its own). For each way of blocking signals (the
 * masking functions, syscall(SYS_rt_sigprocmask), setcontext, siglongjmp)
 * the thread blocks everything and then touches evicted tiered memory and
 * reads into it. Then the helper threads the C library starts with every
 * signal blocked: SIGEV_THREAD timers, POSIX aio (aio_read, aio_write,
 * lio_listio) and getaddrinfo_a, on tiered memory.
 *
 *   test_signal_paths          every case, each in a fresh process
 *   test_signal_paths CASE     one case
 */
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "check.h"

#define MIB (1024ul * 1024ul)
/* Larger than the test's budget (16 MiB): touching it all evicts. */
#define DATA_BYTES (40 * MIB)

static uint64_t *data;

/* Writes all of the tiered block and reads it back: most of it is evicted
 * and faulted in again in between. */
static void churn(const char *what, uint64_t seed) {
  fill(data, DATA_BYTES / 8, seed);
  size_t bad = bad_words(data, DATA_BYTES / 8, seed);
  CHECK(bad == 0, "%s: %zu bad words in tiered memory", what, bad);
}

/* A file with known contents, and a read(2) of it into tiered memory
 * that was evicted just before (the kernel-access trap's SIGSYS). */
static int data_file(size_t len, uint64_t seed) {
  char name[] = "/tmp/tiermem-signal-paths-XXXXXX";
  int fd = mkstemp(name);
  unlink(name);
  uint64_t *buf = malloc(len);
  fill(buf, len / 8, seed);
  CHECK(write(fd, buf, len) == (ssize_t)len, "writing the data file");
  free(buf);
  return fd;
}

static void read_into_tiered(const char *what) {
  size_t len = 8 * MIB;
  int fd = data_file(len, 77);
  fill(data, DATA_BYTES / 8, 5); /* evicts the head of the block */
  ssize_t got = pread(fd, data, len, 0);
  CHECK(got == (ssize_t)len, "%s: read into evicted tiered memory: %zd (%s)", what, got, strerror(errno));
  CHECK(bad_words(data, len / 8, 77) == 0, "%s: read data", what);
  close(fd);
}

/* ---- dispositions ---- */

static sigjmp_buf recover;
static volatile sig_atomic_t own_faults;

static void on_crash(int sig) {
  (void)sig;
  own_faults++;
  siglongjmp(recover, 1);
}

/* The program's own fault, which its handler must get: a write to a
 * read-only page of plain memory. */
static void own_fault(const char *what) {
  char *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int before = own_faults;
  if (sigsetjmp(recover, 1) == 0) *(volatile char *)ro = 1;
  CHECK(own_faults == before + 1, "%s: the program's handler did not get its SIGSEGV", what);
  munmap(ro, 4096);
}

/* glibc's compat sigvec (no longer in the headers). */
struct old_sigvec {
  void (*sv_handler)(int);
  int sv_mask;
  int sv_flags;
};
int sigvec_compat(int, const struct old_sigvec *, struct old_sigvec *);
__asm__(".symver sigvec_compat, sigvec@GLIBC_2.2.5");
extern __sighandler_t __sysv_signal(int, __sighandler_t);
extern __sighandler_t ssignal(int, __sighandler_t);
extern __sighandler_t bsd_signal(int, __sighandler_t);
/* Deprecated in the headers, still what old programs call. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define SA_RESTORER 0x04000000
extern int __sigaction(int, const struct sigaction *, struct sigaction *);

/* The kernel's struct sigaction, and a restorer, for a raw rt_sigaction. */
struct kernel_sigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)(void);
  uint64_t mask;
};
void test_restore_rt(void);
__asm__(".text\n test_restore_rt: mov $15, %rax\n syscall\n");

static int install(const char *how, int sig, void (*h)(int)) {
  if (!strcmp(how, "signal")) return signal(sig, h) == SIG_ERR ? -1 : 0;
  if (!strcmp(how, "__sysv_signal")) return __sysv_signal(sig, h) == SIG_ERR ? -1 : 0;
  if (!strcmp(how, "sysv_signal")) return sysv_signal(sig, h) == SIG_ERR ? -1 : 0;
  if (!strcmp(how, "bsd_signal")) return bsd_signal(sig, h) == SIG_ERR ? -1 : 0;
  if (!strcmp(how, "ssignal")) return ssignal(sig, h) == SIG_ERR ? -1 : 0;
  if (!strcmp(how, "sigset")) return sigset(sig, h) == SIG_ERR ? -1 : 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = h;
  sigfillset(&sa.sa_mask); /* a crash handler that blocks everything */
  if (!strcmp(how, "sigaction")) return sigaction(sig, &sa, NULL);
  if (!strcmp(how, "__sigaction")) return __sigaction(sig, &sa, NULL);
  if (!strcmp(how, "sigvec")) {
    struct old_sigvec v = {h, -1, 0};
    return sigvec_compat(sig, &v, NULL);
  }
  if (!strcmp(how, "syscall")) {
    struct kernel_sigaction k = {h, SA_RESTORER | SA_NODEFER, test_restore_rt, ~0ull};
    return (int)syscall(SYS_rt_sigaction, sig, &k, NULL, 8);
  }
  if (!strcmp(how, "sigignore")) return sigignore(sig);
  return -2;
}

static const char *const dispositions[] = {"signal", "__sysv_signal", "sysv_signal", "bsd_signal",
                                           "ssignal", "sigset",        "sigaction",   "__sigaction",
                                           "sigvec", "syscall",       "sigignore"};

static void disposition_case(const char *how) {
  void (*h)(int) = strcmp(how, "sigignore") ? on_crash : SIG_IGN;
  CHECK(install(how, SIGSEGV, h) == 0 && install(how, SIGBUS, h) == 0, "%s: installing", how);
  churn(how, 1);
  read_into_tiered(how);
  if (h != SIG_IGN) {
    own_fault(how);
    /* One-shot dispositions (sysv) are gone now: install again. */
    install(how, SIGSEGV, h);
    churn(how, 2);
    own_fault(how);
  }
  /* What the program installed is what it reads back. */
  struct sigaction now;
  sigaction(SIGSEGV, NULL, &now);
  CHECK(now.sa_handler == h, "%s: sigaction reports %p, not the program's handler", how,
        (void *)now.sa_handler);
  /* SIGSYS too: a program's handler for it (or SIG_IGN) must not replace
   * the trap's. */
  CHECK(install(how, SIGSYS, h) == 0, "%s: installing for SIGSYS", how);
  read_into_tiered(how);
}

/* ---- masks ---- */

static void block_all(const char *how) {
  sigset_t all;
  sigfillset(&all);
  if (!strcmp(how, "sigprocmask")) {
    sigprocmask(SIG_SETMASK, &all, NULL);
  } else if (!strcmp(how, "pthread_sigmask")) {
    pthread_sigmask(SIG_BLOCK, &all, NULL);
  } else if (!strcmp(how, "sigblock")) {
    sigblock(~0);
  } else if (!strcmp(how, "sighold")) {
    sighold(SIGBUS), sighold(SIGSEGV), sighold(SIGSYS);
  } else if (!strcmp(how, "syscall")) {
    uint64_t m = ~0ull;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &m, NULL, 8);
  } else if (!strcmp(how, "setcontext")) {
    static volatile int done;
    ucontext_t uc;
    done = 0;
    getcontext(&uc);
    if (!done) {
      done = 1;
      sigfillset(&uc.uc_sigmask);
      setcontext(&uc);
    }
  } else if (!strcmp(how, "siglongjmp")) {
    /* A jump buffer saved while everything was blocked (by a raw call
     * the guard lets through as an unblock-free query: it saves the mask
     * it is given). */
    static sigjmp_buf jb;
    sigjmp_buf *p = &jb;
    memset(&jb, 0, sizeof jb);
    if (sigsetjmp(*p, 1) == 0) {
      jb[0].__mask_was_saved = 1;
      sigfillset(&jb[0].__saved_mask);
      siglongjmp(*p, 1);
    }
  }
}

static const char *const masks[] = {"sigprocmask", "pthread_sigmask", "sigblock", "sighold",
                                    "syscall",     "setcontext",      "siglongjmp"};

static void mask_case(const char *how) {
  block_all(how);
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  CHECK(sigismember(&now, SIGINT) || !strcmp(how, "sighold"), "%s: SIGINT not blocked: the case did nothing",
        how);
  /* The handler-thread path serves faults without a signal: there a
   * thread may block them. */
  const char *path = getenv("TIERMEM_FAULT_PATH");
  if (!path || strcmp(path, "handler-thread") != 0)
    CHECK(!sigismember(&now, SIGBUS) && !sigismember(&now, SIGSEGV) && !sigismember(&now, SIGSYS),
          "%s: a fault signal is blocked", how);
  churn(how, 3);
  read_into_tiered(how);
}

/* ---- helper threads of the C library ---- */

static volatile int timer_result = -1;

static void on_timer(union sigval v) {
  (void)v;
  /* A thread glibc started with every signal blocked. */
  fill(data, DATA_BYTES / 8, 9);
  timer_result = (int)bad_words(data, DATA_BYTES / 8, 9);
  int fd = data_file(MIB, 78);
  fill(data, DATA_BYTES / 8, 10);
  if (pread(fd, data, MIB, 0) != (ssize_t)MIB || bad_words(data, MIB / 8, 78) != 0) timer_result = -2;
  close(fd);
}

static void timer_case(void) {
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD;
  ev.sigev_notify_function = on_timer;
  timer_t t;
  CHECK(timer_create(CLOCK_MONOTONIC, &ev, &t) == 0, "timer_create");
  struct itimerspec its = {{0, 0}, {0, 1000000}};
  timer_settime(t, 0, &its, NULL);
  for (int i = 0; i < 3000 && timer_result == -1; i++) usleep(10000);
  CHECK(timer_result == 0, "SIGEV_THREAD timer thread: result %d", timer_result);
  timer_delete(t);
}

static void aio_case(void) {
  size_t len = 8 * MIB;
  int fd = data_file(len, 79);
  /* aio_read into evicted tiered memory. */
  fill(data, DATA_BYTES / 8, 11);
  struct aiocb cb;
  memset(&cb, 0, sizeof cb);
  cb.aio_fildes = fd;
  cb.aio_buf = data;
  cb.aio_nbytes = len;
  CHECK(aio_read(&cb) == 0, "aio_read: %s", strerror(errno));
  const struct aiocb *list[2] = {&cb, NULL};
  while (aio_error(&cb) == EINPROGRESS) aio_suspend(list, 1, NULL);
  CHECK(aio_return(&cb) == (ssize_t)len, "aio_read returned %zd", aio_return(&cb));
  CHECK(bad_words(data, len / 8, 79) == 0, "aio_read data");
  /* lio_listio: two reads into two evicted halves, waiting. */
  fill(data, DATA_BYTES / 8, 12);
  struct aiocb a = cb, b = cb;
  a.aio_nbytes = b.aio_nbytes = len / 2;
  a.aio_lio_opcode = b.aio_lio_opcode = LIO_READ;
  b.aio_offset = len / 2;
  b.aio_buf = (char *)data + len / 2;
  struct aiocb *lio[2] = {&a, &b};
  CHECK(lio_listio(LIO_WAIT, lio, 2, NULL) == 0, "lio_listio: %s", strerror(errno));
  CHECK(bad_words(data, len / 8, 79) == 0, "lio_listio data");
  /* aio_write from evicted tiered memory. */
  fill(data, len / 8, 80);
  fill(data + len / 8, (DATA_BYTES - len) / 8, 13);
  struct aiocb w = cb;
  CHECK(aio_write(&w) == 0, "aio_write");
  const struct aiocb *wl[1] = {&w};
  while (aio_error(&w) == EINPROGRESS) aio_suspend(wl, 1, NULL);
  CHECK(aio_return(&w) == (ssize_t)len, "aio_write returned %zd", aio_return(&w));
  uint64_t *back = malloc(len);
  CHECK(pread(fd, back, len, 0) == (ssize_t)len && bad_words(back, len / 8, 80) == 0, "aio_write data");
  free(back);
  close(fd);
}

static void gai_case(void) {
  /* The request blocks in tiered memory, evicted before the call: the
   * helper thread writes the results there. */
  struct gaicb *reqs = (struct gaicb *)data;
  fill(data, DATA_BYTES / 8, 14);
  memset(reqs, 0, 2 * sizeof *reqs);
  reqs[0].ar_name = "localhost";
  fill(data + MIB, (DATA_BYTES - 8 * MIB) / 8, 15); /* evicts the requests' page */
  unsigned char resident = 1;
  mincore(reqs, 4096, &resident);
  CHECK(!(resident & 1), "getaddrinfo_a: the requests' page was not evicted: the case tests nothing");
  struct gaicb *list[1] = {&reqs[0]};
  int r = getaddrinfo_a(GAI_WAIT, list, 1, NULL);
  CHECK(r == 0 && gai_error(&reqs[0]) == 0 && reqs[0].ar_result != NULL, "getaddrinfo_a: %d (%s)", r,
        gai_strerror(r));
  if (reqs[0].ar_result) freeaddrinfo(reqs[0].ar_result);
}

static void run_case(const char *name) {
  data = malloc(DATA_BYTES);
  CHECK(data != NULL, "malloc");
  for (size_t k = 0; k < sizeof dispositions / sizeof *dispositions; k++) {
    char n[64];
    snprintf(n, sizeof n, "disposition-%s", dispositions[k]);
    if (!strcmp(name, n)) disposition_case(dispositions[k]);
  }
  for (size_t k = 0; k < sizeof masks / sizeof *masks; k++) {
    char n[64];
    snprintf(n, sizeof n, "mask-%s", masks[k]);
    if (!strcmp(name, n)) mask_case(masks[k]);
  }
  if (!strcmp(name, "timer")) timer_case();
  if (!strcmp(name, "aio")) aio_case();
  if (!strcmp(name, "getaddrinfo_a")) gai_case();
}

int main(int argc, char **argv) {
  if (argc == 2) {
    run_case(argv[1]);
    if (checks == 0) {
      fprintf(stderr, "no case %s\n", argv[1]);
      return 2;
    }
    return failures ? 1 : 0;
  }
  char names[32][64];
  size_t n = 0;
  for (size_t k = 0; k < sizeof dispositions / sizeof *dispositions; k++)
    snprintf(names[n++], 64, "disposition-%s", dispositions[k]);
  for (size_t k = 0; k < sizeof masks / sizeof *masks; k++) snprintf(names[n++], 64, "mask-%s", masks[k]);
  snprintf(names[n++], 64, "timer");
  snprintf(names[n++], 64, "aio");
  snprintf(names[n++], 64, "getaddrinfo_a");
  const char *list[32];
  for (size_t k = 0; k < n; k++) list[k] = names[k];
  return run_each_case(argv[0], list, n, "test_signal_paths") ? 1 : 0;
}
