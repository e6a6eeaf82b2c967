/* What the C test programs share: a counting CHECK that reports and goes
 * on, a 64-bit mix for per-word patterns, a number read from a file, and a
 * runner that runs each case of a program in a fresh process. Include once
 * per program. */
#ifndef TIERMEM_TESTS_CHECK_H
#define TIERMEM_TESTS_CHECK_H

#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

static int failures;
static int checks;

/* A failed check prints "FAIL FILE:LINE: ", `head` (a string), the message,
 * then runs `tail` (a statement that prints the rest of the line). */
#define CHECK_WITH(head, tail, cond, ...)                          \
  do {                                                             \
    checks++;                                                      \
    if (!(cond)) {                                                 \
      failures++;                                                  \
      fprintf(stderr, "FAIL %s:%d: %s", __FILE__, __LINE__, head); \
      fprintf(stderr, __VA_ARGS__);                                \
      tail;                                                        \
      fputc('\n', stderr);                                         \
    }                                                              \
  } while (0)

#ifdef CHECK_LAST_ERROR
/* Programs of the C API (CHECK_LAST_ERROR defined, tiermem.h included):
 * the line names the condition and the library's last error too. */
#define CHECK(cond, ...) \
  CHECK_WITH(#cond ": ", fprintf(stderr, " [last error: \"%s\"]", tm_last_error()), cond, __VA_ARGS__)
#else
#define CHECK(cond, ...) CHECK_WITH("", (void)0, cond, __VA_ARGS__)
#endif

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

/* The first number in the file at `path` (a /proc or /sys value), or -1. */
static inline long read_long(const char *path) {
  FILE *f = fopen(path, "r");
  long v = -1;
  if (f != NULL) {
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
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

struct check_case {
  const char *name;
  void (*run)(void);
};

/* The main of a program of `cases`: PROGRAM CASE runs that case in this
 * process (exit status 2 if it ran no check: no such case); PROGRAM runs
 * every case, each in a fresh process (run_each_case). */
static inline int run_cases(int argc, char **argv, const struct check_case *cases, size_t n, const char *program) {
  if (argc == 2) {
    for (size_t k = 0; k < n; k++)
      if (strcmp(argv[1], cases[k].name) == 0) cases[k].run();
    if (checks == 0) {
      fprintf(stderr, "no case %s\n", argv[1]);
      return 2;
    }
    return failures ? 1 : 0;
  }
  const char *names[n];
  for (size_t k = 0; k < n; k++) names[k] = cases[k].name;
  return run_each_case(argv[0], names, n, program) ? 1 : 0;
}

#endif
