/* Kernel I/O on tiered buffers from several threads at once (issue 30.3,
 * 30.4, 30.10), under the preload library with TIERMEM_NEAR=16M (run by
 * scripts/ctest.sh on both fault paths).
 *
 * A thread blocked in recv(2)/read(2)/recvmsg(2)/readv(2) into a large
 * tiered buffer must not keep another thread's send(2)/write(2) from a
 * tiered buffer, evicted, from working: together the two buffers are
 * larger than the budget. Datagrams keep their boundaries; vmsplice(2)
 * from and into tiered buffers works; a signal handler that siglongjmps
 * out of a blocked read into tiered memory, again and again, leaves
 * nothing held (reads and the whole budget still work afterwards).
 *
 *   test_kernel_io          every case, each in a fresh process
 *   test_kernel_io CASE     one case
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define MIB (1024ul * 1024ul)
/* Each side's buffer: together more than the test's 16 MiB budget, each
 * more than the pin allowance (half of it). */
#define BUF_BYTES (12 * MIB)

/* Evicts what was touched before: the budget is 16 MiB. */
static void churn(uint64_t seed) {
  static uint64_t *spare;
  if (!spare) spare = malloc(40 * MIB);
  fill(spare, 40 * MIB / 8, seed);
}

enum way { SOCKET, PIPE, VECTOR, MESSAGE };
static const char *const way_names[] = {"send/recv on a stream socket", "write/read on a pipe",
                                        "writev/readv on a pipe", "sendmsg/recvmsg on a stream socket"};

struct reader {
  enum way way;
  int fd;
  uint64_t *buf;
  size_t got;
  int err;
};

/* Reads BUF_BYTES into `buf`, blocking until the writer is there. */
static void *read_all(void *arg) {
  struct reader *r = arg;
  while (r->got < BUF_BYTES) {
    char *at = (char *)r->buf + r->got;
    size_t want = BUF_BYTES - r->got;
    ssize_t n = -1;
    struct iovec iov[2] = {{at, want / 2}, {at + want / 2, want - want / 2}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    switch (r->way) {
    case SOCKET: n = recv(r->fd, at, want, 0); break;
    case PIPE: n = read(r->fd, at, want); break;
    case VECTOR: n = readv(r->fd, iov, 2); break;
    case MESSAGE: n = recvmsg(r->fd, &m, 0); break;
    }
    if (n <= 0) {
      r->err = n < 0 ? errno : EPIPE;
      break;
    }
    r->got += (size_t)n;
  }
  return NULL;
}

static void blocked_reader_case(enum way way) {
  const char *name = way_names[way];
  int fds[2];
  if (way == PIPE || way == VECTOR) {
    CHECK(pipe(fds) == 0, "pipe");
  } else {
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0, "socketpair");
  }
  int rd = way == PIPE || way == VECTOR ? fds[0] : fds[1];
  int wr = way == PIPE || way == VECTOR ? fds[1] : fds[0];
  struct reader r = {way, rd, malloc(BUF_BYTES), 0, 0};
  uint64_t *out = malloc(BUF_BYTES);
  fill(out, BUF_BYTES / 8, 7);
  memset(r.buf, 0, BUF_BYTES);
  churn(1); /* both buffers are mostly evicted now */
  unsigned char in_core[2] = {1, 1};
  mincore(out, 4096, &in_core[0]);
  mincore(r.buf, 4096, &in_core[1]);
  CHECK(!(in_core[0] & 1) && !(in_core[1] & 1), "%s: the buffers were not evicted (%d %d %p %p): the case tests nothing", name, in_core[0], in_core[1], (void *)out, (void *)r.buf);
  pthread_t t;
  pthread_create(&t, NULL, read_all, &r);
  usleep(200000); /* the reader blocks first */
  size_t sent = 0;
  /* A blocking stream send moves all of it in one call. */
  if (way == SOCKET) {
    ssize_t n = send(wr, out, BUF_BYTES, 0);
    CHECK(n == (ssize_t)BUF_BYTES, "%s: one send of %lu bytes returned %zd (%s)", name, BUF_BYTES, n,
          strerror(errno));
    sent = BUF_BYTES;
  }
  while (sent < BUF_BYTES) {
    char *at = (char *)out + sent;
    size_t want = BUF_BYTES - sent;
    struct iovec iov[2] = {{at, want / 2}, {at + want / 2, want - want / 2}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t n = -1;
    switch (way) {
    case SOCKET: n = send(wr, at, want, 0); break;
    case PIPE: n = write(wr, at, want); break;
    case VECTOR: n = writev(wr, iov, 2); break;
    case MESSAGE: n = sendmsg(wr, &m, 0); break;
    }
    if (n <= 0) {
      CHECK(0, "%s: the writer failed after %zu bytes: %s", name, sent, strerror(errno));
      break;
    }
    sent += (size_t)n;
  }
  close(wr);
  pthread_join(t, NULL);
  CHECK(r.got == BUF_BYTES && r.err == 0, "%s: the reader got %zu bytes (%s)", name, r.got, strerror(r.err));
  CHECK(bad_words(r.buf, BUF_BYTES / 8, 7) == 0, "%s: data", name);
  close(rd);
  free(r.buf), free(out);
}

/* The report's case: a thread blocked in recv(2), then a send(2) of an
 * evicted buffer from another (EFAULT before: the receiver's pins took the
 * allowance and the sender's call ran unpinned). */
static int sv_plain[2];

static void *recv_plain(void *arg) {
  char *b = arg;
  size_t got = 0;
  while (got < BUF_BYTES) {
    ssize_t n = recv(sv_plain[1], b + got, BUF_BYTES - got, 0);
    if (n <= 0) break;
    got += (size_t)n;
  }
  return (void *)got;
}

static void blocked_recv_case(void) {
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv_plain);
  char *in = malloc(BUF_BYTES), *out = malloc(BUF_BYTES);
  memset(in, 0, BUF_BYTES);
  fill((uint64_t *)out, BUF_BYTES / 8, 17);
  char *spare = malloc(64 * MIB);
  memset(spare, 1, 64 * MIB);
  pthread_t t;
  pthread_create(&t, NULL, recv_plain, in);
  usleep(200000);
  size_t sent = 0;
  while (sent < BUF_BYTES) {
    ssize_t n = send(sv_plain[0], out + sent, BUF_BYTES - sent, 0);
    if (n <= 0) {
      CHECK(0, "send after %zu bytes: %s", sent, strerror(errno));
      break;
    }
    sent += (size_t)n;
  }
  close(sv_plain[0]);
  void *got;
  pthread_join(t, &got);
  CHECK((size_t)got == BUF_BYTES && bad_words((uint64_t *)in, BUF_BYTES / 8, 17) == 0, "received %zu bytes",
        (size_t)got);
  close(sv_plain[1]);
  free(in), free(out), free(spare);
}

