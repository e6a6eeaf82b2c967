/* Tiered memory the program makes inaccessible (mprotect PROT_NONE: a
 * reserve, guard pages inside a large block) while other memory churns.
 * tiermem reads a page to evict it, and an eviction that met such a page
 * killed the process with SIGSEGV (`tiermem run --near 1M`, both fault
 * paths), found by a new-user sweep. Checks every page's data after the
 * protection is lifted again. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BLOCK (8u << 20)
#define CHURN (16u << 20)

static int fail(const char *what) {
    fprintf(stderr, "test_protnone: FAIL: %s\n", what);
    return 1;
}

static void churn(unsigned char *c, unsigned seed) {
    for (size_t i = 0; i < CHURN; i += 256) c[i] = (unsigned char)(seed + i / 256);
}

int main(void) {
    unsigned char *c = malloc(CHURN);
    unsigned char *p = mmap(NULL, BLOCK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *g = malloc(BLOCK + 4096);
    if (!c || p == MAP_FAILED || !g) return fail("allocation");
    unsigned char *gp = (unsigned char *)(((size_t)g + 4095) & ~(size_t)4095);
    for (size_t i = 0; i < BLOCK; i++) p[i] = gp[i] = (unsigned char)(i / 4096 * 7 + 1);
    for (int round = 0; round < 3; round++) {
        /* The whole mapping, and every 16th page of the block (guards). */
        if (mprotect(p, BLOCK, PROT_NONE)) return fail("mprotect PROT_NONE");
        for (size_t off = 0; off < BLOCK; off += 16 * 4096)
            if (mprotect(gp + off, 4096, PROT_NONE)) return fail("mprotect guard");
        churn(c, (unsigned)round);
        for (size_t i = 0; i < BLOCK; i += 512)
            if (i / 4096 % 16 != 0 && gp[i] != (unsigned char)(i / 4096 * 7 + 1)) return fail("block data");
        churn(c, (unsigned)round + 100);
        if (mprotect(p, BLOCK, PROT_READ | PROT_WRITE)) return fail("mprotect RW");
        for (size_t off = 0; off < BLOCK; off += 16 * 4096)
            if (mprotect(gp + off, 4096, PROT_READ | PROT_WRITE)) return fail("mprotect guard RW");
        for (size_t i = 0; i < BLOCK; i++)
            if (p[i] != (unsigned char)(i / 4096 * 7 + 1) || gp[i] != (unsigned char)(i / 4096 * 7 + 1))
                return fail("data after the protection was lifted");
        churn(c, (unsigned)round + 200);
    }
    munmap(p, BLOCK);
    free(g);
    printf("test_protnone: ok\n");
    return 0;
}
