/* examples/file_vecadd.c -- vecadd with its vectors in files. Plain fread loads the inputs
 * straight into shared memory, a kernel adds them, plain fwrite saves the result straight from
 * shared memory. ADSM_INTERPOSE_IO is what makes the unchanged stdio calls work on shared
 * objects (read(2) would otherwise fail with EFAULT on a page adsm keeps protected).
 * Exits non-zero if anything is wrong.
 *
 *   cc -std=c11 -I. examples/file_vecadd.c -pthread -ldl && ./a.out */
#define ADSM_INTERPOSE_IO
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* One body for every backend: the CPU runs it on emu and host; on cuda NVRTC compiles the same
 * text at the first launch. */
ADSM_KERNEL_DEF(vecadd, (ADSM_OUT(float, c), ADSM_IN(float, a), ADSM_IN(float, b), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = a[i] + b[i];
    }
});

/* n floats to or from a file, with plain stdio; 0 on success */
static int save(const char *path, const float *v, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(v, sizeof *v, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    return ok ? 0 : -1;
}

static int load(const char *path, float *v, size_t n) {
    FILE *f = fopen(path, "rb");
    int ok = f && fread(v, sizeof *v, n, f) == n;
    if (f) fclose(f);
    return ok ? 0 : -1;
}

int main(void) {
    const size_t n = (size_t)1 << 20;
    const char *tmp = getenv("TMPDIR");
    char dir[512], pa[600], pb[600], pc[600];
    snprintf(dir, sizeof dir, "%s/file_vecadd_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(pa, sizeof pa, "%s/a.bin", dir);
    snprintf(pb, sizeof pb, "%s/b.bin", dir);
    snprintf(pc, sizeof pc, "%s/c.bin", dir);

    /* the input files, written from an ordinary buffer */
    float *plain = malloc(n * sizeof *plain);
    int failed = !plain;
    for (size_t i = 0; !failed && i < n; i++) plain[i] = (float)i;
    failed = failed || save(pa, plain, n) != 0;
    for (size_t i = 0; !failed && i < n; i++) plain[i] = 2.0f * (float)i;
    failed = failed || save(pb, plain, n) != 0;

    /* files -> shared memory -> kernel -> file, with no staging copies */
    float *a = adsm_alloc(n * sizeof *a), *b = adsm_alloc(n * sizeof *b), *c = adsm_alloc(n * sizeof *c);
    failed = failed || !a || !b || !c || load(pa, a, n) != 0 || load(pb, b, n) != 0;
    adsm_result r = failed ? ADSM_OK : ADSM_CALL(vecadd, adsm_grid_1d((uint32_t)((n + 255) / 256), 256), c, a, b, n);
    if (r == ADSM_OK && !failed) r = adsm_sync();
    failed = failed || r != ADSM_OK || save(pc, c, n) != 0;

    /* check the result file with an ordinary buffer */
    size_t wrong = n;
    if (!failed && load(pc, plain, n) == 0) {
        wrong = 0;
        for (size_t i = 0; i < n; i++) wrong += plain[i] != 3.0f * (float)i;
    }
    printf("file_vecadd: %zu elements, files -> %s/%s -> file, %zu wrong%s%s\n", n, adsm_backend_name(),
           adsm_protocol_name(), wrong, r != ADSM_OK ? "; " : "", r != ADSM_OK ? adsm_last_error() : "");

    unlink(pa);
    unlink(pb);
    unlink(pc);
    rmdir(dir);
    adsm_free(a);
    adsm_free(b);
    adsm_free(c);
    free(plain);
    adsm_shutdown();
    return failed || wrong != 0;
}
