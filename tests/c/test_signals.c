/* What ordinary programs do to their own threads and signals, on tiered
 * memory: timers whose handlers read region memory, siglongjmp out of
 * region reads, asynchronous cancellation, process-directed signals aimed
 * at tiermem's own threads, threads that block every signal, handlers with
 * a full sa_mask, small stacks and alternate signal stacks, and system
 * calls that write into region pages. Each case runs on both fault paths
 * (in-context and handler-thread) with a budget far below the footprint, so
 * that nearly every access evicts or fills.
 *
 * Exit status 0 when every check passed. A case that hangs is caught by
 * the watchdog (alarm-free: a thread that aborts after a deadline).
 */
#define _GNU_SOURCE
#include <aio.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/types.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <ucontext.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <spawn.h>
#include <time.h>
#include <unistd.h>

#include <tiermem.h>

#include "check.h"

enum { PAGE = 4096, PAGES = 512, NEAR_PAGES = 16 };

static const char *path_name(int path) {
  return path == TM_FAULT_IN_CONTEXT ? "in-context" : "handler-thread";
}

/* A region of PAGES pages over NEAR_PAGES, every word written with mix(i):
 * most pages end up evicted. */
static tm_region *make_region(int path, uint32_t movers) {
  struct tm_config cfg;
  tm_config_init(&cfg, (uint64_t)PAGES * PAGE, (uint64_t)NEAR_PAGES * PAGE);
  cfg.fault_path = path;
  cfg.movers = movers;
  tm_region *r = NULL;
  if (tm_region_create(&cfg, &r) != TM_OK) {
    fprintf(stderr, "tm_region_create: %s\n", tm_last_error());
    exit(2);
  }
  uint64_t *w = tm_region_base(r);
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i++) w[i] = mix(i);
  return r;
}

/* ---- watchdog: a hang is a failure with a message, not a stuck job ---- */

static _Atomic(const char *) current_case;
/* What the watchdog's first instruction found: 1 if every asynchronous
 * signal was blocked, 0 if not; -1 until it looked. */
static atomic_int watchdog_masked = -1;

static void *watchdog(void *arg) {
  (void)arg;
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  atomic_store(&watchdog_masked, sigismember(&now, SIGALRM) == 1 && sigismember(&now, SIGPROF) == 1 &&
                                     sigismember(&now, SIGUSR1) == 1 && sigismember(&now, SIGUSR2) == 1);
  const char *last = NULL;
  int same = 0;
  for (;;) {
    sleep(1);
    const char *c = atomic_load(&current_case);
    same = (c == last) ? same + 1 : 0;
    last = c;
    if (c && same >= 60) {
      fprintf(stderr, "FAIL: case \"%s\" hangs (60 s)\n", c);
      _exit(3);
    }
  }
  return NULL;
}

/* Starts the watchdog with every signal blocked from its first instruction
 * (it inherits the mask in place while it is created). A thread that opens
 * them even briefly, as one that blocks them in its own body does until it
 * gets there, can take the process-directed signals the cases send: the
 * kernel hands SIGALRM to it while the main thread serves a fault with
 * them blocked, and a handler that siglongjmps then moves it onto the main
 * thread's stack (two threads on one stack: "stack smashing detected" or
 * SIGSEGV in the longjmp case, about 1 run in 100 on a loaded machine); a
 * SIGUSR1 handler run on it counts as one run on a tiermem thread.
 * Returns 0 if the watchdog did not start with them blocked. */
static int start_watchdog(void) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pthread_t dog;
  int r = pthread_create(&dog, NULL, watchdog, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (r != 0) return 0;
  while (atomic_load(&watchdog_masked) < 0) sched_yield();
  return atomic_load(&watchdog_masked) == 1;
}

/* The kernel's name of thread `tid` of this process ("?" if gone). */
static const char *thread_name(pid_t tid, char *buf, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f || !fgets(buf, (int)len, f)) snprintf(buf, len, "?");
  if (f) fclose(f);
  buf[strcspn(buf, "\n")] = 0;
  return buf;
}

/* ---- 1. a 1 ms timer whose handler reads region memory ---- */

static uint64_t *timer_words;
static atomic_ulong timer_reads;
static atomic_ulong timer_bad;

static void on_alarm_read(int sig) {
  (void)sig;
  unsigned long n = atomic_fetch_add(&timer_reads, 1);
  size_t i = (size_t)(mix(n) % ((size_t)PAGES * PAGE / 8));
  if (timer_words[i] != mix(i)) atomic_fetch_add(&timer_bad, 1);
}

/* `which` timer (ITIMER_REAL: SIGALRM, wall clock; ITIMER_PROF: SIGPROF,
 * CPU time, as profilers use) every millisecond while the program reads
 * region memory; the handler reads region memory too. */
static void timer_case(int path, int which, int sig) {
  tm_region *r = make_region(path, 0);
  timer_words = tm_region_base(r);
  atomic_store(&timer_reads, 0);
  atomic_store(&timer_bad, 0);
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm_read;
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, NULL);
  struct itimerval it = {{0, 1000}, {0, 1000}};
  setitimer(which, &it, NULL);
  uint64_t bad = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 64)
      if (timer_words[i] != mix(i)) bad++;
    clock_gettime(CLOCK_MONOTONIC, &t1);
  } while (t1.tv_sec - t0.tv_sec < 1 || atomic_load(&timer_reads) < 200);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(which, &off, NULL);
  signal(sig, SIG_DFL);
  CHECK(bad == 0 && atomic_load(&timer_bad) == 0, "%s: %lu bad words, %lu bad in handler",
        path_name(path), (unsigned long)bad, (unsigned long)atomic_load(&timer_bad));
  CHECK(atomic_load(&timer_reads) >= 200, "%s: only %lu timer reads", path_name(path),
        (unsigned long)atomic_load(&timer_reads));
  tm_region_destroy(r);
}

