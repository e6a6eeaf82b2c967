/* Linux AIO (io_submit, as libaio and fio's libaio engine make it) with
 * O_DIRECT on tiered buffers. The kernel pins a direct read's pages when
 * it is submitted and the device fills them after io_submit has returned;
 * a page evicted before the completion is reaped lost its data (fio
 * --ioengine=libaio --direct=1 verified corrupt blocks under tiermem run on
 * the handler-thread path; on the in-context path io_submit failed with
 * EFAULT). The calls go through the C library's syscall(), as libaio's do.
 *
 * Each round: a file of known blocks is read with several IOCB_CMD_PREAD
 * and IOCB_CMD_PREADV in flight at once into evicted tiered buffers, with
 * other memory churned while they are in flight, and every block checked;
 * then blocks of a new pattern are written from evicted tiered buffers
 * with IOCB_CMD_PWRITE and read back through a plain buffer. Last, reads
 * reaped from the ring in user space, then their buffers freed. Exit status 0
 * when every block is right. Usage: test_aio [DIR] (default: .), where DIR
 * is on a file system that takes O_DIRECT (not tmpfs). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "io_blocks.h"

static long io_setup_(unsigned nr, aio_context_t *ctx) { return syscall(SYS_io_setup, nr, ctx); }
static long io_destroy_(aio_context_t ctx) { return syscall(SYS_io_destroy, ctx); }
static long io_submit_(aio_context_t ctx, long n, struct iocb **l) { return syscall(SYS_io_submit, ctx, n, l); }
static long io_getevents_(aio_context_t ctx, long min, long max, struct io_event *ev) {
    return syscall(SYS_io_getevents, ctx, min, max, ev, NULL);
}

static void *tiered_block(void) {
    void *p = NULL;
    /* 4 KiB-aligned for O_DIRECT; large enough to be tiered. */
    return posix_memalign(&p, 4096, BLOCK) == 0 ? p : NULL;
}

/* Waits for `n` completions; 0 when each completed whole. */
static int reap(aio_context_t ctx, long n, const char *what) {
    struct io_event ev[BLOCKS];
    long got = 0;
    int failed = 0;
    while (got < n) {
        long r = io_getevents_(ctx, 1, n - got, ev);
        if (r < 0) {
            if (errno == EINTR) continue;
            printf("test_aio: %s: io_getevents: %s\n", what, strerror(errno));
            return 1;
        }
        for (long k = 0; k < r; k++) {
            if (ev[k].res != (int64_t)BLOCK) {
                printf("test_aio: %s: a block completed with %lld\n", what, (long long)ev[k].res);
                failed = 1;
            }
        }
        got += r;
    }
    return failed;
}

static struct iocb cb[BLOCKS], *list[BLOCKS];
static struct iovec iov[BLOCKS][2];

/* Submits one I/O of `op` per block, block b at file offset b * BLOCK
 * from or into buf[b]; with `vectored`, odd blocks go as the vectored op
 * in two halves. Returns 0 when all were submitted. */
static int submit(aio_context_t ctx, int fd, unsigned char **buf, uint16_t op, int vectored, const char *what) {
    memset(cb, 0, sizeof cb);
    for (int b = 0; b < BLOCKS; b++) {
        cb[b].aio_fildes = (uint32_t)fd;
        cb[b].aio_offset = (int64_t)b * BLOCK;
        cb[b].aio_data = (uint64_t)b;
        cb[b].aio_lio_opcode = op;
        cb[b].aio_buf = (uint64_t)(uintptr_t)buf[b];
        cb[b].aio_nbytes = BLOCK;
        if (vectored && b % 2) {
            iov[b][0] = (struct iovec){buf[b], BLOCK / 2};
            iov[b][1] = (struct iovec){buf[b] + BLOCK / 2, BLOCK / 2};
            cb[b].aio_lio_opcode = op == IOCB_CMD_PREAD ? IOCB_CMD_PREADV : IOCB_CMD_PWRITEV;
            cb[b].aio_buf = (uint64_t)(uintptr_t)iov[b];
            cb[b].aio_nbytes = 2;
        }
        list[b] = &cb[b];
    }
    long s = io_submit_(ctx, BLOCKS, list);
    if (s == BLOCKS) return 0;
    printf("test_aio: io_submit of the %s: %ld (%s)\n", what, s, s < 0 ? strerror(errno) : "short");
    return 1;
}

