/* bench/apps/spmv/kernels.h -- spmv (Parboil): the product Ax = A * x of a sparse square matrix
 * stored in JDS format (rows sorted by decreasing length, the k-th nonzero of every row stored
 * together in "jagged diagonal" k, padded per warp of 32 rows) with a dense vector. As in Parboil,
 * the matrix and the vector go to the device once and the product runs 50 times (one kernel call
 * each, every call writing all of Ax); Ax comes back once.
 *
 * Shared by explicit.c and adsm.c: the kernel (single-source: one body), the sizes, the input
 * generator, the reference and the check. Inputs: matrix.jds (a header of 4 ints: dim, len, depth,
 * nzcnt_len; then data: len floats, index: len ints, ptr: depth ints (start of each diagonal),
 * perm: dim ints (original row of each sorted row), nzcnt: nzcnt_len ints (diagonals of each
 * warp)) and x.bin (dim floats). Reference: ax.ref (dim floats, computed in double). Tolerance:
 * Parboil's compare-output for spmv, an absolute difference at most 1e-4 times the largest
 * magnitude of the reference, or a relative one below 0.2%. */
#ifndef BENCH_APPS_SPMV_KERNELS_H
#define BENCH_APPS_SPMV_KERNELS_H

#include "bench/apps/common.h"

/* One thread per sorted row; the rows of a warp walk the same number of diagonals. */
ADSM_KERNEL_DEF(spmv_jds, (ADSM_OUT(float, ax), ADSM_IN(float, data), ADSM_IN(int, index), ADSM_IN(int, perm),
                           ADSM_IN(float, x), ADSM_IN(int, nzcnt), ADSM_IN(int, ptr), ADSM_VALUE(int, dim)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= (size_t)dim) continue;
        float sum = 0.0f;
        for (int k = 0; k < nzcnt[i / 32]; k++) {
            size_t j = (size_t)ptr[k] + i;
            sum += data[j] * x[index[j]];
        }
        ax[perm[i]] = sum;
    }
});

/* Compiles the single-source kernels now on cuda (NVRTC), not inside the first timed call. */
static inline void spmv_load_kernels(void) {
    if (ADSM_PREPARE(spmv_jds) != ADSM_OK)
        app_die(adsm_last_error());
}

typedef struct spmv_size {
    int dim, avg_nnz, band, iterations;
} spmv_size;

/* Quick: 100000 rows of 24 nonzeros on average. Full: the shape of Parboil's large data set
 * (Dubcova3: 146689 rows, about 25 nonzeros per row). 50 products either way, as Parboil. */
static inline spmv_size spmv_size_of(const app_run *r) {
    spmv_size s = {100000, 24, 2000, 50};
    if (r->full) s = (spmv_size){146689, 25, 3000, 50};
    return s;
}

static inline adsm_grid spmv_grid(spmv_size s) { return adsm_grid_1d((uint32_t)(s.dim + 127) / 128, 128); }

/* Rows of avg_nnz / 2 .. 3 * avg_nnz / 2 - 1 nonzeros uniform in [-1, 1), in columns within band
 * of the diagonal (a banded, FEM-like pattern); x uniform in [0, 1). The reference in double,
 * from the rows before the JDS conversion. */
