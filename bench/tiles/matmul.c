/* bench/tiles/matmul.c -- tiled matmul on shared memory (the adsm version), as in the Nanos6
 * paper: one adsm_alloc per tile of A, B and C, the CPU writes A and B, one task per (i, j, k)
 * adds A[i][k] B[k][j] into C[i][j], and the CPU reads C back; adsm decides what moves and
 * adsm_get_stats says how much. C starts as fresh shared objects, zero on both sides, so it never
 * needs to travel to the device. The explicit twin is matmul_explicit.c.
 *
 *   matmul [--tiles T (4)] [--tile-size B (128)] [--runs N (3)]
 * Each run allocates fresh tiles (untimed), then times fill + multiply + read back. Runs on the
 * main thread, normal context; ADSM_PROTOCOL etc. select the protocol as for any adsm program. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/tiles/kernels.h"
#include "bench/tiles/plan.h"

static float **mm_alloc_shared(const tiles_options *o) {
    float **tile = calloc((size_t)mm_tile_count(o), sizeof *tile);
    if (!tile) tiles_die("matmul: out of memory");
    for (int t = 0; t < mm_tile_count(o); t++)
        if (!(tile[t] = adsm_alloc(mm_tile_bytes(o)))) tiles_die(adsm_last_error());
    return tile;
}

static void mm_free_shared(const tiles_options *o, float **tile) {
    for (int t = 0; t < mm_tile_count(o); t++) adsm_free(tile[t]);
    free(tile);
}

/* One timed run on fresh shared tiles; C goes into `dense` for the check. */
static tiles_run mm_run_shared(const tiles_options *o, float *dense) {
    float **a = mm_alloc_shared(o), **b = mm_alloc_shared(o), **c = mm_alloc_shared(o);
    adsm_reset_stats();

    double t0 = tiles_now_ms();
    mm_fill(o, a, 0);
    mm_fill(o, b, 1);
    mm_multiply(o, c, a, b);
    if (adsm_sync() != ADSM_OK) tiles_die(adsm_last_error());
    mm_gather(o, c, dense);
    tiles_run run = {tiles_now_ms() - t0, 0, 0, 0};

    adsm_stats st;
    adsm_get_stats(&st);
    run.h2d_bytes = st.h2d_bytes;
    run.d2h_bytes = st.d2h_bytes;
    run.d2d_bytes = st.d2d_bytes;
    mm_free_shared(o, a);
    mm_free_shared(o, b);
    mm_free_shared(o, c);
    return run;
}

int main(int argc, char **argv) {
    tiles_options o = tiles_parse("matmul", "adsm", 4, 128, argc, argv);
    size_t n = (size_t)o.tiles * o.tile_size;
    tiles_start(&o);
    tiles_load_kernels();
    double *want = mm_reference(&o);
    float *got = calloc(n * n, sizeof *got);
    if (!got) tiles_die("matmul: out of memory");

    tiles_run runs[TILES_MAX_RUNS];
    int ok = 1;
    for (int r = 0; r < o.runs; r++) {
        runs[r] = mm_run_shared(&o, got);
        ok &= mm_check(&o, got, want);
    }
    int rc = tiles_report(&o, adsm_protocol_name(), mm_shape(&o), mm_tile_bytes(&o), tiles_median(runs, o.runs), ok);
    tiles_plan_report(&o);
    free(want);
    free(got);
    adsm_shutdown();
    return rc;
}
