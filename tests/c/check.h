/* What the C test programs share: a counting CHECK that reports and goes
 * on, and a 64-bit mix for per-word patterns. Include once per program. */
#ifndef TIERMEM_TESTS_CHECK_H
#define TIERMEM_TESTS_CHECK_H

#include <stdint.h>
#include <stdio.h>

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

#endif
