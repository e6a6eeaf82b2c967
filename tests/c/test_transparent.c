/* An unmodified program under tiermem's preload library (run by
 * scripts/ctest.sh with LD_PRELOAD=libtiermem_preload.so, TIERMEM_NEAR far
 * below the footprint and TIERMEM_THRESHOLD=256K): the whole allocation
 * interface, large anonymous mmaps, static arrays, kernel accesses
 * (read/fread/readv/recv into tiered buffers), fork, threads created before
 * and after, signal masks, dlopen, exit with live allocations, programs the
 * process runs (which inherit its seccomp filter). Nothing here
 * mentions tiermem: every check is what the C library promises. Each case
 * runs in a fresh process; the JSON report of one case checks that tiering
 * really happened (evictions > 0).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define MIB (1024ul * 1024ul)

/* ---- the allocation interface ---- */

static void test_alloc_surface(void) {
  /* Large blocks of every kind, written and checked after the others
   * churned the budget. */
  size_t n = 24 * MIB / 8;
  uint64_t *a = malloc(n * 8);
  uint64_t *b = calloc(n, 8);
  void *c = NULL;
  CHECK(posix_memalign(&c, 2 * MIB, 16 * MIB) == 0 && ((uintptr_t)c % (2 * MIB)) == 0, "posix_memalign");
  uint64_t *d = aligned_alloc(4096, 8 * MIB);
  uint64_t *e = memalign(65536, 8 * MIB);
  uint64_t *f = valloc(8 * MIB);
  uint64_t *g = pvalloc(8 * MIB + 1);
  CHECK(a && b && c && d && e && f && g, "allocations");
  size_t zero_bad = 0;
  for (size_t i = 0; i < n; i += 7) zero_bad += b[i] != 0;
  CHECK(zero_bad == 0, "calloc memory not zero: %zu words", zero_bad);
  CHECK(malloc_usable_size(a) >= n * 8, "malloc_usable_size %zu", malloc_usable_size(a));
  CHECK(((uintptr_t)e % 65536) == 0 && ((uintptr_t)f % 4096) == 0 && ((uintptr_t)g % 4096) == 0, "alignment");
  fill(a, n, 1);
  fill(b, n, 2);
  fill(c, 16 * MIB / 8, 3);
  fill(d, MIB, 4);
  fill(e, MIB, 5);
  fill(f, MIB, 6);
  fill(g, MIB, 7);
  CHECK(bad_words(a, n, 1) == 0 && bad_words(b, n, 2) == 0 && bad_words(c, 16 * MIB / 8, 3) == 0, "data lost");
  CHECK(bad_words(d, MIB, 4) == 0 && bad_words(e, MIB, 5) == 0 && bad_words(f, MIB, 6) == 0 &&
            bad_words(g, MIB, 7) == 0,
        "data lost (aligned)");
  /* realloc across the threshold both ways, growing and shrinking. */
  uint64_t *r = malloc(64);
  r[0] = 42;
  r = realloc(r, 32 * MIB);
  CHECK(r && r[0] == 42, "realloc small -> large");
  fill(r, 32 * MIB / 8, 8);
  r = realloc(r, 48 * MIB);
  CHECK(r && bad_words(r, 32 * MIB / 8, 8) == 0, "realloc large -> larger");
  r = realloc(r, 1 * MIB);
  CHECK(r && bad_words(r, MIB / 8, 8) == 0, "realloc shrink");
  r = realloc(r, 100);
  CHECK(r && r[3] == mix(8 + 3), "realloc large -> small");
  uint64_t *ra = reallocarray(NULL, 1 * MIB, 8);
  CHECK(ra != NULL, "reallocarray");
  /* Overflowing products, hidden from the compiler's own check. */
  volatile size_t huge = SIZE_MAX / 2;
  CHECK(reallocarray(NULL, huge, 4) == NULL && errno == ENOMEM, "reallocarray overflow");
  CHECK(calloc(huge, 4) == NULL, "calloc overflow");
  /* Freed memory comes back zeroed through calloc. */
  free(b);
  uint64_t *b2 = calloc(n, 8);
  zero_bad = 0;
  for (size_t i = 0; i < n; i += 5) zero_bad += b2[i] != 0;
  CHECK(zero_bad == 0, "calloc after free not zero: %zu", zero_bad);
  free(a), free(b2), free(c), free(d), free(e), free(f), free(g), free(r), free(ra);
  free(NULL);
  /* C library internals and small objects are untouched. */
  char *s = strdup("small");
  CHECK(strcmp(s, "small") == 0, "strdup");
  free(s);
}

/* ---- large anonymous mmap, munmap, mremap, madvise ---- */

static void test_mmap(void) {
  size_t len = 40 * MIB;
  uint64_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED, "mmap");
  fill(m, len / 8, 11);
  CHECK(bad_words(m, len / 8, 11) == 0, "mmap data");
  uint64_t *m2 = mremap(m, len, 2 * len, MREMAP_MAYMOVE);
  CHECK(m2 != MAP_FAILED && bad_words(m2, len / 8, 11) == 0, "mremap keeps data");
  CHECK(madvise((char *)m2 + len, len, MADV_DONTNEED) == 0 && m2[len / 8 + 5] == 0, "madvise DONTNEED zeroes");
  CHECK(munmap(m2, 2 * len) == 0, "munmap");
  /* File mappings stay the kernel's. */
  FILE *t = tmpfile();
  fputs("mapped file", t);
  fflush(t);
  char *fm = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fileno(t), 0);
  CHECK(fm != MAP_FAILED && memcmp(fm, "mapped", 6) == 0, "file mapping");
  munmap(fm, 4096);
  fclose(t);
}

