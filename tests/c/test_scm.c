/* Descriptors passed over a Unix socket (SCM_RIGHTS) with the message
 * header, the ancillary buffer and the data all in tiered memory, evicted
 * between calls: 20 small messages, then one of 1 MiB (more than a bounce
 * buffer takes at once) with one descriptor. Each passed descriptor is a
 * pipe's write end that the receiver writes through. Run by
 * scripts/ctest.sh plainly and under `tiermem run --near 16K` on both
 * fault paths: on the in-context path sendmsg failed with EFAULT and
 * recvmsg dropped the descriptors (MSG_CTRUNC) until the preload library
 * copied header, address and ancillary data (crates/tiermem-preload/src/iov.rs);
 * a large message was sent in pieces, each carrying the descriptor again. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (1u << 20)
static char *heap; /* 16 MiB: junk to evict with, then the message parts */
static void churn(int r) { memset(heap, r, 8u << 20); }

/* Sends `len` bytes of data with descriptor `fd`; everything tiered. */
static int send_fd(int sock, int fd, size_t len) {
    struct msghdr *m = (struct msghdr *)(heap + (9u << 20));
    struct iovec *iov = (struct iovec *)(heap + (10u << 20));
    char *ctl = heap + (11u << 20), *data = heap + (12u << 20);
    for (size_t i = 0; i < len; i++) data[i] = (char)(i * 7);
    memset(m, 0, sizeof *m);
    iov->iov_base = data; iov->iov_len = len;
    m->msg_iov = iov; m->msg_iovlen = 1;
    m->msg_control = ctl; m->msg_controllen = CMSG_SPACE(sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(m);
    c->cmsg_level = SOL_SOCKET; c->cmsg_type = SCM_RIGHTS; c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    churn(1);
    size_t done = 0;
    ssize_t r = sendmsg(sock, m, 0);
    if (r <= 0) { fprintf(stderr, "sendmsg: %s\n", strerror(errno)); return -1; }
    done = (size_t)r;
    while (done < len) { /* the rest without the descriptor */
        r = send(sock, data + done, len - done, 0);
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

/* Receives `len` bytes; returns how many descriptors came with them (each
 * written through and closed), or -1. */
static int recv_fds(int sock, size_t len, int pipe_rd) {
    struct msghdr *m = (struct msghdr *)(heap + (13u << 20));
    struct iovec *iov = (struct iovec *)(heap + (13u << 20) + 4096);
    char *ctl = heap + (14u << 20), *data = heap + (15u << 20);
    int fds = 0;
    size_t done = 0;
    while (done < len) {
        memset(m, 0, sizeof *m);
        iov->iov_base = data + done; iov->iov_len = len - done;
        m->msg_iov = iov; m->msg_iovlen = 1;
        m->msg_control = ctl; m->msg_controllen = 256;
        churn(2);
        ssize_t r = recvmsg(sock, m, 0);
        if (r <= 0) { fprintf(stderr, "recvmsg: %s\n", r < 0 ? strerror(errno) : "end"); return -1; }
        if (m->msg_flags & MSG_CTRUNC) { fprintf(stderr, "recvmsg: MSG_CTRUNC\n"); return -1; }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int k = 0; k < n; k++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
                char x = 'x', y = 0;
                if (write(fd, &x, 1) != 1 || read(pipe_rd, &y, 1) != 1 || y != 'x') return -1;
                close(fd);
                fds++;
            }
        }
        done += (size_t)r;
    }
    for (size_t i = 0; i < len; i++)
        if (data[i] != (char)(i * 7)) { fprintf(stderr, "data differs at %zu\n", i); return -1; }
    return fds;
}

int main(void) {
    heap = malloc(16u << 20);
    int sv[2], p[2];
    if (!heap || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || pipe(p)) return 2;
    int bad = 0;
    for (int r = 0; r < 20; r++)
        if (send_fd(sv[0], p[1], 6) || recv_fds(sv[1], 6, p[0]) != 1) bad++;
    printf("test_scm: small messages: %d of 20 failed\n", bad);
    /* One large message: the receiver reads while the sender sends. */
    pid_t pid = fork();
    if (pid == 0) _exit(send_fd(sv[0], p[1], BIG) ? 1 : 0);
    int n = recv_fds(sv[1], BIG, p[0]);
    int st = -1;
    if (n < 0) kill(pid, SIGKILL); /* a sender left without a reader */
    waitpid(pid, &st, 0);
    printf("test_scm: 1 MiB message with one descriptor: %d received\n", n);
    return bad || n != 1 || st != 0 ? 1 : 0;
}
