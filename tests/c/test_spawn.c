/* Programs started with their path, arguments, environment and command
 * strings (and the pointer arrays) in tiered memory, evicted between
 * calls: fork+execv, fork+execve, fork+execvp, fork+execl, posix_spawn,
 * posix_spawnp, system, popen, vfork+execve, and vfork+execve, execl,
 * execle and execlp after the child closed every descriptor above 2 (as
 * Python's subprocess does), 10 times each. Every child is a shell that
 * exits 0 only if it got its arguments and the environment variable. Run
 * by scripts/ctest.sh plainly and under `tiermem run --near 16K` on both
 * fault paths (the kernel reads these strings in kernel mode: on the
 * in-context path an evicted page failed the call with EFAULT until the
 * preload library copied them, crates/tiermem-preload/src/exec.rs). */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>
extern char **environ;
static char *big;
/* Touches every page of the heap (past the strings) so that at a small
 * budget the strings' pages are evicted before the next call. */
static void churn(int i) {
    for (size_t k = 0; k < (8u << 20); k += 4096) big[k + 4000] = (char)i;
}
/* In a function of its own: vfork's child shares this frame. `how`: 0
 * execve, 1 execve after closing every descriptor above 2, 2-4 the same
 * with execl, execle, execlp (C variadic functions the preload library
 * must export: it did not, and a vfork child's execl read evicted strings). */
static __attribute__((noinline)) pid_t vfork_exec(int how, char *path, char **av, char **ev) {
    pid_t p = vfork();
    if (p == 0) {
        if (how > 0) syscall(SYS_close_range, 3u, ~0u, 0u);
        if (how <= 1) execve(path, av, ev);
        if (how == 2) execl(path, av[0], av[1], av[2], (char *)NULL);
        if (how == 3) execle(path, av[0], av[1], av[2], (char *)NULL, ev);
        if (how == 4) execlp(av[0], av[0], av[1], av[2], (char *)NULL);
        _exit(98);
    }
    return p;
}
static int status_ok(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }
int main(void) {
    big = malloc(8 << 20);
    if (!big) return 2;
    char *path = big + 4096 * 100, *file = big + 4096 * 300, *a1 = big + 4096 * 700, *a2 = big + 4096 * 1500;
    char *cmd = big + 4096 * 1700, *envs = big + 4096 * 1800;
    strcpy(path, "/bin/sh"); strcpy(file, "sh"); strcpy(a1, "-c");
    strcpy(cmd, "test \"$TM_X\" = yes && exit 0; exit 3");
    strcpy(a2, cmd); strcpy(envs, "TM_X=yes");
    char **av = (char **)(big + 4096 * 1900), **ev = (char **)(big + 4096 * 2000);
    av[0] = file; av[1] = a1; av[2] = a2; av[3] = NULL;
    ev[0] = envs; ev[1] = NULL;
    putenv(envs); /* environ now holds a tiered string */
    const char *names[] = {"execv",  "execve", "execvp", "execl",         "posix_spawn",
                           "posix_spawnp", "system", "popen",  "vfork+execve", "vfork+close+execve",
                           "vfork+close+execl", "vfork+close+execle", "vfork+close+execlp"};
    int fails = 0;
    for (int w = 0; w < 13; w++) {
        int ok = 0;
        for (int i = 0; i < 10; i++) {
            churn(i);
            int st = -1;
            pid_t p;
            if (w < 4) {
                p = fork();
                if (p == 0) {
                    if (w == 0) execv(path, av);
                    if (w == 1) execve(path, av, ev);
                    if (w == 2) execvp(file, av);
                    if (w == 3) execl(path, file, a1, a2, (char *)NULL);
                    _exit(98);
                }
                waitpid(p, &st, 0);
            } else if (w < 6) {
                int r = w == 4 ? posix_spawn(&p, path, NULL, NULL, av, ev) : posix_spawnp(&p, file, NULL, NULL, av, environ);
                if (r == 0) waitpid(p, &st, 0);
            } else if (w == 6) {
                st = system(cmd);
            } else if (w == 7) {
                FILE *f = popen(cmd, "r");
                st = f ? pclose(f) : -1;
            } else {
                p = vfork_exec(w - 8, path, av, ev);
                if (p > 0) waitpid(p, &st, 0);
            }
            ok += status_ok(st);
        }
        printf("%s %d/10\n", names[w], ok);
        fails += ok != 10;
    }
    return fails ? 1 : 0;
}