/* ---- mremap of large mappings, whole and in part; fixed addresses ----
 *
 * A program that manages its own large mappings: grows, shrinks and moves
 * them (MREMAP_MAYMOVE, MREMAP_FIXED to a place it reserved,
 * MREMAP_DONTUNMAP), moves parts of them out, replaces a range with fresh
 * memory by mmap(MAP_FIXED), with far more data than a small near budget
 * holds; every word is checked after every move. */

static void *map_rw(size_t len) {
  return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

/* Address space of the program's own, not memory: where MREMAP_FIXED goes. */
static char *reserve(size_t len) {
  char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static size_t nonzero_words(const uint64_t *p, size_t words) {
  size_t n = 0;
  for (size_t i = 0; i < words; i++) n += p[i] != 0;
  return n;
}

/* mremap's result and errno, for the error cases. */
static int remap_fails(void *old, size_t old_len, size_t new_len, int flags, void *to, int want) {
  errno = 0;
  void *r = mremap(old, old_len, new_len, flags, to);
  return r == MAP_FAILED && errno == want;
}

static void test_mremap(void) {
  const size_t W = MIB / 8; /* words per MiB */
  /* Whole mapping: grow (in place or moved), shrink, grow without moving. */
  uint64_t *m = map_rw(32 * MIB);
  CHECK(m != MAP_FAILED, "mmap");
  fill(m, 32 * W, 51);
  uint64_t *g = mremap(m, 32 * MIB, 48 * MIB, MREMAP_MAYMOVE);
  CHECK(g != MAP_FAILED, "grow: %s", strerror(errno));
  CHECK(bad_words(g, 32 * W, 51) == 0 && nonzero_words(g + 32 * W, 16 * W) == 0, "grow: data, zero tail");
  uint64_t *s = mremap(g, 48 * MIB, 24 * MIB, 0);
  CHECK(s == g && bad_words(s, 24 * W, 51) == 0, "shrink in place");
  uint64_t *s2 = mremap(s, 24 * MIB, 28 * MIB, 0);
  if (s2 == MAP_FAILED) {
    CHECK(errno == ENOMEM, "grow without MREMAP_MAYMOVE: %s", strerror(errno));
  } else {
    CHECK(s2 == s && bad_words(s2, 24 * W, 51) == 0 && nonzero_words(s2 + 24 * W, 4 * W) == 0,
          "grow in place over the freed tail");
    s = mremap(s2, 28 * MIB, 24 * MIB, 0);
  }

  /* MREMAP_FIXED to a place the program reserved, growing on the way. */
  char *place = reserve(64 * MIB);
  CHECK(place != NULL, "reserve");
  uint64_t *f = mremap(s, 24 * MIB, 32 * MIB, MREMAP_MAYMOVE | MREMAP_FIXED, place);
  CHECK(f == (uint64_t *)place, "MREMAP_FIXED: %p, %s", (void *)f, strerror(errno));
  CHECK(bad_words(f, 24 * W, 51) == 0 && nonzero_words(f + 24 * W, 8 * W) == 0, "MREMAP_FIXED data");
  fill(f, 32 * W, 52); /* still writable memory */
  CHECK(bad_words(f, 32 * W, 52) == 0, "MREMAP_FIXED destination memory");

  /* MREMAP_FIXED onto another large mapping of the program's: replaced. */
  uint64_t *a = map_rw(16 * MIB), *b = map_rw(16 * MIB);
  CHECK(a != MAP_FAILED && b != MAP_FAILED, "mmap a, b");
  fill(a, 16 * W, 53);
  fill(b, 16 * W, 54);
  uint64_t *ab = mremap(a, 16 * MIB, 16 * MIB, MREMAP_MAYMOVE | MREMAP_FIXED, b);
  CHECK(ab == b && bad_words(b, 16 * W, 53) == 0, "MREMAP_FIXED onto a mapping: %s", strerror(errno));
  uint64_t *ab2 = mremap(b, 8 * MIB, 4 * MIB, MREMAP_MAYMOVE | MREMAP_FIXED, b + 12 * W);
  CHECK(ab2 == b + 12 * W && bad_words(ab2, 4 * W, 53) == 0 && bad_words(b + 8 * W, 4 * W, 53 + 8 * W) == 0,
        "MREMAP_FIXED of a head into the same mapping's tail");

  /* Part of a mapping: the middle moved out (growing, so it must move),
   * a part moved to a fixed place, the tail shrunk; what stays is intact. */
  uint64_t *c = map_rw(32 * MIB);
  CHECK(c != MAP_FAILED, "mmap c");
  fill(c, 32 * W, 55);
  uint64_t *mid = mremap(c + 8 * W, 8 * MIB, 12 * MIB, MREMAP_MAYMOVE);
  CHECK(mid != MAP_FAILED && mid != c + 8 * W, "move the middle out: %s", strerror(errno));
  CHECK(bad_words(mid, 8 * W, 55 + 8 * W) == 0 && nonzero_words(mid + 8 * W, 4 * W) == 0, "middle moved");
  uint64_t *part = mremap(c + 16 * W, 8 * MIB, 8 * MIB, MREMAP_MAYMOVE | MREMAP_FIXED, place + 40 * MIB);
  CHECK(part == (uint64_t *)(place + 40 * MIB) && bad_words(part, 8 * W, 55 + 16 * W) == 0,
        "a part to a fixed place: %s", strerror(errno));
  CHECK(mremap(c + 24 * W, 8 * MIB, 4 * MIB, 0) == c + 24 * W, "shrink a tail part");
  CHECK(bad_words(c, 8 * W, 55) == 0 && bad_words(c + 24 * W, 4 * W, 55 + 24 * W) == 0, "what stays");
  /* The middle is gone: growing the head in place over it is the kernel's
   * business (it may or may not), but never loses data. */
  uint64_t *head = mremap(c, 8 * MIB, 12 * MIB, 0);
  if (head != MAP_FAILED)
    CHECK(head == c && bad_words(c, 8 * W, 55) == 0 && nonzero_words(c + 8 * W, 4 * W) == 0,
          "the head grown over the hole");
  else
    CHECK(errno == ENOMEM, "grow the head: %s", strerror(errno));

  /* MREMAP_DONTUNMAP (Linux 5.7): moved, the source stays mapped, empty. */
  uint64_t *e = map_rw(16 * MIB);
  fill(e, 16 * W, 56);
  uint64_t *moved = mremap(e, 16 * MIB, 16 * MIB, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL);
  if (moved == MAP_FAILED && errno == EINVAL) {
    fprintf(stderr, "skipped: MREMAP_DONTUNMAP (kernel before 5.7)\n");
  } else {
    CHECK(moved != MAP_FAILED && moved != e, "MREMAP_DONTUNMAP: %s", strerror(errno));
    CHECK(bad_words(moved, 16 * W, 56) == 0, "MREMAP_DONTUNMAP data");
    CHECK(nonzero_words(e, 16 * W) == 0, "MREMAP_DONTUNMAP source reads zeros");
    fill(e, 16 * W, 57);
    uint64_t *fx =
        mremap(e, 8 * MIB, 8 * MIB, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, place + 48 * MIB);
    CHECK(fx == (uint64_t *)(place + 48 * MIB) && bad_words(fx, 8 * W, 57) == 0 &&
              nonzero_words(e, 8 * W) == 0 && bad_words(e + 8 * W, 8 * W, 57 + 8 * W) == 0,
          "MREMAP_DONTUNMAP to a fixed place");
    munmap(moved, 16 * MIB);
  }
  munmap(e, 16 * MIB);

  /* mmap(MAP_FIXED) of fresh memory over part of a mapping: zeros there. */
  uint64_t *z = map_rw(16 * MIB);
  fill(z, 16 * W, 58);
  CHECK(mmap(z + 4 * W, 4 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
            z + 4 * W,
        "mmap(MAP_FIXED) over a mapping: %s", strerror(errno));
  CHECK(bad_words(z, 4 * W, 58) == 0 && nonzero_words(z + 4 * W, 4 * W) == 0 &&
            bad_words(z + 8 * W, 8 * W, 58 + 8 * W) == 0,
        "mmap(MAP_FIXED): zeros in the range, data around it");

  /* The kernel's errors. */
  uint64_t *v = map_rw(20 * MIB);
  munmap(v + 16 * W, 4 * MIB); /* v's mapping ends at 16 MiB */
  CHECK(remap_fails((char *)v + 1, MIB, 2 * MIB, MREMAP_MAYMOVE, NULL, EINVAL), "unaligned: EINVAL");
  CHECK(remap_fails(v, 16 * MIB, 0, MREMAP_MAYMOVE, NULL, EINVAL), "no length: EINVAL");
  CHECK(remap_fails(v, 16 * MIB, 16 * MIB, MREMAP_FIXED, place, EINVAL), "fixed without maymove: EINVAL");
  CHECK(remap_fails(v, 16 * MIB, 16 * MIB, MREMAP_MAYMOVE | MREMAP_FIXED, v + W, EINVAL), "overlap: EINVAL");
  CHECK(remap_fails(v, 16 * MIB, 8 * MIB, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, NULL, EINVAL),
        "MREMAP_DONTUNMAP resizing: EINVAL");
  CHECK(remap_fails(v, 16 * MIB, 16 * MIB, 0x80, NULL, EINVAL), "unknown flag: EINVAL");
  CHECK(remap_fails(v, 20 * MIB, 24 * MIB, MREMAP_MAYMOVE, NULL, EFAULT), "beyond the mapping: EFAULT");
  CHECK(remap_fails(v, 0, 16 * MIB, MREMAP_MAYMOVE, NULL, EINVAL), "no old length (private): EINVAL");
  CHECK(remap_fails(v + 16 * W, 4 * MIB, 8 * MIB, MREMAP_MAYMOVE, NULL, EFAULT), "unmapped: EFAULT");
  CHECK(remap_fails(v, 16 * MIB, 32 * MIB, 0, NULL, ENOMEM) || mremap(v, 32 * MIB, 16 * MIB, 0) == v,
        "no room without MREMAP_MAYMOVE: ENOMEM");
  CHECK(nonzero_words(v, 16 * W) == 0, "v untouched");

  /* Moving a small mapping of the kernel's to where a large one was: never
   * over memory the program let go of (under tiermem, that is still its
   * heap, and the next large mapping must read zeros and keep its data). */
  uint64_t *big = map_rw(24 * MIB);
  fill(big, 24 * W, 59);
  uint64_t *gone = map_rw(24 * MIB);
  munmap(gone, 24 * MIB);
  uint64_t *small = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  fill(small, 65536 / 8, 60);
  uint64_t *onto = mremap(small, 65536, 65536, MREMAP_MAYMOVE | MREMAP_FIXED, gone);
  if (onto == MAP_FAILED) {
    CHECK(errno == EINVAL, "a move onto unmapped memory: %s", strerror(errno));
    munmap(small, 65536);
  } else {
    CHECK(onto == gone && bad_words(onto, 65536 / 8, 60) == 0, "a move onto unmapped memory");
  }
  uint64_t *fresh = map_rw(24 * MIB);
  uint64_t *fresh2 = mmap(gone + W, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (fresh2 == MAP_FAILED) CHECK(errno == EINVAL, "mmap(MAP_FIXED) onto unmapped memory: %s", strerror(errno));
  CHECK(fresh != MAP_FAILED && nonzero_words(fresh, 24 * W) == 0, "fresh memory reads zeros");
  fill(fresh, 24 * W, 61);
  fill(big, 24 * W, 62); /* evicts fresh */
  CHECK(bad_words(fresh, 24 * W, 61) == 0 && bad_words(big, 24 * W, 62) == 0, "fresh memory keeps its data");

  /* Munmap across holes and mappings, as the kernel allows. */
  CHECK(munmap(c, 32 * MIB) == 0 && munmap(mid, 12 * MIB) == 0 && munmap(place, 64 * MIB) == 0 &&
            munmap(a, 16 * MIB) == 0 && munmap(b, 16 * MIB) == 0 && munmap(z, 16 * MIB) == 0 &&
            munmap(v, 16 * MIB) == 0 && munmap(big, 24 * MIB) == 0 && munmap(fresh, 24 * MIB) == 0,
        "munmap");
  CHECK(munmap((char *)c + 1, MIB) == -1 && errno == EINVAL, "munmap unaligned: EINVAL");
}

/* ---- kernel accesses into tiered buffers ---- */

static void test_kernel_access(void) {
  size_t len = 32 * MIB;
  uint64_t *src = malloc(len);
  fill(src, len / 8, 21);
  FILE *t = tmpfile();
  CHECK(fwrite(src, 1, len, t) == len, "fwrite from tiered memory");
  fflush(t);
  uint64_t *dst = malloc(len);
  uint64_t *spare = malloc(len);
  fill(spare, len / 8, 99); /* evicts dst's and src's pages */
  rewind(t);
  CHECK(fread(dst, 1, len, t) == len, "fread into tiered memory");
  CHECK(bad_words(dst, len / 8, 21) == 0, "fread data");
  memset(dst, 0, len);
  fill(spare, len / 8, 98);
  CHECK(pread(fileno(t), dst, len, 0) == (ssize_t)len, "pread: %s", strerror(errno));
  CHECK(bad_words(dst, len / 8, 21) == 0, "pread data");
  fill(spare, len / 8, 97);
  struct iovec iov[2] = {{dst, len / 2}, {(char *)dst + len / 2, len / 2}};
  CHECK(preadv(fileno(t), iov, 2, 0) == (ssize_t)len, "preadv: %s", strerror(errno));
  CHECK(bad_words(dst, len / 8, 21) == 0, "preadv data");
  /* Offset -1: the file position, which moves on, in every piece of a
   * call split because its buffers are larger than can be pinned at once. */
  fill(spare, len / 8, 95);
  CHECK(lseek(fileno(t), 0, SEEK_SET) == 0, "lseek: %s", strerror(errno));
  CHECK(preadv2(fileno(t), iov, 2, -1, 0) == (ssize_t)len, "preadv2 at the file position: %s", strerror(errno));
  CHECK(bad_words(dst, len / 8, 21) == 0, "preadv2 at the file position: data");
  CHECK(lseek(fileno(t), 0, SEEK_CUR) == (off_t)len, "preadv2 moved the file position by what it read");
  fill(dst, len / 8, 22);
  CHECK(lseek(fileno(t), 0, SEEK_SET) == 0, "lseek: %s", strerror(errno));
  CHECK(pwritev2(fileno(t), iov, 2, -1, 0) == (ssize_t)len, "pwritev2 at the file position: %s", strerror(errno));
  CHECK(lseek(fileno(t), 0, SEEK_CUR) == (off_t)len, "pwritev2 moved the file position by what it wrote");
  fill(spare, len / 8, 94);
  CHECK(pread(fileno(t), spare, len, 0) == (ssize_t)len, "pread: %s", strerror(errno));
  CHECK(bad_words(spare, len / 8, 22) == 0, "pwritev2 at the file position: data");
  fill(dst, len / 8, 21);
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  fill(spare, len / 8, 96);
  CHECK(send(sv[0], dst, 65536, 0) == 65536, "send from tiered memory");
  CHECK(recv(sv[1], spare, 65536, MSG_WAITALL) == 65536, "recv into tiered memory");
  CHECK(memcmp(spare, dst, 65536) == 0, "socket data");
  close(sv[0]), close(sv[1]);

  /* A peek that waits for all of a stream larger than one bounce buffer
   * (256 KiB): one call, not pieces that would each read the head again. */
  size_t peek = 320 * 1024;
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
  int big = 4 << 20;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  fill(dst, peek / 8, 93);
  CHECK(send(sv[0], dst, peek, MSG_DONTWAIT) == (ssize_t)peek, "send %zu bytes: %s", peek, strerror(errno));
  fill(spare, len / 8, 92);
  CHECK(recv(sv[1], spare, peek, MSG_PEEK | MSG_WAITALL) == (ssize_t)peek, "recv(MSG_PEEK|MSG_WAITALL): %s",
        strerror(errno));
  CHECK(bad_words(spare, peek / 8, 93) == 0, "a peek of %zu bytes sees the stream once, in order", peek);
  close(sv[0]), close(sv[1]);

  /* MSG_TRUNC on a datagram: the datagram's whole length, what fits copied. */
  CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
  fill(dst, 8192 / 8, 91);
  CHECK(send(sv[0], dst, 8192, 0) == 8192, "send a datagram: %s", strerror(errno));
  fill(spare, len / 8, 90); /* the receiving page is evicted */
  CHECK(recv(sv[1], spare, 4096, MSG_TRUNC) == 8192, "recv(MSG_TRUNC) returns the datagram's length");
  CHECK(bad_words(spare, 4096 / 8, 91) == 0, "recv(MSG_TRUNC) data");
  close(sv[0]), close(sv[1]);
  fclose(t);
  free(src), free(dst), free(spare);
}

/* ---- static arrays ---- */

#define STATIC_WORDS (20u * 1024u * 1024u / 8u)
static uint64_t static_array[STATIC_WORDS];
static uint64_t static_data[STATIC_WORDS] = {1, 2, 3};

static void test_statics(void) {
  CHECK(static_data[0] == 1 && static_data[2] == 3 && static_data[5] == 0, "initialised data kept");
  fill(static_array, STATIC_WORDS, 31);
  fill(static_data, STATIC_WORDS, 32);
  uint64_t *spare = malloc(32 * MIB);
  fill(spare, 32 * MIB / 8, 33);
  CHECK(bad_words(static_array, STATIC_WORDS, 31) == 0 && bad_words(static_data, STATIC_WORDS, 32) == 0,
        "static data lost");
  int fd = open("/dev/urandom", O_RDONLY);
  ssize_t got = read(fd, static_array, 4 * MIB);
  CHECK(got == (ssize_t)(4 * MIB), "read into a static array: %zd, %s", got, strerror(errno));
  close(fd);
  free(spare);
}

/* ---- the smallest budget across two regions ----
 *
 * The heap and the static arrays share one near budget. A move from a
 * page-crossing static source to a page-crossing heap destination needs
 * two pages of each at once: on the 4-page minimum (tiermem run --near
 * 16K) every one of them must stay while the last comes in (it died of
 * SIGBUS when each region spared the thread's last fills of its own). */

static void move8(void *dst, const void *src) {
#if defined(__x86_64__)
  /* One instruction, so all four pages must be resident together. */
  __asm__ volatile("movsq" : "+D"(dst), "+S"(src) : : "memory");
#else
  memcpy(dst, src, 8);
#endif
}

static void test_min_budget(void) {
  const size_t span = MIB, words = span / 8, pages = span / 4096;
  fill(static_data, words, 61);
  uint64_t *heap = malloc(span);
  fill(heap, words, 62);
  unsigned char *st = (unsigned char *)static_data, *hp = (unsigned char *)heap;
  unsigned char *out = (unsigned char *)static_array;
  size_t bad = 0;
  uint64_t x = 7;
  for (int i = 0; i < 4000; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    size_t s = ((x >> 20) % (pages - 1) + 1) * 4096 - 1 - (x >> 8) % 7;
    size_t d = ((x >> 40) % (pages - 1) + 1) * 4096 - 1 - (x >> 12) % 7;
    /* Static to heap, then heap to another static array. */
    unsigned char *from = i % 2 ? hp : st, *to = i % 2 ? out : hp;
    move8(to + d, from + s);
    bad += memcmp(to + d, from + s, 8) != 0;
  }
  CHECK(bad == 0, "min budget: %zu moves across regions lost data", bad);
  CHECK(bad_words(static_data, words, 61) == 0, "min budget: the static source changed");
  free(heap);
}

/* ---- memory locks ----
 *
 * MPI libraries and real-time codes lock all their memory at start. The
 * data must stay right, locking must succeed, and under a near budget the
 * program must not be held in memory whole: the heap's reservation (twice
 * the machine's memory) must never be populated. */

static long status_kib(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0) v = atol(line + n);
  if (f) fclose(f);
  return v;
}

/* The near budget the program runs under (TIERMEM_NEAR, in bytes), 0 when
 * none: the bound on resident memory checked below. */
static size_t near_budget(void) {
  const char *s = getenv("TIERMEM_NEAR");
  if (!s || !*s) return 0;
  char *end;
  size_t v = strtoul(s, &end, 10);
  switch (*end) {
  case 'G': case 'g': return v << 30;
  case 'M': case 'm': return v << 20;
  case 'K': case 'k': return v << 10;
  case '%': return 0;
  default: return v;
  }
}

/* Resident and locked memory with `live` bytes of large data live (the
 * static arrays come on top). `raw`: after a raw mlockall system call,
 * which no library sees (VmLck then counts address space that is not
 * memory, and tiering metadata may be resident: only the data is
 * bounded). */
static void check_resident(const char *when, size_t live, int raw) {
  long lck = status_kib("VmLck:"), rss = status_kib("VmRSS:"), anon = status_kib("RssAnon:"),
       shmem = status_kib("RssShmem:");
  size_t near = near_budget();
  live += 2 * STATIC_WORDS * 8;
  fprintf(stderr, "  %s: VmLck %ld kB, VmRSS %ld kB, RssAnon %ld kB, RssShmem %ld kB (live data %zu MiB)\n", when,
          lck, rss, anon, shmem, live / MIB);
  if (!raw) CHECK(lck >= 0 && lck < (1l << 20), "%s: VmLck %ld kB", when, lck);
  /* Near memory (anonymous: the budget, and the program's own memory),
   * not the data, several times the budget. VmRSS counts a far store in
   * memory too (shared memory: RssShmem), which holds evicted data only. */
  if (near && !raw)
    CHECK((size_t)anon * 1024 < 2 * near + 32 * MIB, "%s: RssAnon %ld kB over a %zu MiB budget", when, anon,
          near / MIB);
  CHECK((size_t)shmem * 1024 < live + 64 * MIB, "%s: RssShmem %ld kB for %zu MiB of data", when, shmem, live / MIB);
}

static void churn_and_check(size_t len, uint64_t seed, size_t live, int raw) {
  uint64_t *p = malloc(len);
  uint64_t *m = mmap(NULL, len / 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p && m != MAP_FAILED, "allocate under a lock");
  fill(p, len / 8, seed);
  fill(m, len / 16, seed + 1);
  fill(static_array, STATIC_WORDS, seed + 2);
  CHECK(bad_words(p, len / 8, seed) == 0 && bad_words(m, len / 16, seed + 1) == 0 &&
            bad_words(static_array, STATIC_WORDS, seed + 2) == 0,
        "data under a lock (seed %llu)", (unsigned long long)seed);
  check_resident("after touching", live + len + len / 2, raw);
  munmap(m, len / 2);
  free(p);
}

/* Whether RLIMIT_MEMLOCK may refuse a lock (root, with CAP_IPC_LOCK, or
 * an unlimited limit, may lock anything). */
static int lock_limited(void) {
  struct rlimit rl;
  return geteuid() != 0 && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
}

static void test_mlock(void) {
  /* mlock/mlock2 of a large buffer, then its data after others churned. */
  size_t len = 32 * MIB;
  uint64_t *b = malloc(len);
  fill(b, len / 8, 71);
  errno = 0;
  if (mlock(b, len) != 0) {
    CHECK(lock_limited() && (errno == ENOMEM || errno == EPERM), "mlock: %s", strerror(errno));
    fprintf(stderr, "skipped: mlock: %s (RLIMIT_MEMLOCK)\n", strerror(errno));
    free(b);
    return;
  }
  CHECK(mlock2(b, len, MLOCK_ONFAULT) == 0 || errno == ENOSYS, "mlock2: %s", strerror(errno));
  CHECK(mlock2(b, len, 0x80) == -1 && errno == EINVAL, "mlock2 with an unknown flag: EINVAL");
  churn_and_check(48 * MIB, 72, len, 0);
  CHECK(bad_words(b, len / 8, 71) == 0, "mlock'ed data");
  CHECK(munlock(b, len) == 0, "munlock: %s", strerror(errno));
  free(b);
}

static void test_mlockall(void) {
  size_t len = 32 * MIB;
  uint64_t *b = malloc(len);
  fill(b, len / 8, 71);
  /* mlockall, every combination; each time more data than the budget. */
  int modes[] = {MCL_CURRENT | MCL_FUTURE, MCL_CURRENT, MCL_FUTURE, MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT,
                 MCL_CURRENT | MCL_ONFAULT};
  CHECK(mlockall(0) == -1 && errno == EINVAL, "mlockall(0): EINVAL");
  CHECK(mlockall(MCL_ONFAULT) == -1 && errno == EINVAL, "mlockall(MCL_ONFAULT): EINVAL");
  for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r = mlockall(modes[k]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (r != 0) {
      CHECK(lock_limited() && (errno == ENOMEM || errno == EPERM), "mlockall(%#x): %s", modes[k], strerror(errno));
      fprintf(stderr, "skipped: mlockall(%#x): %s (RLIMIT_MEMLOCK)\n", modes[k], strerror(errno));
      continue;
    }
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    fprintf(stderr, "  mlockall(%#x) took %.3f s\n", modes[k], s);
    CHECK(s < 10, "mlockall(%#x) took %.1f s", modes[k], s);
    check_resident("after mlockall", len, 0);
    churn_and_check(96 * MIB, 80 + 10 * k, len, 0);
    CHECK(bad_words(b, len / 8, 71) == 0, "data from before the lock");
    CHECK(munlockall() == 0, "munlockall: %s", strerror(errno));
  }
  free(b);
}

/* The same with the system call made directly, as no C library function
 * (an interposer) sees it: it must not populate the machine's memory nor
 * stop tiering; what it costs in resident metadata is in
 * docs/transparent.md. */
static void test_mlockall_raw(void) {
  size_t len = 32 * MIB;
  uint64_t *b = malloc(len);
  fill(b, len / 8, 91);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long r = syscall(SYS_mlockall, MCL_CURRENT | MCL_FUTURE);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (r != 0) {
    CHECK(lock_limited() && (errno == ENOMEM || errno == EPERM), "raw mlockall: %s", strerror(errno));
    fprintf(stderr, "skipped: raw mlockall: %s (RLIMIT_MEMLOCK)\n", strerror(errno));
    free(b);
    return;
  }
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr, "  raw mlockall took %.3f s\n", s);
  CHECK(s < 10, "raw mlockall took %.1f s", s);
  check_resident("after a raw mlockall", len, 1);
  churn_and_check(96 * MIB, 92, len, 1);
  CHECK(bad_words(b, len / 8, 91) == 0, "data from before the lock");
  CHECK(syscall(SYS_munlockall) == 0, "munlockall: %s", strerror(errno));
  churn_and_check(96 * MIB, 93, len, 1);
  free(b);
}

/* ---- fork, and fork+exec ---- */

static void test_fork(void) {
  size_t len = 40 * MIB;
  uint64_t *p = malloc(len);
  fill(p, len / 8, 41);
  fill(static_array, STATIC_WORDS, 42);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    int ok = bad_words(p, len / 8, 41) == 0 && bad_words(static_array, STATIC_WORDS, 42) == 0;
    fill(p, len / 8, 43); /* the child's copy is its own */
    uint64_t *q = malloc(len);
    ok = ok && q && bad_words(p, len / 8, 43) == 0;
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child saw wrong data (status %#x)", st);
  CHECK(bad_words(p, len / 8, 41) == 0 && bad_words(static_array, STATIC_WORDS, 42) == 0, "parent data changed");
  /* fork + exec and posix_spawn work unchanged. */
  char *argv[] = {"/bin/sh", "-c", "exit 7", NULL};
  extern char **environ;
  pid_t sp;
  CHECK(posix_spawn(&sp, "/bin/sh", NULL, NULL, argv, environ) == 0, "posix_spawn");
  waitpid(sp, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7, "posix_spawn child status %#x", st);
  CHECK(system("exit 3") == 3 << 8, "system()");
  free(p);
}

/* ---- programs the process runs ----
 *
 * They inherit the seccomp filter that traps system calls on tiered memory
 * (filters survive execve and cannot be removed), but not its SIGSYS
 * handler: a trapped call would kill them. The filter traps only calls
 * made from this image's C library, so no other image is ever trapped,
 * whatever its buffers. */

/* read(2) made by this executable's own code, not the C library's (as a
 * static program makes it). */
static long raw_read(int fd, void *buf, size_t n) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "0"((long)SYS_read), "D"((long)fd), "S"(buf), "d"(n) : "rcx", "r11", "memory");
  return r;
}

/* test_transparent read-into ADDR...: a plain program (run without the
 * preload) that maps 64 KiB at each ADDR (skipped if something of its own
 * is there) and reads and getrandom()s into it (also with a raw system
 * call from its own code: built -no-pie, that code sits where its
 * parent's does), then reads into a 1 MiB block of its C library's heap.
 * Exit 0 when all went well. */
static int read_into(int n, char **addrs) {
  int fd = open("/dev/zero", O_RDONLY);
  if (fd < 0) return 2;
  for (int k = 0; k < n; k++) {
    void *want = (void *)(uintptr_t)strtoull(addrs[k], NULL, 0);
    char *m = mmap(want, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == MAP_FAILED && errno == EEXIST) continue;
    if (m != want) return 3;
    memset(m, 0xff, 65536);
    if (read(fd, m, 65536) != 65536 || m[0] != 0 || m[65535] != 0) return 4;
    if (getrandom(m, 16, 0) != 16) return 5;
    m[0] = 1;
    if (raw_read(fd, m, 4096) != 4096 || m[0] != 0) return 7;
    munmap(m, 65536);
  }
  char *b = malloc(MIB);
  if (!b || read(fd, b, MIB) != (ssize_t)MIB || b[MIB - 1] != 0) return 6;
  free(b);
  close(fd);
  return 0;
}

/* The environment without LD_PRELOAD. */
static char **plain_environ(void) {
  extern char **environ;
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 1, sizeof *env);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0) env[k++] = environ[i];
  return env;
}

