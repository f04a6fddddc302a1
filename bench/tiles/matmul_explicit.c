/* bench/tiles/matmul_explicit.c -- tiled matmul with device buffers and copies by hand: what a
 * careful programmer writes, on one device or several (--devices N, each task on the owner of its
 * C tile as in matmul.c). Host tiles of each matrix live in one adsm_host_alloc buffer; each tile
 * of A, B and C has its own adsm_dev_alloc_on buffer on every device. C is zeroed on every device
 * (adsm_memset: nothing crosses the bus); the copies are the explicit plan's (plan.h): every A
 * and B tile a device needs goes there before anything runs, C tiles another device wrote move
 * device to device where needed, and C comes home once. The program counts the bytes it copies.
 * The adsm twin is matmul.c.
 *
 *   matmul_explicit [--tiles T (4)] [--tile-size B (128)] [--runs N (3)] [--devices D (1)]
 *                   [--policy v1..v4: v1 places tasks in turn, the others on their tile's owner]
 * Each run allocates fresh buffers (untimed), then times fill + copies + multiply + copies back +
 * read back; as in cholesky_explicit.c, device-to-device copies are synchronous. Runs on the main
 * thread, normal context. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/tiles/plan.h"

/* A task on the buffers of its device: A's, B's and C's tiles in mm_walk's numbering. */
static void mm_launch_on_buffers(void *ctx, const tiles_task *k) {
    tiles_buffers *tb = (tiles_buffers *)ctx;
    mm_launch((float *const *)tb->dev[k->dev], tb->tile_size, k);
}

/* One timed run on fresh host and device tiles; C goes into `dense` for the check. */
static tiles_run mm_run_explicit(const tiles_options *o, float *dense) {
    int n = mm_tile_count(o);
    size_t bytes = mm_tile_bytes(o);
    tiles_buffers tb = tiles_buffers_new(o, 3 * n, bytes);
    float **host = (float **)tb.host;

    double t0 = tiles_now_ms();
    mm_fill(o, host, 0);
    mm_fill(o, host + n, 1);
    for (int d = 0; d < o->devices; d++)
        for (int t = 2 * n; t < 3 * n; t++)
            if (adsm_memset(tb.dev[d][t], 0, bytes) != ADSM_OK) tiles_die(adsm_last_error());
    tiles_plan p = tiles_plan_execute(o, tiles_buffers_copy, &tb, mm_launch_on_buffers, &tb);
    mm_gather(o, host + 2 * n, dense);
    tiles_run run = {tiles_now_ms() - t0, p.h2d * bytes, p.d2h * bytes, p.d2d * bytes};

    tiles_buffers_free(&tb);
    return run;
}

int main(int argc, char **argv) {
    tiles_options o = tiles_parse("matmul", "explicit", 4, 128, argc, argv);
    size_t n = (size_t)o.tiles * o.tile_size;
    tiles_start(&o);
    tiles_load_kernels();
    double *want = mm_reference(&o);
    float *got = calloc(n * n, sizeof *got);
    if (!got) tiles_die("matmul_explicit: out of memory");

    tiles_run runs[TILES_MAX_RUNS];
    int ok = 1;
    for (int r = 0; r < o.runs; r++) {
        runs[r] = mm_run_explicit(&o, got);
        ok &= mm_check(&o, got, want);
    }
    int rc = tiles_report(&o, "-", mm_shape(&o), mm_tile_bytes(&o), tiles_median(runs, o.runs), ok);
    free(want);
    free(got);
    adsm_shutdown();
    return rc;
}