static void test_timer_handler_reads_region(int path) {
  atomic_store(&current_case, "timer handler reads region memory");
  timer_case(path, ITIMER_REAL, SIGALRM);
}

static void test_profiling_timer(int path) {
  atomic_store(&current_case, "ITIMER_PROF handler reads region memory");
  timer_case(path, ITIMER_PROF, SIGPROF);
}

/* ---- 2. a timer handler that siglongjmps out of region reads ---- */

static sigjmp_buf slice_jump;
static volatile sig_atomic_t slice_armed;
static atomic_int slice_tid;
static atomic_ulong slice_stray;
static atomic_int stray_tid;

static void on_alarm_jump(int sig) {
  (void)sig;
  pid_t me = (pid_t)syscall(SYS_gettid);
  if (me != atomic_load(&slice_tid)) {
    /* Another thread: jumping would run it on the main thread's stack. */
    atomic_fetch_add(&slice_stray, 1);
    atomic_store(&stray_tid, (int)me);
    return;
  }
  if (slice_armed) {
    slice_armed = 0;
    siglongjmp(slice_jump, 1);
  }
}

static void test_siglongjmp_out_of_reads(int path) {
  atomic_store(&current_case, "siglongjmp out of region reads");
  tm_region *r = make_region(path, 0);
  volatile uint64_t *w = tm_region_base(r);
  atomic_store(&slice_tid, (int)syscall(SYS_gettid));
  atomic_store(&slice_stray, 0);
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm_jump;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 200}, {0, 200}};
  setitimer(ITIMER_REAL, &it, NULL);
  volatile unsigned jumps = 0;
  volatile uint64_t bad = 0;
  volatile size_t pos = 0;
  while (jumps < 3000) {
    if (sigsetjmp(slice_jump, 1)) {
      jumps++;
      continue;
    }
    slice_armed = 1;
    for (;;) { /* a time slice of plain reads, cut short by the timer */
      size_t i = (pos * 577) % ((size_t)PAGES * PAGE / 8);
      if (w[i] != mix(i)) bad++;
      pos++;
    }
  }
  slice_armed = 0;
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  signal(SIGALRM, SIG_DFL);
  /* Every page must still be readable: a page left busy hangs here (the
   * watchdog reports it). */
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 512)
    if (w[i] != mix(i)) bad++;
  CHECK(bad == 0, "%s: %lu bad words after %u jumps", path_name(path), (unsigned long)bad, jumps);
  char name[32];
  CHECK(atomic_load(&slice_stray) == 0, "%s: %lu SIGALRM handlers ran on another thread (last: %d, %s)",
        path_name(path), (unsigned long)atomic_load(&slice_stray), atomic_load(&stray_tid),
        thread_name(atomic_load(&stray_tid), name, sizeof name));
  tm_region_destroy(r);
}

/* ---- 2b. the same out of tiermem's own calls (evict_all, advise
 * DONTNEED, prefetch, touch): each owns pages, near slots or a range-table
 * lookup for a moment, which an abandoned call would keep forever (the
 * next access hung or died of SIGBUS, or destroy hung) ---- */

static void test_siglongjmp_out_of_calls(int path) {
  atomic_store(&current_case, "siglongjmp out of tiermem calls");
  tm_region *r = make_region(path, 0);
  volatile uint64_t *w = tm_region_base(r);
  atomic_store(&slice_tid, (int)syscall(SYS_gettid));
  atomic_store(&slice_stray, 0);
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm_jump;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 100}, {0, 100}};
  setitimer(ITIMER_REAL, &it, NULL);
  volatile unsigned jumps = 0;
  volatile uint64_t bad = 0;
  volatile size_t k = 0;
  while (jumps < 2000) {
    if (sigsetjmp(slice_jump, 1)) {
      jumps++;
      continue;
    }
    slice_armed = 1;
    for (;;) {
      void *at = (void *)(w + (k % (PAGES / 8)) * 8 * (PAGE / 8));
      switch (k++ % 4) {
      case 0: tm_region_evict_all(r); break;
      case 1: tm_advise(at, 8 * PAGE, TM_ADVICE_DONTNEED); break;
      case 2: tm_prefetch(at, 8 * PAGE); break;
      default: tm_touch(at, 8 * PAGE); break;
      }
      size_t i = (k * 577) % ((size_t)PAGES * PAGE / 8);
      if (w[i] != mix(i)) bad++;
    }
  }
  slice_armed = 0;
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  signal(SIGALRM, SIG_DFL);
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 512)
    if (w[i] != mix(i)) bad++;
  CHECK(bad == 0, "%s: %lu bad words after %u jumps", path_name(path), (unsigned long)bad, jumps);
  CHECK(tm_region_evict_all(r) >= 0, "%s: evict_all after the jumps: %s", path_name(path), tm_last_error());
  tm_region_destroy(r); /* a lookup left open would hang here */
}

/* ---- 3. asynchronous cancellation of threads that touch region memory ---- */

