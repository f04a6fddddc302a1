/* bench/apps/tpacf/kernels.h -- tpacf (Parboil): the two-point angular correlation function of a
 * set of galaxies. Histograms of the angular distances between pairs of points (20 bins, 5 per
 * decade from 1 to 10000 arcminutes) for data-data pairs, and for each random set random-random
 * and data-random pairs. The CPU turns the (ra, dec) inputs into unit vectors and the bin
 * boundaries into cosines; all points go to the device at once; one kernel call per histogram
 * (DD, then RR and DR for each random set in a loop), each into its own slice of one histogram
 * array; the CPU then adds up the RR and DR histograms over the random sets.
 *
 * Shared by explicit.c and adsm.c: the kernel (CPU body and CUDA C twin), the sizes, the input
 * generator, the reference and the check. Inputs: data.bin (n x {ra, dec} floats, degrees) and
 * random.bin (sets x n x {ra, dec}). Output: tpacf.out (text, as Parboil's: DD, DR, RR of each
 * bin, one per line). Reference: tpacf.ref (the same 60 counts as unsigned ints, computed in
 * double). Tolerance: Parboil's tpacf compare tool (per bin group a relative and an absolute
 * tolerance, both must be exceeded to fail, and the total may not fall short by more than 1e-4). */
#ifndef BENCH_APPS_TPACF_KERNELS_H
#define BENCH_APPS_TPACF_KERNELS_H

#include "bench/apps/common.h"

#define TPACF_BINS 20
#define TPACF_BINS_PER_DEC 5
#define TPACF_MIN_ARCMIN 1.0
#define TPACF_PI 3.14159265358979323846

/* Pairs (i, j) of point i of set a and point j of set b (j > i when a == b), binned by the cosine
 * of their angle: bin k holds binb[k] > cos >= binb[k + 1]. Sets lie in pts as x[nall], y[nall],
 * z[nall], each set n points; the counts are added to hist[0..TPACF_BINS). */
ADSM_KERNEL_DEF(tpacf_hist, (ADSM_INOUT(unsigned, hist), ADSM_IN(float, pts), ADSM_IN(float, binb), ADSM_VALUE(int, n),
                             ADSM_VALUE(int, nall), ADSM_VALUE(int, a), ADSM_VALUE(int, b)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= (size_t)n) continue;
        const float *x = pts + (size_t)b * n, *y = x + nall, *z = y + nall;
        float xi = pts[(size_t)a * n + i], yi = pts[(size_t)nall + (size_t)a * n + i];
        float zi = pts[2 * (size_t)nall + (size_t)a * n + i];
        unsigned counts[TPACF_BINS] = {0};
        for (int j = a == b ? (int)i + 1 : 0; j < n; j++) {
            float c = xi * x[j] + yi * y[j] + zi * z[j];
            if (c >= binb[0] || c < binb[TPACF_BINS]) continue;
            int lo = 0, hi = TPACF_BINS;
            while (hi - lo > 1) {
                int mid = (lo + hi) / 2;
                if (c >= binb[mid])
                    hi = mid;
                else
                    lo = mid;
            }
            counts[lo]++;
        }
        for (int k = 0; k < TPACF_BINS; k++)
            if (counts[k]) adsm_atomic_add_u32(&hist[k], counts[k]);
    }
});

/* Compiles the single-source kernel now on cuda (NVRTC), not inside the first timed call. */
static inline void tpacf_load_kernels(void) {
    if (ADSM_PREPARE(tpacf_hist) != ADSM_OK) app_die(adsm_last_error());
}

typedef struct tpacf_size {
    int n, sets; /* points per set, random sets */
} tpacf_size;

/* --full: 100 random sets, as Parboil's data sets, of 4096 points. */
static inline tpacf_size tpacf_size_of(const app_run *r) {
    tpacf_size s = {2048, 10};
    if (r->full) s = (tpacf_size){4096, 100};
    return s;
}

static inline adsm_grid tpacf_grid(tpacf_size s) { return adsm_grid_1d((uint32_t)(((size_t)s.n + 127) / 128), 128); }

/* The bin boundaries: cosines of 10^(k / 5) arcminutes, k = 0..TPACF_BINS (descending). */
static inline double tpacf_boundary(int k) {
    return cos(pow(10.0, log10(TPACF_MIN_ARCMIN) + (double)k / TPACF_BINS_PER_DEC) / 60.0 * TPACF_PI / 180.0);
}

/* (ra, dec) in degrees to a unit vector. */
static inline void tpacf_unit(const float *sph, double v[3]) {
    double ra = sph[0] * TPACF_PI / 180.0, dec = sph[1] * TPACF_PI / 180.0;
    v[0] = cos(dec) * cos(ra);
    v[1] = cos(dec) * sin(ra);
    v[2] = sin(dec);
}

