/* Stacks the program makes in memory tiermem tiers: the kernel writes
 * signal frames (and, for a thread's own stack, the thread's control
 * block) there, and no fault can be served for such a write. Under
 * `tiermem run --near 16K --threshold 256K` on the in-context path each
 * case died of SIGSEGV once its stack had been evicted.
 *
 *   altstack-malloc  sigaltstack on 1 MiB from malloc, signals after churn
 *   altstack-mmap    the same from mmap, then madvise(DONTNEED) on it
 *   ucontext         a coroutine on a 2 MiB malloc stack (makecontext),
 *                    signals delivered while it runs
 *   pthread          3 threads on their own malloc stacks
 *                    (pthread_attr_setstack), signalled, joined, twice
 *   clone            clone(CLONE_VM) children on a malloc stack
 *   reuse            a held stack freed, its memory reused and churned
 *
 * With no argument every case runs in turn. Each checks its results and
 * the data of a churned buffer. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#define CHURN (8u << 20)
static unsigned char *churn_buf;
static volatile sig_atomic_t handled;

static void fail(const char *what) {
    fprintf(stderr, "test_stacks: FAIL: %s\n", what);
    exit(1);
}

/* Rewrites the churn buffer (evicting everything else at a small budget)
 * and checks it. */
static void churn(unsigned seed) {
    for (size_t i = 0; i < CHURN; i += 512) churn_buf[i] = (unsigned char)(seed + i / 512);
    for (size_t i = 0; i < CHURN; i += 512)
        if (churn_buf[i] != (unsigned char)(seed + i / 512)) fail("churn buffer data");
}

/* Uses about depth * 2 KiB of stack; returns a checkable sum. */
static unsigned long deep(int depth) {
    volatile unsigned char pad[2048];
    for (size_t i = 0; i < sizeof pad; i += 256) pad[i] = (unsigned char)(depth + i);
    unsigned long s = depth == 0 ? 0 : deep(depth - 1);
    for (size_t i = 0; i < sizeof pad; i += 256) s += pad[i];
    return s;
}

static unsigned long expected_deep(int depth) {
    unsigned long s = 0;
    for (int d = 0; d <= depth; d++)
        for (size_t i = 0; i < 2048; i += 256) s += (unsigned char)(d + i);
    return s;
}

static void on_usr1(int sig) {
    (void)sig;
    /* Deep enough to reach several pages of the stack it runs on. */
    if (deep(24) != expected_deep(24)) _exit(3);
    handled++;
}

static void install(int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL)) fail("sigaction");
}

static void altstack(void *sp, size_t size, int dontneed) {
    stack_t ss = {.ss_sp = sp, .ss_size = size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL)) fail("sigaltstack");
    install(SA_ONSTACK);
    handled = 0;
    for (int i = 0; i < 6; i++) {
        churn((unsigned)i);
        if (dontneed && i == 3 && madvise(sp, size, MADV_DONTNEED)) fail("madvise");
        raise(SIGUSR1);
    }
    if (handled != 6) fail("altstack: signals handled");
    ss.ss_flags = SS_DISABLE;
    if (sigaltstack(&ss, NULL)) fail("sigaltstack disable");
}

static ucontext_t main_ctx, co_ctx;
static unsigned long co_sums;

static void coroutine(void) {
    for (int i = 0; i < 5; i++) {
        co_sums += deep(100);
        churn((unsigned)(100 + i));
        raise(SIGUSR1); /* its frame goes on the coroutine's stack */
        swapcontext(&co_ctx, &main_ctx);
    }
}

static void run_ucontext(void) {
    size_t size = 2u << 20;
    char *stack = malloc(size);
    if (!stack) fail("malloc");
    install(0);
    handled = 0;
    if (getcontext(&co_ctx)) fail("getcontext");
    co_ctx.uc_stack.ss_sp = stack;
    co_ctx.uc_stack.ss_size = size;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, coroutine, 0);
    for (int i = 0; i < 5; i++) {
        if (swapcontext(&main_ctx, &co_ctx)) fail("swapcontext");
        churn((unsigned)(200 + i));
    }
    if (co_sums != 5 * expected_deep(100)) fail("ucontext: results");
    if (handled != 5) fail("ucontext: signals handled");
    free(stack);
}