struct cancel_arg {
  volatile uint64_t *w;
  atomic_int started;
};

static void *cancel_me(void *p) {
  struct cancel_arg *a = p;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  atomic_fetch_add(&a->started, 1);
  uint64_t x = 0;
  for (size_t k = 0;; k++) {
    size_t i = (mix(k + (size_t)pthread_self()) % ((size_t)PAGES * PAGE / 8));
    x += a->w[i];
  }
  return (void *)(uintptr_t)x;
}

/* 100 rounds of 4 threads running `body` on r's memory, cancelled at
 * random moments; then every page must still read back right (a page left
 * busy would hang here: the watchdog reports it). Destroys r. */
static void cancel_rounds(int path, tm_region *r, void *(*body)(void *)) {
  struct cancel_arg a = {.w = tm_region_base(r)};
  for (int round = 0; round < 100; round++) {
    pthread_t t[4];
    atomic_store(&a.started, 0);
    for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, body, &a);
    while (atomic_load(&a.started) < 4) sched_yield();
    usleep(200 + (round % 5) * 300);
    for (int k = 0; k < 4; k++) pthread_cancel(t[k]);
    for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
  }
  uint64_t bad = 0;
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 97)
    if (a.w[i] != mix(i)) bad++;
  CHECK(bad == 0, "%s: %lu bad words after cancellations", path_name(path), (unsigned long)bad);
  tm_region_destroy(r);
}

static void test_async_cancel(int path) {
  atomic_store(&current_case, "asynchronous cancellation");
  tm_region *r = make_region(path, 0);
  cancel_rounds(path, r, cancel_me);
}

/* ---- 3b. deferred cancellation with a file far store: the fault service
 * reads and writes the file, and must contain no cancellation point ---- */

static void *cancel_me_deferred(void *p) {
  struct cancel_arg *a = p;
  atomic_fetch_add(&a->started, 1);
  uint64_t x = 0;
  for (size_t k = 0;; k++) {
    size_t i = (mix(k + (size_t)pthread_self()) % ((size_t)PAGES * PAGE / 8));
    x += a->w[i];
    if (k % 64 == 0) pthread_testcancel();
  }
  return (void *)(uintptr_t)x;
}

static void test_deferred_cancel_file_store(int path) {
  atomic_store(&current_case, "deferred cancellation, file far store");
  struct tm_config cfg;
  tm_config_init(&cfg, (uint64_t)PAGES * PAGE, (uint64_t)NEAR_PAGES * PAGE);
  cfg.fault_path = path;
  cfg.far_kind = TM_FAR_FILE;
  cfg.far_path = "/tmp";
  tm_region *r = NULL;
  if (tm_region_create(&cfg, &r) != TM_OK) {
    fprintf(stderr, "tm_region_create: %s\n", tm_last_error());
    exit(2);
  }
  uint64_t *w = tm_region_base(r);
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i++) w[i] = mix(i);
  cancel_rounds(path, r, cancel_me_deferred);
}

/* ---- 4. process-directed signals never run on tiermem's threads ---- */

static atomic_int app_tids[8];
static atomic_ulong foreign_runs;
static atomic_ulong usr1_runs;

static int is_app_thread(pid_t tid) {
  for (int k = 0; k < 8; k++)
    if (atomic_load(&app_tids[k]) == tid) return 1;
  return 0;
}

static void on_usr1(int sig) {
  (void)sig;
  atomic_fetch_add(&usr1_runs, 1);
  pid_t me = (pid_t)syscall(SYS_gettid);
  if (!is_app_thread(me)) {
    atomic_fetch_add(&foreign_runs, 1);
    atomic_store(&stray_tid, (int)me);
  }
}

static void test_runtime_threads_get_no_app_signals(int path) {
  atomic_store(&current_case, "process-directed signals at a high rate");
  memset(app_tids, 0, sizeof app_tids);
  atomic_store(&app_tids[0], (int)syscall(SYS_gettid));
  /* The watchdog blocks every signal from its first instruction
   * (start_watchdog): a handler run on it counts as a foreign run too. */
  tm_region *r = make_region(path, 1);
  struct sigaction sa = {0};
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  atomic_store(&foreign_runs, 0);
  atomic_store(&usr1_runs, 0);
  volatile uint64_t *w = tm_region_base(r);
  uint64_t bad = 0;
  /* The main thread blocks SIGUSR1 while it sends, so that the kernel
   * must pick another thread: only tiermem's exist besides the watchdog. */
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  for (int k = 0; k < 20000; k++) {
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    kill(getpid(), SIGUSR1);
    size_t i = (mix((uint64_t)k) % ((size_t)PAGES * PAGE / 8));
    if (w[i] != mix(i)) bad++;
    pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
  }
  signal(SIGUSR1, SIG_IGN);
  CHECK(bad == 0, "%s: %lu bad words", path_name(path), (unsigned long)bad);
  char name[32];
  CHECK(atomic_load(&foreign_runs) == 0, "%s: %lu of %lu SIGUSR1 handlers ran on other threads (last: %d, %s)",
        path_name(path), (unsigned long)atomic_load(&foreign_runs), (unsigned long)atomic_load(&usr1_runs),
        atomic_load(&stray_tid), thread_name(atomic_load(&stray_tid), name, sizeof name));
  CHECK(atomic_load(&usr1_runs) > 0, "%s: SIGUSR1 never delivered", path_name(path));
  tm_region_destroy(r);
  signal(SIGUSR1, SIG_DFL);
}