static int run_status(char **argv, char **env) {
  pid_t pid;
  int st = -1;
  if (posix_spawn(&pid, argv[0], NULL, NULL, argv, env) != 0 || waitpid(pid, &st, 0) < 0) return -1;
  return st;
}

/* test_transparent exec-noaslr (run with address randomisation off, as
 * gdb and setarch -R run programs): tiered memory of every kind, then
 * preloaded shells, which get the same layout as this process, so their C
 * library sits where this process's does and their data where its static
 * arrays are. They must install their SIGSYS handler before anything of
 * theirs can trap. Exit 0 when all went well. */
static int noaslr_children(void) {
  extern char **environ;
  char *heap = malloc(8 * MIB);
  fill((uint64_t *)heap, MIB, 63);
  fill(static_array, STATIC_WORDS, 64);
  fill(static_data, STATIC_WORDS, 65);
  char *sh[] = {"/bin/sh", "-c", "exit 7", NULL};
  int bad = 0;
  for (int k = 0; k < 4; k++) {
    int st = run_status(sh, environ);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 7)) {
      if (!bad) fprintf(stderr, "sh without address randomisation: status %#x\n", st);
      bad++;
    }
  }
  int st = system("exit 3");
  if (st != 3 << 8) fprintf(stderr, "system() without address randomisation: status %#x\n", st), bad++;
  bad += bad_words((uint64_t *)heap, MIB, 63) != 0 || bad_words(static_array, STATIC_WORDS, 64) != 0;
  return bad ? 1 : 0;
}

