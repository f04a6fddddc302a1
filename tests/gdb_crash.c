/* tests/gdb_crash.c -- a program with one real bug for tests/gdb_check.sh: it reads a kernel's
 * result (a fault adsm resolves), then reads an object after adsm_free (a fault nobody resolves).
 * The line of the bug is marked for the check. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <stdio.h>

ADSM_KERNEL(gdb_fill, ADSM_OUT(int, c), ADSM_VALUE(size_t, n));
void gdb_fill(adsm_grid g, int *c, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = (int)i;
    }
}

int main(void) {
    size_t n = 1 << 20;
    int *c = adsm_alloc(n * sizeof *c);
    if (!c || ADSM_CALL(gdb_fill, adsm_grid_1d(n / 256, 256), c, n) != ADSM_OK || adsm_sync() != ADSM_OK) {
        fprintf(stderr, "%s\n", adsm_last_error());
        return 1;
    }
    printf("resolved read: %d\n", c[7]);
    fflush(stdout);
    adsm_free(c);
    printf("%d\n", c[8]); /* THE BUG: used after adsm_free */
    return 0;
}
