/* What the C test programs share: a counting CHECK that reports and goes
 * on, a 64-bit mix for per-word patterns, and a runner that runs each case
 * of a program in a fresh process. Include once per program. */
#ifndef TIERMEM_TESTS_CHECK_H
#define TIERMEM_TESTS_CHECK_H

#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>

static int failures;
static int checks;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    checks++;                                              \
    if (!(cond)) {                                         \
      failures++;                                          \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fputc('\n', stderr);                                 \
    }                                                      \
  } while (0)

static inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Words `seed + i` mixed, and how many differ from them. */
static inline void fill(uint64_t *p, size_t words, uint64_t seed) {
  for (size_t i = 0; i < words; i++) p[i] = mix(seed + i);
}

static inline size_t bad_words(const uint64_t *p, size_t words, uint64_t seed) {
  size_t bad = 0;
  for (size_t i = 0; i < words; i++) bad += p[i] != mix(seed + i);
  return bad;
}

/* Runs `self NAME` for each of `names` in a fresh process (the
 * environment, LD_PRELOAD included, is inherited), prints "ok NAME" or
 * "FAIL NAME: why", then a total for `program`; returns the failures. */
static inline int run_each_case(const char *self, const char *const *names, size_t n, const char *program) {
  extern char **environ;
  int failed = 0;
  for (size_t k = 0; k < n; k++) {
    char *args[] = {(char *)self, (char *)names[k], NULL};
    pid_t pid;
    int st = 0;
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) != 0 || waitpid(pid, &st, 0) < 0) {
      fprintf(stderr, "FAIL %s: cannot run\n", names[k]);
      failed++;
      continue;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      printf("ok   %s\n", names[k]);
    } else {
      failed++;
      fprintf(stderr, "FAIL %s: %s %d\n", names[k], WIFSIGNALED(st) ? "killed by signal" : "exit status",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
  }
  printf("%s: %zu cases, %d failed\n", program, n, failed);
  return failed;
}

#endif
