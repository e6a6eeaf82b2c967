/* execl, execle and execlp for the preload library (src/exec.rs): C
 * variadic functions, which stable Rust cannot define. Each gathers its
 * arguments into a vector and calls the Rust interposer of execve or
 * execvpe, which copies the strings out of tiered memory. The vector lives
 * on this stack, which is never tiered. The exported execl, execle and
 * execlp are Rust trampolines that jump here (src/execl.rs): symbols of
 * a C object are not exported from the Rust cdylib. */
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>

extern char **environ;
int tiermem_preload_execve(const char *path, char *const argv[], char *const envp[]);
int tiermem_preload_execvpe(const char *file, char *const argv[], char *const envp[]);

/* Arguments after the first, up to the null; Linux takes at most
 * ARG_MAX / sizeof(char *) of them anyway. */
#define MAX_ARGS 65536

static int count_args(const char *first, va_list ap) {
    int n = 1;
    if (first != NULL)
        while (va_arg(ap, char *) != NULL && n < MAX_ARGS) n++;
    return n + 1;
}

/* Gathers `arg` and the arguments after it, up to the null, then (with_env)
 * the environment vector, and execs `path` (searched on PATH where
 * `search`). */
static int gather_and_exec(int search, int with_env, const char *path, const char *arg, va_list ap) {
    va_list counting;
    va_copy(counting, ap);
    int size = count_args(arg, counting);
    va_end(counting);
    char *argv[size];
    argv[0] = (char *)arg;
    int n = 1;
    while (argv[n - 1] != NULL) {
        if (n == MAX_ARGS) {
            errno = E2BIG;
            return -1;
        }
        argv[n] = va_arg(ap, char *);
        n++;
    }
    char *const *envp = with_env ? va_arg(ap, char *const *) : environ;
    return search ? tiermem_preload_execvpe(path, argv, envp) : tiermem_preload_execve(path, argv, envp);
}

int tiermem_c_execl(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    int r = gather_and_exec(0, 0, path, arg, ap);
    va_end(ap);
    return r;
}

int tiermem_c_execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    int r = gather_and_exec(0, 1, path, arg, ap);
    va_end(ap);
    return r;
}

int tiermem_c_execlp(const char *file, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    int r = gather_and_exec(1, 0, file, arg, ap);
    va_end(ap);
    return r;
}
