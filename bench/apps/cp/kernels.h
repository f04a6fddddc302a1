/* bench/apps/cp/kernels.h -- cp (Parboil): the Coulombic potential of a set of charged atoms on a
 * 2D lattice slice, computed in chunks of atoms that each add to the lattice (one kernel call per
 * chunk, as the original does to fit its atoms in constant memory).
 *
 * Shared by explicit.c and adsm.c: the kernel (single-source: one body), the sizes, the input
 * generator, the reference and the check. Inputs: atoms.bin (natoms x {x, y, z, q} floats).
 * Reference: energy.ref (nx x ny floats, computed in double). Tolerance: 1e-3 relative. */
#ifndef BENCH_APPS_CP_KERNELS_H
#define BENCH_APPS_CP_KERNELS_H

#include "bench/apps/common.h"

ADSM_KERNEL_DEF(cp_slice, (ADSM_INOUT(float, energy), ADSM_IN(float, atoms), ADSM_VALUE(int, natoms),
                           ADSM_VALUE(int, nx), ADSM_VALUE(int, ny), ADSM_VALUE(float, spacing),
                           ADSM_VALUE(float, z)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= (size_t)nx * (size_t)ny) continue;
        float x = (float)(i % (size_t)nx) * spacing, y = (float)(i / (size_t)nx) * spacing, e = 0.0f;
        for (int a = 0; a < natoms; a++) {
            float dx = x - atoms[4 * a], dy = y - atoms[4 * a + 1], dz = z - atoms[4 * a + 2];
            e += atoms[4 * a + 3] / sqrtf(dx * dx + dy * dy + dz * dz);
        }
        energy[i] += e;
    }
});

/* Compiles the single-source kernels now on cuda (NVRTC), not inside the first timed call. */
static inline void cp_load_kernels(void) {
    if (ADSM_PREPARE(cp_slice) != ADSM_OK)
        app_die(adsm_last_error());
}

typedef struct cp_size {
    int nx, ny, natoms, chunk;
    float spacing, z;
} cp_size;

static inline cp_size cp_size_of(const app_run *r) {
    cp_size s = {256, 256, 4000, 1000, 0.1f, -1.0f};
    if (r->full) s = (cp_size){512, 512, 40000, 4000, 0.1f, -1.0f};
    return s;
}

static inline adsm_grid cp_grid(cp_size s) {
    return adsm_grid_1d((uint32_t)(((size_t)s.nx * s.ny + 127) / 128), 128);
}

/* Atoms in the box above the slice (z from 0 to 2, the slice at -1: no atom sits on a lattice
 * point), charges from -1 to 1; the reference in double. */
static inline void cp_generate(const app_run *r) {
    cp_size s = cp_size_of(r);
    float *atoms = malloc((size_t)s.natoms * 4 * sizeof *atoms);
    float *ref = malloc((size_t)s.nx * s.ny * sizeof *ref);
    app_rng g = {0x9e3779b97f4a7c15ull};
    for (int a = 0; a < s.natoms; a++) {
        atoms[4 * a] = (float)(app_rng_unit(&g) * s.nx * s.spacing);
        atoms[4 * a + 1] = (float)(app_rng_unit(&g) * s.ny * s.spacing);
        atoms[4 * a + 2] = (float)(app_rng_unit(&g) * 2.0);
        atoms[4 * a + 3] = (float)(app_rng_unit(&g) * 2.0 - 1.0);
    }
    for (size_t i = 0; i < (size_t)s.nx * s.ny; i++) {
        double x = (double)(i % (size_t)s.nx) * s.spacing, y = (double)(i / (size_t)s.nx) * s.spacing, e = 0;
        for (int a = 0; a < s.natoms; a++) {
            double dx = x - atoms[4 * a], dy = y - atoms[4 * a + 1], dz = s.z - atoms[4 * a + 2];
            e += atoms[4 * a + 3] / sqrt(dx * dx + dy * dy + dz * dz);
        }
        ref[i] = (float)e;
    }
    app_write_file(r, "atoms.bin", atoms, (size_t)s.natoms * 4 * sizeof *atoms);
    app_write_file(r, "energy.ref", ref, (size_t)s.nx * s.ny * sizeof *ref);
    free(atoms);
    free(ref);
}

static inline int cp_check(const app_run *r, const float *energy) {
    cp_size s = cp_size_of(r);
    size_t n = (size_t)s.nx * s.ny;
    float *ref = app_read_plain(r, "energy.ref", n * sizeof *ref);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !app_close(energy[i], ref[i], 1e-3);
    free(ref);
    if (bad) fprintf(stderr, "cp: %zu of %zu lattice points differ from the reference\n", bad, n);
    return bad == 0;
}

#endif /* BENCH_APPS_CP_KERNELS_H */