/* ---- 5. threads that block every signal (MPI progress threads, pools) ---- */

struct blocked_arg {
  volatile uint64_t *w;
  uint64_t bad;
};

static void *read_all_blocked(void *p) {
  struct blocked_arg *a = p;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, NULL);
  for (int pass = 0; pass < 3; pass++)
    for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 7)
      if (a->w[i] != mix(i)) a->bad++;
  /* Writes too (write-protect faults, evictions with write-back). */
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 511) a->w[i] = mix(i);
  return NULL;
}

static void test_thread_blocking_all_signals(int path) {
  atomic_store(&current_case, "a thread that blocks every signal");
  tm_region *r = make_region(path, 0);
  struct blocked_arg a = {.w = tm_region_base(r)};
  pthread_t t;
  pthread_create(&t, NULL, read_all_blocked, &a);
  pthread_join(t, NULL);
  CHECK(a.bad == 0, "%s: %lu bad words", path_name(path), (unsigned long)a.bad);
  /* The same with sigprocmask in the main thread. */
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  uint64_t bad = 0;
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 13)
    if (a.w[i] != mix(i)) bad++;
  sigprocmask(SIG_SETMASK, &old, NULL);
  CHECK(bad == 0, "%s: %lu bad words (sigprocmask)", path_name(path), (unsigned long)bad);
  tm_region_destroy(r);
}

/* ---- 6. handlers with a full sa_mask that read region memory ---- */

static volatile uint64_t *handler_words;
static atomic_ulong handler_bad;
static atomic_ulong handler_runs;

static void on_full_mask(int sig) {
  (void)sig;
  unsigned long n = atomic_fetch_add(&handler_runs, 1);
  for (size_t k = 0; k < 16; k++) {
    size_t i = (size_t)(mix(n * 16 + k) % ((size_t)PAGES * PAGE / 8));
    if (handler_words[i] != mix(i)) atomic_fetch_add(&handler_bad, 1);
  }
}

extern int __sigaction(int, const struct sigaction *, struct sigaction *);

static void full_mask_handler_case(int path, int sig, int installed_before) {
  tm_region *r = make_region(path, 0);
  handler_words = tm_region_base(r);
  atomic_store(&handler_bad, 0);
  atomic_store(&handler_runs, 0);
  if (!installed_before) {
    struct sigaction sa = {0};
    sa.sa_handler = on_full_mask;
    sigfillset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
  }
  for (int k = 0; k < 300; k++) pthread_kill(pthread_self(), sig);
  CHECK(atomic_load(&handler_runs) == 300, "%s: %lu handler runs", path_name(path),
        (unsigned long)atomic_load(&handler_runs));
  CHECK(atomic_load(&handler_bad) == 0, "%s: %lu bad words in the handler", path_name(path),
        (unsigned long)atomic_load(&handler_bad));
  tm_region_destroy(r);
}

static void test_full_mask_handler(int path) {
  atomic_store(&current_case, "a handler with a full sa_mask reads region memory");
  full_mask_handler_case(path, SIGUSR1, 0);
}

static void test_full_mask_handler_installed_before(int path) {
  atomic_store(&current_case, "the same, handler installed before tiermem (bypassing sigaction)");
  /* This process has no region yet: install with the C library's own
   * sigaction, as code loaded before tiermem would have. */
  struct sigaction sa = {0};
  sa.sa_handler = on_full_mask;
  sigfillset(&sa.sa_mask);
  __sigaction(SIGUSR2, &sa, NULL);
  full_mask_handler_case(path, SIGUSR2, 1);
}

/* ---- 7. SIGBUS set to SIG_IGN before tiermem: kill() stays ignored ---- */

static void test_ignored_sigbus_stays_ignored(int path) {
  atomic_store(&current_case, "SIGBUS ignored before tiermem, then kill(SIGBUS)");
  signal(SIGBUS, SIG_IGN);
  tm_region *r = make_region(path, 0);
  kill(getpid(), SIGBUS);
  raise(SIGBUS);
  volatile uint64_t *w = tm_region_base(r);
  CHECK(w[12345] == mix(12345), "%s: region unreadable after an ignored SIGBUS", path_name(path));
  tm_region_destroy(r);
}

/* ---- 8. the application installs SIGBUS/SIGSEGV handlers after tiermem ---- */

static atomic_int app_segv_seen;

static void on_app_segv(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)ctx;
  if (si->si_addr == (void *)8) {
    atomic_fetch_add(&app_segv_seen, 1);
    _exit(atomic_load(&app_segv_seen) == 1 ? 42 : 43);
  }
  _exit(44);
}

