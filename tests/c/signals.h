/* What the signal test programs (test_signals.c, test_signal_threads.c)
 * share: a region mostly evicted, the watchdog, and the runner that runs
 * every case on both fault paths, each in a fresh process. Include once
 * per program, before anything else. */
#ifndef TIERMEM_TESTS_SIGNALS_H
#define TIERMEM_TESTS_SIGNALS_H

#define _GNU_SOURCE
#include <aio.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
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

static inline const char *path_name(int path) {
  return path == TM_FAULT_IN_CONTEXT ? "in-context" : "handler-thread";
}

/* A region of PAGES pages over NEAR_PAGES (make_region: with `movers`
 * mover threads; make_region_with: of `cfg`, see region_config), every
 * word written with mix(i): most pages end up evicted. */
static inline tm_region *make_region_with(const struct tm_config *cfg) {
  tm_region *r = NULL;
  if (tm_region_create(cfg, &r) != TM_OK) {
    fprintf(stderr, "tm_region_create: %s\n", tm_last_error());
    exit(2);
  }
  uint64_t *w = tm_region_base(r);
  for (size_t i = 0; i < (size_t)PAGES * PAGE / 8; i++) w[i] = mix(i);
  return r;
}

/* The configuration of such a region on fault path `path`. */
static inline struct tm_config region_config(int path) {
  struct tm_config cfg;
  tm_config_init(&cfg, (uint64_t)PAGES * PAGE, (uint64_t)NEAR_PAGES * PAGE);
  cfg.fault_path = path;
  return cfg;
}

static inline tm_region *make_region(int path, uint32_t movers) {
  struct tm_config cfg = region_config(path);
  cfg.movers = movers;
  return make_region_with(&cfg);
}

/* ---- watchdog: a hang is a failure with a message, not a stuck job ---- */

/* How long a case may run (seconds); -DWATCHDOG_SECONDS=3 to see a dump. */
#ifndef WATCHDOG_SECONDS
#define WATCHDOG_SECONDS 60
#endif

static _Atomic(const char *) current_case;
/* What the watchdog's first instruction found: 1 if every asynchronous
 * signal was blocked, 0 if not; -1 until it looked. */
static atomic_int watchdog_masked = -1;

/* "lib+0xoffset" for a code address, from /proc/self/maps: with the
 * build's debug information, addr2line -e lib 0xoffset names the line. */
static inline void code_place(unsigned long pc, char *out, size_t len) {
  snprintf(out, len, "?");
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off;
    char path[400] = "";
    if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %399s", &lo, &hi, &off, path) >= 3 && pc >= lo && pc < hi) {
      snprintf(out, len, "%s+%#lx", path[0] ? path : "[anon]", pc - lo + off);
      break;
    }
  }
  fclose(f);
}

/* Code addresses among the words of a thread's stack from `sp` up (a
 * thread that blocks signals, as one in a fault handler does, cannot be
 * asked for a backtrace): return addresses, read through /proc/self/mem
 * (an unmapped stack fails the read, not the watchdog), each as
 * lib+offset, the innermost first. Stale words give false entries. */
static inline void scan_stack(unsigned long sp) {
  unsigned long lo[64], hi[64], off[64];
  char paths[64][160];
  int n = 0;
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  while (f && n < 64 && fgets(line, sizeof line, f)) {
    char perms[8] = "", path[160] = "";
    if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %159s", &lo[n], &hi[n], perms, &off[n], path) >= 4 && perms[2] == 'x' &&
        path[0] == '/') {
      snprintf(paths[n], sizeof paths[n], "%s", strrchr(path, '/') + 1);
      n++;
    }
  }
  if (f) fclose(f);
  int mem = open("/proc/self/mem", O_RDONLY);
  if (mem < 0) return;
  static unsigned long words[2048];
  ssize_t got = pread(mem, words, sizeof words, (off_t)sp);
  close(mem);
  fprintf(stderr, "   stack from %#lx:", sp);
  int shown = 0;
  for (ssize_t k = 0; k < got / 8 && shown < 40; k++)
    for (int m = 0; m < n; m++)
      if (words[k] >= lo[m] && words[k] < hi[m]) {
        fprintf(stderr, " %s+%#lx", paths[m], words[k] - lo[m] + off[m]);
        shown++;
        break;
      }
  fprintf(stderr, "\n");
}