/* One I/O of `op` per block (see submit), with other memory coming in,
 * evicting, before it is submitted and while the device works: -1 if it
 * was not all submitted, else 0 when each completed whole. */
static int transfer(aio_context_t ctx, int fd, unsigned char **buf, uint16_t op, int vectored, const char *what) {
    churn();
    if (submit(ctx, fd, buf, op, vectored, what)) return -1;
    churn();
    return reap(ctx, BLOCKS, what);
}

int main(int argc, char **argv) {
    unsigned char *plain;
    int fd = direct_file("test_aio", argc, argv, &plain);
    if (fd < 0) return fd == -1 ? 0 : 2;
    aio_context_t ctx = 0;
    if (io_setup_(64, &ctx) < 0) {
        printf("test_aio: skipped: io_setup: %s\n", strerror(errno));
        return 0;
    }
    unsigned char *buf[BLOCKS];
    for (int b = 0; b < BLOCKS; b++)
        if (!(buf[b] = tiered_block())) return 2;
    /* The file's first pattern, written plainly. */
    for (size_t b = 0; b < BLOCKS; b++) {
        for (size_t i = 0; i < BLOCK; i++) plain[i] = pattern(b, i, 0);
        if (pwrite(fd, plain, BLOCK, (off_t)(b * BLOCK)) != (ssize_t)BLOCK) {
            printf("test_aio: pwrite: %s\n", strerror(errno));
            return 2;
        }
    }
    int failed = 0;
    for (int round = 0; round < 3; round++) {
        /* Reads: half plain, half vectored (two halves each). */
        for (int b = 0; b < BLOCKS; b++) memset(buf[b], 0xAA, BLOCK);
        int done = transfer(ctx, fd, buf, IOCB_CMD_PREAD, 1, "reads");
        failed |= done != 0;
        if (done < 0) break;
        size_t bad = 0;
        for (size_t b = 0; b < BLOCKS; b++) bad += pages_wrong(buf[b], b, round);
        /* Writes of the next round's pattern from evicted buffers. */
        for (size_t b = 0; b < BLOCKS; b++)
            for (size_t i = 0; i < BLOCK; i++) buf[b][i] = pattern(b, i, round + 1);
        done = transfer(ctx, fd, buf, IOCB_CMD_PWRITE, 0, "writes");
        failed |= done != 0;
        if (done < 0) break;
        size_t bad_written = 0;
        for (size_t b = 0; b < BLOCKS; b++) {
            if (pread(fd, plain, BLOCK, (off_t)(b * BLOCK)) != (ssize_t)BLOCK) return 2;
            bad_written += pages_wrong(plain, b, round + 1);
        }
        printf("test_aio: round %d: %d MiB read in %d I/Os: %zu pages wrong; written: %zu pages wrong\n", round,
               BLOCKS * (int)(BLOCK >> 20), BLOCKS, bad, bad_written);
        failed |= bad != 0 || bad_written != 0;
    }
    /* Completions reaped from the ring in this process's memory, as fio's
     * userspace_reap does: no call says the I/O ended, and freeing its
     * buffers then (a discard, which waits for pins) must not hang. */
    if (!failed) {
        struct aio_ring {
            unsigned id, nr, head, tail, magic, compat_features, incompat_features, header_length;
            struct io_event events[];
        } *ring = (struct aio_ring *)ctx;
        long s = submit(ctx, fd, buf, IOCB_CMD_PREAD, 0, "reads to reap from the ring") ? -1 : BLOCKS;
        unsigned seen = 0;
        for (int spins = 0; s == BLOCKS && seen < BLOCKS && spins < 10000; spins++) {
            unsigned head = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
            unsigned tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
            if (head != tail) {
                seen += (tail + ring->nr - head) % ring->nr;
                __atomic_store_n(&ring->head, tail, __ATOMIC_RELEASE);
            } else {
                usleep(1000);
            }
        }
        printf("test_aio: %u of %d completions reaped from the ring; freeing the buffers\n", seen, BLOCKS);
        fflush(stdout);
        failed |= s != BLOCKS || seen != BLOCKS;
        for (int b = 0; b < BLOCKS; b++) free(buf[b]);
        printf("test_aio: freed\n");
    }
    io_destroy_(ctx);
    close(fd);
    return failed;
}
