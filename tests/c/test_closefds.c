/* A program that closes every descriptor above 2, or duplicates onto
 * them, while its heap is tiered: close_range(3, ~0), closefrom(3), a
 * close() loop up to the descriptor limit, and dup2 of /dev/null onto
 * every open descriptor above 2, through the C library's functions and
 * through its syscall() (which no interposer sees: the signal guard's
 * filter traps those), one after the other, each followed by a
 * check of every page of a heap array written before and evicted since. Run by scripts/ctest.sh plainly
 * and under `tiermem run --near 16K` on both fault paths: the userfaultfd
 * and the far store were closed or replaced and every evicted page came
 * back wrong, silently, until tiermem's descriptors were guarded
 * (crates/tiermem-sys/src/fdguard.rs, crates/tiermem-interpose/src/fds.rs). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PAGES 1024u
static unsigned long *a;

static unsigned long value(size_t p) { return p * 2654435761u + 17; }

static int check(void) {
    size_t bad = 0;
    for (size_t p = 0; p < PAGES; p++) bad += a[p * 512] != value(p);
    return bad == 0 ? 0 : 1;
}

static void dup_onto_all(int raw) {
    int null = open("/dev/null", O_RDWR);
    int fds[4096], n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && n < 4096) fds[n++] = atoi(e->d_name);
    if (d) closedir(d);
    for (int k = 0; k < n; k++)
        if (fds[k] > 2 && fds[k] != null) {
            /* EBUSY on tiermem's is fine */
            if (raw == 1) syscall(SYS_dup2, null, fds[k]);
            else if (raw == 2) syscall(SYS_dup3, null, fds[k], 0);
            else dup2(null, fds[k]);
        }
}

int main(void) {
    a = malloc((size_t)PAGES * 4096);
    if (!a) return 2;
    for (size_t p = 0; p < PAGES; p++) a[p * 512] = value(p);
    const char *ways[] = {"dup2 onto every open descriptor", "close loop", "closefrom", "close_range",
                          "syscall(SYS_dup2) onto every open descriptor", "syscall(SYS_dup3) onto every open descriptor",
                          "syscall(SYS_close) loop", "syscall(SYS_close_range)"};
    int failed = 0;
    /* One after the other in this process (a forked child's memory is a
     * plain copy, not tiered): each must leave tiermem's descriptors. */
    for (int w = 0; w < 8; w++) {
        if (w == 0) dup_onto_all(0);
        if (w == 1)
            for (int fd = 3; fd < getdtablesize(); fd++) close(fd);
        if (w == 2) closefrom(3);
        if (w == 3) close_range(3, ~0u, 0);
        if (w == 4) dup_onto_all(1);
        if (w == 5) dup_onto_all(2);
        if (w == 6)
            for (int fd = 3; fd < getdtablesize(); fd++) syscall(SYS_close, fd);
        if (w == 7) syscall(SYS_close_range, 3, ~0u, 0);
        /* Touch everything twice: what is resident now is evicted. */
        int lost = check() | check();
        printf("%s: %s\n", ways[w], lost ? "PAGES LOST" : "every page intact");
        failed += lost;
    }
    return failed ? 1 : 0;
}