static void test_exec(void) {
  extern char **environ;
  /* The address of read() taken in this program: built -no-pie, that
   * makes a canonical PLT entry in the executable, which is not the C
   * library and must not become a trapped call site. */
  volatile uintptr_t read_address = (uintptr_t)&read;
  CHECK(read_address != 0, "&read");
  /* Tiered memory of every kind this process traps: the heap (in the
   * kernel-access window) and both static arrays (trapped in place). */
  char *heap = malloc(8 * MIB);
  fill((uint64_t *)heap, MIB, 61);
  fill(static_array, STATIC_WORDS, 62);
  char a[3][32];
  snprintf(a[0], sizeof a[0], "%#lx", ((uintptr_t)heap + 4 * MIB) & ~0xfffful);
  snprintf(a[1], sizeof a[1], "%#lx", ((uintptr_t)static_array + 4 * MIB) & ~0xfffful);
  snprintf(a[2], sizeof a[2], "%#lx", ((uintptr_t)static_data + 4 * MIB) & ~0xfffful);
  char *reader[] = {"/proc/self/exe", "read-into", a[0], a[1], a[2], NULL};
  char **plain = plain_environ();
  /* A plain program with buffers where this process traps calls. */
  int st = run_status(reader, plain);
  CHECK(st == 0, "a plain program reading where its parent traps: status %#x", st);
  /* The same under a huge stack limit: the kernel then maps libraries and
   * mmap()s below ~21 TiB, inside the kernel-access window, and the
   * program's C library's own data (malloc's tcache key, filled by
   * getrandom) lies there. */
  struct rlimit old;
  getrlimit(RLIMIT_STACK, &old);
  struct rlimit big = {old.rlim_max, old.rlim_max};
  int raised = old.rlim_max == RLIM_INFINITY && setrlimit(RLIMIT_STACK, &big) == 0;
  if (!raised) fprintf(stderr, "note: RLIMIT_STACK cannot be raised to unlimited; the huge-stack runs prove less\n");
  st = run_status(reader, plain);
  CHECK(st == 0, "a plain program under an unlimited stack: status %#x", st);
  /* Preloaded shells (TIERMEM_FOLLOW_EXEC: tiered themselves), in a loop:
   * before their own handler exists, nothing of theirs may trap. */
  char *sh[] = {"/bin/sh", "-c", "exit 7", NULL};
  int bad = 0;
  for (int k = 0; k < 4; k++) {
    st = run_status(sh, environ);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 7)) {
      if (!bad) fprintf(stderr, "sh under an unlimited stack: status %#x\n", st);
      bad++;
    }
  }
  CHECK(bad == 0, "%d of 4 preloaded shells failed under an unlimited stack", bad);
  if (raised) setrlimit(RLIMIT_STACK, &old);
  bad = 0;
  for (int k = 0; k < 4; k++) {
    st = run_status(sh, environ);
    bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 7);
  }
  CHECK(bad == 0, "preloaded shells failed (%d)", bad);
  /* A tiered process without address randomisation, running shells. */
  int persona = personality(0xffffffff);
  if (persona != -1 && personality(persona | ADDR_NO_RANDOMIZE) != -1) {
    char *noaslr[] = {"/proc/self/exe", "exec-noaslr", NULL};
    st = run_status(noaslr, environ);
    personality(persona);
    CHECK(st == 0, "preloaded shells without address randomisation: status %#x", st);
  } else {
    fprintf(stderr, "note: cannot turn address randomisation off; that part is skipped\n");
  }
  CHECK(bad_words((uint64_t *)heap, MIB, 61) == 0 && bad_words(static_array, STATIC_WORDS, 62) == 0,
        "parent data changed");
  free(plain);
  free(heap);
}

