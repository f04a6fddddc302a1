/* bench/tiles/cholesky.c -- tiled Cholesky on shared memory (the adsm version): one adsm_alloc per
 * tile of the lower triangle, the CPU writes the input into the tiles, the task graph of
 * kernels.h runs on them, and the CPU reads the factor back; adsm decides what moves and
 * adsm_get_stats says how much. The explicit twin is cholesky_explicit.c.
 *
 *   cholesky [--tiles T (4)] [--tile-size B (128)] [--runs N (3)]
 * Each run allocates fresh tiles (untimed), then times fill + factor + read back. Runs on the main
 * thread, normal context; ADSM_PROTOCOL etc. select the protocol as for any adsm program. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/tiles/kernels.h"
#include "bench/tiles/plan.h"

/* One timed run on fresh shared tiles; the factor goes into `dense` for the check. */
static tiles_run chol_run_shared(const tiles_options *o, double *dense) {
    int count = chol_tile_count(o);
    double **tile = calloc((size_t)count, sizeof *tile);
    if (!tile) tiles_die("cholesky: out of memory");
    for (int t = 0; t < count; t++)
        if (!(tile[t] = adsm_alloc(chol_tile_bytes(o)))) tiles_die(adsm_last_error());
    adsm_reset_stats();

    double t0 = tiles_now_ms();
    chol_fill(o, tile);
    chol_factor(o, tile);
    if (adsm_sync() != ADSM_OK) tiles_die(adsm_last_error());
    chol_gather(o, tile, dense);
    tiles_run run = {tiles_now_ms() - t0, 0, 0, 0};

    adsm_stats st;
    adsm_get_stats(&st);
    run.h2d_bytes = st.h2d_bytes;
    run.d2h_bytes = st.d2h_bytes;
    run.d2d_bytes = st.d2d_bytes;
    for (int t = 0; t < count; t++) adsm_free(tile[t]);
    free(tile);
    return run;
}

int main(int argc, char **argv) {
    tiles_options o = tiles_parse("cholesky", "adsm", 4, 128, argc, argv);
    size_t n = (size_t)o.tiles * o.tile_size;
    tiles_start(&o);
    tiles_load_kernels();
    double *want = chol_reference(&o), *got = calloc(n * n, sizeof *got);
    if (!got) tiles_die("cholesky: out of memory");

    tiles_run runs[TILES_MAX_RUNS];
    int ok = 1;
    for (int r = 0; r < o.runs; r++) {
        runs[r] = chol_run_shared(&o, got);
        ok &= chol_check(&o, got, want);
    }
    int rc = tiles_report(&o, adsm_protocol_name(), chol_shape(&o), chol_tile_bytes(&o), tiles_median(runs, o.runs), ok);
    tiles_plan_report(&o);
    free(want);
    free(got);
    adsm_shutdown();
    return rc;
}
