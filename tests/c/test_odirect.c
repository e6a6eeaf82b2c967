/* Direct I/O (O_DIRECT) between a file and tiered buffers whose pages
 * were evicted, with buffers of a quarter of the near budget to four
 * times it, through every way a program reads or writes a file:
 * pread/pwrite, read/write, preadv/pwritev and readv/writev (two pieces).
 * The kernel pins a direct read's pages for the device while it works; if
 * tiermem evicted pages the call had pinned already while it brought in
 * the later ones, the read would return its full length with stale pages
 * (the handler-thread path did: 177 of 512 at --near 1M, a new-user
 * sweep). scripts/ctest.sh runs it on both fault paths. Skips (exit 0)
 * where the file system takes no O_DIRECT (tmpfs). The file is made in
 * $TMPDIR, or the current directory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* O_DIRECT wants page-aligned buffers. */
static unsigned char *aligned(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, 4096, n) == 0 ? p : NULL;
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
    static const char *const ways[] = {"pread", "read", "preadv", "readv"};
    int failed = 0;
    for (int way = 0; way < 4; way++) {
        for (size_t kb = 256; kb <= 4096; kb *= 2) {
            size_t n = kb << 10, half = n / 2;
            unsigned char *src = aligned(n), *dst = aligned(n);
            if (!src || !dst) return 2;
            for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i / 4096 * 3 + kb + way);
            memset(dst, 0, n);
            evict_others(); /* src and dst out of near memory */
            ssize_t w = -1, r = -1;
            struct iovec wv[2] = {{src, half}, {src + half, n - half}};
            struct iovec rv[2] = {{dst, half}, {dst + half, n - half}};
            switch (way) {
            case 0: w = pwrite(fd, src, n, 0); break;
            case 1: w = lseek(fd, 0, SEEK_SET) == 0 ? write(fd, src, n) : -1; break;
            case 2: w = pwritev(fd, wv, 2, 0); break;
            case 3: w = lseek(fd, 0, SEEK_SET) == 0 ? writev(fd, wv, 2) : -1; break;
            }
            evict_others();
            switch (way) {
            case 0: r = pread(fd, dst, n, 0); break;
            case 1: r = lseek(fd, 0, SEEK_SET) == 0 ? read(fd, dst, n) : -1; break;
            case 2: r = preadv(fd, rv, 2, 0); break;
            case 3: r = lseek(fd, 0, SEEK_SET) == 0 ? readv(fd, rv, 2) : -1; break;
            }
            size_t bad = 0;
            for (size_t p = 0; p < n / 4096; p++) bad += memcmp(src + p * 4096, dst + p * 4096, 4096) != 0;
            printf("test_odirect: %-6s %4zu KiB: write %zd, read %zd, %zu of %zu pages wrong\n", ways[way], kb, w,
                   r, bad, n / 4096);
            failed += w != (ssize_t)n || r != (ssize_t)n || bad != 0;
            free(src);
            free(dst);
        }
    }
    close(fd);
    return failed ? 1 : 0;
}