/* ---- threads, masks, dlopen ---- */

static void *worker(void *arg) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, NULL); /* like MPI progress threads */
  uint64_t *p = malloc(16 * MIB);
  fill(p, 2 * MIB, (uintptr_t)arg);
  size_t bad = bad_words(p, 2 * MIB, (uintptr_t)arg);
  /* A system call into tiered memory, every signal blocked: the SIGSYS
   * that serves it must still get through. */
  int fd = open("/dev/zero", O_RDONLY);
  bad += read(fd, p, MIB) != (ssize_t)MIB;
  for (size_t i = 0; i < MIB / 8; i++) bad += p[i] != 0;
  close(fd);
  free(p);
  return (void *)(uintptr_t)bad;
}

static void test_threads_and_dlopen(void) {
  pthread_t t[4];
  for (uintptr_t k = 0; k < 4; k++) pthread_create(&t[k], NULL, worker, (void *)(k * 1000));
  size_t bad = 0;
  for (int k = 0; k < 4; k++) {
    void *r;
    pthread_join(t[k], &r);
    bad += (uintptr_t)r;
  }
  CHECK(bad == 0, "threads: %zu bad words", bad);
  void *h = dlopen("libm.so.6", RTLD_NOW);
  CHECK(h != NULL, "dlopen: %s", dlerror());
  double (*cosine)(double) = (double (*)(double))dlsym(h, "cos");
  CHECK(cosine && cosine(0.0) == 1.0, "dlsym");
  dlclose(h);
}

