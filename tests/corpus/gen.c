/* Deterministic inputs for the real-program corpus (tests/corpus/run.sh).
 *
 *   gen text BYTES SEED    lines of 3-14 words drawn from a 30,000-word
 *                          vocabulary with a skewed (Zipf-like) frequency:
 *                          compresses about 3-4x, sorts, has duplicates
 *   gen rand BYTES SEED    incompressible bytes
 *   gen mixed BYTES SEED   text with a random block every ~64 KiB and long
 *                          repeats (what a long-range compressor finds)
 *   gen csv ROWS SEED      id,key,group,value rows (sqlite, sort -k, awk)
 *   gen ints COUNT SEED    one signed 64-bit integer a line
 *
 * The same arguments give the same bytes on every machine: the generator
 * is splitmix64 and integer arithmetic only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t state;

static uint64_t next(void) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t below(uint64_t n) { return next() % n; }

#define VOCAB 30000
static char words[VOCAB][16];

static void make_vocab(void) {
  static const char letters[] = "etaoinshrdlcumwfgypbvkjxqz";
  for (int i = 0; i < VOCAB; i++) {
    int len = 2 + (int)below(10);
    for (int j = 0; j < len; j++) {
      /* Frequent letters more often: index the min of two draws. */
      uint64_t a = below(26), b = below(26);
      words[i][j] = letters[a < b ? a : b];
    }
    words[i][len] = 0;
  }
}

/* A word index skewed towards small ones: min of three uniform draws over
 * a range itself drawn on a log scale. */
static int word(void) {
  uint64_t range = 16ULL << below(11); /* 16 .. 16384 */
  if (range > VOCAB) range = VOCAB;
  uint64_t a = below(range), b = below(range);
  return (int)(a < b ? a : b);
}

static size_t text_line(char *buf) {
  size_t n = 0;
  int count = 3 + (int)below(12);
  for (int i = 0; i < count; i++) {
    const char *w = words[word()];
    size_t l = strlen(w);
    memcpy(buf + n, w, l);
    n += l;
    buf[n++] = i + 1 < count ? ' ' : '\n';
  }
  return n;
}

static void out(const void *p, size_t n) {
  if (fwrite(p, 1, n, stdout) != n) {
    perror("gen: write");
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: gen text|rand|mixed|csv|ints SIZE SEED\n");
    return 2;
  }
  const char *kind = argv[1];
  uint64_t size = strtoull(argv[2], NULL, 10);
  state = strtoull(argv[3], NULL, 10) * 0x2545f4914f6cdd1dULL + 1;
  static char buf[1 << 16];
  if (!strcmp(kind, "rand")) {
    while (size > 0) {
      size_t n = size < sizeof buf ? size : sizeof buf;
      for (size_t i = 0; i < n; i += 8) {
        uint64_t r = next();
        memcpy(buf + i, &r, n - i < 8 ? n - i : 8);
      }
      out(buf, n);
      size -= n;
    }
  } else if (!strcmp(kind, "text") || !strcmp(kind, "mixed")) {
    make_vocab();
    int mixed = !strcmp(kind, "mixed");
    /* For mixed: remember earlier 4 KiB stretches and repeat some. */
    static char hist[64][4096];
    int nhist = 0;
    uint64_t done = 0;
    while (done < size) {
      size_t n = 0;
      if (mixed && below(16) == 0) {
        for (; n < 4096; n += 8) {
          uint64_t r = next();
          memcpy(buf + n, &r, 8);
        }
      } else if (mixed && nhist > 0 && below(4) == 0) {
        memcpy(buf, hist[below(nhist)], 4096);
        n = 4096;
      } else {
        while (n < 4096) n += text_line(buf + n);
        if (mixed) memcpy(hist[nhist < 64 ? (uint64_t)nhist++ : below(64)], buf, 4096);
      }
      if (n > size - done) n = size - done;
      out(buf, n);
      done += n;
    }
  } else if (!strcmp(kind, "csv")) {
    make_vocab();
    for (uint64_t i = 0; i < size; i++) {
      int n = snprintf(buf, sizeof buf, "%llu,%s%s,%d,%lld\n", (unsigned long long)i,
                       words[word()], words[below(VOCAB)], (int)below(1000),
                       (long long)(next() >> 20) - (1LL << 43));
      out(buf, (size_t)n);
    }
  } else if (!strcmp(kind, "ints")) {
    for (uint64_t i = 0; i < size; i++) {
      int n = snprintf(buf, sizeof buf, "%lld\n", (long long)next());
      out(buf, (size_t)n);
    }
  } else {
    fprintf(stderr, "gen: unknown kind %s\n", kind);
    return 2;
  }
  return fflush(stdout) ? 1 : 0;
}
