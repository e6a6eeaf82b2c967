/* Counts what a program asks of MPI's one-sided operations, for the
 * explanation of ArgoDSM's times in docs/svm.md: LD_PRELOAD this library
 * and at MPI_Finalize every rank prints, on one line, its MPI_Put, MPI_Get
 * and atomic calls (with bytes), its MPI_Win_lock/MPI_Win_unlock pairs
 * and MPI_Win_flush calls, and the wall time spent inside each kind.
 * Through the MPI profiling interface (PMPI): nothing is changed. The
 * counters are atomics: ArgoDSM calls MPI from several threads. */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

enum { PUT, GET, ATOMIC, LOCK, UNLOCK, FLUSH, KINDS };
static const char *names[KINDS] = {"put", "get", "atomic", "lock", "unlock", "flush"};
static atomic_ulong calls[KINDS], bytes[KINDS], nanos[KINDS];

static unsigned long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long)ts.tv_sec * 1000000000ul + (unsigned long)ts.tv_nsec;
}

static void count(int kind, unsigned long t0, unsigned long n) {
    atomic_fetch_add(&calls[kind], 1);
    atomic_fetch_add(&bytes[kind], n);
    atomic_fetch_add(&nanos[kind], now_ns() - t0);
}

static unsigned long size_of(int n, MPI_Datatype t) {
    int s = 0;
    PMPI_Type_size(t, &s);
    return (unsigned long)n * (unsigned long)s;
}

int MPI_Put(const void *o, int oc, MPI_Datatype ot, int r, MPI_Aint d, int tc, MPI_Datatype tt, MPI_Win w) {
    unsigned long t0 = now_ns();
    int rc = PMPI_Put(o, oc, ot, r, d, tc, tt, w);
    count(PUT, t0, size_of(oc, ot));
    return rc;
}

int MPI_Get(void *o, int oc, MPI_Datatype ot, int r, MPI_Aint d, int tc, MPI_Datatype tt, MPI_Win w) {
    unsigned long t0 = now_ns();
    int rc = PMPI_Get(o, oc, ot, r, d, tc, tt, w);
    count(GET, t0, size_of(oc, ot));
    return rc;
}

int MPI_Fetch_and_op(const void *o, void *res, MPI_Datatype t, int r, MPI_Aint d, MPI_Op op, MPI_Win w) {
    unsigned long t0 = now_ns();
    int rc = PMPI_Fetch_and_op(o, res, t, r, d, op, w);
    count(ATOMIC, t0, size_of(1, t));
    return rc;
}

int MPI_Compare_and_swap(const void *o, const void *c, void *res, MPI_Datatype t, int r, MPI_Aint d, MPI_Win w) {
    unsigned long t0 = now_ns();
    int rc = PMPI_Compare_and_swap(o, c, res, t, r, d, w);
    count(ATOMIC, t0, size_of(1, t));
    return rc;
}

int MPI_Win_lock(int type, int r, int assert, MPI_Win w) {
    unsigned long t0 = now_ns();
    int rc = PMPI_Win_lock(type, r, assert, w);
    count(LOCK, t0, 0);
    return rc;
}

int MPI_Win_unlock(int r, MPI_Win w) {
    unsigned long t0 = now_ns();
    int rc = PMPI_Win_unlock(r, w);
    count(UNLOCK, t0, 0);
    return rc;
}

int MPI_Win_flush(int r, MPI_Win w) {
    unsigned long t0 = now_ns();
    int rc = PMPI_Win_flush(r, w);
    count(FLUSH, t0, 0);
    return rc;
}

int MPI_Finalize(void) {
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char line[1024];
    int at = snprintf(line, sizeof line, "[count_shim rank %d]", rank);
    for (int k = 0; k < KINDS && at < (int)sizeof line; k++)
        at += snprintf(line + at, sizeof line - at, " %s %lu calls %lu B %.3f s;", names[k],
                       atomic_load(&calls[k]), atomic_load(&bytes[k]), atomic_load(&nanos[k]) / 1e9);
    fprintf(stderr, "%s\n", line);
    return PMPI_Finalize();
}