/* ---- exit with live allocations, frees in destructors ---- */

static uint64_t *left_for_destructor;

__attribute__((destructor)) static void free_late(void) { free(left_for_destructor); }

static void test_exit_with_live_memory(void) {
  left_for_destructor = malloc(8 * MIB);
  fill(left_for_destructor, MIB, 51);
  void *leak = malloc(8 * MIB);
  (void)leak;
  CHECK(bad_words(left_for_destructor, MIB, 51) == 0, "late data");
}

static const struct check_case cases[] = {
    {"alloc", test_alloc_surface},       {"mmap", test_mmap},   {"kernel-access", test_kernel_access},
    {"statics", test_statics},           {"fork", test_fork},   {"threads", test_threads_and_dlopen},
    {"exit", test_exit_with_live_memory}, {"exec", test_exec},
    {"mremap", test_mremap},             {"mlockall", test_mlockall}, {"mlock", test_mlock},
    {"mlockall-raw", test_mlockall_raw}, {"min-budget", test_min_budget},
};

/* test_transparent: every case, each in a fresh process (the environment,
 * LD_PRELOAD included, is inherited); test_transparent CASE: one case. */
int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "read-into") == 0) return read_into(argc - 2, argv + 2);
  if (argc == 2 && strcmp(argv[1], "exec-noaslr") == 0) return noaslr_children();
  return run_cases(argc, argv, cases, sizeof cases / sizeof cases[0], "test_transparent");
}