static pthread_mutex_t churn_lock = PTHREAD_MUTEX_INITIALIZER;
static void *thread_body(void *arg) {
    uintptr_t k = (uintptr_t)arg;
    unsigned long s = 0;
    for (int i = 0; i < 3; i++) {
        s += deep(60);
        pthread_mutex_lock(&churn_lock);
        churn((unsigned)(300 + k * 10 + i));
        pthread_mutex_unlock(&churn_lock);
        pthread_kill(pthread_self(), SIGUSR1);
    }
    return (void *)(uintptr_t)(s == 3 * expected_deep(60));
}

static void run_pthread(void) {
    install(0);
    handled = 0;
    for (int round = 0; round < 2; round++) {
        enum { N = 3 };
        size_t size = 2u << 20;
        char *stacks[N];
        pthread_t t[N];
        for (int k = 0; k < N; k++) {
            stacks[k] = malloc(size);
            if (!stacks[k]) fail("malloc");
            pthread_attr_t at;
            pthread_attr_init(&at);
            if (pthread_attr_setstack(&at, stacks[k], size)) fail("pthread_attr_setstack");
            if (pthread_create(&t[k], &at, thread_body, (void *)(uintptr_t)k)) fail("pthread_create");
            pthread_attr_destroy(&at);
        }
        pthread_mutex_lock(&churn_lock);
        churn(400);
        pthread_mutex_unlock(&churn_lock);
        for (int k = 0; k < N; k++) {
            void *ok;
            if (pthread_join(t[k], &ok)) fail("pthread_join");
            if (!ok) fail("pthread: results");
            free(stacks[k]);
        }
    }
    if (handled != 2 * 3 * 3) fail("pthread: signals handled");
}

static int clone_child(void *arg) {
    (void)arg;
    /* No C library calls that need this task's own thread state. */
    unsigned long s = deep(120);
    for (size_t i = 0; i < CHURN; i += 4096) churn_buf[i] ^= 0x5a;
    for (size_t i = 0; i < CHURN; i += 4096) churn_buf[i] ^= 0x5a;
    return s == expected_deep(120) ? 0 : 7;
}

static void run_clone(void) {
    size_t size = 1u << 20;
    char *stack = malloc(size);
    if (!stack) fail("malloc");
    for (int i = 0; i < 4; i++) {
        churn((unsigned)(500 + i));
        pid_t pid = clone(clone_child, stack + size, CLONE_VM | CLONE_FILES | SIGCHLD, NULL);
        if (pid < 0) fail("clone");
        int st;
        if (waitpid(pid, &st, 0) != pid) fail("waitpid");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "clone child status %#x\n", st);
            fail("clone: child");
        }
        churn((unsigned)(510 + i));
    }
    free(stack);
}

static void run_reuse(void) {
    size_t size = 1u << 20;
    for (int round = 0; round < 3; round++) {
        char *sp = malloc(size);
        if (!sp) fail("malloc");
        altstack(sp, size, 0);
        free(sp);
        /* The freed stack's memory comes back as ordinary tiered memory. */
        size_t n = 4u << 20;
        unsigned *big = malloc(n);
        if (!big) fail("malloc big");
        for (size_t i = 0; i < n / 4; i++) big[i] = (unsigned)(i * 2654435761u + round);
        churn((unsigned)(600 + round));
        for (size_t i = 0; i < n / 4; i++)
            if (big[i] != (unsigned)(i * 2654435761u + round)) fail("reuse: data");
        free(big);
    }
}

int main(int argc, char **argv) {
    churn_buf = malloc(CHURN);
    if (!churn_buf) fail("malloc churn");
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
#define CASE(name, body)                                  \
    if (!only || !strcmp(only, name)) {                   \
        body;                                             \
        printf("test_stacks: %s ok\n", name);             \
        ran++;                                            \
    }
    CASE("altstack-malloc", {
        char *sp = malloc(1u << 20);
        if (!sp) fail("malloc");
        altstack(sp, 1u << 20, 0);
        free(sp);
    })
    CASE("altstack-mmap", {
        void *sp = mmap(NULL, 1u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (sp == MAP_FAILED) fail("mmap");
        altstack(sp, 1u << 20, 1);
        munmap(sp, 1u << 20);
    })
    CASE("ucontext", run_ucontext())
    CASE("pthread", run_pthread())
    CASE("clone", run_clone())
    CASE("reuse", run_reuse())
    if (!ran) {
        fprintf(stderr, "test_stacks: unknown case %s\n", only);
        return 2;
    }
    return 0;
}
