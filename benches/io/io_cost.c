/* What a read(2) into a buffer costs, plain and under tiermem's preload:
 * run by benches/io/run.sh plain, under `tiermem run`, and under another
 * build's `tiermem run` (before/after), in one run.
 *
 *   io_cost SOURCE MIB ROUNDS
 *
 * SOURCE: `pipe` (a writer thread pushes MIB MiB through a pipe sized to
 * 1 MiB; the reader asks for all that is left at each call), `socket` (the
 * same over a stream socketpair), `file` (one read(2) of MIB MiB of a file
 * in the page cache), `zero` (read(2)s of 1 MiB from /dev/zero). The
 * reader's buffer is MIB MiB from malloc (tiered under tiermem): written
 * once before the timed rounds, so that resident or evicted is what the
 * budget makes of it. Prints one line of JSON: the median seconds of a
 * round, GB/s, and the read(2) calls the reader made.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024ul * 1024ul)

static int wfd;
static size_t total;
static char *wsrc;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *writer(void *arg) {
  (void)arg;
  size_t done = 0;
  while (done < total) {
    size_t n = total - done < MIB ? total - done : MIB;
    ssize_t w = write(wfd, wsrc, n);
    if (w <= 0) break;
    done += (size_t)w;
  }
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: io_cost pipe|socket|file|zero MIB ROUNDS\n");
    return 2;
  }
  const char *src = argv[1];
  total = (size_t)atol(argv[2]) * MIB;
  int rounds = atoi(argv[3]);
  char *buf = malloc(total);
  memset(buf, 1, total);
  wsrc = malloc(MIB); /* below the default threshold: plain memory */
  memset(wsrc, 2, MIB);
  int file = -1;
  if (!strcmp(src, "file")) {
    char name[] = "/tmp/io-cost-XXXXXX";
    file = mkstemp(name);
    unlink(name);
    for (size_t d = 0; d < total; d += MIB)
      if (write(file, wsrc, MIB) != (ssize_t)MIB) return 1;
  }
  double *t = calloc((size_t)rounds, sizeof *t);
  long calls = 0;
  for (int r = 0; r < rounds; r++) {
    int fds[2] = {-1, -1};
    pthread_t th;
    int rfd = -1;
    if (!strcmp(src, "pipe") || !strcmp(src, "socket")) {
      if (!strcmp(src, "pipe")) {
        if (pipe(fds)) return 1;
        fcntl(fds[1], F_SETPIPE_SZ, (int)MIB);
      } else if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds)) {
        return 1;
      }
      rfd = fds[0];
      wfd = fds[1];
      pthread_create(&th, NULL, writer, NULL);
    } else if (!strcmp(src, "zero")) {
      rfd = open("/dev/zero", O_RDONLY);
    } else {
      rfd = file;
      lseek(file, 0, SEEK_SET);
    }
    double t0 = now();
    size_t got = 0;
    while (got < total) {
      size_t want = total - got;
      if (!strcmp(src, "zero") && want > MIB) want = MIB;
      ssize_t n = read(rfd, buf + got, want);
      calls++;
      if (n <= 0) {
        perror("read");
        return 1;
      }
      got += (size_t)n;
    }
    t[r] = now() - t0;
    if (fds[0] >= 0) {
      pthread_join(th, NULL);
      close(fds[0]), close(fds[1]);
    } else if (rfd != file) {
      close(rfd);
    }
  }
  qsort(t, (size_t)rounds, sizeof *t, cmp);
  double med = t[rounds / 2];
  printf("{\"source\": \"%s\", \"mib\": %zu, \"rounds\": %d, \"median_s\": %.6f, \"gb_per_s\": %.3f, "
         "\"reads_per_round\": %ld}\n",
         src, total / MIB, rounds, med, (double)total / med / 1e9, calls / rounds);
  return 0;
}