static void test_app_handlers_after_tiermem(int path) {
  atomic_store(&current_case, "application SIGBUS/SIGSEGV handlers installed after tiermem");
  tm_region *r = make_region(path, 0);
  struct sigaction sa = {0}, old = {0};
  sa.sa_sigaction = on_app_segv;
  sa.sa_flags = SA_SIGINFO;
  CHECK(sigaction(SIGSEGV, &sa, &old) == 0, "sigaction(SIGSEGV)");
  CHECK(sigaction(SIGBUS, &sa, NULL) == 0, "sigaction(SIGBUS)");
  struct sigaction now;
  sigaction(SIGSEGV, NULL, &now);
  CHECK(now.sa_sigaction == on_app_segv, "the application sees its own handler");
  /* tiermem still serves the region ... */
  volatile uint64_t *w = tm_region_base(r);
  uint64_t bad = 0;
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 29)
    if (w[i] != mix(i)) bad++;
  CHECK(bad == 0, "%s: %lu bad words with application handlers", path_name(path), (unsigned long)bad);
  /* ... and a crash of the application's own reaches its handler. */
  pid_t pid = fork();
  if (pid == 0) {
    volatile uintptr_t bad_addr = 8;
    *(volatile int *)bad_addr = 1;
    _exit(45);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42, "the application's SIGSEGV handler did not run (status %#x)", st);
  tm_region_destroy(r);
}

/* ---- 9. sigwait and signalfd threads, fork from a signal handler ---- */

static atomic_int waiter_done;
static atomic_ulong waiter_bad;
static atomic_ulong waiter_got;
static volatile uint64_t *waiter_words;

static void waiter_read(unsigned long n) {
  for (size_t k = 0; k < 8; k++) {
    size_t i = (size_t)(mix(n * 8 + k) % ((size_t)PAGES * PAGE / 8));
    if (waiter_words[i] != mix(i)) atomic_fetch_add(&waiter_bad, 1);
  }
}

static void *sigwait_thread(void *arg) {
  (void)arg;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  while (!atomic_load(&waiter_done)) {
    int sig;
    struct timespec ts = {0, 10 * 1000 * 1000};
    if (sigtimedwait(&set, NULL, &ts) == SIGUSR1) waiter_read(atomic_fetch_add(&waiter_got, 1));
    (void)sig;
  }
  return NULL;
}

static void *signalfd_thread(void *arg) {
  int fd = *(int *)arg;
  struct signalfd_siginfo info;
  while (!atomic_load(&waiter_done)) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 10) == 1 && read(fd, &info, sizeof info) == (ssize_t)sizeof info)
      waiter_read(atomic_fetch_add(&waiter_got, 1));
  }
  return NULL;
}

static void waiter_case(int path, int use_signalfd) {
  tm_region *r = make_region(path, 1);
  waiter_words = tm_region_base(r);
  atomic_store(&waiter_done, 0);
  atomic_store(&waiter_bad, 0);
  atomic_store(&waiter_got, 0);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, NULL); /* before the waiter starts: it inherits it */
  int fd = use_signalfd ? signalfd(-1, &set, SFD_CLOEXEC) : -1;
  pthread_t t;
  pthread_create(&t, NULL, use_signalfd ? signalfd_thread : sigwait_thread, &fd);
  uint64_t bad = 0;
  for (int k = 0; k < 4000; k++) {
    kill(getpid(), SIGUSR1);
    size_t i = (size_t)(mix((uint64_t)k + 77) % ((size_t)PAGES * PAGE / 8));
    if (waiter_words[i] != mix(i)) bad++;
  }
  usleep(50 * 1000);
  atomic_store(&waiter_done, 1);
  pthread_join(t, NULL);
  if (fd >= 0) close(fd);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  CHECK(bad == 0 && atomic_load(&waiter_bad) == 0, "%s: %lu bad words, %lu in the waiter", path_name(path),
        (unsigned long)bad, (unsigned long)atomic_load(&waiter_bad));
  CHECK(atomic_load(&waiter_got) > 0, "%s: the waiter got no signal", path_name(path));
  tm_region_destroy(r);
}

static void test_sigwait_thread(int path) {
  atomic_store(&current_case, "a sigwait thread reads region memory");
  waiter_case(path, 0);
}

static void test_signalfd_thread(int path) {
  atomic_store(&current_case, "a signalfd thread reads region memory");
  waiter_case(path, 1);
}

static atomic_int forks_done;

static void on_usr2_fork(int sig) {
  (void)sig;
  pid_t p = fork();
  if (p == 0) _exit(0);
  if (p > 0) {
    int st;
    waitpid(p, &st, 0);
    atomic_fetch_add(&forks_done, 1);
  }
}

static void test_fork_from_handler(int path) {
  atomic_store(&current_case, "fork() from a signal handler while faulting");
  tm_region *r = make_region(path, 1);
  volatile uint64_t *w = tm_region_base(r);
  struct sigaction sa = {0};
  sa.sa_handler = on_usr2_fork;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);
  atomic_store(&forks_done, 0);
  uint64_t bad = 0;
  for (int k = 0; k < 200; k++) {
    pthread_kill(pthread_self(), SIGUSR2);
    for (size_t i = (size_t)k; i < (size_t)PAGES * PAGE / 8; i += 4099)
      if (w[i] != mix(i)) bad++;
  }
  signal(SIGUSR2, SIG_DFL);
  CHECK(bad == 0, "%s: %lu bad words", path_name(path), (unsigned long)bad);
  CHECK(atomic_load(&forks_done) == 200, "%s: %d forks", path_name(path), atomic_load(&forks_done));
  tm_region_destroy(r);
}

/* ---- small stacks: a fault needs little of the faulting thread's stack ---- */

struct small_stack_arg {
  volatile uint64_t *w;
  uint64_t bad;
};

/* Streams over the whole region (PAGES over NEAR_PAGES: nearly every
 * access fills and evicts), reading and writing, three passes. */
