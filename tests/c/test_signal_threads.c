/* What ordinary programs do to their own threads and signals, on tiered
 * memory, continued from test_signals.c: sigwait and signalfd threads, fork
 * from a signal handler, small stacks and alternate signal stacks, the
 * application's own SIGSYS action, read() of a C library in another link
 * namespace, and glibc's POSIX aio writing into region pages. Each case
 * runs on both fault paths (in-context and handler-thread) with a budget
 * far below the footprint, so that nearly every access evicts or fills.
 *
 * Exit status 0 when every check passed. A case that hangs is caught by
 * the watchdog (alarm-free: a thread that aborts after a deadline).
 */
#include "signals.h"

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

int main(int argc, char **argv) {
  return signals_main(argc, argv, cases, sizeof cases / sizeof cases[0], "test_signal_threads");
}
