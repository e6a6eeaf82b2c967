/* An ordinary program that knows nothing of tiermem: a 2D 9-point heat
 * stencil (paper 1's workload) on two malloc'd grids, with OpenMP when
 * built with -fopenmp. Run it as it is, or under tiermem:
 *
 *   cc -O2 -fopenmp examples/c/heat.c -o heat
 *   ./heat 8192 10                               # 1 GiB of grids
 *   tiermem run --near 512M -- ./heat 8192 10     # the same, over a 512 MiB budget
 *
 * It prints the time and a checksum of the final grid (the same with and
 * without tiermem, and for any number of threads).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
  int iters = argc > 2 ? atoi(argv[2]) : 10;
  if (n < 3 || iters < 1) {
    fprintf(stderr, "usage: %s [N >= 3] [ITERATIONS >= 1]\n", argv[0]);
    return 2;
  }
  double *a = malloc(n * n * sizeof *a);
  double *b = malloc(n * n * sizeof *b);
  if (!a || !b) {
    fprintf(stderr, "heat: cannot allocate 2 x %zu MiB\n", n * n * sizeof *a >> 20);
    return 1;
  }
  /* A hot edge and a deterministic interior. */
#pragma omp parallel for
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      a[i * n + j] = (i == 0) ? 100.0 : (double)((i * 31 + j * 17) % 97) / 97.0;
      b[i * n + j] = a[i * n + j];
    }
  double t0 = now();
  for (int it = 0; it < iters; it++) {
#pragma omp parallel for
    for (size_t i = 1; i < n - 1; i++)
      for (size_t j = 1; j < n - 1; j++) {
        const double *r = &a[i * n + j];
        b[i * n + j] = (4.0 * r[0] + r[-1] + r[1] + r[-(long)n] + r[n] +
                        0.5 * (r[-(long)n - 1] + r[-(long)n + 1] + r[n - 1] + r[n + 1])) /
                       10.0;
      }
    double *t = a;
    a = b;
    b = t;
  }
  double t1 = now();
  /* An order-independent checksum: integer sum of scaled values. */
  uint64_t sum = 0;
  for (size_t k = 0; k < n * n; k++) sum += (uint64_t)(a[k] * 1e6);
  printf("heat: %zu x %zu, %d iterations, %.3f s, checksum %llu\n", n, n, iters, t1 - t0,
         (unsigned long long)sum);
  free(a);
  free(b);
  return 0;
}
