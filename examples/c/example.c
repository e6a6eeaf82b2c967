/*
 * tiermem from C: an array of doubles four times larger than its
 * near-memory budget, then the process-wide allocator.
 *
 * Build (see scripts/ctest.sh):
 *   cargo build --release -p tiermem-capi
 *   cc -std=c11 -Iinclude examples/c/example.c -Ltarget/release -ltiermem -o example
 *   LD_LIBRARY_PATH=target/release ./example
 */
#include <stdio.h>

#include <tiermem.h>

int main(void) {
  /* A 64 MiB region over a 16 MiB near-memory budget, defaults otherwise. */
  struct tm_config cfg;
  tm_config_init(&cfg, 64u << 20, 16u << 20);
  tm_region *region;
  int rc = tm_region_create(&cfg, &region);
  if (rc != TM_OK) {
    fprintf(stderr, "tm_region_create: %s: %s\n", tm_strerror(rc), tm_last_error());
    return 1;
  }

  /* The region is ordinary memory to this code: pages move in and out of
   * the 16 MiB budget on page faults. */
  double *a = tm_region_base(region);
  size_t n = tm_region_size(region) / sizeof *a;
  for (size_t i = 0; i < n; i++) {
    a[i] = (double)i;
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    sum += a[i];
  }
  double expected = (double)n * (double)(n - 1) / 2.0; /* exact: below 2^53 */
  printf("sum of %zu doubles: %.0f (expected %.0f)\n", n, sum, expected);

  struct tm_stats st = {.struct_size = sizeof st};
  if (tm_region_stats(region, &st) == TM_OK) {
    printf("zero fills %llu, far fills %llu, evictions %llu, written back %llu MiB, "
           "resident %llu MiB, median fault %llu ns\n",
           (unsigned long long)st.faults_zero_fill, (unsigned long long)st.faults_far_fill,
           (unsigned long long)st.evictions, (unsigned long long)(st.bytes_out >> 20),
           (unsigned long long)(st.resident_bytes >> 20), (unsigned long long)st.fault_p50_ns);
  }
  tm_region_destroy(region);

  /* The process-wide region: sized by TIERMEM_FAR and TIERMEM_NEAR (default
   * twice the physical memory over 1G), created on first use. */
  size_t m = 1u << 20;
  double *b = tm_malloc_global(m * sizeof *b);
  if (b == NULL) {
    fprintf(stderr, "tm_malloc_global: %s\n", tm_last_error());
    return 1;
  }
  for (size_t i = 0; i < m; i++) {
    b[i] = 0.5;
  }
  double half = 0.0;
  for (size_t i = 0; i < m; i++) {
    half += b[i];
  }
  printf("global: %zu doubles of 0.5 sum to %.1f\n", m, half);
  rc = tm_free_global(b);
  if (rc != TM_OK) {
    fprintf(stderr, "tm_free_global: %s\n", tm_last_error());
    return 1;
  }

  return sum == expected && half == (double)m / 2.0 ? 0 : 1;
}
