/* io_uring on tiered buffers. The kernel reads and writes an io_uring
 * request's buffer when it gets to it: in io_uring_enter, in its own worker
 * threads, or (SQPOLL) with no system call of the program at all, and a
 * direct read pins the pages for the device until it completes. Under
 * tiermem run, Node's libuv (UV_USE_IO_URING=1) failed with EFAULT on the
 * in-context path, and fio --ioengine=io_uring --direct=1 verified corrupt
 * blocks on the handler-thread path. tiermem refuses io_uring in a tiered
 * process (io_uring_setup fails with ENOSYS, as on a kernel built without
 * it), and programs fall back to plain calls.
 *
 * The ring is set up the two ways programs make the call: through the C
 * library's syscall() (fio, libuv) and with a `syscall` instruction of the
 * program's own (liburing). Where it is set up, direct reads of a file of
 * known blocks go into evicted tiered buffers with other memory churned
 * while they are in flight (with and without SQPOLL), then writes from
 * evicted buffers, each checked; where io_uring_setup fails with ENOSYS, the
 * same I/O goes through pread and pwrite. Exit status 0 when every block is
 * right. Usage: test_uring [DIR] (default: .), where DIR is on a file
 * system that takes O_DIRECT (not tmpfs). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io_blocks.h"

/* io_uring_setup through the C library, or through an instruction of
 * this program's own, as liburing makes it. */
static long setup_libc(unsigned entries, struct io_uring_params *p) {
    return syscall(SYS_io_uring_setup, entries, p);
}
static long setup_raw(unsigned entries, struct io_uring_params *p) {
    long r;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "0"((long)SYS_io_uring_setup), "D"((long)entries), "S"(p)
                     : "rcx", "r11", "memory");
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

struct ring {
    int fd;
    unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
};

/* 0 with the ring mapped; -1 with errno from io_uring_setup (ENOSYS where
 * refused); 1 on another failure. */
static int ring_open(struct ring *r, long (*setup)(unsigned, struct io_uring_params *), int sqpoll) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    if (sqpoll) {
        p.flags = IORING_SETUP_SQPOLL;
        p.sq_thread_idle = 100;
    }
    long fd = setup(BLOCKS * 2, &p);
    if (fd < 0) return -1;
    r->fd = (int)fd;
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    size_t len = sq_len > cq_len ? sq_len : cq_len;
    char *sq = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
    struct io_uring_sqe *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || sqes == MAP_FAILED || !(p.features & IORING_FEAT_SINGLE_MMAP)) return 1;
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(sq + p.cq_off.head);
    r->cq_tail = (unsigned *)(sq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(sq + p.cq_off.ring_mask);
    r->sqes = sqes;
    r->cqes = (struct io_uring_cqe *)(sq + p.cq_off.cqes);
    return 0;
}

/* Queues one op per block (block b at file offset b * BLOCK, from or into
 * buf[b]), lets the kernel start them, churns, then waits for all; 0 when
 * each completed whole. */
static int ring_io(struct ring *r, int sqpoll, int fd, unsigned char **buf, int op, const char *what) {
    unsigned tail = *r->sq_tail;
    for (int b = 0; b < BLOCKS; b++, tail++) {
        unsigned k = tail & *r->sq_mask;
        struct io_uring_sqe *e = &r->sqes[k];
        memset(e, 0, sizeof *e);
        e->opcode = (uint8_t)op;
        e->fd = fd;
        e->off = (uint64_t)b * BLOCK;
        e->addr = (uint64_t)(uintptr_t)buf[b];
        e->len = BLOCK;
        e->user_data = (uint64_t)b;
        r->sq_array[k] = k;
    }
    __atomic_store_n(r->sq_tail, tail, __ATOMIC_RELEASE);
    unsigned flags = sqpoll ? IORING_ENTER_SQ_WAKEUP : 0;
    if (syscall(SYS_io_uring_enter, r->fd, sqpoll ? 0 : BLOCKS, 0, flags, NULL, 0) < 0) {
        printf("test_uring: %s: io_uring_enter: %s\n", what, strerror(errno));
        return 1;
    }
    /* While the device works: other memory comes in, evicting. */
    churn();
    int failed = 0;
    for (int got = 0; got < BLOCKS;) {
        unsigned head = *r->cq_head;
        if (head == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE)) {
            if (syscall(SYS_io_uring_enter, r->fd, 0, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0 && errno != EINTR) {
                printf("test_uring: %s: io_uring_enter (wait): %s\n", what, strerror(errno));
                return 1;
            }
            continue;
        }
        struct io_uring_cqe *c = &r->cqes[head & *r->cq_mask];
        if (c->res != (int32_t)BLOCK) {
            printf("test_uring: %s: block %llu completed with %d (%s)\n", what, (unsigned long long)c->user_data,
                   c->res, c->res < 0 ? strerror(-c->res) : "short");
            failed = 1;
        }
        __atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
        got++;
    }
    return failed;
}

