/* What the direct-I/O tests (test_aio.c, test_uring.c) share: blocks of a
 * known pattern per round, a check of a block page by page, and churn of
 * other tiered memory, more than any budget the tests use, so that the
 * tiered buffers are evicted while their I/O is in flight. */
#ifndef TIERMEM_TESTS_IO_BLOCKS_H
#define TIERMEM_TESTS_IO_BLOCKS_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (1u << 20)
#define BLOCKS 8
#define CHURN_BYTES (24u << 20)

static unsigned char pattern(size_t block, size_t i, int round) {
    return (unsigned char)(block * 13 + i / 4096 * 7 + i % 251 + round * 31);
}

/* Pages of block `block` in `data` that do not hold round `round`'s. */
static size_t pages_wrong(const unsigned char *data, size_t block, int round) {
    size_t bad = 0;
    for (size_t p = 0; p < BLOCK / 4096; p++)
        for (size_t i = p * 4096; i < (p + 1) * 4096; i++)
            if (data[i] != pattern(block, i, round)) {
                bad++;
                break;
            }
    return bad;
}

/* CHURN_BYTES of tiered memory, allocated by the test. */
static unsigned char *junk;
static void churn(void) {
    for (size_t i = 0; i < CHURN_BYTES; i += 4096) junk[i]++;
}

/* A new file opened O_DIRECT in argv[1] (default .), unlinked, with the
 * churn memory and a plain 4 KiB-aligned block `*plain` made; -1 (after a
 * "skipped" line) where the file system takes no O_DIRECT (tmpfs), -2 when
 * memory runs out. */
static int direct_file(const char *name, int argc, char **argv, unsigned char **plain) {
    const char *dir = argc > 1 ? argv[1] : ".";
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%d", dir, name, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) {
        printf("%s: skipped: no O_DIRECT file in %s: %s\n", name, dir, strerror(errno));
        return -1;
    }
    unlink(path);
    junk = malloc(CHURN_BYTES);
    *plain = NULL;
    if (!junk || posix_memalign((void **)plain, 4096, BLOCK)) return -2;
    memset(junk, 1, CHURN_BYTES);
    return fd;
}

#endif
