/* OpenMP (libgomp, 2 threads): a parallel sweep and reduction over arrays
 * larger than the near budget, checked. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  const long n = 8L << 20; /* 64 MiB per array */
  double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  if (!a || !b) return 2;
#pragma omp parallel for
  for (long i = 0; i < n; i++) a[i] = (double)i;
  double s = 0;
  for (int rep = 0; rep < 2; rep++) {
    s = 0;
#pragma omp parallel for reduction(+ : s)
    for (long i = 0; i < n; i++) {
      b[i] = a[i] * 2.0;
      s += b[i];
    }
  }
  double want = (double)n * (double)(n - 1);
  int ok = s == want && omp_get_max_threads() >= 1;
  printf("openmp (%d threads): %s\n", omp_get_max_threads(), ok ? "ok" : "WRONG");
  free(a);
  free(b);
  return ok ? 0 : 1;
}
