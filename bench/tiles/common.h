/* bench/tiles/common.h -- what the tiled benchmarks (bench/tiles/: tiled Cholesky and tiled matmul,
 * the groundwork for issue 12, "Several accelerators") share: options, a deterministic generator,
 * the run timer, the median of the runs and the table each program prints.
 *
 * Each benchmark is two programs over one kernels.h: an adsm version (one shared object per tile,
 * adsm moves the data) and an explicit version (one device buffer per tile, copies by hand, host
 * tiles from adsm_host_alloc). Both print the same table: variant, protocol, median time of the
 * runs, bytes each way and those bytes counted in tiles, then "check: ok" when every run matched
 * the CPU reference (the program exits non-zero otherwise).
 *
 *   <program> [--tiles T] [--tile-size B] [--runs N] [--devices D] [--policy v1|v2|v3|v4]
 * The adsm versions take ADSM_PROTOCOL, ADSM_BLOCK_SIZE, ... like any adsm program. Runs on the
 * main thread, normal context. Helpers carry the tiles_ prefix (ADSM_ names are the library's). */
#ifndef BENCH_TILES_COMMON_H
#define BENCH_TILES_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TILES_MAX_RUNS 101

/* One benchmark invocation. devices: emulated devices the tiles are spread over (ADSM_EMU_DEVICES;
 * the explicit versions keep buffers on each, adsm_dev_alloc_on, and make the explicit plan's
 * copies, plan.h). policy: the multi-GPU paper's runtime versions, as adsm settings:
 *   v1  basic: tasks go to devices in turn, outputs written through to the host, no read cache
 *   v2  + data affinity: each task on the block-cyclic owner of the tile it writes
 *   v3  + read-only replicas kept as a cache (invalidated by writes)
 *   v4  + write-back: outputs stay on their device until someone needs them (adsm's default)
 * (ADSM_WRITE_THROUGH for v1-v3, ADSM_DROP_REPLICAS for v1-v2). */
typedef struct tiles_options {
    const char *bench, *variant; /* "cholesky" / "matmul"; "adsm" / "explicit" */
    int tiles;                   /* tiles per side of each matrix */
    int tile_size;               /* elements per side of one tile */
    int runs;                    /* timed repetitions; the table shows the median */
    int devices;                 /* devices to spread the tiles over (adsm versions: 1..8) */
    const char *policy;          /* "v1" .. "v4", see above */
} tiles_options;

/* What one run measured: wall time and bytes moved each way (and between devices). */
typedef struct tiles_run {
    double ms;
    uint64_t h2d_bytes, d2h_bytes, d2d_bytes;
} tiles_run;

static inline void tiles_die(const char *what) {
    fprintf(stderr, "%s\n", what);
    exit(1);
}

static inline double tiles_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline void tiles_usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--tiles T] [--tile-size B] [--runs N (1..%d)] [--devices D (1..8)] "
            "[--policy v1|v2|v3|v4 (v4)]\n", argv0, TILES_MAX_RUNS);
    exit(2);
}

static inline int tiles_int_arg(const char *argv0, const char *text, int lo, int hi) {
    char *end;
    long v = strtol(text, &end, 10);
    if (*end || v < lo || v > hi) tiles_usage(argv0);
    return (int)v;
}

static inline tiles_options tiles_parse(const char *bench, const char *variant, int default_tiles,
                                        int default_tile_size, int argc, char **argv) {
    tiles_options o = {bench, variant, default_tiles, default_tile_size, 3, 1, "v4"};
    for (int i = 1; i < argc; i++) {
        int more = i + 1 < argc;
        if (strcmp(argv[i], "--tiles") == 0 && more) o.tiles = tiles_int_arg(argv[0], argv[++i], 1, 64);
        else if (strcmp(argv[i], "--tile-size") == 0 && more) o.tile_size = tiles_int_arg(argv[0], argv[++i], 1, 4096);
        else if (strcmp(argv[i], "--runs") == 0 && more) o.runs = tiles_int_arg(argv[0], argv[++i], 1, TILES_MAX_RUNS);
        else if (strcmp(argv[i], "--devices") == 0 && more) o.devices = tiles_int_arg(argv[0], argv[++i], 1, 8);
        else if (strcmp(argv[i], "--policy") == 0 && more && strlen(argv[i + 1]) == 2 && argv[i + 1][0] == 'v' &&
                 argv[i + 1][1] >= '1' && argv[i + 1][1] <= '4')
            o.policy = argv[++i];
        else tiles_usage(argv[0]);
    }
    return o;
}

