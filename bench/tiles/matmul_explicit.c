/* bench/tiles/matmul_explicit.c -- tiled matmul with device buffers and copies by hand: what a
 * careful programmer writes for one device. Host tiles of each matrix live in one adsm_host_alloc
 * buffer, each tile gets its own adsm_dev_alloc buffer (as each is its own object in matmul.c);
 * A and B go to the device once, C is zeroed there (adsm_memset: nothing crosses the bus), all
 * T^3 tasks run, and C comes back once. The program counts the bytes it copies. The adsm twin is
 * matmul.c.
 *
 *   matmul_explicit [--tiles T (4)] [--tile-size B (128)] [--runs N (3)]
 * Each run allocates fresh buffers (untimed), then times fill + copies + multiply + copies back +
 * read back. Runs on the main thread, normal context. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/tiles/kernels.h"

/* One matrix of tiles on both sides: host tiles inside one host buffer, one device buffer each. */
typedef struct mm_pair {
    float *host_block;
    float **host, **dev;
} mm_pair;

static mm_pair mm_pair_alloc(const tiles_options *o) {
    int count = mm_tile_count(o);
    size_t bytes = mm_tile_bytes(o);
    mm_pair p = {adsm_host_alloc(bytes * (size_t)count), calloc((size_t)count, sizeof(float *)),
                 calloc((size_t)count, sizeof(float *))};
    if (!p.host_block || !p.host || !p.dev) tiles_die("matmul_explicit: out of memory");
    for (int t = 0; t < count; t++) {
        p.host[t] = p.host_block + (size_t)t * bytes / sizeof(float);
        if (!(p.dev[t] = adsm_dev_alloc(bytes))) tiles_die(adsm_last_error());
    }
    return p;
}

static void mm_pair_free(const tiles_options *o, mm_pair *p) {
    for (int t = 0; t < mm_tile_count(o); t++) adsm_dev_free(p->dev[t]);
    adsm_host_free(p->host_block);
    free(p->host);
    free(p->dev);
}

/* Host to device, every tile of p; returns the bytes copied. */
static uint64_t mm_to_device(const tiles_options *o, const mm_pair *p) {
    for (int t = 0; t < mm_tile_count(o); t++)
        if (adsm_copy_to_device(p->dev[t], p->host[t], mm_tile_bytes(o)) != ADSM_OK) tiles_die(adsm_last_error());
    return (uint64_t)mm_tile_count(o) * mm_tile_bytes(o);
}

/* Device to host, every tile of p; returns the bytes copied. */
static uint64_t mm_from_device(const tiles_options *o, const mm_pair *p) {
    for (int t = 0; t < mm_tile_count(o); t++)
        if (adsm_copy_from_device(p->host[t], p->dev[t], mm_tile_bytes(o)) != ADSM_OK) tiles_die(adsm_last_error());
    return (uint64_t)mm_tile_count(o) * mm_tile_bytes(o);
}

/* One timed run on fresh host and device tiles; C goes into `dense` for the check. */
static tiles_run mm_run_explicit(const tiles_options *o, float *dense) {
    mm_pair a = mm_pair_alloc(o), b = mm_pair_alloc(o), c = mm_pair_alloc(o);

    double t0 = tiles_now_ms();
    tiles_run run = {0, 0, 0, 0};
    mm_fill(o, a.host, 0);
    mm_fill(o, b.host, 1);
    run.h2d_bytes = mm_to_device(o, &a) + mm_to_device(o, &b);
    for (int t = 0; t < mm_tile_count(o); t++)
        if (adsm_memset(c.dev[t], 0, mm_tile_bytes(o)) != ADSM_OK) tiles_die(adsm_last_error());
    mm_multiply(o, c.dev, a.dev, b.dev);
    if (adsm_sync() != ADSM_OK) tiles_die(adsm_last_error());
    run.d2h_bytes = mm_from_device(o, &c);
    mm_gather(o, c.host, dense);
    run.ms = tiles_now_ms() - t0;

    mm_pair_free(o, &a);
    mm_pair_free(o, &b);
    mm_pair_free(o, &c);
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
