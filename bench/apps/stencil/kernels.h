/* bench/apps/stencil/kernels.h -- stencil (Parboil): a 7-point Jacobi stencil on a 3D grid of
 * floats, next = c1 * (the six neighbours) - c0 * centre, with the boundary fixed, for many time
 * steps. As in Parboil, the grid goes to the device once, the second grid starts as a device-side
 * copy of the first (its boundary never changes), each step is one kernel call from one grid into
 * the other and the two pointers are swapped between calls (nothing is copied between steps), and
 * the result comes back once. Each thread of a 2D grid over (x, y) walks its column along z, as
 * Parboil's kernel does (without its shared-memory tiling and coarsening).
 *
 * Shared by explicit.c and adsm.c: the kernel (single-source: one body), the sizes, the input
 * generator, the reference and the check. Input: grid.bin (nx x ny x nz floats, x fastest).
 * Reference: grid.ref (the same shape, after all the steps, computed in double). Tolerance:
 * Parboil's compare-output for stencil, an absolute difference at most 0.001 or a relative one
 * below 0.2%. */
#ifndef BENCH_APPS_STENCIL_KERNELS_H
#define BENCH_APPS_STENCIL_KERNELS_H

#include "bench/apps/common.h"

/* A 2D grid: x fastest, then y; each interior (x, y) walks z = 1 .. nz - 2. */
ADSM_KERNEL_DEF(stencil_jacobi, (ADSM_OUT(float, anext), ADSM_IN(float, a0), ADSM_VALUE(int, nx), ADSM_VALUE(int, ny),
                                 ADSM_VALUE(int, nz), ADSM_VALUE(float, c0), ADSM_VALUE(float, c1)), g, {
    const size_t width = (size_t)g.grid.x * g.block.x, sy = (size_t)nx, sz = (size_t)nx * ny;
    ADSM_FOR_EACH_THREAD(g, i) {
        size_t x = i % width, y = i / width;
        if (x < 1 || y < 1 || x >= (size_t)nx - 1 || y >= (size_t)ny - 1) continue;
        for (size_t z = 1; z < (size_t)nz - 1; z++) {
            size_t at = z * sz + y * sy + x;
            anext[at] = (a0[at + sz] + a0[at - sz] + a0[at + sy] + a0[at - sy] + a0[at + 1] + a0[at - 1]) * c1 -
                        a0[at] * c0;
        }
    }
});

/* Compiles the single-source kernels now on cuda (NVRTC), not inside the first timed call. */
static inline void stencil_load_kernels(void) {
    if (ADSM_PREPARE(stencil_jacobi) != ADSM_OK)
        app_die(adsm_last_error());
}

typedef struct stencil_size {
    int nx, ny, nz, steps;
    float c0, c1;
} stencil_size;

/* Quick: 128 x 128 x 32 (Parboil's small data set), 100 steps. Full: 512 x 512 x 64 (Parboil's
 * default data set), 100 steps. Parboil's weights (c0 = 1/6, c1 = 1/36) take every interior point
 * within a few dozen steps to a fixed point set by the boundary alone, tiny under the absolute
 * tolerance, so a wrong step would not show in the output; c0 = -0.4 and c1 = 0.1 make the same
 * kernel a stable diffusion (0.4 + 6 x 0.1 = 1) whose output depends on every step. */
static inline stencil_size stencil_size_of(const app_run *r) {
    stencil_size s = {128, 128, 32, 100, -0.4f, 0.1f};
    if (r->full) s = (stencil_size){512, 512, 64, 100, -0.4f, 0.1f};
    return s;
}

static inline size_t stencil_points(stencil_size s) { return (size_t)s.nx * s.ny * s.nz; }

/* Parboil's launch shape without its coarsening along x: blocks of 32 x 4 threads over (x, y). */
static inline adsm_grid stencil_grid(stencil_size s) {
    return adsm_grid_3d(adsm_dim3_make((uint32_t)(s.nx + 31) / 32, (uint32_t)(s.ny + 3) / 4, 1),
                        adsm_dim3_make(32, 4, 1));
}

/* Values uniform in [-100, 100): zero mean and large, so that after the last step a point still
 * differs from its value one step earlier by more than the tolerance (a lost or stale step shows).
 * The reference runs the same steps in double. */
static inline void stencil_generate(const app_run *r) {
    stencil_size s = stencil_size_of(r);
    size_t n = stencil_points(s), sy = (size_t)s.nx, sz = (size_t)s.nx * s.ny;
    float *grid = malloc(n * sizeof *grid), *ref = malloc(n * sizeof *ref);
    double *cur = malloc(n * sizeof *cur), *next = malloc(n * sizeof *next);
    app_rng g = {0x510e527fade682d1ull};
    for (size_t i = 0; i < n; i++) grid[i] = (float)(app_rng_unit(&g) * 200.0 - 100.0);
    for (size_t i = 0; i < n; i++) cur[i] = next[i] = grid[i];
    for (int t = 0; t < s.steps; t++) {
        for (size_t z = 1; z < (size_t)s.nz - 1; z++)
            for (size_t y = 1; y < (size_t)s.ny - 1; y++)
                for (size_t x = 1; x < (size_t)s.nx - 1; x++) {
                    size_t at = z * sz + y * sy + x;
                    next[at] = (cur[at + sz] + cur[at - sz] + cur[at + sy] + cur[at - sy] + cur[at + 1] + cur[at - 1]) *
                                   (double)s.c1 -
                               cur[at] * (double)s.c0;
                }
        double *swap = cur;
        cur = next;
        next = swap;
    }
    for (size_t i = 0; i < n; i++) ref[i] = (float)cur[i];
    app_write_file(r, "grid.bin", grid, n * sizeof *grid);
    app_write_file(r, "grid.ref", ref, n * sizeof *ref);
    free(grid);
    free(ref);
    free(cur);
    free(next);
}

static inline int stencil_check(const app_run *r, const float *grid) {
    stencil_size s = stencil_size_of(r);
    size_t n = stencil_points(s), bad = 0;
    float *ref = app_read_plain(r, "grid.ref", n * sizeof *ref);
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)grid[i] - ref[i]);
        bad += !(diff <= 0.001 || diff < 0.002 * fabs(ref[i]));
    }
    free(ref);
    if (bad) fprintf(stderr, "stencil: %zu of %zu grid points differ from the reference\n", bad, n);
    return bad == 0;
}

#endif /* BENCH_APPS_STENCIL_KERNELS_H */
