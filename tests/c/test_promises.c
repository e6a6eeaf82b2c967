/*
 * include/tiermem.h read as a hostile user: each promise of the header's
 * conventions and function comments that no other test checks, checked
 * here. Every case runs in a fresh child process with a watchdog, so a
 * crash or a hang is a reported failure of that case, not of the program.
 * Built and run by scripts/ctest.sh (shared and static library).
 */
#define _GNU_SOURCE /* memfd_create, pthreads */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include <tiermem.h>

#define CHECK_LAST_ERROR
#include "check.h"

#define MiB ((size_t)1 << 20)
#define PAGE ((size_t)4096)

/* rc is the documented error and tm_last_error says something. */
#define EXPECT_RC(expr, code)                                                 \
  do {                                                                        \
    int rc_ = (expr);                                                         \
    CHECK(rc_ == (code), "%s returned %d, expected %d", #expr, rc_, (code));  \
    CHECK(tm_last_error()[0] != '\0', "%s: tm_last_error is empty", #expr);   \
  } while (0)

/* ---- "A NULL pointer ... is reported as TM_EINVAL; never undefined
 * behaviour": every exported function, every pointer argument. */
static void null_everywhere(void) {
  struct tm_config cfg;
  tm_config_init(&cfg, 1 * MiB, 1 * MiB);
  struct tm_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  struct tm_team_stats ts;
  struct tm_svm_stats ss;

  EXPECT_RC(tm_region_stats(NULL, &st), TM_EINVAL);
  EXPECT_RC(tm_region_evict_all(NULL), TM_EINVAL);
  EXPECT_RC(tm_region_discard(NULL, 0, PAGE), TM_EINVAL);
  EXPECT_RC(tm_prefetch(NULL, PAGE), TM_EINVAL);
  EXPECT_RC(tm_advise(NULL, PAGE, TM_ADVICE_WILLNEED), TM_EINVAL);
  EXPECT_RC(tm_touch(NULL, PAGE), TM_EINVAL);
  CHECK(tm_region_destroy(NULL) == TM_OK, "tm_region_destroy(NULL) is a no-op");

  EXPECT_RC(tm_segment_create(2 * MiB, TM_SEGMENT_2M, NULL), TM_EINVAL);
  CHECK(tm_segment_base(NULL) == NULL && tm_segment_size(NULL) == 0 &&
            tm_segment_page_size(NULL) == 0,
        "segment accessors of NULL");
  CHECK(tm_segment_destroy(NULL) == TM_OK, "tm_segment_destroy(NULL) is a no-op");

  EXPECT_RC(tm_team_create(4 * MiB, 1 * MiB, 2, 0, NULL), TM_EINVAL);
  EXPECT_RC(tm_team_run(NULL, TM_TEAM_THREADS, NULL, NULL), TM_EINVAL);
  EXPECT_RC(tm_team_worker_rank(NULL), TM_EINVAL);
  EXPECT_RC(tm_team_worker_count(NULL), TM_EINVAL);
  CHECK(tm_team_worker_base(NULL) == NULL, "tm_team_worker_base(NULL)");
  EXPECT_RC(tm_team_barrier(NULL), TM_EINVAL);
  EXPECT_RC(tm_team_create_named(NULL, 4 * MiB, 1 * MiB, 2, 0, NULL), TM_EINVAL);
  tm_team *t = (tm_team *)1; /* must be overwritten with NULL on failure */
  EXPECT_RC(tm_team_attach(NULL, 1, &t), TM_EINVAL);
  EXPECT_RC(tm_team_attach("tiermem-promises-none", 1, NULL), TM_EINVAL);
  EXPECT_RC(tm_team_sync(NULL), TM_EINVAL);
  CHECK(tm_team_base(NULL) == NULL && tm_team_size(NULL) == 0, "team accessors of NULL");
  EXPECT_RC(tm_team_rank(NULL), TM_EINVAL);
  EXPECT_RC(tm_team_stats(NULL, &ts), TM_EINVAL);
  CHECK(tm_team_destroy(NULL) == TM_OK, "tm_team_destroy(NULL) is a no-op");

  EXPECT_RC(tm_svm_create(16 * PAGE, 2, 0, NULL), TM_EINVAL);
  EXPECT_RC(tm_svm_run(NULL, NULL, NULL), TM_EINVAL);
  EXPECT_RC(tm_svm_stats(NULL, &ss), TM_EINVAL);
  CHECK(tm_svm_destroy(NULL) == TM_OK, "tm_svm_destroy(NULL) is a no-op");
  EXPECT_RC(tm_svm_free(NULL), TM_EINVAL);
  EXPECT_RC(tm_svm_set_mode(NULL, PAGE, TM_SVM_DSM), TM_EINVAL);
  EXPECT_RC(tm_svm_hint_read_only(NULL, PAGE), TM_EINVAL);

  EXPECT_RC(tm_far_map_file(NULL, 0, PAGE, 0, NULL), TM_EINVAL);
  CHECK(tm_far_free(NULL) == TM_OK, "tm_far_free(NULL) is a no-op");
  void *to = (void *)1;
  EXPECT_RC(tm_overshadow_create(NULL, PAGE, &to), TM_EINVAL);
  CHECK(to == NULL, "*to is NULL on failure");
  EXPECT_RC(tm_overshadow_create_ex(NULL, PAGE, TM_OVERSHADOW_WHOLE, NULL), TM_EINVAL);
  EXPECT_RC(tm_overshadow_wait(NULL), TM_EINVAL);
  EXPECT_RC(tm_overshadow_test(NULL), TM_EINVAL);
  EXPECT_RC(tm_overshadow_destroy(NULL), TM_EINVAL);
}

/* ---- Unknown enumeration values are TM_EINVAL, never guessed. */
static void unknown_enums(void) {
  void *far = tm_far_alloc(4 * PAGE);
  CHECK(far != NULL, "tm_far_alloc");
  void *to = (void *)1;
  EXPECT_RC(tm_overshadow_create_ex(far, 4 * PAGE, 2, &to), TM_EINVAL);
  CHECK(to == NULL, "*to is NULL on failure");
  EXPECT_RC(tm_overshadow_create_ex(far, 4 * PAGE, -1, &to), TM_EINVAL);
  CHECK(tm_far_free(far) == TM_OK, "tm_far_free");

  /* Flag words with a bit no version defines. */
  tm_segment *seg = (tm_segment *)1;
  EXPECT_RC(tm_segment_create(2 * MiB, 4, &seg), TM_EINVAL);
  CHECK(seg == NULL, "segment *out NULL on failure");
  tm_svm *svm = (tm_svm *)1;
  EXPECT_RC(tm_svm_create(16 * PAGE, 1, 4, &svm), TM_EINVAL);
  tm_team *t = (tm_team *)1;
  EXPECT_RC(tm_team_create(4 * MiB, 1 * MiB, 2, 16, &t), TM_EINVAL);
  t = NULL;
  CHECK(tm_team_create(4 * MiB, 1 * MiB, 2, 0, &t) == TM_OK, "tm_team_create");
  EXPECT_RC(tm_team_run(t, -1, NULL, NULL), TM_EINVAL);
  CHECK(tm_team_destroy(t) == TM_OK, "tm_team_destroy");

  tm_region *r = NULL;
  struct tm_config cfg;
  tm_config_init(&cfg, 1 * MiB, 1 * MiB);
  CHECK(tm_region_create(&cfg, &r) == TM_OK, "tm_region_create");
  EXPECT_RC(tm_advise(tm_region_base(r), PAGE, -1), TM_EINVAL);
  EXPECT_RC(tm_advise(tm_region_base(r), PAGE, TM_ADVICE_DONTNEED + 1), TM_EINVAL);
  tm_region_destroy(r);
}

/* ---- tm_region_create: "a negative code with *out set to NULL". */
static void create_sets_out_null(void) {
  struct tm_config cfg;
  tm_config_init(&cfg, 0, 1 * MiB);
  tm_region *r = (tm_region *)1;
  EXPECT_RC(tm_region_create(&cfg, &r), TM_EINVAL);
  CHECK(r == NULL, "*out is %p after a failed create", (void *)r);
  r = (tm_region *)1;
  EXPECT_RC(tm_region_create(NULL, &r), TM_EINVAL);
  CHECK(r == NULL, "*out is %p after tm_region_create(NULL, &r)", (void *)r);
  tm_segment *s = (tm_segment *)1;
  EXPECT_RC(tm_segment_create(0, TM_SEGMENT_2M, &s), TM_EINVAL);
  CHECK(s == NULL, "segment *out is NULL on failure");
}

/* ---- tm_region_discard: "offset and len must be multiples of the page
 * size and the range inside the region" (wrap-around included). */
static void discard_bounds(void) {
  struct tm_config cfg;
  tm_config_init(&cfg, 1 * MiB, 1 * MiB);
  tm_region *r = NULL;
  CHECK(tm_region_create(&cfg, &r) == TM_OK, "tm_region_create");
  unsigned char *b = tm_region_base(r);
  memset(b, 0x5a, 1 * MiB);
  EXPECT_RC(tm_region_discard(r, 1, PAGE), TM_EINVAL);
  EXPECT_RC(tm_region_discard(r, 0, PAGE + 1), TM_EINVAL);
  EXPECT_RC(tm_region_discard(r, 1 * MiB, PAGE), TM_EINVAL);
  EXPECT_RC(tm_region_discard(r, 1 * MiB - PAGE, 2 * PAGE), TM_EINVAL);
  EXPECT_RC(tm_region_discard(r, PAGE, SIZE_MAX - PAGE + 1), TM_EINVAL);
  EXPECT_RC(tm_region_discard(r, SIZE_MAX - PAGE + 1, 2 * PAGE), TM_EINVAL);
  size_t bad = 0;
  for (size_t i = 0; i < 1 * MiB; i++) bad += b[i] != 0x5a;
  CHECK(bad == 0, "a refused discard changed %zu bytes", bad);
  CHECK(tm_region_discard(r, PAGE, PAGE) == TM_OK, "valid discard");
  CHECK(b[PAGE] == 0 && b[PAGE - 1] == 0x5a && b[2 * PAGE] == 0x5a, "discard forgets one page");
  tm_region_destroy(r);
}

/* ---- tm_prefetch / tm_advise: "the range must lie in one tiermem region". */
static void prefetch_bounds(void) {
  struct tm_config cfg;
  tm_config_init(&cfg, 1 * MiB, 1 * MiB);
  tm_region *r = NULL;
  CHECK(tm_region_create(&cfg, &r) == TM_OK, "tm_region_create");
  unsigned char *b = tm_region_base(r);
  EXPECT_RC(tm_prefetch(b + 1 * MiB - PAGE, 2 * PAGE), TM_EINVAL);
  EXPECT_RC(tm_prefetch(b, SIZE_MAX), TM_EINVAL);
  EXPECT_RC(tm_advise(b + PAGE, SIZE_MAX - PAGE, TM_ADVICE_DONTNEED), TM_EINVAL);
  EXPECT_RC(tm_advise(b - PAGE, 2 * PAGE, TM_ADVICE_WILLNEED), TM_EINVAL);
  CHECK(tm_prefetch(b, 1 * MiB) == TM_OK, "whole region: %s", tm_last_error());
  EXPECT_RC(tm_touch(b + 1 * MiB - PAGE, 2 * PAGE), TM_EINVAL);
  EXPECT_RC(tm_touch(b, SIZE_MAX), TM_EINVAL);
  EXPECT_RC(tm_touch(b - PAGE, 2 * PAGE), TM_EINVAL);
  tm_region_destroy(r);
  /* After destroy the range is no region's any more. */
  EXPECT_RC(tm_prefetch(b, PAGE), TM_EINVAL);
  EXPECT_RC(tm_touch(b, PAGE), TM_EINVAL);
}

/* ---- tm_region_evict_all: "the number of pages evicted (>= 0)". */
static void evict_all_counts(void) {
  struct tm_config cfg;
  tm_config_init(&cfg, 4 * MiB, 1 * MiB);
  cfg.fault_around_off = 1; /* exactly the pages touched are resident */
  tm_region *r = NULL;
  CHECK(tm_region_create(&cfg, &r) == TM_OK, "tm_region_create");
  unsigned char *b = tm_region_base(r);
  CHECK(tm_region_evict_all(r) == 0, "an untouched region evicts 0 pages");
  for (size_t i = 0; i < 10; i++) b[i * PAGE] = (unsigned char)(i + 1);
  int n = tm_region_evict_all(r);
  CHECK(n == 10, "10 touched pages, evict_all returned %d", n);
  struct tm_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK(tm_region_stats(r, &st) == TM_OK && st.resident_bytes == 0, "resident %llu after evict_all",
        (unsigned long long)st.resident_bytes);
  for (size_t i = 0; i < 10; i++) CHECK(b[i * PAGE] == i + 1, "page %zu kept its data", i);
  tm_region_destroy(r);
}

/* ---- tm_region_stats: "bytes beyond this library's struct are zeroed";
 * struct_size "a multiple of 8, at least 16". */
static void stats_sizes(void) {
  struct tm_config cfg;
  tm_config_init(&cfg, 1 * MiB, 1 * MiB);
  tm_region *r = NULL;
  CHECK(tm_region_create(&cfg, &r) == TM_OK, "tm_region_create");
  ((volatile char *)tm_region_base(r))[0] = 1;
  /* A newer caller's bigger struct. */
  uint64_t big[(sizeof(struct tm_stats) + 64) / 8];
  memset(big, 0xaa, sizeof big);
  ((struct tm_stats *)big)->struct_size = sizeof big;
  CHECK(tm_region_stats(r, (struct tm_stats *)big) == TM_OK, "bigger struct: %s", tm_last_error());
  const unsigned char *tail = (const unsigned char *)big + sizeof(struct tm_stats);
  size_t nonzero = 0;
  for (size_t i = 0; i < 64; i++) nonzero += tail[i] != 0;
  CHECK(nonzero == 0, "%zu bytes beyond the library's struct not zeroed", nonzero);
  CHECK(((struct tm_stats *)big)->faults_zero_fill == 1, "fields filled");
  /* An older caller's smaller struct: nothing written past it. */
  uint64_t small[4];
  memset(small, 0xaa, sizeof small);
  small[0] = 16; /* struct_size (uint32) + reserved: little-endian */
  CHECK(tm_region_stats(r, (struct tm_stats *)small) == TM_OK, "16-byte struct");
  CHECK(small[2] == 0xaaaaaaaaaaaaaaaaULL && small[3] == 0xaaaaaaaaaaaaaaaaULL,
        "written past a 16-byte struct");
  struct tm_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = 12;
  EXPECT_RC(tm_region_stats(r, &st), TM_EINVAL);
  st.struct_size = 8;
  EXPECT_RC(tm_region_stats(r, &st), TM_EINVAL);
  tm_region_destroy(r);
}

/* ---- tm_last_error is "for the calling thread". */
static void *fail_in_thread(void *arg) {
  (void)arg;
  int rc = tm_region_evict_all(NULL);
  return (void *)(intptr_t)(rc == TM_EINVAL && tm_last_error()[0] != '\0');
}

static void last_error_per_thread(void) {
  struct tm_config cfg;
  tm_config_init(&cfg, 1 * MiB, 1 * MiB);
  cfg.far_kind = 5;
  tm_region *r = NULL;
  CHECK(tm_region_create(&cfg, &r) == TM_EINVAL, "far_kind 5");
  char mine[512];
  snprintf(mine, sizeof mine, "%s", tm_last_error());
  CHECK(strstr(mine, "far_kind") != NULL, "message names far_kind: %s", mine);
  pthread_t th;
  void *ok = NULL;
  CHECK(pthread_create(&th, NULL, fail_in_thread, NULL) == 0, "pthread_create");
  pthread_join(th, &ok);
  CHECK(ok != NULL, "the other thread saw its own error");
  CHECK(strcmp(tm_last_error(), mine) == 0, "another thread's failure changed this thread's "
        "last error to \"%s\"", tm_last_error());
}

/* ---- tm_malloc_global: "size 0 returns a unique pointer"; NULL on failure
 * with details; "the memory is 64-byte aligned". */
static void global_heap(void) {
  void *a = tm_malloc_global(0), *b = tm_malloc_global(0);
  CHECK(a != NULL && b != NULL && a != b, "size 0: %p %p", a, b);
  for (size_t n = 1; n < 300; n += 37) {
    void *p = tm_malloc_global(n);
    CHECK(p != NULL && (uintptr_t)p % 64 == 0, "size %zu: %p", n, p);
    tm_free_global(p);
  }
  volatile size_t max = SIZE_MAX; /* hidden from the compiler's size check */
  void *huge = tm_malloc_global(max);
  CHECK(huge == NULL && tm_last_error()[0] != '\0', "SIZE_MAX: %p", huge);
  huge = tm_malloc_global(max - 4095);
  CHECK(huge == NULL, "SIZE_MAX - 4095: %p", huge);
  CHECK(tm_free_global(a) == TM_OK && tm_free_global(b) == TM_OK, "free size-0 allocations");
  EXPECT_RC(tm_free_global(a), TM_EINVAL);
}

/* ---- Far memory: size 0, foreign pointers, double free, file bounds. */
static void far_memory(void) {
  volatile size_t max = SIZE_MAX;
  CHECK(tm_far_alloc(0) == NULL, "tm_far_alloc(0)");
  CHECK(strstr(tm_last_error(), "0") != NULL || tm_last_error()[0] != '\0', "message");
  CHECK(tm_far_alloc(max) == NULL, "tm_far_alloc(SIZE_MAX)");
  unsigned char *f = tm_far_alloc(3 * PAGE + 1);
  CHECK(f != NULL, "tm_far_alloc");
  size_t nonzero = 0;
  for (size_t i = 0; i < 4 * PAGE; i++) nonzero += f[i] != 0;
  CHECK(nonzero == 0, "far memory is zeroed, rounded up to whole pages");
  int local = 0;
  EXPECT_RC(tm_far_free(&local), TM_EINVAL);
  EXPECT_RC(tm_far_free(f + PAGE), TM_EINVAL);
  CHECK(tm_far_free(f) == TM_OK, "tm_far_free");
  EXPECT_RC(tm_far_free(f), TM_EINVAL);

  char path[] = "/tmp/tiermem-promises-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  CHECK(ftruncate(fd, 4 * PAGE) == 0, "ftruncate");
  close(fd);
  void *m = (void *)1;
  EXPECT_RC(tm_far_map_file(path, 1, PAGE, 0, &m), TM_EINVAL);
  CHECK(m == NULL, "*out NULL on failure");
  EXPECT_RC(tm_far_map_file(path, 0, PAGE + 1, 0, &m), TM_EINVAL);
  EXPECT_RC(tm_far_map_file(path, 4 * PAGE, PAGE, 0, &m), TM_EINVAL);
  EXPECT_RC(tm_far_map_file(path, 0, 0, 0, &m), TM_EINVAL);
  EXPECT_RC(tm_far_map_file("/nonexistent-tiermem/x", 0, PAGE, 0, &m), TM_EINVAL);
  CHECK(tm_far_map_file(path, PAGE, 2 * PAGE, 1, &m) == TM_OK && m != NULL, "valid map: %s",
        tm_last_error());
  /* Overshadow: "size 0, unaligned, not far memory" are TM_EINVAL. */
  void *to = NULL;
  EXPECT_RC(tm_overshadow_create(m, 0, &to), TM_EINVAL);
  EXPECT_RC(tm_overshadow_create((char *)m + 1, PAGE, &to), TM_EINVAL);
  EXPECT_RC(tm_overshadow_create(m, 3 * PAGE, &to), TM_EINVAL);
  EXPECT_RC(tm_overshadow_create(&local, PAGE, &to), TM_EINVAL);
  CHECK(tm_overshadow_create(m, 2 * PAGE, &to) == TM_OK, "overshadow: %s", tm_last_error());
  CHECK(tm_overshadow_wait(to) == TM_OK && tm_overshadow_test(to) == 1, "wait/test");
  CHECK(tm_overshadow_destroy(to) == TM_OK, "destroy");
  EXPECT_RC(tm_overshadow_destroy(to), TM_EINVAL);
  EXPECT_RC(tm_overshadow_test(to), TM_EINVAL);
  EXPECT_RC(tm_overshadow_wait(to), TM_EINVAL);
  CHECK(tm_far_free(m) == TM_OK, "unmap the file range");
  unlink(path);
}

/* ---- SVM outside tm_svm_run: "TM_EINVAL outside tm_svm_run"; unlock of a
 * lock not held is TM_EINVAL; lock ids 0..127. */
static int svm_bad_locks(void *arg) {
  (void)arg;
  if (tm_svm_unlock(3) != TM_EINVAL) return 1;
  if (tm_svm_lock(128) != TM_EINVAL || tm_svm_lock(-1) != TM_EINVAL) return 2;
  if (tm_svm_lock(127) != TM_OK || tm_svm_unlock(127) != TM_OK) return 3;
  if (tm_svm_set_mode(&arg, PAGE, TM_SVM_DSM) != TM_EINVAL) return 4;
  void *p = tm_svm_malloc(PAGE);
  if (p == NULL) return 5;
  if (tm_svm_set_mode(p, PAGE, 2) != TM_EINVAL || tm_svm_set_mode(p, PAGE, -1) != TM_EINVAL) return 6;
  if (tm_svm_set_mode(p, PAGE, TM_SVM_DSM) != TM_OK) return 7;
  return tm_svm_free(p) == TM_OK ? 0 : 8;
}

static void svm_outside_run(void) {
  EXPECT_RC(tm_svm_rank(), TM_EINVAL);
  EXPECT_RC(tm_svm_procs(), TM_EINVAL);
  CHECK(tm_svm_malloc(PAGE) == NULL, "tm_svm_malloc outside a run");
  EXPECT_RC(tm_svm_lock(0), TM_EINVAL);
  EXPECT_RC(tm_svm_unlock(0), TM_EINVAL);
  EXPECT_RC(tm_svm_barrier(), TM_EINVAL);
  tm_svm *s = (tm_svm *)1;
  EXPECT_RC(tm_svm_create(16 * PAGE, 0, 0, &s), TM_EINVAL);
  CHECK(s == NULL, "*out NULL on failure");
  EXPECT_RC(tm_svm_create(16 * PAGE, 54, 0, &s), TM_EINVAL);
  EXPECT_RC(tm_svm_create(16 * PAGE + 1, 2, 0, &s), TM_EINVAL);
  CHECK(tm_svm_create(16 * PAGE, 1, 0, &s) == TM_OK, "tm_svm_create: %s", tm_last_error());
  int rc = tm_svm_run(s, svm_bad_locks, NULL);
  CHECK(rc == TM_OK, "lock and mode checks inside a run: %d %s", rc, tm_last_error());
  tm_svm_destroy(s);
}

/* ---- Teams: worker counts 1 to 53. */
static void team_bounds(void) {
  tm_team *t = (tm_team *)1;
  EXPECT_RC(tm_team_create(4 * MiB, 1 * MiB, 0, 0, &t), TM_EINVAL);
  CHECK(t == NULL, "*out NULL on failure");
  EXPECT_RC(tm_team_create(4 * MiB, 1 * MiB, 54, 0, &t), TM_EINVAL);
  EXPECT_RC(tm_team_create(0, 1 * MiB, 2, 0, &t), TM_EINVAL);
  /* A size no file or mapping can have: refused, not TM_EINTERNAL ("a bug"). */
  volatile size_t max = SIZE_MAX;
  EXPECT_RC(tm_team_create(max - 4095, 1 * MiB, 2, 0, &t), TM_EINVAL);
  EXPECT_RC(tm_team_create(((size_t)64 << 40) + 4096, 1 * MiB, 2, 0, &t), TM_EINVAL);
  EXPECT_RC(tm_team_create_named("tiermem-promises-huge", max - 4095, 1 * MiB, 2, 0, &t), TM_EINVAL);
  EXPECT_RC(tm_team_attach("tiermem-promises-no-such-team", 1, &t), TM_EINVAL);
}

/* ---- tm_strerror: "static, never-freed", same text every call. */
static void strerror_static(void) {
  const char *a = tm_strerror(TM_EIO), *b = tm_strerror(TM_EIO);
  CHECK(a == b, "tm_strerror returns the same static string");
  CHECK(strcmp(tm_strerror(INT32_MIN), "unknown error code") == 0, "INT_MIN");
  CHECK(strcmp(tm_strerror(1), "unknown error code") == 0, "positive code");
}


/* ---- struct tm_config field ranges as documented. */
static int create_rc(const struct tm_config *cfg) {
  tm_region *r = NULL;
  int rc = tm_region_create(cfg, &r);
  if (rc == TM_OK) {
    volatile unsigned char *b = tm_region_base(r);
    size_t n = tm_region_size(r) / PAGE;
    for (size_t i = 0; i < n; i++) b[i * PAGE] = (unsigned char)(i + 1);
    for (size_t i = 0; i < n; i++)
      if (b[i * PAGE] != (unsigned char)(i + 1)) rc = 1000; /* data lost */
    tm_region_destroy(r);
  }
  return rc;
}

static void config_ranges(void) {
  struct tm_config cfg;
  /* "at least 4 pages unless >= virt_bytes" */
  tm_config_init(&cfg, 2 * PAGE, 2 * PAGE);
  CHECK(create_rc(&cfg) == TM_OK, "a 2-page region with a 2-page budget: %s", tm_last_error());
  tm_config_init(&cfg, 3 * PAGE, 8 * PAGE);
  CHECK(create_rc(&cfg) == TM_OK, "a budget above virt_bytes: %s", tm_last_error());
  /* "at most 64 TiB" */
  tm_config_init(&cfg, ((uint64_t)64 << 40) + PAGE, 1 * MiB);
  EXPECT_RC(create_rc(&cfg), TM_EINVAL);
  /* evict_batch_pages "1 to 512" */
  tm_config_init(&cfg, 1 * MiB, 16 * PAGE);
  cfg.evict_batch_pages = 0;
  EXPECT_RC(create_rc(&cfg), TM_EINVAL);
  cfg.evict_batch_pages = 1;
  CHECK(create_rc(&cfg) == TM_OK, "evict_batch_pages 1: %s", tm_last_error());
  cfg.evict_batch_pages = 512;
  CHECK(create_rc(&cfg) == TM_OK, "evict_batch_pages 512: %s", tm_last_error());
  /* handler_threads "at least 1" */
  tm_config_init(&cfg, 1 * MiB, 16 * PAGE);
  cfg.fault_path = TM_FAULT_HANDLER_THREAD;
  cfg.handler_threads = 0;
  EXPECT_RC(create_rc(&cfg), TM_EINVAL);
  cfg.handler_threads = 2;
  CHECK(create_rc(&cfg) == TM_OK, "2 handler threads: %s", tm_last_error());
  /* prefetch_max_pages "4 to 2048; 0 = default" */
  tm_config_init(&cfg, 1 * MiB, 16 * PAGE);
  cfg.movers = 1;
  cfg.prefetch_max_pages = 2049;
  EXPECT_RC(create_rc(&cfg), TM_EINVAL);
  cfg.prefetch_max_pages = 2048;
  CHECK(create_rc(&cfg) == TM_OK, "prefetch_max_pages 2048: %s", tm_last_error());
  cfg.prefetch_max_pages = 4;
  CHECK(create_rc(&cfg) == TM_OK, "prefetch_max_pages 4: %s", tm_last_error());
  /* "A value below the version-1 size is TM_EINVAL" */
  tm_config_init(&cfg, 1 * MiB, 1 * MiB);
  cfg.struct_size = 64;
  EXPECT_RC(create_rc(&cfg), TM_EINVAL);
  /* "The TIERMEM_* environment variables are NOT applied" by tm_config_init. */
  setenv("TIERMEM_POLICY", "scan", 1);
  setenv("TIERMEM_FAULT_PATH", "handler-thread", 1);
  setenv("TIERMEM_EVICT_BATCH", "8", 1);
  tm_config_init(&cfg, 1 * MiB, 1 * MiB);
  CHECK(cfg.policy == TM_POLICY_FIFO && cfg.fault_path == TM_FAULT_IN_CONTEXT &&
            cfg.evict_batch_pages == 64,
        "tm_config_init applied TIERMEM_* variables");
}

/* ---- tm_last_error: "A successful call does not clear it." */
static void last_error_sticks(void) {
  CHECK(tm_region_evict_all(NULL) == TM_EINVAL, "fail");
  char before[512];
  snprintf(before, sizeof before, "%s", tm_last_error());
  struct tm_config cfg;
  tm_config_init(&cfg, 1 * MiB, 1 * MiB);
  tm_region *r = NULL;
  CHECK(tm_region_create(&cfg, &r) == TM_OK, "succeed");
  CHECK(tm_region_destroy(r) == TM_OK, "succeed");
  CHECK(before[0] != '\0' && strcmp(before, tm_last_error()) == 0,
        "a successful call changed the last error from \"%s\" to \"%s\"", before, tm_last_error());
}

/* ---- far_path: "Any bytes but NUL"; a new file name is "created mode
 * 0600, removed with the region; an existing file is refused"; a directory
 * gets an unnamed file (nothing left in it). */
static size_t entries(const char *dir) {
  DIR *d = opendir(dir);
  size_t n = 0;
  if (d == NULL) return (size_t)-1;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

static void far_path_bytes(void) {
  char base[] = "/tmp/tiermem-promises-XXXXXX";
  CHECK(mkdtemp(base) != NULL, "mkdtemp");
  char dir[256], file[300];
  snprintf(dir, sizeof dir, "%s/a dir\nwith \xff\xfe bytes; $(x) *", base);
  CHECK(mkdir(dir, 0700) == 0, "mkdir odd name");
  umask(0);
  for (int path = 0; path < 2; path++) {
    struct tm_config cfg;
    tm_config_init(&cfg, 1 * MiB, 16 * PAGE);
    cfg.far_kind = TM_FAR_FILE;
    cfg.fault_path = path ? TM_FAULT_HANDLER_THREAD : TM_FAULT_IN_CONTEXT;
    cfg.far_path = dir; /* a directory */
    tm_region *r = NULL;
    CHECK(tm_region_create(&cfg, &r) == TM_OK, "far file in an odd directory: %s", tm_last_error());
    CHECK(create_rc(&cfg) == TM_OK, "data through it");
    tm_region_destroy(r);
    CHECK(entries(dir) == 0, "the directory holds %zu entries after destroy", entries(dir));
    snprintf(file, sizeof file, "%s/\x01\xc3(far\tfile)", dir); /* a new file name */
    cfg.far_path = file;
    r = NULL;
    CHECK(tm_region_create(&cfg, &r) == TM_OK, "odd new file name: %s", tm_last_error());
    struct stat st;
    int exists = stat(file, &st) == 0;
    CHECK(!exists || (st.st_mode & 0777) == 0600, "far file mode %o, umask 0",
          (unsigned)(st.st_mode & 0777));
    tm_region *r2 = (tm_region *)1;
    if (exists) {
      EXPECT_RC(tm_region_create(&cfg, &r2), TM_EINVAL); /* existing file refused */
      CHECK(r2 == NULL, "*out NULL");
    }
    tm_region_destroy(r);
    CHECK(entries(dir) == 0, "the far file outlived its region");
  }
  rmdir(dir);
  rmdir(base);
}


/* ---- As an unprivileged user: tm_hugepages_reserve "needs root;
 * TM_EPERM otherwise"; tm_region_create is TM_EPERM when userfaultfd is not
 * allowed for this user (vm.unprivileged_userfaultfd=0), with the fix named. */
static void unprivileged(void) {
  if (geteuid() != 0) {
    printf("  unprivileged: skipped (needs root to drop to nobody)\n");
    return;
  }
  CHECK(tm_hugepages_reserve(12345, 1, NULL) == TM_EINVAL, "page_size 12345");
  if (setgid(65534) != 0 || setuid(65534) != 0) {
    printf("  unprivileged: skipped (setuid(65534): %s)\n", strerror(errno));
    return;
  }
  uint64_t available = 0;
  EXPECT_RC(tm_hugepages_reserve(2 * MiB, 1, &available), TM_EPERM);
  CHECK(strstr(tm_last_error(), "root") != NULL, "the message says root is needed");
  FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
  int allowed = 1;
  if (f != NULL) {
    if (fscanf(f, "%d", &allowed) != 1) allowed = 1;
    fclose(f);
  }
  for (int path = 0; path < 2; path++) {
    struct tm_config cfg;
    tm_config_init(&cfg, 1 * MiB, 16 * PAGE);
    cfg.fault_path = path ? TM_FAULT_HANDLER_THREAD : TM_FAULT_IN_CONTEXT;
    int rc = create_rc(&cfg);
    if (allowed) {
      CHECK(rc == TM_OK, "unprivileged_userfaultfd=1, path %d: %d", path, rc);
    } else {
      CHECK(rc == TM_EPERM, "unprivileged_userfaultfd=0, path %d: %d", path, rc);
      CHECK(strstr(tm_last_error(), "unprivileged_userfaultfd") != NULL, "the fix is named");
    }
  }
}

/* ---- docs/errors.md: "an existing file is never overwritten". */
static void existing_file_kept(void) {
  char path[] = "/tmp/tiermem-promises-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  const char text[] = "the next job's data";
  CHECK(write(fd, text, sizeof text) == (ssize_t)sizeof text, "write");
  close(fd);
  for (int direct = 0; direct < 2; direct++) {
    struct tm_config cfg;
    tm_config_init(&cfg, 1 * MiB, 16 * PAGE);
    cfg.far_kind = TM_FAR_FILE;
    cfg.far_path = path;
    cfg.far_direct = direct;
    tm_region *r = (tm_region *)1;
    EXPECT_RC(tm_region_create(&cfg, &r), TM_EINVAL);
    CHECK(r == NULL, "*out NULL");
  }
  char back[sizeof text] = {0};
  fd = open(path, O_RDONLY);
  CHECK(fd >= 0 && read(fd, back, sizeof back) == (ssize_t)sizeof text && memcmp(back, text, sizeof text) == 0,
        "the existing file changed");
  struct stat st;
  CHECK(fstat(fd, &st) == 0 && st.st_size == (off_t)sizeof text, "size %lld", (long long)st.st_size);
  close(fd);
  unlink(path);
}


/* ---- tm_hugepages_reserve beyond the machine's memory: refused with
 * TM_EINVAL before the pool is touched (it used to turn all free memory
 * into 2 MiB pages, keep them, and report TM_EHUGEPAGES). Root only; the
 * pool is put back as found whatever happens (see main). */
static const char *const nr_2m = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

static void hugepages_beyond_memory(void) {
  long before = read_long(nr_2m);
  if (geteuid() != 0 || before < 0) {
    printf("  hugepages_beyond_memory: skipped (needs root and %s)\n", nr_2m);
    return;
  }
  long mem_kib = 0;
  FILE *f = fopen("/proc/meminfo", "r");
  CHECK(f != NULL && fscanf(f, "MemTotal: %ld kB", &mem_kib) == 1, "MemTotal");
  if (f != NULL) fclose(f);
  uint64_t available = 12345;
  EXPECT_RC(tm_hugepages_reserve(2 * MiB, UINT64_MAX, &available), TM_EINVAL);
  CHECK(strstr(tm_last_error(), "memory") != NULL, "the message names the memory");
  EXPECT_RC(tm_hugepages_reserve(2 * MiB, (uint64_t)mem_kib / 2048 + 1, NULL), TM_EINVAL);
  EXPECT_RC(tm_hugepages_reserve(1 << 30, (uint64_t)mem_kib / (1 << 20) + 1, NULL), TM_EINVAL);
  /* A segment or 2 MiB region larger than memory: no pool can help, so
   * the message must not suggest reserving one. */
  volatile size_t max = SIZE_MAX;
  tm_segment *s = (tm_segment *)1;
  EXPECT_RC(tm_segment_create(max - 4095, TM_SEGMENT_2M, &s), TM_EINVAL);
  CHECK(s == NULL && strstr(tm_last_error(), "MemTotal") != NULL, "segment beyond memory");
  EXPECT_RC(tm_segment_create((size_t)mem_kib * 1024 + (1u << 30), 0, &s), TM_EINVAL);
  CHECK(read_long(nr_2m) == before, "the 2M pool went from %ld to %ld pages", before, read_long(nr_2m));
}

struct test {
  const char *name;
  void (*fn)(void);
};

static const struct test tests[] = {
    {"null_everywhere", null_everywhere},
    {"unknown_enums", unknown_enums},
    {"create_sets_out_null", create_sets_out_null},
    {"discard_bounds", discard_bounds},
    {"prefetch_bounds", prefetch_bounds},
    {"evict_all_counts", evict_all_counts},
    {"stats_sizes", stats_sizes},
    {"last_error_per_thread", last_error_per_thread},
    {"global_heap", global_heap},
    {"far_memory", far_memory},
    {"svm_outside_run", svm_outside_run},
    {"team_bounds", team_bounds},
    {"strerror_static", strerror_static},
    {"config_ranges", config_ranges},
    {"last_error_sticks", last_error_sticks},
    {"far_path_bytes", far_path_bytes},
    {"unprivileged", unprivileged},
    {"existing_file_kept", existing_file_kept},
    {"hugepages_beyond_memory", hugepages_beyond_memory},
};

int main(int argc, char **argv) {
  setenv("TIERMEM_FAR", "64M", 1);
  setenv("TIERMEM_NEAR", "16M", 1);
  int failed = 0;
  long pool_2m = read_long(nr_2m);
  for (size_t k = 0; k < sizeof tests / sizeof tests[0]; k++) {
    if (argc > 1 && strcmp(argv[1], tests[k].name) != 0) continue;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(30); /* a hang is a failure */
      tests[k].fn();
      fflush(NULL);
      _exit(failures == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
      failed++;
      if (WIFSIGNALED(status))
        fprintf(stderr, "  %s: killed by signal %d\n", tests[k].name, WTERMSIG(status));
    }
    printf("%s %s\n", ok ? "ok  " : "FAIL", tests[k].name);
    /* A case that grew the 2 MiB pool (a regression) must not leave this
     * machine's memory in it. */
    if (pool_2m >= 0 && read_long(nr_2m) != pool_2m) {
      FILE *f = fopen(nr_2m, "w");
      if (f != NULL) {
        fprintf(f, "%ld\n", pool_2m);
        fclose(f);
      }
    }
  }
  return failed == 0 ? 0 : 1;
}
