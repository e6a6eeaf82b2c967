/* Allocates MiB megabytes (argv[1], default 48), writes them twice and
 * reads them back: a small program whose heap a near budget below that
 * binds (tests/mpi/run.sh runs it under mpirun and tiermem run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 48) << 20;
    unsigned char *p = malloc(n);
    if (!p) return 1;
    for (int round = 1; round <= 2; round++) memset(p, round, n);
    unsigned long sum = 0;
    for (size_t i = 0; i < n; i += 4096) sum += p[i];
    free(p);
    if (sum != 2 * (n / 4096)) {
        fprintf(stderr, "alloc: wrong sum %lu\n", sum);
        return 1;
    }
    return 0;
}