/* The device that owns tile (i, j) under the paper's 2D block-cyclic distribution over a grid of
 * devices (rows x cols, rows * cols = devices, as square as possible): owner computes, each task
 * runs on the owner of the tile it writes (ADSM_CALL_ON). */
static inline int tiles_owner(const tiles_options *o, int i, int j) {
    int rows = 1;
    for (int r = 1; r * r <= o->devices; r++)
        if (o->devices % r == 0) rows = r;
    int cols = o->devices / rows;
    return (i % rows) * cols + (j % cols);
}

/* The paper's version number of the policy (1..4). */
static inline int tiles_version(const tiles_options *o) { return o->policy[1] - '0'; }

/* The device a task writing tile (i, j) runs on: its owner, or under v1 (no data affinity) the
 * next device in turn (*turn counts the tasks of one walk of the graph), as the basic runtime
 * hands tasks to whichever device is free. */
static inline int tiles_place(const tiles_options *o, int *turn, int i, int j) {
    return tiles_version(o) == 1 ? (*turn)++ % o->devices : tiles_owner(o, i, j);
}

/* Deterministic data without state: element `index` of the matrix seeded `seed` is a splitmix64
 * hash mapped to [-1, 1), so a tile can be generated alone, in any order, by any program. */
static inline double tiles_unit(uint64_t seed, uint64_t index) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + index + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

/* Relative-or-absolute comparison: |got - want| <= tol * max(1, |want|). */
static inline int tiles_close(double got, double want, double tol) {
    double scale = fabs(want) > 1.0 ? fabs(want) : 1.0;
    return fabs(got - want) <= tol * scale;
}

static inline int tiles_compare_ms(const void *a, const void *b) {
    double x = ((const tiles_run *)a)->ms, y = ((const tiles_run *)b)->ms;
    return (x > y) - (x < y);
}

/* The median run by time (runs are sorted in place). Bytes are those of that run: every run moves
 * the same bytes on one device, so any run would do. */
static inline tiles_run tiles_median(tiles_run *runs, int n) {
    qsort(runs, (size_t)n, sizeof *runs, tiles_compare_ms);
    return runs[n / 2];
}

/* The table: one header line saying what was run, one row, and the check line. */
static inline int tiles_report(const tiles_options *o, const char *protocol, const char *shape, size_t tile_bytes,
                               tiles_run median, int ok) {
    printf("%s: %s, %d runs, %d device(s), policy %s\n", o->bench, shape, o->runs, o->devices, o->policy);
    printf("%-9s %-9s %10s %12s %12s %12s %10s %10s %10s\n", "variant", "protocol", "time_ms", "h2d_bytes",
           "d2h_bytes", "d2d_bytes", "h2d_tiles", "d2h_tiles", "d2d_tiles");
    printf("%-9s %-9s %10.3f %12llu %12llu %12llu %10.1f %10.1f %10.1f\n", o->variant, protocol, median.ms,
           (unsigned long long)median.h2d_bytes, (unsigned long long)median.d2h_bytes,
           (unsigned long long)median.d2d_bytes, (double)median.h2d_bytes / (double)tile_bytes,
           (double)median.d2h_bytes / (double)tile_bytes, (double)median.d2d_bytes / (double)tile_bytes);
    printf("check: %s\n", ok ? "ok" : "FAILED");
    if (!ok) fprintf(stderr, "%s (%s): result differs from the CPU reference\n", o->bench, o->variant);
    return ok ? 0 : 1;
}

#endif /* BENCH_TILES_COMMON_H */