static void backtrace_on_signal(int sig) {
  (void)sig;
  void *frames[48];
  int n = backtrace(frames, 48);
  char head[64];
  int k = snprintf(head, sizeof head, "-- backtrace of thread %ld:\n", (long)syscall(SYS_gettid));
  if (write(2, head, (size_t)k) < 0) return;
  backtrace_symbols_fd(frames, n, 2);
}

/* Where every thread is, for a hang: its state, wait channel and system
 * call (number, then the instruction pointer's library and offset) from
 * /proc, then the backtrace of each thread that takes SIGRTMIN+3 (one that
 * blocks it, as one inside a fault handler may, prints none: its /proc
 * line says where it is). */
static inline void dump_threads(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = backtrace_on_signal;
  sigaction(SIGRTMIN + 3, &sa, NULL);
  DIR *d = opendir("/proc/self/task");
  if (!d) return;
  long self = (long)syscall(SYS_gettid);
  struct dirent *e;
  while ((e = readdir(d))) {
    long tid = atol(e->d_name);
    if (tid <= 0) continue;
    char path[96], stat[512] = "", wchan[64] = "", call[256] = "", place[512] = "?";
    FILE *f;
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    if ((f = fopen(path, "r"))) { if (!fgets(stat, sizeof stat, f)) stat[0] = 0; fclose(f); }
    snprintf(path, sizeof path, "/proc/self/task/%ld/wchan", tid);
    if ((f = fopen(path, "r"))) { if (!fgets(wchan, sizeof wchan, f)) wchan[0] = 0; fclose(f); }
    snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
    if ((f = fopen(path, "r"))) { if (!fgets(call, sizeof call, f)) call[0] = 0; fclose(f); }
    call[strcspn(call, "\n")] = 0;
    char *last = strrchr(call, ' ');
    if (last) code_place(strtoul(last + 1, NULL, 16), place, sizeof place);
    char *comm_end = strrchr(stat, ')');
    char state = comm_end && comm_end[1] ? comm_end[2] : '?';
    char *comm = strchr(stat, '(');
    if (comm_end) *comm_end = 0;
    fprintf(stderr, "thread %ld (%s)%s: state %c, wchan %s, syscall %s, at %s\n", tid, comm ? comm + 1 : "?",
            tid == self ? " [watchdog]" : "", state, wchan[0] ? wchan : "-", call, place);
    /* The stack pointer is the second last field of a thread in a call. */
    char *sp_field = NULL;
    for (char *q = call; last && (q = strchr(q, ' ')) && q < last; q++) sp_field = q + 1;
    if (tid != self && sp_field && strncmp(call, "running", 7) != 0) scan_stack(strtoul(sp_field, NULL, 16));
  }
  closedir(d);
  d = opendir("/proc/self/task");
  while (d && (e = readdir(d))) {
    long tid = atol(e->d_name);
    /* One at a time: their lines do not mix. */
    if (tid > 0 && tid != self && syscall(SYS_tgkill, getpid(), tid, SIGRTMIN + 3) == 0) usleep(300000);
  }
  if (d) closedir(d);
}

static inline void *watchdog(void *arg) {
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
    if (c && same >= WATCHDOG_SECONDS) {
      fprintf(stderr, "FAIL: case \"%s\" hangs (%d s); where its threads are:\n", c, WATCHDOG_SECONDS);
      dump_threads();
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
static inline int start_watchdog(void) {
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


struct test_case {
  const char *name;
  void (*run)(int path);
};

/* PROGRAM: every case on both paths, each in a fresh process (some
 * set things up before tiermem starts; a crash in one hides no other).
 * PROGRAM CASE PATH: one case on one path, in this process. */
static inline int signals_main(int argc, char **argv, const struct test_case *cases, size_t n,
                               const char *program) {
  int paths[2] = {TM_FAULT_IN_CONTEXT, TM_FAULT_HANDLER_THREAD};
  if (argc == 3) {
    if (!start_watchdog()) {
      fprintf(stderr, "FAIL: the watchdog thread started with asynchronous signals open\n");
      return 1;
    }
    int found = 0;
    for (int p = 0; p < 2; p++) {
      if (strcmp(argv[2], path_name(paths[p])) != 0) continue;
      for (size_t k = 0; k < n; k++)
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
  for (size_t k = 0; k < n; k++) {
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
  printf("%s: %d case runs, %d failed\n", program, run, failed);
  return failed ? 1 : 0;
}

#endif
