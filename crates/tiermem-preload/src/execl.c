/* execl, execle and execlp for the preload library (src/exec.rs): C
 * variadic functions, which stable Rust cannot define. Each gathers its
 * arguments into a vector and calls the Rust interposer of execve or
 * execvpe, which copies the strings out of tiered memory. The vector lives
 * on this stack, which is never tiered. */
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>

extern char **environ;
int tiermem_preload_execve(const char *path, char *const argv[], char *const envp[]);
int tiermem_preload_execvpe(const char *file, char *const argv[], char *const envp[]);

/* Arguments after the first, up to the null; Linux takes at most
 * ARG_MAX / sizeof(char *) of them anyway. */
#define MAX_ARGS 65536

#define GATHER(first, ap, argv, n)                       \
    do {                                                 \
        argv[0] = (char *)(first);                       \
        n = 1;                                           \
        while (argv[n - 1] != NULL) {                    \
            if (n == MAX_ARGS) {                         \
                va_end(ap);                              \
                errno = E2BIG;                           \
                return -1;                               \
            }                                            \
            argv[n] = va_arg(ap, char *);                \
            n++;                                         \
        }                                                \
    } while (0)

static int count_args(const char *first, va_list ap) {
    int n = 1;
    if (first != NULL)
        while (va_arg(ap, char *) != NULL && n < MAX_ARGS) n++;
    return n + 1;
}

int execl(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    int size = count_args(arg, ap);
    va_end(ap);
    char *argv[size];
    int n;
    va_start(ap, arg);
    GATHER(arg, ap, argv, n);
    va_end(ap);
    (void)n;
    return tiermem_preload_execve(path, argv, environ);
}

int execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    int size = count_args(arg, ap);
    va_end(ap);
    char *argv[size];
    int n;
    va_start(ap, arg);
    GATHER(arg, ap, argv, n);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    (void)n;
    return tiermem_preload_execve(path, argv, envp);
}

int execlp(const char *file, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    int size = count_args(arg, ap);
    va_end(ap);
    char *argv[size];
    int n;
    va_start(ap, arg);
    GATHER(arg, ap, argv, n);
    va_end(ap);
    (void)n;
    return tiermem_preload_execvpe(file, argv, environ);
}
