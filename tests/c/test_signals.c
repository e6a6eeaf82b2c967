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
#include <errno.h>
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
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <tiermem.h>

static int failures;
static int checks;

#define CHECK(cond, ...)                                          \
  do {                                                            \
    checks++;                                                     \
    if (!(cond)) {                                                \
      failures++;                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                               \
      fputc('\n', stderr);                                        \
    }                                                             \
  } while (0)

enum { PAGE = 4096, PAGES = 512, NEAR_PAGES = 16 };

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

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

static void *watchdog(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
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

static void test_timer_handler_reads_region(int path) {
  atomic_store(&current_case, "timer handler reads region memory");
  if (atomic_load(&current_case)) fprintf(stderr, "case: %s\n", atomic_load(&current_case));
  tm_region *r = make_region(path, 0);
  timer_words = tm_region_base(r);
  atomic_store(&timer_reads, 0);
  atomic_store(&timer_bad, 0);
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm_read;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 1000}, {0, 1000}};
  setitimer(ITIMER_REAL, &it, NULL);
  uint64_t bad = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i += 64)
      if (timer_words[i] != mix(i)) bad++;
    clock_gettime(CLOCK_MONOTONIC, &t1);
  } while (t1.tv_sec - t0.tv_sec < 1 || atomic_load(&timer_reads) < 200);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  signal(SIGALRM, SIG_DFL);
  CHECK(bad == 0 && atomic_load(&timer_bad) == 0, "%s: %lu bad words, %lu bad in handler",
        path_name(path), (unsigned long)bad, (unsigned long)atomic_load(&timer_bad));
  CHECK(atomic_load(&timer_reads) >= 200, "%s: only %lu timer reads", path_name(path),
        (unsigned long)atomic_load(&timer_reads));
  tm_region_destroy(r);
}

/* ---- 2. a timer handler that siglongjmps out of region reads ---- */

static sigjmp_buf slice_jump;
static volatile sig_atomic_t slice_armed;

static void on_alarm_jump(int sig) {
  (void)sig;
  if (slice_armed) {
    slice_armed = 0;
    siglongjmp(slice_jump, 1);
  }
}

static void test_siglongjmp_out_of_reads(int path) {
  atomic_store(&current_case, "siglongjmp out of region reads");
  if (atomic_load(&current_case)) fprintf(stderr, "case: %s\n", atomic_load(&current_case));
  tm_region *r = make_region(path, 0);
  volatile uint64_t *w = tm_region_base(r);
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
  tm_region_destroy(r);
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

static void test_async_cancel(int path) {
  atomic_store(&current_case, "asynchronous cancellation");
  if (atomic_load(&current_case)) fprintf(stderr, "case: %s\n", atomic_load(&current_case));
  tm_region *r = make_region(path, 0);
  struct cancel_arg a = {.w = tm_region_base(r)};
  for (int round = 0; round < 100; round++) {
    pthread_t t[4];
    atomic_store(&a.started, 0);
    for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, cancel_me, &a);
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
  struct cancel_arg a = {.w = w};
  for (int round = 0; round < 100; round++) {
    pthread_t t[4];
    atomic_store(&a.started, 0);
    for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, cancel_me_deferred, &a);
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
  if (!is_app_thread((pid_t)syscall(SYS_gettid))) atomic_fetch_add(&foreign_runs, 1);
}

static void test_runtime_threads_get_no_app_signals(int path) {
  atomic_store(&current_case, "process-directed signals at a high rate");
  if (atomic_load(&current_case)) fprintf(stderr, "case: %s\n", atomic_load(&current_case));
  memset(app_tids, 0, sizeof app_tids);
  atomic_store(&app_tids[0], (int)syscall(SYS_gettid));
  /* The watchdog thread blocks everything; it counts as the application's. */
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
  CHECK(atomic_load(&foreign_runs) == 0, "%s: %lu of %lu SIGUSR1 handlers ran on tiermem threads",
        path_name(path), (unsigned long)atomic_load(&foreign_runs), (unsigned long)atomic_load(&usr1_runs));
  CHECK(atomic_load(&usr1_runs) > 0, "%s: SIGUSR1 never delivered", path_name(path));
  tm_region_destroy(r);
  signal(SIGUSR1, SIG_DFL);
}

struct test_case {
  const char *name;
  void (*run)(int path);
};

static const struct test_case cases[] = {
    {"timer", test_timer_handler_reads_region},
    {"longjmp", test_siglongjmp_out_of_reads},
    {"cancel", test_async_cancel},
    {"deferred-cancel", test_deferred_cancel_file_store},
    {"runtime-threads", test_runtime_threads_get_no_app_signals},
};

/* test_signals [CASE [PATH]]: all cases on both paths, or one case
 * (by name) on one path (in-context or handler-thread). */
int main(int argc, char **argv) {
  pthread_t dog;
  pthread_create(&dog, NULL, watchdog, NULL);
  int paths[2] = {TM_FAULT_IN_CONTEXT, TM_FAULT_HANDLER_THREAD};
  for (int p = 0; p < 2; p++) {
    if (argc > 2 && strcmp(argv[2], path_name(paths[p])) != 0) continue;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
      if (argc < 2 || strcmp(argv[1], cases[k].name) == 0) cases[k].run(paths[p]);
  }
  atomic_store(&current_case, NULL);
  if (atomic_load(&current_case)) fprintf(stderr, "case: %s\n", atomic_load(&current_case));
  printf("test_signals: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
