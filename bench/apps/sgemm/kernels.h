/* bench/apps/sgemm/kernels.h -- sgemm (Parboil): the dense product C = alpha * A * B + beta * C in
 * single precision, A given column-major and B given transposed (B^T column-major), as Parboil's
 * 'N', 'T' call does; one kernel call, each thread computing one element of C. Like Parboil,
 * alpha = 1 and beta = 0 and C is never copied to the device: with beta 0 the kernel does not read
 * C (the BLAS convention), so an uninitialised device C is harmless.
 *
 * Shared by explicit.c and adsm.c: the kernel (single-source: one body), the sizes, the input
 * generator, the reference and the check. Inputs: a.bin (m x k floats, column-major) and bt.bin
 * (n x k floats, column-major: B transposed). Reference: c.ref (m x n floats, column-major,
 * computed in double). Tolerance: Parboil's compare-output for sgemm, an absolute difference
 * below 0.01 or a relative one below 1%. */
#ifndef BENCH_APPS_SGEMM_KERNELS_H
#define BENCH_APPS_SGEMM_KERNELS_H

#include "bench/apps/common.h"

/* A 2D grid: x runs down the m rows of C (fastest), y across its n columns. */
ADSM_KERNEL_DEF(sgemm_nt, (ADSM_INOUT(float, c), ADSM_IN(float, a), ADSM_IN(float, bt), ADSM_VALUE(int, m),
                           ADSM_VALUE(int, n), ADSM_VALUE(int, k), ADSM_VALUE(float, alpha),
                           ADSM_VALUE(float, beta)), g, {
    const size_t width = (size_t)g.grid.x * g.block.x;
    ADSM_FOR_EACH_THREAD(g, i) {
        size_t row = i % width, col = i / width;
        if (row >= (size_t)m || col >= (size_t)n) continue;
        float acc = 0.0f;
        for (int l = 0; l < k; l++) acc += a[row + (size_t)l * m] * bt[col + (size_t)l * n];
        size_t at = row + col * (size_t)m;
        c[at] = beta == 0.0f ? alpha * acc : alpha * acc + beta * c[at];
    }
});

/* Compiles the single-source kernels now on cuda (NVRTC), not inside the first timed call. */
static inline void sgemm_load_kernels(void) {
    if (ADSM_PREPARE(sgemm_nt) != ADSM_OK)
        app_die(adsm_last_error());
}

typedef struct sgemm_size {
    int m, n, k;
    float alpha, beta;
} sgemm_size;

/* Quick: 512 x 512 x 512. Full: the shape of Parboil's medium data set (A 1024 x 992, B 992 x 1056). */
static inline sgemm_size sgemm_size_of(const app_run *r) {
    sgemm_size s = {512, 512, 512, 1.0f, 0.0f};
    if (r->full) s = (sgemm_size){1024, 1056, 992, 1.0f, 0.0f};
    return s;
}

static inline adsm_grid sgemm_grid(sgemm_size s) {
    return adsm_grid_3d(adsm_dim3_make((uint32_t)(s.m + 15) / 16, (uint32_t)(s.n + 15) / 16, 1),
                        adsm_dim3_make(16, 16, 1));
}

/* Entries uniform in [-1, 1); the reference in double (beta is 0: C starts undefined). */
static inline void sgemm_generate(const app_run *r) {
    sgemm_size s = sgemm_size_of(r);
    size_t na = (size_t)s.m * s.k, nb = (size_t)s.n * s.k, nc = (size_t)s.m * s.n;
    float *a = malloc(na * sizeof *a), *bt = malloc(nb * sizeof *bt), *ref = malloc(nc * sizeof *ref);
    double *acc = calloc((size_t)s.m, sizeof *acc);
    app_rng g = {0x5be3a1c2d4e6f708ull};
    for (size_t i = 0; i < na; i++) a[i] = (float)(app_rng_unit(&g) * 2.0 - 1.0);
    for (size_t i = 0; i < nb; i++) bt[i] = (float)(app_rng_unit(&g) * 2.0 - 1.0);
    for (int col = 0; col < s.n; col++) {
        memset(acc, 0, (size_t)s.m * sizeof *acc);
        for (int l = 0; l < s.k; l++) {
            double b = bt[col + (size_t)l * s.n];
            for (int row = 0; row < s.m; row++) acc[row] += a[row + (size_t)l * s.m] * b;
        }
        for (int row = 0; row < s.m; row++) ref[row + (size_t)col * s.m] = (float)(s.alpha * acc[row]);
    }
    app_write_file(r, "a.bin", a, na * sizeof *a);
    app_write_file(r, "bt.bin", bt, nb * sizeof *bt);
    app_write_file(r, "c.ref", ref, nc * sizeof *ref);
    free(a);
    free(bt);
    free(ref);
    free(acc);
}

static inline int sgemm_check(const app_run *r, const float *c) {
    sgemm_size s = sgemm_size_of(r);
    size_t n = (size_t)s.m * s.n;
    float *ref = app_read_plain(r, "c.ref", n * sizeof *ref);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !app_close(c[i], ref[i], 0.01);
    free(ref);
    if (bad) fprintf(stderr, "sgemm: %zu of %zu elements of C differ from the reference\n", bad, n);
    return bad == 0;
}

#endif /* BENCH_APPS_SGEMM_KERNELS_H */
