/* bench/tiles/cholesky_explicit.c -- tiled Cholesky with device buffers and copies by hand: what a
 * careful programmer writes, on one device or several (--devices N, each task on the same device
 * as in cholesky.c). Host tiles live in one adsm_host_alloc buffer; each tile has its own
 * adsm_dev_alloc_on buffer on every device. The copies are the explicit plan's (plan.h): every
 * tile a device needs from the host goes there first, before anything runs; a tile another
 * device wrote moves device to device (adsm_memcpy between buffers) right before the task that
 * needs it; every tile comes home once at the end. On one device: every tile in once, the graph,
 * every tile back once. The program counts the bytes it copies. The adsm twin is cholesky.c.
 *
 *   cholesky_explicit [--tiles T (4)] [--tile-size B (128)] [--runs N (3)] [--devices D (1)]
 *                     [--policy v1..v4: v1 places tasks in turn, the others on their tile's owner]
 * Each run allocates fresh buffers (untimed), then times fill + copies + factor + copies back +
 * read back. Device-to-device copies are synchronous (adsm's explicit copies follow every launch
 * issued so far), so with several devices the time is not a fair reference; the bytes are. Runs
 * on the main thread, normal context. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/tiles/plan.h"

/* A task on the buffers of its device. */
static void chol_launch_on_buffers(void *ctx, const tiles_task *k) {
    tiles_buffers *tb = (tiles_buffers *)ctx;
    chol_launch((double *const *)tb->dev[k->dev], tb->tile_size, k);
}

/* One timed run on fresh host and device tiles; the factor goes into `dense` for the check. */
static tiles_run chol_run_explicit(const tiles_options *o, double *dense) {
    size_t bytes = chol_tile_bytes(o);
    tiles_buffers tb = tiles_buffers_new(o, chol_tile_count(o), bytes);

    double t0 = tiles_now_ms();
    chol_fill(o, (double *const *)tb.host);
    tiles_plan p = tiles_plan_execute(o, tiles_buffers_copy, &tb, chol_launch_on_buffers, &tb);
    chol_gather(o, (double *const *)tb.host, dense);
    tiles_run run = {tiles_now_ms() - t0, p.h2d * bytes, p.d2h * bytes, p.d2d * bytes};

    tiles_buffers_free(&tb);
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
