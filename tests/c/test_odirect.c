/* Direct I/O (O_DIRECT) between a file and tiered buffers whose pages
 * were evicted, with buffers of a quarter of the near budget to four
 * times it. The kernel pins a direct read's pages for the device while it
 * works. Passes on the in-context path (the call is trapped and its
 * buffer pinned by tiermem). On the handler-thread path it FAILS today:
 * the kernel takes the faults page by page and tiermem evicts pages the
 * call had pinned already once the buffer nears the budget; the read
 * returns its full length with stale pages (177 of 512 at --near 1M, a
 * new-user sweep; open, docs/design.md "Kernel accesses").
 * scripts/ctest.sh runs it in-context. Skips (exit 0) where the file
 * system takes no O_DIRECT (tmpfs). The file is made in $TMPDIR, or the
 * current directory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char *aligned(size_t n) {
    unsigned char *raw = malloc(n + 4096);
    return raw ? (unsigned char *)(((uintptr_t)raw + 4095) & ~(uintptr_t)4095) : NULL;
}

static void evict_others(void) {
    static unsigned char *junk;
    if (!junk) junk = malloc(8u << 20);
    memset(junk, 1, 8u << 20);
}

int main(void) {
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/test_odirect.%d", dir && *dir ? dir : ".", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {
        printf("test_odirect: skipped: no O_DIRECT on the file system of %s\n", path);
        return 0;
    }
    if (fd < 0) {
        perror("test_odirect: open");
        return 1;
    }
    unlink(path);
    int failed = 0;
    for (size_t kb = 256; kb <= 4096; kb *= 2) {
        size_t n = kb << 10;
        unsigned char *src = aligned(n), *dst = aligned(n);
        if (!src || !dst) return 2;
        for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i / 4096 * 3 + kb);
        memset(dst, 0, n);
        evict_others(); /* src and dst out of near memory */
        ssize_t w = pwrite(fd, src, n, 0);
        evict_others();
        ssize_t r = pread(fd, dst, n, 0);
        size_t bad = 0;
        for (size_t p = 0; p < n / 4096; p++) bad += memcmp(src + p * 4096, dst + p * 4096, 4096) != 0;
        printf("test_odirect: %4zu KiB: write %zd, read %zd, %zu of %zu pages wrong\n", kb, w, r, bad, n / 4096);
        failed += w != (ssize_t)n || r != (ssize_t)n || bad != 0;
    }
    close(fd);
    return failed ? 1 : 0;
}