static void *stream_region(void *p) {
  struct small_stack_arg *a = p;
  for (int pass = 0; pass < 3; pass++) {
    for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 257)
      if (a->w[i] != mix(i) + (uint64_t)pass) a->bad++;
    for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i++)
      if (i % 257 == 0) a->w[i] = mix(i) + (uint64_t)pass + 1;
  }
  return NULL;
}

static void test_min_stack_thread(int path) {
  atomic_store(&current_case, "a PTHREAD_STACK_MIN thread streaming over an evicting region");
  tm_region *r = make_region(path, 0);
  struct small_stack_arg a = {.w = tm_region_base(r)};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  CHECK(pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN) == 0, "setstacksize(%ld)", (long)PTHREAD_STACK_MIN);
  pthread_t t;
  CHECK(pthread_create(&t, &attr, stream_region, &a) == 0, "pthread_create with PTHREAD_STACK_MIN");
  pthread_join(t, NULL);
  pthread_attr_destroy(&attr);
  CHECK(a.bad == 0, "%s: %lu bad words", path_name(path), (unsigned long)a.bad);
  struct tm_stats s = {.struct_size = sizeof s};
  CHECK(tm_region_stats(r, &s) == TM_OK, "tm_region_stats: %s", tm_last_error());
  CHECK(s.evictions > PAGES, "%s: the stream evicted (%lu evictions)", path_name(path), (unsigned long)s.evictions);
  tm_region_destroy(r);
}

static volatile uint64_t *altstack_words;
static atomic_ulong altstack_bad;
static atomic_ulong altstack_runs;

/* Reads 64 pages spread over the region: evicted ones, each a fill that
 * evicts, on the alternate stack. */
static void on_usr1_altstack(int sig) {
  (void)sig;
  static atomic_ulong next;
  unsigned long start = atomic_fetch_add(&next, 1);
  for (unsigned long k = 0; k < 64; k++) {
    size_t i = ((start * 64 + k) * 37 % PAGES) * (PAGE / 8) + k;
    if (altstack_words[i] != mix(i)) atomic_fetch_add(&altstack_bad, 1);
  }
  atomic_fetch_add(&altstack_runs, 1);
}

static void test_sigaltstack_handler(int path) {
  atomic_store(&current_case, "an SA_ONSTACK handler on a SIGSTKSZ alternate stack reading evicted pages");
  tm_region *r = make_region(path, 0);
  altstack_words = tm_region_base(r);
  CHECK(tm_region_evict_all(r) >= 0, "evict_all: %s", tm_last_error());
  stack_t ss = {.ss_size = SIGSTKSZ, .ss_flags = 0};
  ss.ss_sp = malloc(ss.ss_size);
  CHECK(ss.ss_sp && sigaltstack(&ss, NULL) == 0, "sigaltstack(%zu bytes)", (size_t)ss.ss_size);
  struct sigaction sa = {0}, old;
  sa.sa_handler = on_usr1_altstack;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &old);
  for (int k = 0; k < 32; k++) raise(SIGUSR1);
  sigaction(SIGUSR1, &old, NULL);
  stack_t off = {.ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
  free(ss.ss_sp);
  CHECK(atomic_load(&altstack_runs) == 32, "%s: %lu handler runs", path_name(path), atomic_load(&altstack_runs));
  CHECK(atomic_load(&altstack_bad) == 0, "%s: %lu bad words", path_name(path), atomic_load(&altstack_bad));
  tm_region_destroy(r);
}

struct test_case {
  const char *name;
  void (*run)(int path);
};

/* ---- 14. the application's own SIGSYS action, before and after tiermem ----
 *
 * The kernel-access trap serves read() into tiered memory in a SIGSYS
 * handler. A program that installs its own SIGSYS action (a handler, or
 * SIG_IGN) must not replace it: a trapped read would "return" its system
 * call number with the buffer untouched, or kill the process. Its action
 * still gets every SIGSYS that is not tiermem's: raise(), and traps of its
 * own seccomp filter. */

#ifndef SYS_SECCOMP
#define SYS_SECCOMP 1 /* si_code of a seccomp trap */
#endif

static atomic_int own_raised, own_trapped;

static void on_own_plain(int sig) {
  (void)sig;
  atomic_fetch_add(&own_raised, 1);
}

static void on_own_sigsys(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  if (si->si_code == SYS_SECCOMP && si->si_errno == 0) {
    atomic_fetch_add(&own_trapped, 1);
    ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RAX] = 4242; /* the trapped call's result */
  } else {
    atomic_fetch_add(&own_raised, 1);
  }
}

/* read()s 8 pages of a file with a known pattern into region pages from
 * `first` (evicted: the region's budget holds its last 16 pages); returns
 * the number of bad words (or of failed calls). */
static size_t read_into_region(tm_region *r, size_t first, uint64_t seed) {
  FILE *t = tmpfile();
  uint64_t page[PAGE / 8];
  for (size_t p = 0; p < 8; p++) {
    for (size_t i = 0; i < PAGE / 8; i++) page[i] = mix(seed + p * PAGE / 8 + i);
    if (fwrite(page, 1, PAGE, t) != PAGE) return 1;
  }
  fflush(t);
  int fd = fileno(t);
  lseek(fd, 0, SEEK_SET);
  uint64_t *w = (uint64_t *)tm_region_base(r) + first * PAGE / 8;
  ssize_t n = read(fd, w, 8 * PAGE);
  size_t bad = n != 8 * PAGE;
  if (bad) fprintf(stderr, "read into the region: %zd (%s)\n", n, n < 0 ? strerror(errno) : "short");
  for (size_t i = 0; i < 8 * PAGE / 8; i++) bad += w[i] != mix(seed + i);
  fclose(t);
  return bad;
}

