/* bench/tiles/cholesky_explicit.c -- tiled Cholesky with device buffers and copies by hand: what a
 * careful programmer writes for one device. Host tiles live in one adsm_host_alloc buffer, each
 * tile gets its own adsm_dev_alloc buffer (as each is its own object in cholesky.c); every lower
 * tile goes to the device once, the whole task graph runs there, and every tile comes back once.
 * The program counts the bytes it copies. The adsm twin is cholesky.c.
 *
 *   cholesky_explicit [--tiles T (4)] [--tile-size B (128)] [--runs N (3)]
 * Each run allocates fresh buffers (untimed), then times fill + copies + factor + copies back +
 * read back. Runs on the main thread, normal context. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/tiles/kernels.h"

/* One timed run on fresh host and device tiles; the factor goes into `dense` for the check. */
static tiles_run chol_run_explicit(const tiles_options *o, double *dense) {
    int count = chol_tile_count(o);
    size_t bytes = chol_tile_bytes(o);
    double **host = calloc((size_t)count, sizeof *host), **dev = calloc((size_t)count, sizeof *dev);
    double *host_block = adsm_host_alloc(bytes * (size_t)count);
    if (!host || !dev || !host_block) tiles_die("cholesky_explicit: out of memory");
    for (int t = 0; t < count; t++) {
        host[t] = host_block + (size_t)t * bytes / sizeof(double);
        if (!(dev[t] = adsm_dev_alloc(bytes))) tiles_die(adsm_last_error());
    }

    double t0 = tiles_now_ms();
    tiles_run run = {0, 0, 0, 0};
    chol_fill(o, host);
    for (int t = 0; t < count; t++, run.h2d_bytes += bytes)
        if (adsm_copy_to_device(dev[t], host[t], bytes) != ADSM_OK) tiles_die(adsm_last_error());
    chol_factor(o, dev);
    if (adsm_sync() != ADSM_OK) tiles_die(adsm_last_error());
    for (int t = 0; t < count; t++, run.d2h_bytes += bytes)
        if (adsm_copy_from_device(host[t], dev[t], bytes) != ADSM_OK) tiles_die(adsm_last_error());
    chol_gather(o, host, dense);
    run.ms = tiles_now_ms() - t0;

    for (int t = 0; t < count; t++) adsm_dev_free(dev[t]);
    adsm_host_free(host_block);
    free(host);
    free(dev);
    return run;
}

int main(int argc, char **argv) {
    tiles_options o = tiles_parse("cholesky", "explicit", 4, 128, argc, argv);
    size_t n = (size_t)o.tiles * o.tile_size;
    tiles_start(&o);
    tiles_load_kernels();
    double *want = chol_reference(&o), *got = calloc(n * n, sizeof *got);
    if (!got) tiles_die("cholesky_explicit: out of memory");

    tiles_run runs[TILES_MAX_RUNS];
    int ok = 1;
    for (int r = 0; r < o.runs; r++) {
        runs[r] = chol_run_explicit(&o, got);
        ok &= chol_check(&o, got, want);
    }
    int rc = tiles_report(&o, "-", chol_shape(&o), chol_tile_bytes(&o), tiles_median(runs, o.runs), ok);
    free(want);
    free(got);
    adsm_shutdown();
    return rc;
}
