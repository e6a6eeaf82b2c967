/* An MPI progress thread for programs that have none (ArgoDSM), for the
 * comparison in docs/svm.md: LD_PRELOAD this library and MPI_Init_thread
 * starts a thread that calls MPI_Iprobe every PROGRESS_SHIM_US microseconds
 * (default 50), as tiermem's SVM does on multi-node jobs, so that one-sided
 * operations targeting a computing rank complete (Open MPI's osc/ucx over
 * TCP emulates them with active messages the target must progress).
 * MPI_Finalize stops it first. Through the MPI profiling interface (PMPI);
 * needs MPI_THREAD_MULTIPLE (ArgoDSM asks for it). */
#define _GNU_SOURCE
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

static pthread_t thread;
static atomic_int stop, started;
static MPI_Comm comm;

static void *progress(void *arg) {
    (void)arg;
    const char *e = getenv("PROGRESS_SHIM_US");
    long us = e ? atol(e) : 50;
    struct timespec ts = {0, (us > 0 ? us : 50) * 1000};
    while (!atomic_load(&stop)) {
        int flag;
        PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS && *provided == MPI_THREAD_MULTIPLE) {
        PMPI_Comm_dup(MPI_COMM_WORLD, &comm);
        if (pthread_create(&thread, NULL, progress, NULL) == 0) atomic_store(&started, 1);
    }
    return rc;
}

int MPI_Finalize(void) {
    if (atomic_load(&started)) {
        atomic_store(&stop, 1);
        pthread_join(thread, NULL);
    }
    return PMPI_Finalize();
}
