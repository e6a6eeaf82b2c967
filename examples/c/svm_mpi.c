/* tiermem's shared virtual memory inside an MPI job: the same tm_svm_* calls
 * as a forked team, one SVM process per rank, on one node or many.
 *
 *   cargo build --release -p tiermem-capi --features mpi
 *   mpicc -std=c11 -O2 -Iinclude examples/c/svm_mpi.c -Ltarget/release -ltiermem -o svm_mpi
 *   LD_LIBRARY_PATH=target/release mpirun -np 4 --mca osc ucx ./svm_mpi
 *
 * (as root, add --allow-run-as-root; on 2 CPUs, --oversubscribe). Each rank
 * adds to a counter under a lock and fills its share of an array in DSM
 * mode; after a barrier every rank checks everything. The program
 * initialises MPI itself (tiermem would otherwise), with MPI_THREAD_MULTIPLE
 * as tiermem needs. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <tiermem.h>

#define WORDS (64 * 1024)

static int work(void *arg) {
    (void)arg;
    int me = tm_svm_rank(), n = tm_svm_procs();
    long *counter = tm_svm_malloc(4096);     /* same address in every rank */
    long *a = tm_svm_malloc(WORDS * sizeof(long));
    if (!counter || !a) return 1;
    tm_svm_set_mode(a, WORDS * sizeof(long), TM_SVM_DSM);
    if (tm_svm_lock(0) != TM_OK) return 1;
    counter[0] += 1;
    if (tm_svm_unlock(0) != TM_OK) return 1;
    for (long i = me; i < WORDS; i += n) a[i] = i * 3 + 1; /* false sharing on every page */
    if (tm_svm_barrier() != TM_OK) return 1;
    for (long i = 0; i < WORDS; i++)
        if (a[i] != i * 3 + 1) {
            fprintf(stderr, "rank %d: a[%ld] = %ld\n", me, i, a[i]);
            return 1;
        }
    if (counter[0] != n) {
        fprintf(stderr, "rank %d: counter %ld, want %d\n", me, counter[0], n);
        return 1;
    }
    if (me == 0) printf("svm_mpi: %d ranks on %d nodes: counter %ld, %d words checked\n", n, tm_svm_nodes(), counter[0], WORDS);
    return 0;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    tm_svm *s;
    int rc = tm_svm_create(64ul << 20, 0, 0, &s); /* 0: every rank */
    if (rc != TM_OK) {
        fprintf(stderr, "tm_svm_create: %s\n", tm_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    rc = tm_svm_run(s, work, NULL);
    if (rc != TM_OK) fprintf(stderr, "tm_svm_run: %s\n", tm_last_error());
    struct tm_svm_stats st;
    if (rc == TM_OK && tm_svm_stats(s, &st) == TM_OK) {
        int me;
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        if (me == 0)
            printf("svm_mpi: %llu fetches, %llu diffs, %llu diff bytes, %llu notices\n",
                   (unsigned long long)st.fetches, (unsigned long long)st.diffs,
                   (unsigned long long)st.diff_bytes, (unsigned long long)st.notices_sent);
    }
    tm_svm_destroy(s);
    MPI_Finalize();
    return rc == TM_OK ? 0 : 1;
}
