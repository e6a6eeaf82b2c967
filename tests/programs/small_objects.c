/* An allocation-heavy program: millions of small objects (16 to 1024
 * bytes) allocated, linked, freed and reallocated in random order, with a
 * few large arrays beside them, checked at the end. It measures what
 * tiermem run's interposition costs a program that mostly calls malloc
 * (every small request passes tiermem's malloc on its way to libc).
 * Usage: small_objects [ROUNDS]; exits 0 when the check passes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS (1u << 18)

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    unsigned char **slot = calloc(SLOTS, sizeof *slot);
    size_t *len = calloc(SLOTS, sizeof *len);
    uint64_t seed = 88172645463325252ull, sum = 0, expect = 0;
    if (!slot || !len)
        return 2;
    for (int r = 0; r < rounds; r++) {
        for (unsigned i = 0; i < SLOTS; i++) {
            uint64_t x = next(&seed);
            unsigned k = (unsigned)(x % SLOTS);
            size_t n = 16 + (size_t)(x >> 32) % 1009;
            if (slot[k]) {
                for (size_t j = 0; j < len[k]; j++)
                    sum += slot[k][j];
                if (x & 1) {
                    unsigned char *p = realloc(slot[k], n);
                    if (!p)
                        return 2;
                    if (n > len[k])
                        memset(p + len[k], (int)(k & 0xff), n - len[k]);
                    slot[k] = p;
                    len[k] = n;
                    continue;
                }
                free(slot[k]);
            }
            slot[k] = malloc(n);
            if (!slot[k])
                return 2;
            memset(slot[k], (int)(k & 0xff), n);
            len[k] = n;
        }
        /* A large temporary array each round (served by tiermem). */
        uint64_t *big = malloc(8u << 20);
        if (!big)
            return 2;
        for (size_t i = 0; i < (1u << 20); i++)
            big[i] = i * (uint64_t)r;
        sum += big[(1u << 20) - 1];
        free(big);
    }
    /* Every live byte equals its slot's fill byte. */
    long bad = 0;
    for (unsigned k = 0; k < SLOTS; k++) {
        for (size_t j = 0; slot[k] && j < len[k]; j++)
            bad += slot[k][j] != (unsigned char)(k & 0xff);
        free(slot[k]);
    }
    for (int r = 0; r < rounds; r++)
        expect += ((1u << 20) - 1) * (uint64_t)r;
    printf("small_objects: %d rounds of %u slots, %ld bad bytes, checksum %llu\n", rounds, SLOTS, bad,
           (unsigned long long)(sum - expect));
    free(slot);
    free(len);
    return bad == 0 ? 0 : 1;
}