/* The same I/O with plain calls: what a program does where io_uring is
 * not there. */
static int plain_io(int fd, unsigned char **buf, int write) {
    churn();
    for (int b = 0; b < BLOCKS; b++) {
        ssize_t n = write ? pwrite(fd, buf[b], BLOCK, (off_t)b * BLOCK) : pread(fd, buf[b], BLOCK, (off_t)b * BLOCK);
        if (n != (ssize_t)BLOCK) {
            printf("test_uring: p%s: %s\n", write ? "write" : "read", n < 0 ? strerror(errno) : "short");
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    unsigned char *plain;
    int fd = direct_file("test_uring", argc, argv, &plain);
    if (fd < 0) return fd == -1 ? 0 : 2;
    unsigned char *buf[BLOCKS];
    for (int b = 0; b < BLOCKS; b++)
        if (posix_memalign((void **)&buf[b], 4096, BLOCK)) return 2;
    for (size_t b = 0; b < BLOCKS; b++) {
        for (size_t i = 0; i < BLOCK; i++) plain[i] = pattern(b, i, 0);
        if (pwrite(fd, plain, BLOCK, (off_t)(b * BLOCK)) != (ssize_t)BLOCK) {
            printf("test_uring: pwrite: %s\n", strerror(errno));
            return 2;
        }
    }
    static const struct {
        const char *name;
        long (*setup)(unsigned, struct io_uring_params *);
        int sqpoll;
    } ways[] = {
        {"syscall()", setup_libc, 0},
        {"syscall() with SQPOLL", setup_libc, 1},
        {"own syscall instruction", setup_raw, 0},
        {"own syscall instruction with SQPOLL", setup_raw, 1},
    };
    int failed = 0, round = 0;
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        struct ring r;
        int open = ring_open(&r, ways[w].setup, ways[w].sqpoll);
        if (open > 0) {
            printf("test_uring: %s: mapping the ring failed\n", ways[w].name);
            return 2;
        }
        if (open < 0 && errno != ENOSYS) {
            printf("test_uring: %s: skipped: io_uring_setup: %s\n", ways[w].name, strerror(errno));
            continue;
        }
        const char *how = open == 0 ? "io_uring" : "refused (ENOSYS): pread and pwrite";
        for (int b = 0; b < BLOCKS; b++) memset(buf[b], 0xAA, BLOCK);
        churn();
        int io = open == 0 ? ring_io(&r, ways[w].sqpoll, fd, buf, IORING_OP_READ, "reads") : plain_io(fd, buf, 0);
        size_t bad = 0;
        for (size_t b = 0; b < BLOCKS; b++) bad += pages_wrong(buf[b], b, round);
        /* Writes of the next round's pattern from evicted buffers. */
        for (size_t b = 0; b < BLOCKS; b++)
            for (size_t i = 0; i < BLOCK; i++) buf[b][i] = pattern(b, i, round + 1);
        churn();
        io |= open == 0 ? ring_io(&r, ways[w].sqpoll, fd, buf, IORING_OP_WRITE, "writes") : plain_io(fd, buf, 1);
        size_t bad_written = 0;
        for (size_t b = 0; b < BLOCKS; b++) {
            if (pread(fd, plain, BLOCK, (off_t)(b * BLOCK)) != (ssize_t)BLOCK) return 2;
            bad_written += pages_wrong(plain, b, round + 1);
        }
        printf("test_uring: %s: %s: read %zu pages wrong, written %zu pages wrong\n", ways[w].name, how, bad,
               bad_written);
        failed |= io || bad != 0 || bad_written != 0;
        round++;
        if (open == 0) close(r.fd);
    }
    close(fd);
    /* A forked child's refusal (it prints no summary of its own): the
     * root's summary and report count it (`children.io_uring_refused`). */
    pid_t child = fork();
    if (child == 0) {
        struct ring r;
        int open = ring_open(&r, setup_libc, 0);
        if (open == 0) close(r.fd);
        exit(open > 0 || (open < 0 && errno != ENOSYS));
    }
    int st = 0;
    if (child < 0 || waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("test_uring: the forked child's io_uring_setup failed\n");
        failed = 1;
    }
    return failed;
}