static inline void spmv_generate(const app_run *r) {
    spmv_size s = spmv_size_of(r);
    int dim = s.dim, maxlen = s.avg_nnz / 2 + s.avg_nnz, warps = (dim + 31) / 32;
    int *count = malloc((size_t)dim * sizeof *count), *col = malloc((size_t)dim * maxlen * sizeof *col);
    float *val = malloc((size_t)dim * maxlen * sizeof *val), *x = malloc((size_t)dim * sizeof *x);
    float *ref = malloc((size_t)dim * sizeof *ref);
    int *perm = malloc((size_t)dim * sizeof *perm), *nzcnt = malloc((size_t)warps * sizeof *nzcnt);
    int *bucket = calloc((size_t)maxlen + 1, sizeof *bucket), *ptr = malloc((size_t)maxlen * sizeof *ptr);
    app_rng g = {0x3c6ef372fe94f82bull};
    for (int i = 0; i < dim; i++) x[i] = (float)app_rng_unit(&g);
    for (int row = 0; row < dim; row++) {
        count[row] = s.avg_nnz / 2 + (int)(app_rng_next(&g) % (uint64_t)s.avg_nnz);
        double sum = 0;
        for (int k = 0; k < count[row]; k++) {
            int c = row + (int)(app_rng_next(&g) % (uint64_t)(2 * s.band + 1)) - s.band;
            c = c < 0 ? -c : c >= dim ? 2 * dim - 2 - c : c;
            col[(size_t)row * maxlen + k] = c;
            val[(size_t)row * maxlen + k] = (float)(app_rng_unit(&g) * 2.0 - 1.0);
            sum += (double)val[(size_t)row * maxlen + k] * x[c];
        }
        ref[row] = (float)sum;
    }
    /* Sort the rows by decreasing length (counting sort, stable). */
    for (int row = 0; row < dim; row++) bucket[count[row]]++;
    for (int c = maxlen, at = 0; c >= 0; c--) {
        int n = bucket[c];
        bucket[c] = at;
        at += n;
    }
    for (int row = 0; row < dim; row++) perm[bucket[count[row]]++] = row;
    /* Diagonal k holds the k-th nonzero of every row of the warps that have one. */
    int depth = count[perm[0]], len = 0;
    for (int w = 0; w < warps; w++) nzcnt[w] = count[perm[32 * w]];
    for (int k = 0; k < depth; k++) {
        ptr[k] = len;
        int rows = 0;
        while (rows < warps && nzcnt[rows] > k) rows++;
        len += 32 * rows;
    }
    float *data = calloc((size_t)len, sizeof *data);
    int *index = calloc((size_t)len, sizeof *index);
    for (int i = 0; i < dim; i++)
        for (int k = 0; k < count[perm[i]]; k++) {
            data[ptr[k] + i] = val[(size_t)perm[i] * maxlen + k];
            index[ptr[k] + i] = col[(size_t)perm[i] * maxlen + k];
        }
    int header[4] = {dim, len, depth, warps};
    FILE *f = app_open(r, "matrix.jds", "wb");
    if (fwrite(header, sizeof *header, 4, f) != 4 || fwrite(data, sizeof *data, (size_t)len, f) != (size_t)len ||
        fwrite(index, sizeof *index, (size_t)len, f) != (size_t)len ||
        fwrite(ptr, sizeof *ptr, (size_t)depth, f) != (size_t)depth ||
        fwrite(perm, sizeof *perm, (size_t)dim, f) != (size_t)dim ||
        fwrite(nzcnt, sizeof *nzcnt, (size_t)warps, f) != (size_t)warps || fclose(f) != 0)
        app_die("writing a data file failed");
    app_write_file(r, "x.bin", x, (size_t)dim * sizeof *x);
    app_write_file(r, "ax.ref", ref, (size_t)dim * sizeof *ref);
    free(count);
    free(col);
    free(val);
    free(x);
    free(ref);
    free(perm);
    free(nzcnt);
    free(bucket);
    free(ptr);
    free(data);
    free(index);
}

static inline int spmv_check(const app_run *r, const float *ax) {
    spmv_size s = spmv_size_of(r);
    float *ref = app_read_plain(r, "ax.ref", (size_t)s.dim * sizeof *ref);
    double largest = 0;
    for (int i = 0; i < s.dim; i++) largest = fabs(ref[i]) > largest ? fabs(ref[i]) : largest;
    size_t bad = 0;
    for (int i = 0; i < s.dim; i++) {
        double diff = fabs((double)ax[i] - ref[i]);
        bad += !(diff <= 1e-4 * largest || diff < 0.002 * fabs(ref[i]));
    }
    free(ref);
    if (bad) fprintf(stderr, "spmv: %zu of %d elements of Ax differ from the reference\n", bad, s.dim);
    return bad == 0;
}

#endif /* BENCH_APPS_SPMV_KERNELS_H */