/* A filter of the program's own that traps getppid() with a marker first
 * argument (SIGSYS, si_errno 0); any other getppid() runs (LeakSanitizer's
 * tracer polls it). */
#define OWN_MARKER 0x7e57f11eu
static int own_filter(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, OWN_MARKER, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0;
}

static void test_own_sigsys_handler(int path) {
  atomic_store(&current_case, "the application's SIGSYS handler, before and after tiermem");
  struct sigaction sa = {0}, now = {0};
  sa.sa_sigaction = on_own_sigsys;
  sa.sa_flags = SA_SIGINFO;
  CHECK(sigaction(SIGSYS, &sa, NULL) == 0, "sigaction(SIGSYS) before tiermem");
  tm_region *r = make_region(path, 0);
  CHECK(read_into_region(r, 100, 1000) == 0, "%s: read() into the region, handler installed before",
        path_name(path));
  raise(SIGSYS);
  CHECK(atomic_load(&own_raised) == 1, "%s: raise(SIGSYS) reached the application's handler %d times",
        path_name(path), atomic_load(&own_raised));
  CHECK(sigaction(SIGSYS, &sa, NULL) == 0, "sigaction(SIGSYS) after tiermem");
  sigaction(SIGSYS, NULL, &now);
  CHECK(now.sa_sigaction == on_own_sigsys, "the application sees its own SIGSYS handler");
  CHECK(read_into_region(r, 200, 2000) == 0, "%s: read() into the region, handler installed after",
        path_name(path));
  CHECK(signal(SIGSYS, on_own_plain) != SIG_ERR, "signal(SIGSYS)");
  CHECK(read_into_region(r, 300, 3000) == 0, "%s: read() into the region after signal()", path_name(path));
  raise(SIGSYS);
  CHECK(atomic_load(&own_raised) == 2, "%s: raise(SIGSYS) after signal()", path_name(path));
  sigaction(SIGSYS, &sa, NULL);
  if (own_filter()) {
    long v = syscall(SYS_getppid, (long)OWN_MARKER);
    CHECK(syscall(SYS_getppid) == getppid(), "getppid() without the marker runs");
    CHECK(v == 4242 && atomic_load(&own_trapped) == 1, "%s: the application's own seccomp trap: %ld, %d",
          path_name(path), v, atomic_load(&own_trapped));
    CHECK(read_into_region(r, 400, 4000) == 0, "%s: read() under two filters", path_name(path));
  } else {
    fprintf(stderr, "note: cannot load a seccomp filter (%s); that part is skipped\n", strerror(errno));
  }
  raise(SIGSYS);
  CHECK(atomic_load(&own_raised) == 3, "%s: last raise(SIGSYS)", path_name(path));
  tm_region_destroy(r);
}

static void test_ignored_sigsys(int path) {
  atomic_store(&current_case, "SIGSYS ignored before and after tiermem");
  CHECK(signal(SIGSYS, SIG_IGN) != SIG_ERR, "signal(SIGSYS, SIG_IGN) before tiermem");
  tm_region *r = make_region(path, 0);
  CHECK(read_into_region(r, 100, 1000) == 0, "%s: read() into the region, SIGSYS ignored before",
        path_name(path));
  raise(SIGSYS); /* stays ignored */
  CHECK(signal(SIGSYS, SIG_IGN) == SIG_IGN, "signal(SIGSYS) reports SIG_IGN");
  CHECK(read_into_region(r, 200, 2000) == 0, "%s: read() into the region, SIGSYS ignored after",
        path_name(path));
  raise(SIGSYS);
  CHECK(signal(SIGSYS, SIG_DFL) == SIG_IGN, "signal(SIGSYS, SIG_DFL) reports SIG_IGN");
  CHECK(read_into_region(r, 300, 3000) == 0, "%s: read() into the region, SIGSYS default", path_name(path));
  tm_region_destroy(r);
}

/* ---- 15. read() of a C library in another link namespace ----
 *
 * dlmopen(LM_ID_NEWLM) loads a second libc.so.6 that dl_iterate_phdr does
 * not show; its read() into a region page that is not resident is served
 * like the main C library's (not EFAULT), when it was loaded before the
 * first region. */

static void test_other_namespace_read(int path) {
  atomic_store(&current_case, "read() of a C library loaded with dlmopen(LM_ID_NEWLM)");
  void *h = dlmopen(LM_ID_NEWLM, "libc.so.6", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "note: dlmopen(libc.so.6): %s; case skipped\n", dlerror());
    return;
  }
  ssize_t (*other_read)(int, void *, size_t);
  void *sym = dlsym(h, "read");
  memcpy(&other_read, &sym, sizeof sym); /* POSIX: dlsym's result is the function */
  ssize_t (*own_read)(int, void *, size_t) = read;
  CHECK(sym && other_read != own_read, "the other namespace's read");
  tm_region *r = make_region(path, 0);
  int fd = open("/dev/zero", O_RDONLY);
  uint64_t *w = (uint64_t *)tm_region_base(r) + 100 * PAGE / 8;
  ssize_t n = other_read(fd, w, 8 * PAGE);
  CHECK(n == 8 * PAGE, "%s: read() of the other namespace into the region: %zd (%s)", path_name(path), n,
        n < 0 ? strerror(errno) : "short");
  size_t bad = 0;
  for (size_t i = 0; i < 8 * PAGE / 8; i++) bad += w[i] != 0;
  CHECK(bad == 0, "%s: %zu words not read", path_name(path), bad);
  close(fd);
  tm_region_destroy(r);
}