static inline void tpacf_ref_pairs(const float *pa, const float *pb, int n, int self, const double *binb,
                                   unsigned *hist) {
    double *u = malloc(3 * (size_t)n * sizeof *u), *v = malloc(3 * (size_t)n * sizeof *v);
    for (int i = 0; i < n; i++) tpacf_unit(pa + 2 * i, u + 3 * i), tpacf_unit(pb + 2 * i, v + 3 * i);
    for (int i = 0; i < n; i++)
        for (int j = self ? i + 1 : 0; j < n; j++) {
            double c = u[3 * i] * v[3 * j] + u[3 * i + 1] * v[3 * j + 1] + u[3 * i + 2] * v[3 * j + 2];
            for (int k = 0; k < TPACF_BINS; k++)
                if (c < binb[k] && c >= binb[k + 1]) hist[k]++;
        }
    free(u);
    free(v);
}

/* Data points in clusters (discs of 5 degrees) around random centres (galaxies cluster); random
 * points uniform on the sphere. The reference: (DD, DR summed over the sets, RR summed) per bin. */
static inline void tpacf_generate(const app_run *r) {
    tpacf_size s = tpacf_size_of(r);
    size_t n = (size_t)s.n;
    float *data = malloc(2 * n * sizeof *data), *rnd = malloc(2 * n * s.sets * sizeof *rnd);
    unsigned ref[3 * TPACF_BINS] = {0}, hist[TPACF_BINS];
    double binb[TPACF_BINS + 1];
    app_rng g = {0xd1b54a32d192ed03ull};
    for (size_t i = 0; i < n * s.sets; i++) {
        rnd[2 * i] = (float)(app_rng_unit(&g) * 360.0);
        rnd[2 * i + 1] = (float)(asin(app_rng_unit(&g) * 2.0 - 1.0) * 180.0 / TPACF_PI);
    }
    for (size_t i = 0; i < n; i += 64) { /* clusters of 64 points */
        double ra = app_rng_unit(&g) * 360.0, dec = asin(app_rng_unit(&g) * 1.6 - 0.8) * 180.0 / TPACF_PI;
        for (size_t j = i; j < i + 64 && j < n; j++) {
            double d = sqrt(app_rng_unit(&g)) * 5.0, t = app_rng_unit(&g) * 2.0 * TPACF_PI;
            data[2 * j] = (float)fmod(ra + d * cos(t) / cos(dec * TPACF_PI / 180.0) + 360.0, 360.0);
            data[2 * j + 1] = (float)(dec + d * sin(t));
        }
    }
    for (int k = 0; k <= TPACF_BINS; k++) binb[k] = tpacf_boundary(k);
    memset(hist, 0, sizeof hist);
    tpacf_ref_pairs(data, data, s.n, 1, binb, hist);
    for (int k = 0; k < TPACF_BINS; k++) ref[3 * k] = hist[k];
    for (int set = 0; set < s.sets; set++) {
        const float *rs = rnd + 2 * n * set;
        memset(hist, 0, sizeof hist);
        tpacf_ref_pairs(data, rs, s.n, 0, binb, hist);
        for (int k = 0; k < TPACF_BINS; k++) ref[3 * k + 1] += hist[k];
        memset(hist, 0, sizeof hist);
        tpacf_ref_pairs(rs, rs, s.n, 1, binb, hist);
        for (int k = 0; k < TPACF_BINS; k++) ref[3 * k + 2] += hist[k];
    }
    app_write_file(r, "data.bin", data, 2 * n * sizeof *data);
    app_write_file(r, "random.bin", rnd, 2 * n * s.sets * sizeof *rnd);
    app_write_file(r, "tpacf.ref", ref, sizeof ref);
    free(data);
    free(rnd);
}

/* result: DD, DR, RR of each bin. Parboil's groups of values (in that order): the first 3 within
 * 10% or 3, the next 3 within 35% or 20, then 5% or 10, 2% or 10, 1% or 10 (9 values), 0.1% or 10
 * (11 values), 0.1% or 10000 (the rest); and the total no more than 0.01% below the reference's. */
static inline int tpacf_check(const app_run *r, const unsigned *result) {
    static const struct {
        int end;
        double rtol, atol;
    } groups[] = {{3, 0.10, 3}, {6, 0.35, 20}, {9, 0.05, 10}, {12, 0.02, 10}, {21, 0.01, 10}, {32, 0.001, 10},
                  {3 * TPACF_BINS, 0.001, 10000}};
    unsigned *ref = app_read_plain(r, "tpacf.ref", 3 * TPACF_BINS * sizeof *ref);
    double sum_ref = 0, sum_got = 0;
    int bad = 0, grp = 0;
    for (int i = 0; i < 3 * TPACF_BINS; i++) {
        while (i >= groups[grp].end) grp++;
        double diff = fabs((double)result[i] - ref[i]);
        if (diff > groups[grp].rtol * ref[i] && diff > groups[grp].atol) {
            fprintf(stderr, "tpacf: value %d is %u, the reference %u\n", i, result[i], ref[i]);
            bad++;
        }
        sum_ref += ref[i];
        sum_got += result[i];
    }
    if (sum_ref - sum_got > 1e-4 * sum_ref) {
        fprintf(stderr, "tpacf: %.0f pairs counted, the reference %.0f\n", sum_got, sum_ref);
        bad++;
    }
    free(ref);
    return bad == 0;
}

#endif /* BENCH_APPS_TPACF_KERNELS_H */
