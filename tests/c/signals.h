/* What the signal test programs (test_signals.c, test_signal_threads.c)
 * share: a region mostly evicted, the watchdog, and the runner that runs
 * every case on both fault paths, each in a fresh process. Include once
 * per program, before anything else. */
#ifndef TIERMEM_TESTS_SIGNALS_H
#define TIERMEM_TESTS_SIGNALS_H

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

static _Atomic(const char *) current_case;
/* What the watchdog's first instruction found: 1 if every asynchronous
 * signal was blocked, 0 if not; -1 until it looked. */
static atomic_int watchdog_masked = -1;

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