/* ---- 16. glibc POSIX aio into region pages: the documented workaround ----
 *
 * aio's helper thread blocks every signal behind the interposers' back; on
 * the in-context path its pread into a tiered buffer is trapped with SIGSYS
 * blocked and the process is killed (docs/design.md, "Kernel accesses"),
 * so the case runs on the handler-thread path only, which serves it. */

static void test_aio_handler_thread(int path) {
  atomic_store(&current_case, "aio_read into evicted region pages (handler-thread path)");
  if (path == TM_FAULT_IN_CONTEXT) return; /* kills the process: documented */
  tm_region *r = make_region(path, 0);
  int fd = open("/dev/zero", O_RDONLY);
  uint64_t *w = (uint64_t *)tm_region_base(r) + 100 * PAGE / 8;
  struct aiocb cb;
  memset(&cb, 0, sizeof cb);
  cb.aio_fildes = fd;
  cb.aio_buf = w;
  cb.aio_nbytes = 64 * PAGE;
  CHECK(aio_read(&cb) == 0, "aio_read: %s", strerror(errno));
  const struct aiocb *list[1] = {&cb};
  while (aio_error(&cb) == EINPROGRESS) aio_suspend(list, 1, NULL);
  int e = aio_error(&cb);
  ssize_t n = aio_return(&cb);
  CHECK(e == 0 && n == 64 * PAGE, "aio_read into the region: error %d, %zd", e, n);
  size_t bad = 0;
  for (size_t i = 0; i < 64 * PAGE / 8; i++) bad += w[i] != 0;
  CHECK(bad == 0, "aio_read: %zu words not read", bad);
  close(fd);
  tm_region_destroy(r);
}

static const struct test_case cases[] = {
    {"timer", test_timer_handler_reads_region},
    {"longjmp", test_siglongjmp_out_of_reads},
    {"longjmp-calls", test_siglongjmp_out_of_calls},
    {"cancel", test_async_cancel},
    {"deferred-cancel", test_deferred_cancel_file_store},
    {"runtime-threads", test_runtime_threads_get_no_app_signals},
    {"blocked-thread", test_thread_blocking_all_signals},
    {"full-mask-handler", test_full_mask_handler},
    {"handler-before", test_full_mask_handler_installed_before},
    {"ignored-sigbus", test_ignored_sigbus_stays_ignored},
    {"app-handlers", test_app_handlers_after_tiermem},
    {"prof-timer", test_profiling_timer},
    {"sigwait-thread", test_sigwait_thread},
    {"signalfd-thread", test_signalfd_thread},
    {"fork-in-handler", test_fork_from_handler},
    {"min-stack-thread", test_min_stack_thread},
    {"sigaltstack-handler", test_sigaltstack_handler},
    {"own-sigsys", test_own_sigsys_handler},
    {"ignored-sigsys", test_ignored_sigsys},
    {"dlmopen-read", test_other_namespace_read},
    {"aio-handler-thread", test_aio_handler_thread},
};

/* test_signals: every case on both paths, each in a fresh process (some
 * set things up before tiermem starts; a crash in one hides no other).
 * test_signals CASE PATH: one case on one path, in this process. */
int main(int argc, char **argv) {
  int paths[2] = {TM_FAULT_IN_CONTEXT, TM_FAULT_HANDLER_THREAD};
  if (argc == 3) {
    if (!start_watchdog()) {
      fprintf(stderr, "FAIL: the watchdog thread started with asynchronous signals open\n");
      return 1;
    }
    int found = 0;
    for (int p = 0; p < 2; p++) {
      if (strcmp(argv[2], path_name(paths[p])) != 0) continue;
      for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        if (strcmp(argv[1], cases[k].name) == 0) {
          found = 1;
          cases[k].run(paths[p]);
        }
    }
    atomic_store(&current_case, NULL);
    if (!found) {
      fprintf(stderr, "no case %s on path %s\n", argv[1], argv[2]);
      return 2;
    }
    return failures ? 1 : 0;
  }
  int failed = 0, run = 0;
  extern char **environ;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    for (int p = 0; p < 2; p++) {
      char *args[] = {argv[0], (char *)cases[k].name, (char *)path_name(paths[p]), NULL};
      pid_t pid;
      int st = 0;
      if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) != 0 || waitpid(pid, &st, 0) < 0) {
        fprintf(stderr, "FAIL %s %s: cannot run\n", cases[k].name, path_name(paths[p]));
        failed++;
        continue;
      }
      run++;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        failed++;
        if (WIFSIGNALED(st))
          fprintf(stderr, "FAIL %s %s: killed by signal %d\n", cases[k].name, path_name(paths[p]), WTERMSIG(st));
        else
          fprintf(stderr, "FAIL %s %s: exit status %d\n", cases[k].name, path_name(paths[p]), WEXITSTATUS(st));
      } else {
        printf("ok   %s %s\n", cases[k].name, path_name(paths[p]));
      }
    }
  }
  printf("test_signals: %d case runs, %d failed\n", run, failed);
  return failed ? 1 : 0;
}