/* Several reader/writer pairs at once, both directions through one
 * socket each. */
struct pair {
  int fd;
  uint64_t seed;
  int ok;
};

static void *exchange(void *arg) {
  struct pair *p = arg;
  size_t len = 4 * MIB;
  uint64_t *out = malloc(len), *in = malloc(len);
  fill(out, len / 8, p->seed);
  p->ok = 1;
  for (int round = 0; round < 3 && p->ok; round++) {
    size_t sent = 0, got = 0;
    while (sent < len || got < len) {
      if (sent < len) {
        ssize_t n = send(p->fd, (char *)out + sent, len - sent > MIB ? MIB : len - sent, MSG_DONTWAIT);
        if (n > 0) sent += (size_t)n;
        else if (errno != EAGAIN) { p->ok = 0; break; }
      }
      if (got < len) {
        ssize_t n = recv(p->fd, (char *)in + got, len - got, MSG_DONTWAIT);
        if (n > 0) got += (size_t)n;
        else if (n == 0 || errno != EAGAIN) { p->ok = 0; break; }
      }
    }
    /* Both ends send the same pattern. */
    if (p->ok && bad_words(in, len / 8, p->seed) != 0) p->ok = 0;
  }
  free(out), free(in);
  return NULL;
}

static void threads_case(void) {
  enum { PAIRS = 3 };
  pthread_t t[2 * PAIRS];
  struct pair p[2 * PAIRS];
  for (int k = 0; k < PAIRS; k++) {
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    p[2 * k] = (struct pair){sv[0], 100 + (uint64_t)k, 0};
    p[2 * k + 1] = (struct pair){sv[1], 100 + (uint64_t)k, 0};
  }
  for (int k = 0; k < 2 * PAIRS; k++) pthread_create(&t[k], NULL, exchange, &p[k]);
  for (int k = 0; k < 2 * PAIRS; k++) {
    pthread_join(t[k], NULL);
    CHECK(p[k].ok, "exchanging thread %d failed", k);
  }
}

