/* fork() at every depth of an unmodified program under tiermem's preload
 * library (issue 30.1): run by scripts/ctest.sh with a near budget far
 * below the footprint, on both fault paths, with 4 KiB pages and with
 * transparent huge pages.
 *
 * Each generation g (0 = the program) holds a 64 MiB block A, most of it
 * evicted; a block B that nobody ever touches; and a block C that it
 * touched only once (resident or evicted, whatever the budget did). Each
 * generation:
 *
 *   1. checks that A holds exactly what its parent left there at the
 *      fork (every word), that B reads as zeros and C as its pattern;
 *   2. forks a child, and right after the fork rewrites all of A (the
 *      child must not see these writes);
 *   3. in the child (generation g + 1): rewrites two pages of every three
 *      of A (the third keeps what older generations wrote), then goes on
 *      at step 1, down to the depth asked;
 *   4. forks and execs this program in "leaf" mode at every depth (a new
 *      image under the inherited seccomp filter: it allocates, writes and
 *      checks tiered memory of its own with --follow-exec, plain memory
 *      otherwise);
 *   5. waits for its children, then checks its own post-fork writes.
 *
 * Exit status 0 when every check at every depth passed.
 *
 *   test_fork_depth [DEPTH [HOW]]   (default 3, fork)
 *   test_fork_depth leaf
 *
 * HOW: `fork` (the C library's), or a fork that runs no fork handlers:
 * `sys-fork` (syscall(SYS_fork)), `sys-clone` (syscall(SYS_clone,
 * SIGCHLD, 0): a child on the caller's stack, as fork makes it).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define MIB (1024ul * 1024ul)
#define A_BYTES (64 * MIB)
#define B_BYTES (8 * MIB)
#define C_BYTES (4 * MIB)
#define PAGE 4096ul
#define PAGE_WORDS (PAGE / 8)

static uint64_t *a, *b, *c;
static const char *how = "fork";

static pid_t fork_how(void) {
  if (!strcmp(how, "sys-fork")) return (pid_t)syscall(SYS_fork);
  if (!strcmp(how, "sys-clone")) return (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  return fork();
}

/* What generation `g` wrote into word `i` of A (for a page it rewrote). */
static uint64_t written_by(int g, size_t i) { return mix(((uint64_t)g << 40) ^ i); }

/* Pages of A that a child rewrites: two of every three. */
static int rewritten(size_t i) { return (i / PAGE_WORDS) % 3 != 0; }

/* What A must hold in generation `g`, before it forks. */
static uint64_t expected(int g, size_t i) {
  if (g == 0 || rewritten(i)) return written_by(g, i);
  return written_by(0, i);
}

/* What generation `g` writes over all of A after forking. */
static uint64_t after_fork(int g, size_t i) { return ~written_by(g, i); }

static size_t bad_a(int g, uint64_t (*want)(int, size_t)) {
  size_t bad = 0;
  for (size_t i = 0; i < A_BYTES / 8; i++) bad += a[i] != want(g, i);
  return bad;
}

static size_t nonzero_b(void) {
  size_t bad = 0;
  for (size_t i = 0; i < B_BYTES / 8; i++) bad += b[i] != 0;
  return bad;
}

static size_t bad_c(void) {
  size_t bad = 0;
  for (size_t i = 0; i < C_BYTES / 8; i++) bad += c[i] != mix(~i);
  return bad;
}

/* A fresh image of this program at this depth: tiered memory of its own
 * (the block is larger than the test's budget). */
static int leaf(void) {
  size_t words = 32 * MIB / 8;
  uint64_t *p = malloc(words * 8);
  CHECK(p != NULL, "leaf: malloc");
  if (!p) return 1;
  for (size_t i = 0; i < words; i++) p[i] = mix(i * 7);
  size_t bad = 0;
  for (size_t i = 0; i < words; i++) bad += p[i] != mix(i * 7);
  CHECK(bad == 0, "leaf: %zu bad words", bad);
  free(p);
  return failures ? 1 : 0;
}

static int run_leaf(int g) {
  pid_t pid = fork();
  if (pid == 0) {
    char *args[] = {"test_fork_depth", "leaf", NULL};
    execv("/proc/self/exe", args);
    _exit(127);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "generation %d: fork+exec", g);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "generation %d: exec'd leaf failed (status %#x)", g, st);
  return failures;
}

/* Generation `g` of `depth`; returns its exit status. */
static int generation(int g, int depth) {
  size_t bad = bad_a(g, expected);
  CHECK(bad == 0, "generation %d: %zu of %lu words of A differ from what its parent wrote", g, bad,
        A_BYTES / 8);
  /* Generation 0 never touches B: it reaches every child untouched. */
  if (g > 0) CHECK(nonzero_b() == 0, "generation %d: the block never touched is not zero", g);
  CHECK(bad_c() == 0, "generation %d: the block touched once changed", g);
  run_leaf(g);
  if (g == depth) return failures ? 1 : 0;
  fflush(NULL);
  pid_t pid = fork_how();
  CHECK(pid >= 0, "generation %d: %s failed", g, how);
  if (pid == 0) {
    int child = g + 1;
    /* The child's own copy: check, then rewrite two pages in three. */
    if (bad_a(g, expected) != 0) {
      fprintf(stderr, "generation %d: A differs right after the fork\n", child);
      _exit(1);
    }
    for (size_t i = 0; i < A_BYTES / 8; i++)
      if (rewritten(i)) a[i] = written_by(child, i);
    _exit(generation(child, depth));
  }
  /* Written after the fork: the child must not see this. */
  for (size_t i = 0; i < A_BYTES / 8; i++) a[i] = after_fork(g, i);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "generation %d: child failed (status %#x)", g, st);
  bad = bad_a(g, after_fork);
  CHECK(bad == 0, "generation %d: %zu words of its own writes lost while its child ran", g, bad);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "leaf") == 0) return leaf();
  int depth = argc >= 2 ? atoi(argv[1]) : 3;
  if (argc >= 3) how = argv[2];
  a = malloc(A_BYTES);
  b = malloc(B_BYTES);
  c = malloc(C_BYTES);
  CHECK(a && b && c, "malloc");
  if (!a || !b || !c) return 1;
  for (size_t i = 0; i < C_BYTES / 8; i++) c[i] = mix(~i);
  for (size_t i = 0; i < A_BYTES / 8; i++) a[i] = written_by(0, i);
  int r = generation(0, depth);
  if (r == 0) printf("test_fork_depth: %d generations (%s), all data as written\n", depth + 1, how);
  return r;
}
