/* A program with its own getenv that reads its own static arrays, as bash
 * does (its getenv looks names up in its shell variables, kept in .bss),
 * and that names `environ` (the C library's copy then lives in the
 * program's .bss). tiermem takes large static arrays over in its
 * constructor, and reads its settings meanwhile: through the program's
 * getenv, that read touched the range being taken over, where no fault
 * could be served (`tiermem run --threshold 32K -- bash -c 'echo hi'`:
 * SIGBUS in-context, a hang on the handler-thread path).
 *
 * It defines setenv too, keeping what it is given to itself (bash's,
 * called before bash's main, lost TIERMEM_CHILDREN_LOG: bash's children
 * did not report to their root).
 *
 * Run under `tiermem run --near 16K --threshold 256K`: checks that the
 * static arrays keep their initial values and their data through churn,
 * that getenv (its own) still answers, and that the variables tiermem sets
 * for the programs it runs are in the environment. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

#define BSS_BYTES (4u << 20)
#define DATA_BYTES (1u << 20)
/* Page-aligned, so that .bss starts on a page and `environ`'s copy shares
 * a page with the array's range. */
static unsigned char bss_table[BSS_BYTES] __attribute__((aligned(4096)));
static unsigned char data_table[DATA_BYTES] = {7, 7, 7};
static volatile unsigned long lookups;

/* Reads several pages of both arrays, then the environment. */
char *getenv(const char *name) {
    unsigned long sum = 0;
    for (size_t i = 0; i < BSS_BYTES; i += BSS_BYTES / 16) sum += bss_table[i];
    for (size_t i = 0; i < DATA_BYTES; i += DATA_BYTES / 8) sum += data_table[i];
    lookups += sum + 1;
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static volatile unsigned long own_sets;

/* Keeps nothing: the environment is not changed through it. */
int setenv(const char *name, const char *value, int overwrite) {
    (void)name;
    (void)value;
    (void)overwrite;
    own_sets++;
    return 0;
}

static int in_environ(const char *prefix) {
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, prefix, strlen(prefix))) return 1;
    return 0;
}

int main(void) {
    if (in_environ("TIERMEM_NEAR=") && !in_environ("TIERMEM_CHILDREN_LOG=")) {
        fprintf(stderr, "test_own_getenv: FAIL: TIERMEM_CHILDREN_LOG was set through the program's setenv\n");
        return 1;
    }
    if (data_table[0] != 7 || data_table[2] != 7 || data_table[3] != 0) {
        fprintf(stderr, "test_own_getenv: FAIL: .data lost its initial values\n");
        return 1;
    }
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < BSS_BYTES; i++) bss_table[i] = (unsigned char)(i * 7 + round);
        for (size_t i = 3; i < DATA_BYTES; i++) data_table[i] = (unsigned char)(i * 13 + round);
        for (size_t i = 0; i < BSS_BYTES; i++)
            if (bss_table[i] != (unsigned char)(i * 7 + round)) {
                fprintf(stderr, "test_own_getenv: FAIL: .bss byte %zu\n", i);
                return 1;
            }
        for (size_t i = 3; i < DATA_BYTES; i++)
            if (data_table[i] != (unsigned char)(i * 13 + round)) {
                fprintf(stderr, "test_own_getenv: FAIL: .data byte %zu\n", i);
                return 1;
            }
    }
    if (!getenv("PATH")) {
        fprintf(stderr, "test_own_getenv: FAIL: getenv(PATH)\n");
        return 1;
    }
    printf("test_own_getenv: ok (%lu lookups)\n", lookups ? 1ul : 0ul);
    return 0;
}
