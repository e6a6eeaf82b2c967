/* vfork children that read and write tiered memory, from several threads
 * at once, before and after closing every descriptor above 2 (Python 3.11's
 * subprocess reads its fds_to_keep tuple after that). Each of 4 threads
 * churns its slice of a heap array (evicting at a small budget), then
 * vforks a child that checks 16 pages of a reference array (evicted by the
 * churn), writes a stamp into one page of its thread's slice, and exits 0
 * if all was as expected. The parent checks the stamp (the child shares
 * its memory) and, at the end, every page of both arrays. Run by
 * scripts/ctest.sh plainly and under `tiermem run --near 16K` on both
 * fault paths: on the in-context path the child served the fault itself
 * with the owner's far store closed and poisoned the page (the parent
 * then died of SIGBUS) until its faults went to a thread of the owner
 * (crates/tiermem/src/vfork.rs). Last, a vfork child resets the SIGBUS
 * handler (as Python's subprocess resets every handler): the parent's own
 * handler must still run for a SIGBUS it raises (tiermem keeps one record
 * of the program's handlers, which the child shares). */
#include <signal.h>
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096u
#define THREADS 4
#define ROUNDS 25
#define SLICE_PAGES 512u /* 2 MiB a thread */
#define REF_PAGES 2048u  /* 8 MiB */

static uint64_t *ref;   /* page p holds p * 0x9e37 + 1 in every word checked */
static uint64_t *work;  /* thread t's slice: pages t * SLICE_PAGES ... */
static int failures;

static uint64_t ref_value(size_t p) { return p * 0x9e37u + 1; }
static uint64_t *word(uint64_t *base, size_t page, size_t k) { return base + page * (PAGE / 8) + k; }

/* In a function of its own: the child shares this frame. */
static __attribute__((noinline)) pid_t child(int t, int round, int close_fds) {
    pid_t p = vfork();
    if (p == 0) {
        if (close_fds) syscall(SYS_close_range, 3u, ~0u, 0u);
        int bad = 0;
        for (size_t k = 0; k < 16; k++) {
            size_t page = (k * 131 + (size_t)round * 17 + (size_t)t * 7) % REF_PAGES;
            if (*word(ref, page, k) != ref_value(page)) bad = 1;
        }
        size_t mine = (size_t)t * SLICE_PAGES + (size_t)round % SLICE_PAGES;
        *word(work, mine, 1) = 0x5a5a0000u + (uint64_t)round;
        _exit(bad ? 3 : 0);
    }
    return p;
}

static void *run(void *arg) {
    int t = (int)(intptr_t)arg;
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t p = 0; p < SLICE_PAGES; p++) *word(work, (size_t)t * SLICE_PAGES + p, 0) += 1;
        pid_t p = child(t, round, round % 2);
        int st = -1;
        if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "thread %d round %d: child status %#x\n", t, round, st);
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
            continue;
        }
        size_t mine = (size_t)t * SLICE_PAGES + (size_t)round % SLICE_PAGES;
        if (*word(work, mine, 1) != 0x5a5a0000u + (uint64_t)round) {
            fprintf(stderr, "thread %d round %d: the child's write is lost\n", t, round);
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

static volatile sig_atomic_t raised;
static void on_bus(int sig) { (void)sig; raised++; }

/* Returns 0 if the parent's SIGBUS handler survived a child's reset. */
static __attribute__((noinline)) int handler_survives_child_reset(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_bus;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) != 0) return 1;
    pid_t p = vfork();
    if (p == 0) {
        struct sigaction dfl = {0};
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGBUS, &dfl, NULL);
        _exit(0);
    }
    int st;
    if (p < 0 || waitpid(p, &st, 0) != p) return 1;
    raise(SIGBUS);
    return raised == 1 ? 0 : 1;
}

int main(void) {
    ref = malloc((size_t)REF_PAGES * PAGE);
    work = calloc((size_t)THREADS * SLICE_PAGES, PAGE);
    if (!ref || !work) return 2;
    for (size_t p = 0; p < REF_PAGES; p++)
        for (size_t k = 0; k < PAGE / 8; k++) *word(ref, p, k) = ref_value(p);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, run, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    size_t bad = 0;
    for (size_t p = 0; p < REF_PAGES; p++)
        for (size_t k = 0; k < PAGE / 8; k++) bad += *word(ref, p, k) != ref_value(p);
    for (size_t p = 0; p < (size_t)THREADS * SLICE_PAGES; p++) bad += *word(work, p, 0) != ROUNDS;
    int lost_handler = handler_survives_child_reset();
    printf("test_vfork_touch: %d threads x %d vfork children, %d failed, %zu bad words, parent's handler %s\n",
           THREADS, ROUNDS, failures, bad, lost_handler ? "lost" : "kept");
    return failures || bad || lost_handler ? 1 : 0;
}
