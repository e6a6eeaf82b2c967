/* An ordinary MPI program, unaware of tiermem: every rank allocates three
 * 16 MiB arrays, fills one with a pattern of its own, and exchanges it with
 * its partner in rounds of large messages (Open MPI's shared-memory
 * transport copies those between the processes with process_vm_readv or
 * process_vm_writev: kernel accesses to pages that may be evicted), then
 * checks every received word and agrees on a global checksum.
 * Run: mpirun -np 2 tiermem run --near 8M -- ./mpi_exchange
 * Exits 0 when every check passes. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WORDS (2u << 20) /* 16 MiB of uint64_t */
#define ROUNDS 4

static uint64_t word(int rank, int round, size_t i)
{
    return ((uint64_t)rank << 56) ^ ((uint64_t)round << 48) ^ (i * 0x9e3779b97f4a7c15ull);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t *mine = malloc(WORDS * sizeof *mine);
    uint64_t *theirs = malloc(WORDS * sizeof *theirs);
    uint64_t *spare = calloc(WORDS, sizeof *spare);
    if (!mine || !theirs || !spare) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int partner = rank ^ 1;
    long bad = 0;
    uint64_t sum = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t i = 0; i < WORDS; i++)
            mine[i] = word(rank, round, i);
        /* Touch the spare array so that the other two are evicted between
         * rounds at a small near budget. */
        for (size_t i = 0; i < WORDS; i += 512)
            spare[i] += (uint64_t)round;
        if (partner < size) {
            /* 4 MiB messages in 4 pieces. */
            size_t piece = WORDS / 4;
            for (int p = 0; p < 4; p++)
                MPI_Sendrecv(mine + p * piece, (int)piece, MPI_UINT64_T, partner, p, theirs + p * piece,
                             (int)piece, MPI_UINT64_T, partner, p, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < WORDS; i++) {
                if (theirs[i] != word(partner, round, i)) {
                    if (bad < 5)
                        fprintf(stderr, "rank %d round %d: word %zu is %#llx, expected %#llx\n", rank, round, i,
                                (unsigned long long)theirs[i], (unsigned long long)word(partner, round, i));
                    bad++;
                }
                sum += theirs[i];
            }
        }
    }
    for (size_t i = 0; i < WORDS; i += 512)
        if (spare[i] != (uint64_t)(ROUNDS * (ROUNDS - 1) / 2))
            bad++;
    long total_bad = 0;
    uint64_t total = 0;
    MPI_Allreduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&sum, &total, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
    /* Recompute the expected checksum without the network. */
    uint64_t expect = 0;
    for (int r = 0; r < size; r++) {
        int q = r ^ 1;
        uint64_t s = 0;
        if (q < size)
            for (int round = 0; round < ROUNDS; round++)
                for (size_t i = 0; i < WORDS; i++)
                    s += word(q, round, i);
        expect ^= s;
    }
    if (rank == 0)
        printf("mpi_exchange: %d ranks, %d rounds of %zu MiB, %ld bad words, checksum %s\n", size, ROUNDS,
               WORDS * sizeof(uint64_t) >> 20, total_bad, total == expect ? "ok" : "WRONG");
    free(mine);
    free(theirs);
    free(spare);
    int ok = total_bad == 0 && total == expect;
    MPI_Finalize();
    return ok ? 0 : 1;
}
