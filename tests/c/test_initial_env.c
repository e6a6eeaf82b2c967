/* Children started with the environment the program itself started with:
 * Go's exec.Command passes os.Environ(), read from the process's initial
 * environment, and some programs copy /proc/self/environ. tiermem's
 * preload records the program the user started in the environment as it
 * starts (TIERMEM_ROOT_PID), so such children lacked the mark and took
 * themselves for that program: each printed its own exit summary into the
 * program's output, wrote its report over the program's, and was tiered
 * without --follow-exec.
 *
 * Usage: test_initial_env (the parent: starts two children, with fork and
 * execve and with posix_spawn, each with the environment read back from
 * /proc/self/environ, and each allocating tiered memory); test_initial_env
 * child (one of them). Exit status 0 when both children ran. Whether a
 * child took itself for the program is told by tiermem run's summaries
 * and report: scripts/ctest.sh checks them. */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char **initial_environment(void) {
    static char buf[1 << 16];
    static char *env[1024];
    FILE *f = fopen("/proc/self/environ", "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    size_t k = 0;
    for (size_t i = 0; i < n && k < 1023; i += strlen(buf + i) + 1) env[k++] = buf + i;
    env[k] = NULL;
    return env;
}

static int work(void) {
    /* Over the threshold the tests use: tiered if the preload tiers it. */
    size_t len = 4u << 20;
    unsigned char *p = malloc(len);
    if (!p) return 2;
    for (size_t i = 0; i < len; i += 4096) p[i] = (unsigned char)(i >> 12 | 1);
    unsigned sum = 0;
    for (size_t i = 0; i < len; i += 4096) sum += p[i];
    free(p);
    return sum == 0 ? 3 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) return work();
    if (work()) return 2;
    char **env = initial_environment();
    if (!env) return 2;
    char *child[] = {argv[0], "child", NULL};
    int failed = 0;
    pid_t pid = fork();
    if (pid == 0) {
        execve("/proc/self/exe", child, env);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("test_initial_env: fork and execve: status %#x\n", status);
        failed = 1;
    }
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, child, env) != 0 || waitpid(pid, &status, 0) != pid ||
        !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("test_initial_env: posix_spawn: status %#x\n", status);
        failed = 1;
    }
    printf("test_initial_env: two children ran with the initial environment\n");
    return failed;
}