static void datagram_case(void) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0, "socketpair");
  int size = 1 << 20;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  size_t msg = 150 * 1024;
  uint64_t *out = malloc(4 * MIB), *in = malloc(4 * MIB);
  for (int k = 0; k < 8; k++) {
    fill(out, msg / 8, 200 + (uint64_t)k);
    churn(300 + (uint64_t)k);
    ssize_t n = send(sv[0], out, msg, 0);
    CHECK(n == (ssize_t)msg, "datagram %d: send %zd (%s)", k, n, strerror(errno));
    /* A buffer larger than the message: one message comes back, whole. */
    n = recv(sv[1], in, 4 * MIB, 0);
    CHECK(n == (ssize_t)msg && bad_words(in, msg / 8, 200 + (uint64_t)k) == 0, "datagram %d: recv %zd", k, n);
  }
  close(sv[0]), close(sv[1]);
  free(out), free(in);
}

static void vmsplice_case(void) {
  int p[2];
  CHECK(pipe(p) == 0, "pipe");
  fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
  size_t len = 1 << 20;
  uint64_t *out = malloc(len), *in = malloc(len);
  for (int k = 0; k < 4; k++) {
    fill(out, len / 8, 400 + (uint64_t)k);
    memset(in, 0, len);
    churn(500 + (uint64_t)k); /* both evicted */
    size_t put = 0;
    ssize_t n = 1;
    while (put < len && n > 0) {
      struct iovec iov = {(char *)out + put, len - put};
      n = vmsplice(p[1], &iov, 1, 0);
      CHECK(n > 0, "vmsplice from tiered memory: %zd (%s)", n, strerror(errno));
      put += n > 0 ? (size_t)n : 0;
    }
    /* Evictions and frames used again for other pages must not change
     * what the pipe holds (the program itself leaves the buffer alone, as
     * vmsplice asks). */
    churn(600 + (uint64_t)k);
    struct iovec back = {in, len};
    size_t got = 0;
    while (got < len && n > 0) {
      back.iov_base = (char *)in + got;
      back.iov_len = len - got;
      ssize_t m = vmsplice(p[0], &back, 1, 0);
      if (m <= 0) {
        CHECK(0, "vmsplice into tiered memory: %zd (%s)", m, strerror(errno));
        break;
      }
      got += (size_t)m;
    }
    CHECK(bad_words(in, len / 8, 400 + (uint64_t)k) == 0, "vmsplice data (round %d)", k);
  }
  close(p[0]), close(p[1]);
  free(out), free(in);
}

static sigjmp_buf out_of_read;

static void on_alarm(int sig) {
  (void)sig;
  siglongjmp(out_of_read, 1);
}

static void longjmp_case(void) {
  int p[2];
  CHECK(pipe(p) == 0, "pipe");
  uint64_t *buf = malloc(8 * MIB);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  int jumps = 0;
  for (int k = 0; k < 200; k++) {
    churn(700 + (uint64_t)k);
    if (sigsetjmp(out_of_read, 1) == 0) {
      struct itimerval it = {{0, 0}, {0, 2000}};
      setitimer(ITIMER_REAL, &it, NULL);
      /* 8 MiB: as many pages as half the budget; never written to. */
      (void)!read(p[0], buf, 8 * MIB);
    } else {
      jumps++;
    }
  }
  CHECK(jumps == 200, "only %d of 200 reads were left by siglongjmp", jumps);
  /* Nothing is left held: a large read of a file into evicted tiered
   * memory still works whole, and so does the whole budget. */
  char name[] = "/tmp/tiermem-kernel-io-XXXXXX";
  int fd = mkstemp(name);
  unlink(name);
  fill(buf, MIB, 800);
  CHECK(write(fd, buf, 8 * MIB) == (ssize_t)(8 * MIB), "write the file");
  churn(801);
  memset(buf, 0, 8 * MIB);
  churn(802);
  ssize_t n = pread(fd, buf, 8 * MIB, 0);
  CHECK(n == (ssize_t)(8 * MIB) && bad_words(buf, MIB, 800) == 0, "read after the jumps: %zd (%s)", n,
        strerror(errno));
  close(fd), close(p[0]), close(p[1]);
  free(buf);
}

static void socket_case(void) { blocked_reader_case(SOCKET); }
static void pipe_case(void) { blocked_reader_case(PIPE); }
static void vector_case(void) { blocked_reader_case(VECTOR); }
static void message_case(void) { blocked_reader_case(MESSAGE); }

static const struct check_case cases[] = {
    {"recv", blocked_recv_case}, {"socket", socket_case},     {"pipe", pipe_case},         {"vector", vector_case},
    {"message", message_case},   {"threads", threads_case},   {"datagram", datagram_case},
    {"vmsplice", vmsplice_case}, {"longjmp", longjmp_case},
};

int main(int argc, char **argv) {
  return run_cases(argc, argv, cases, sizeof cases / sizeof cases[0], "test_kernel_io");
}
