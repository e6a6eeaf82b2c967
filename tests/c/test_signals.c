/* What ordinary programs do to their own threads and signals, on tiered
 * memory: timers whose handlers read region memory, siglongjmp out of
 * region reads, asynchronous cancellation, process-directed signals aimed
 * at tiermem's own threads, threads that block every signal, handlers with
 * a full sa_mask, and the application's own SIGBUS/SIGSEGV handlers
 * (test_signal_threads.c has the rest). Each case runs on both fault paths
 * (in-context and handler-thread) with a budget far below the footprint, so
 * that nearly every access evicts or fills.
 *
 * Exit status 0 when every check passed. A case that hangs is caught by
 * the watchdog (alarm-free: a thread that aborts after a deadline).
 */
#include "signals.h"

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

/* Runs `slice` (an endless loop over r's words w from *pos, counting the
 * wrong ones in *bad) in time slices that a SIGALRM every `usec` µs cuts
 * short with a siglongjmp, `rounds` times; then stops the timer and checks
 * that no word was wrong. */
typedef void slice_fn(tm_region *r, volatile uint64_t *w, volatile size_t *pos, volatile uint64_t *bad);

static void jump_out_of(int path, tm_region *r, suseconds_t usec, unsigned rounds, slice_fn *slice) {
  volatile uint64_t *w = tm_region_base(r);
  atomic_store(&slice_tid, (int)syscall(SYS_gettid));
  atomic_store(&slice_stray, 0);
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm_jump;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, usec}, {0, usec}};
  setitimer(ITIMER_REAL, &it, NULL);
  volatile unsigned jumps = 0;
  volatile uint64_t bad = 0;
  volatile size_t pos = 0;
  while (jumps < rounds) {
    if (sigsetjmp(slice_jump, 1)) {
      jumps++;
      continue;
    }
    slice_armed = 1;
    slice(r, w, &pos, &bad);
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
}

/* A time slice of plain reads. */
static void read_slice(tm_region *r, volatile uint64_t *w, volatile size_t *pos, volatile uint64_t *bad) {
  (void)r;
  for (;;) {
    size_t i = (*pos * 577) % ((size_t)PAGES * PAGE / 8);
    if (w[i] != mix(i)) (*bad)++;
    (*pos)++;
  }
}

static void test_siglongjmp_out_of_reads(int path) {
  atomic_store(&current_case, "siglongjmp out of region reads");
  tm_region *r = make_region(path, 0);
  jump_out_of(path, r, 200, 3000, read_slice);
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

/* A time slice of tiermem calls, each followed by a read. */
static void call_slice(tm_region *r, volatile uint64_t *w, volatile size_t *k, volatile uint64_t *bad) {
  for (;;) {
    void *at = (void *)(w + (*k % (PAGES / 8)) * 8 * (PAGE / 8));
    switch ((*k)++ % 4) {
    case 0: tm_region_evict_all(r); break;
    case 1: tm_advise(at, 8 * PAGE, TM_ADVICE_DONTNEED); break;
    case 2: tm_prefetch(at, 8 * PAGE); break;
    default: tm_touch(at, 8 * PAGE); break;
    }
    size_t i = (*k * 577) % ((size_t)PAGES * PAGE / 8);
    if (w[i] != mix(i)) (*bad)++;
  }
}

static void test_siglongjmp_out_of_calls(int path) {
  atomic_store(&current_case, "siglongjmp out of tiermem calls");
  tm_region *r = make_region(path, 0);
  jump_out_of(path, r, 100, 2000, call_slice);
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

/* A region like make_region's over a file far store in /tmp: the fault
 * service reads and writes the file. */
static tm_region *make_file_region(int path) {
  struct tm_config cfg = region_config(path);
  cfg.far_kind = TM_FAR_FILE;
  cfg.far_path = "/tmp";
  return make_region_with(&cfg);
}

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
  tm_region *r = make_file_region(path);
  cancel_rounds(path, r, cancel_me_deferred);
}

/* ---- 3c. a discard by a thread whose deferred cancel is pending: freeing
 * far space (fallocate) must not be a cancellation point, or the thread
 * unwinds out of it holding a page busy (the next access hangs) ---- */

struct discard_arg {
  tm_region *r;
  atomic_int cancelled, returned;
};

static void *discard_with_cancel_pending(void *p) {
  struct discard_arg *a = p;
  while (!atomic_load(&a->cancelled)) sched_yield();
  tm_region_discard(a->r, 0, (size_t)PAGES * PAGE);
  atomic_store(&a->returned, 1);
  pthread_testcancel();
  return NULL;
}

static void test_discard_with_cancel_pending(int path) {
  atomic_store(&current_case, "discard with a cancel pending, file far store");
  tm_region *r = make_file_region(path);
  struct discard_arg a = {.r = r};
  pthread_t t;
  pthread_create(&t, NULL, discard_with_cancel_pending, &a);
  pthread_cancel(t);
  atomic_store(&a.cancelled, 1);
  void *res = NULL;
  pthread_join(t, &res);
  CHECK(atomic_load(&a.returned) == 1, "%s: the discard was a cancellation point", path_name(path));
  CHECK(res == PTHREAD_CANCELED, "%s: the thread was not cancelled after the discard", path_name(path));
  volatile uint64_t *w = tm_region_base(r);
  uint64_t nonzero = 0;
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 512) nonzero += w[i] != 0;
  CHECK(nonzero == 0, "%s: %lu discarded pages not zero", path_name(path), (unsigned long)nonzero);
  tm_region_destroy(r);
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


static const struct test_case cases[] = {
    {"timer", test_timer_handler_reads_region},
    {"longjmp", test_siglongjmp_out_of_reads},
    {"longjmp-calls", test_siglongjmp_out_of_calls},
    {"cancel", test_async_cancel},
    {"deferred-cancel", test_deferred_cancel_file_store},
    {"discard-cancel", test_discard_with_cancel_pending},
    {"runtime-threads", test_runtime_threads_get_no_app_signals},
    {"blocked-thread", test_thread_blocking_all_signals},
    {"full-mask-handler", test_full_mask_handler},
    {"handler-before", test_full_mask_handler_installed_before},
    {"ignored-sigbus", test_ignored_sigbus_stays_ignored},
    {"app-handlers", test_app_handlers_after_tiermem},
    {"prof-timer", test_profiling_timer},
};

int main(int argc, char **argv) {
  return signals_main(argc, argv, cases, sizeof cases / sizeof cases[0], "test_signals");
}
