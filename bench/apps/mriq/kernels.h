/* bench/apps/mriq/kernels.h -- mri-q (Parboil): the Q matrix of a non-Cartesian MRI
 * reconstruction. A first kernel computes |phi|^2 for every k-space sample; the CPU packs each
 * sample's (kx, ky, kz, |phi|^2) into one table; a second kernel then adds, for every voxel x,
 * sum_k |phi_k|^2 * exp(i 2 pi k.x) to (Qr, Qi), one call per chunk of samples (the original
 * copies each chunk to constant memory before its call).
 *
 * Shared by explicit.c and adsm.c: the kernels (single-source: one body each), the sizes, the input
 * generator, the reference and the check. Inputs: input.bin (kx, ky, kz, phiR, phiI: numk floats
 * each, then x, y, z: numx floats each). Output: q.out (Qr then Qi, numx floats each). Reference:
 * q.ref (same layout, computed in double). Tolerance: Parboil's mri-q compare tool, a value
 * matches when it is within 0.2% of the reference or within 1e-4 of the largest reference
 * magnitude. */
#ifndef BENCH_APPS_MRIQ_KERNELS_H
#define BENCH_APPS_MRIQ_KERNELS_H

#include "bench/apps/common.h"

#define MRIQ_PI2 6.2831853071795864769

ADSM_KERNEL_DEF(mriq_phimag, (ADSM_OUT(float, phimag), ADSM_IN(float, phir), ADSM_IN(float, phii),
                              ADSM_VALUE(int, numk)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= (size_t)numk) continue;
        phimag[i] = phir[i] * phir[i] + phii[i] * phii[i];
    }
});

/* kvals: count samples of {kx, ky, kz, |phi|^2}. */
ADSM_KERNEL_DEF(mriq_q, (ADSM_INOUT(float, qr), ADSM_INOUT(float, qi), ADSM_IN(float, x), ADSM_IN(float, y),
                         ADSM_IN(float, z), ADSM_IN(float, kvals), ADSM_VALUE(int, count), ADSM_VALUE(int, numx)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= (size_t)numx) continue;
        float sr = qr[i], si = qi[i];
        for (int k = 0; k < count; k++) {
            const float *kv = kvals + 4 * k;
            float arg = (float)MRIQ_PI2 * (kv[0] * x[i] + kv[1] * y[i] + kv[2] * z[i]);
            sr += kv[3] * cosf(arg);
            si += kv[3] * sinf(arg);
        }
        qr[i] = sr;
        qi[i] = si;
    }
});

/* Compiles the single-source kernels now on cuda (NVRTC), not inside the first timed call. */
static inline void mriq_load_kernels(void) {
    if (ADSM_PREPARE(mriq_phimag) != ADSM_OK ||
        ADSM_PREPARE(mriq_q) != ADSM_OK)
        app_die(adsm_last_error());
}

typedef struct mriq_size {
    int numx, numk, chunk; /* voxels, k-space samples, samples per Q kernel call */
} mriq_size;

/* --full: Parboil's large data set (a 64^3 image, 2048 samples, 1024 samples per call). */
static inline mriq_size mriq_size_of(const app_run *r) {
    mriq_size s = {16384, 2048, 512};
    if (r->full) s = (mriq_size){262144, 2048, 1024};
    return s;
}

static inline adsm_grid mriq_grid(int n) { return adsm_grid_1d((uint32_t)(((size_t)n + 255) / 256), 256); }

/* k-space samples in [-0.5, 0.5)^3, phi in [-1, 1)^2, voxels in [-16, 16)^3; Q in double. */
static inline void mriq_generate(const app_run *r) {
    mriq_size s = mriq_size_of(r);
    size_t nin = 5 * (size_t)s.numk + 3 * (size_t)s.numx;
    float *in = malloc(nin * sizeof *in), *ref = malloc(2 * (size_t)s.numx * sizeof *ref);
    float *k = in, *phi = in + 3 * (size_t)s.numk, *v = in + 5 * (size_t)s.numk;
    app_rng g = {0x5851f42d4c957f2dull};
    for (size_t i = 0; i < 3 * (size_t)s.numk; i++) k[i] = (float)(app_rng_unit(&g) - 0.5);
    for (size_t i = 0; i < 2 * (size_t)s.numk; i++) phi[i] = (float)(app_rng_unit(&g) * 2.0 - 1.0);
    for (size_t i = 0; i < 3 * (size_t)s.numx; i++) v[i] = (float)(app_rng_unit(&g) * 32.0 - 16.0);
    for (int i = 0; i < s.numx; i++) {
        double sr = 0, si = 0;
        for (int j = 0; j < s.numk; j++) {
            double pr = phi[j], pi = phi[s.numk + j], mag = pr * pr + pi * pi;
            double arg = MRIQ_PI2 * ((double)k[j] * v[i] + (double)k[s.numk + j] * v[s.numx + i] +
                                     (double)k[2 * s.numk + j] * v[2 * s.numx + i]);
            sr += mag * cos(arg);
            si += mag * sin(arg);
        }
        ref[i] = (float)sr;
        ref[s.numx + i] = (float)si;
    }
    app_write_file(r, "input.bin", in, nin * sizeof *in);
    app_write_file(r, "q.ref", ref, 2 * (size_t)s.numx * sizeof *ref);
    free(in);
    free(ref);
}

static inline int mriq_check(const app_run *r, const float *qr, const float *qi) {
    mriq_size s = mriq_size_of(r);
    size_t n = (size_t)s.numx, bad = 0;
    float *ref = app_read_plain(r, "q.ref", 2 * n * sizeof *ref);
    double top = 0;
    for (size_t i = 0; i < 2 * n; i++) top = fabs(ref[i]) > top ? fabs(ref[i]) : top;
    for (size_t i = 0; i < 2 * n; i++) {
        double diff = fabs((double)(i < n ? qr[i] : qi[i - n]) - ref[i]);
        bad += !(diff <= 1e-4 * top || diff < 0.002 * fabs(ref[i]));
    }
    free(ref);
    if (bad) fprintf(stderr, "mri-q: %zu of %zu Q values differ from the reference\n", bad, 2 * n);
    return bad == 0;
}

#endif /* BENCH_APPS_MRIQ_KERNELS_H */
