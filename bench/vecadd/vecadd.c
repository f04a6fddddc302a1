#define ADSM_IMPLEMENTATION
#include "adsm.h"

/* bench/vecadd/vecadd.c -- the GMAC paper's Figure 11 (ASPLOS 2010, section 5.2) with adsm.
 *
 * Two vectors of 8 Mi floats are initialised on the CPU, a kernel adds them, and the CPU reads
 * the whole result and checks it against a CPU reference. Variants, all in one run on one backend
 * (ADSM_BACKEND, else the default):
 *   explicit  adsm_host_alloc host buffers (adsm's memory kind), adsm_dev_alloc device buffers, adsm_copy_to_device of a and
 *             b, the kernel on the device pointers, adsm_copy_from_device of c: exactly what is
 *             needed moves. Independent of the block size: the baseline (block_size 0).
 *   batch, lazy, rolling
 *             adsm_alloc objects, CPU init, ADSM_CALL, adsm_sync, CPU read; one point per block
 *             size, 4K .. 32M.
 *   um, um-prefetch
 *             on cuda only: the same program on CUDA managed memory, the driver migrating pages
 *             on faults (um) or where the kernel annotations prefetch them (um-prefetch); one
 *             point each (no blocks).
 *   hmm       on cuda where the GPU reaches pageable host memory (HMM): the same program on plain
 *             host memory (otherwise stderr says why there is no such row).
 * One measurement = adsm_init (protocol, block size) + adsm_reset_stats, then the timed part
 * (allocation, CPU init, call, sync, CPU read-back and check), then free + adsm_shutdown (not
 * timed: init and shutdown fork and reap the emulated device). The CPU read-back loop is the
 * same for every variant: it compares each element of c with a precomputed reference.
 *
 * Runs go in rounds, every point once per round, so drift on a shared machine spreads over all.
 * Per point: median wall time of --runs runs, the median of each transfer statistic (h2d_ns,
 * d2h_ns from adsm_stats; bandwidth = bytes / ns = GB/s), bytes each way, faults (read + write),
 * evictions, and the ratio of the median wall time to the explicit version's median wall time.
 * Benchmarks assert correctness, never timings: any wrong element exits non-zero.
 *
 *   gcc -std=c11 -O2 -Wall -Wextra -Werror -I. bench/vecadd/vecadd.c -pthread -ldl -o /tmp/bva
 *   /tmp/bva [--quick | --full] [--runs N] [--elements N] [--csv FILE]
 *     --quick      3 runs per point, all 14 block sizes (the default)
 *     --full       7 runs per point
 *     --runs N     runs per point (overrides --quick/--full)
 *     --elements N vector length (default 8Mi = 8388608, as in the paper)
 *     --csv FILE   one row per point: variant,block_size,wall_ms,h2d_ms,d2h_ms,h2d_gbps,
 *                  d2h_gbps,h2d_bytes,d2h_bytes,faults,evictions,ratio_to_explicit
 * Progress goes to stderr (one line per point), the markdown table to stdout at the end. */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench/common.h"

/* One body for every backend: the CPU runs it on emu and host; on cuda NVRTC compiles the same
 * text at the first launch after each adsm_init (see measure: before the clock starts). */
ADSM_KERNEL_DEF(vecadd, (ADSM_OUT(float, c), ADSM_IN(float, a), ADSM_IN(float, b), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = a[i] + b[i];
    }
});

#define MAX_RUNS 100
#define NBLOCKS 14

static const size_t block_sizes[NBLOCKS] = {
    (size_t)4 << 10,   (size_t)8 << 10,   (size_t)16 << 10,  (size_t)32 << 10, (size_t)64 << 10,
    (size_t)128 << 10, (size_t)256 << 10, (size_t)512 << 10, (size_t)1 << 20,  (size_t)2 << 20,
    (size_t)4 << 20,   (size_t)8 << 20,   (size_t)16 << 20,  (size_t)32 << 20};

typedef enum { V_EXPLICIT, V_BATCH, V_LAZY, V_ROLLING, V_UM, V_UM_PREFETCH, V_HMM } variant;
static const char *variant_name[] = {"explicit", "batch", "lazy", "rolling", "um", "um-prefetch", "hmm"};
static const adsm_protocol_kind variant_protocol[] = {ADSM_PROTOCOL_DEFAULT, ADSM_PROTOCOL_BATCH, ADSM_PROTOCOL_LAZY,
                                                      ADSM_PROTOCOL_ROLLING, ADSM_PROTOCOL_UM,
                                                      ADSM_PROTOCOL_UM_PREFETCH, ADSM_PROTOCOL_HMM};

/* one measurement */
typedef struct sample {
    double wall_ns;
    adsm_stats st;
} sample;

/* one point: medians over the runs */
typedef struct point {
    variant v;
    size_t block_size; /* 0 for explicit */
    double wall_ms, wall_min_ms, wall_max_ms;
    double h2d_ms, d2h_ms, h2d_gbps, d2h_gbps;
    uint64_t h2d_bytes, d2h_bytes, faults, evictions;
    double ratio;
} point;

static size_t n_elems = (size_t)8 << 20;
static float *ref;         /* CPU reference: ref[i] = init_a(i) + init_b(i) */
static char backend[64] = "?";

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Initial values: exact in float, varied, so a misplaced block shows. */
static inline float init_a(size_t i) { return (float)(i & 0xffff); }
static inline float init_b(size_t i) { return 0.25f * (float)((i >> 10) & 0x3fff); }

static void die(const char *what, const char *where) {
    fprintf(stderr, "vecadd: %s failed (%s): %s\n", what, where, adsm_last_error());
    exit(1);
}

static void size_label(size_t bytes, char *buf, size_t len) {
    if (bytes == 0) snprintf(buf, len, "-");
    else if (bytes >= ((size_t)1 << 20)) snprintf(buf, len, "%zuM", bytes >> 20);
    else snprintf(buf, len, "%zuK", bytes >> 10);
}

/* The read-back: the CPU reads all of c and compares it with the reference. Returns the index of
 * the first wrong element, or n when all are right. Same loop for every variant, timed. */
static size_t check(const float *c) {
    size_t first_bad = n_elems;
    for (size_t i = 0; i < n_elems; i++)
        if (c[i] != ref[i] && first_bad == n_elems) first_bad = i;
    return first_bad;
}

static void report_wrong(const char *where, const float *c, size_t i) {
    fprintf(stderr, "vecadd: WRONG RESULT in %s: c[%zu] = %.9g, expected %.9g (a=%.9g b=%.9g)\n", where, i,
            (double)c[i], (double)ref[i], (double)init_a(i), (double)init_b(i));
    exit(2);
}

static sample measure(variant v, size_t block_size) {
    char where[64], bs[16];
    size_label(block_size, bs, sizeof bs);
    snprintf(where, sizeof where, "%s %s", variant_name[v], bs);

    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.protocol = variant_protocol[v];
    cfg.block_size = block_size; /* 0 (explicit): default */
    if (adsm_init(&cfg) != ADSM_OK) die("adsm_init", where);
    /* on cuda, compile the single-source kernel before the clock starts */
    if (ADSM_PREPARE(vecadd) != ADSM_OK) die("ADSM_PREPARE(vecadd)", where);
    snprintf(backend, sizeof backend, "%s", adsm_backend_name());
    if (v != V_EXPLICIT && v < V_UM && adsm_block_size() != block_size) {
        fprintf(stderr, "vecadd: asked for block size %zu, runtime uses %zu\n", block_size, adsm_block_size());
        exit(1);
    }
    adsm_reset_stats();

    const size_t n = n_elems, bytes = n * sizeof(float);
    const adsm_grid grid = adsm_grid_1d((uint32_t)((n + 255) / 256), 256);
    sample s;
    size_t bad;
    double t0 = now_ns();
    if (v == V_EXPLICIT) {
        /* adsm's memory kind (huge pages; page-locked on cuda): a malloc'd baseline would measure
         * 4 KiB pages against adsm's huge pages, not the copies */
        float *a = adsm_host_alloc(bytes), *b = adsm_host_alloc(bytes), *c = adsm_host_alloc(bytes);
        if (!a || !b || !c) die("adsm_host_alloc", where);
        float *da = adsm_dev_alloc(bytes), *db = adsm_dev_alloc(bytes), *dc = adsm_dev_alloc(bytes);
        if (!da || !db || !dc) die("adsm_dev_alloc", where);
        for (size_t i = 0; i < n; i++) {
            a[i] = init_a(i);
            b[i] = init_b(i);
        }
        if (adsm_copy_to_device(da, a, bytes) != ADSM_OK) die("adsm_copy_to_device(a)", where);
        if (adsm_copy_to_device(db, b, bytes) != ADSM_OK) die("adsm_copy_to_device(b)", where);
        if (ADSM_CALL(vecadd, grid, dc, da, db, n) != ADSM_OK) die("ADSM_CALL", where);
        if (adsm_sync() != ADSM_OK) die("adsm_sync", where);
        if (adsm_copy_from_device(c, dc, bytes) != ADSM_OK) die("adsm_copy_from_device(c)", where);
        bad = check(c);
        s.wall_ns = now_ns() - t0;
        if (bad != n) report_wrong(where, c, bad);
        if (adsm_dev_free(da) != ADSM_OK || adsm_dev_free(db) != ADSM_OK || adsm_dev_free(dc) != ADSM_OK)
            die("adsm_dev_free", where);
        if (adsm_host_free(a) != ADSM_OK || adsm_host_free(b) != ADSM_OK || adsm_host_free(c) != ADSM_OK)
            die("adsm_host_free", where);
    } else {
        float *a = adsm_alloc(bytes), *b = adsm_alloc(bytes), *c = adsm_alloc(bytes);
        if (!a || !b || !c) die("adsm_alloc", where);
        for (size_t i = 0; i < n; i++) {
            a[i] = init_a(i);
            b[i] = init_b(i);
        }
        if (ADSM_CALL(vecadd, grid, c, a, b, n) != ADSM_OK) die("ADSM_CALL", where);
        if (adsm_sync() != ADSM_OK) die("adsm_sync", where);
        bad = check(c);
        s.wall_ns = now_ns() - t0;
        if (bad != n) report_wrong(where, c, bad);
        if (adsm_free(a) != ADSM_OK || adsm_free(b) != ADSM_OK || adsm_free(c) != ADSM_OK) die("adsm_free", where);
    }
    if (adsm_get_stats(&s.st) != ADSM_OK) die("adsm_get_stats", where);
    adsm_shutdown();
    return s;
}

/* One point from its runs' samples: medians, and the fastest and slowest wall time. */
static point summarise(variant v, size_t block_size, const sample *samples, int runs) {
    double wall[MAX_RUNS] = {0}, h2d_ns[MAX_RUNS], d2h_ns[MAX_RUNS], h2d_bw[MAX_RUNS], d2h_bw[MAX_RUNS];
    double h2d_b[MAX_RUNS], d2h_b[MAX_RUNS], faults[MAX_RUNS], evict[MAX_RUNS];
    double lo, hi;
    point p;
    memset(&p, 0, sizeof p);
    p.v = v;
    p.block_size = block_size;
    for (int r = 0; r < runs; r++) {
        sample s = samples[r];
        wall[r] = s.wall_ns;
        h2d_ns[r] = (double)s.st.h2d_ns;
        d2h_ns[r] = (double)s.st.d2h_ns;
        h2d_bw[r] = s.st.h2d_ns ? (double)s.st.h2d_bytes / (double)s.st.h2d_ns : 0.0;
        d2h_bw[r] = s.st.d2h_ns ? (double)s.st.d2h_bytes / (double)s.st.d2h_ns : 0.0;
        h2d_b[r] = (double)s.st.h2d_bytes;
        d2h_b[r] = (double)s.st.d2h_bytes;
        faults[r] = (double)(s.st.read_faults + s.st.write_faults);
        evict[r] = (double)s.st.evictions;
    }
    bench_range(wall, runs, &lo, &hi);
    p.wall_ms = bench_median(wall, runs) / 1e6;
    p.wall_min_ms = lo / 1e6;
    p.wall_max_ms = hi / 1e6;
    p.h2d_ms = bench_median(h2d_ns, runs) / 1e6;
    p.d2h_ms = bench_median(d2h_ns, runs) / 1e6;
    p.h2d_gbps = bench_median(h2d_bw, runs);
    p.d2h_gbps = bench_median(d2h_bw, runs);
    p.h2d_bytes = (uint64_t)bench_median(h2d_b, runs);
    p.d2h_bytes = (uint64_t)bench_median(d2h_b, runs);
    p.faults = (uint64_t)bench_median(faults, runs);
    p.evictions = (uint64_t)bench_median(evict, runs);
    return p;
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--quick | --full] [--runs N] [--elements N] [--csv FILE]\n"
            "  --quick       %d runs per point (default)\n"
            "  --full        7 runs per point\n"
            "  --runs N      runs per point, 1..%d\n"
            "  --elements N  vector length (default 8388608)\n"
            "  --csv FILE    write one CSV row per point\n",
            argv0, 3, MAX_RUNS);
}

static int parse_size(const char *s, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v == 0) return -1;
    *out = (size_t)v;
    return 0;
}

int main(int argc, char **argv) {
    int runs = 3, runs_set = 0, full = 0;
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        size_t v;
        if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc && parse_size(argv[i + 1], &v) == 0 && v <= MAX_RUNS) {
            runs = (int)v;
            runs_set = 1;
            i++;
        } else if (!strcmp(argv[i], "--elements") && i + 1 < argc && parse_size(argv[i + 1], &v) == 0 &&
                   v <= UINT32_MAX) {
            n_elems = v;
            i++;
        } else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
            csv_path = argv[++i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(argv[0]);
            return 0;
        } else {
            usage(argv[0]);
            return 1;
        }
    }
    if (!runs_set) runs = full ? 7 : 3;

    FILE *csv = NULL;
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
        fprintf(stderr, "vecadd: cannot open %s: %s\n", csv_path, strerror(errno));
        return 1;
    }

    ref = malloc(n_elems * sizeof *ref);
    if (!ref) {
        fprintf(stderr, "vecadd: malloc failed\n");
        return 1;
    }
    for (size_t i = 0; i < n_elems; i++) ref[i] = init_a(i) + init_b(i);

    if (adsm_init(NULL) != ADSM_OK) { /* which backend the runs get: unified memory is cuda's only */
        fprintf(stderr, "vecadd: adsm_init: %s\n", adsm_last_error());
        return 1;
    }
    snprintf(backend, sizeof backend, "%s", adsm_backend_name());
    adsm_shutdown();
    /* the last points: unified memory, on cuda only; hmm where the GPU reaches pageable memory */
    int on_cuda = strcmp(backend, "cuda") == 0;
    variant last_unified = on_cuda && bench_hmm_runs("vecadd") ? V_HMM : V_UM_PREFETCH;
    int npoints = 1 + 3 * NBLOCKS + (on_cuda ? (int)(last_unified - V_UM) + 1 : 0);
    point *pts = calloc((size_t)npoints, sizeof *pts);
    variant *vs = calloc((size_t)npoints, sizeof *vs);
    size_t *bss = calloc((size_t)npoints, sizeof *bss);
    sample *samples = calloc((size_t)npoints * (size_t)runs, sizeof *samples);
    if (!pts || !vs || !bss || !samples) return 1;
    int k = 0;
    vs[k++] = V_EXPLICIT;
    for (variant v = V_BATCH; v <= V_ROLLING; v++)
        for (int b = 0; b < NBLOCKS; b++) {
            vs[k] = v;
            bss[k++] = block_sizes[b];
        }
    for (variant v = V_UM; v <= last_unified && k < npoints; v++) vs[k++] = v;
    /* Rounds: every point once, then again, so that a slow minute of a shared machine lands on
     * every point alike rather than on a stretch of them (the fourth GPU run: with each point's
     * runs back to back, lazy read 1.04-1.47x explicit by where the slow stretches fell). */
    double t_start = now_ns();
    for (int r = 0; r < runs; r++) {
        for (int i = 0; i < npoints; i++) samples[(size_t)i * (size_t)runs + (size_t)r] = measure(vs[i], bss[i]);
        fprintf(stderr, "round %d of %d: %d points, %.0f s elapsed\n", r + 1, runs, npoints, (now_ns() - t_start) / 1e9);
    }
    for (int i = 0; i < npoints; i++) {
        point *p = &pts[i];
        *p = summarise(vs[i], bss[i], &samples[(size_t)i * (size_t)runs], runs);
        char bs[16] = "-";
        if (bss[i]) size_label(bss[i], bs, sizeof bs);
        fprintf(stderr, "[%2d/%d] %-11s %5s  wall %8.1f ms (min %.1f, max %.1f)  x%.2f explicit  faults %llu  "
                "evictions %llu\n", i + 1, npoints, variant_name[vs[i]], bs, p->wall_ms, p->wall_min_ms,
                p->wall_max_ms, p->wall_ms / pts[0].wall_ms, (unsigned long long)p->faults,
                (unsigned long long)p->evictions);
    }
    free(vs);
    free(bss);
    free(samples);
    for (int i = 0; i < npoints; i++) pts[i].ratio = pts[i].wall_ms / pts[0].wall_ms;

    /* header: backend, machine, date */
    struct utsname u;
    char date[64] = "?";
    time_t t = time(NULL);
    struct tm tm;
    if (uname(&u) != 0) snprintf(u.release, sizeof u.release, "?");
    if (localtime_r(&t, &tm)) strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", &tm);
    printf("## vecadd (GMAC Figure 11): %zu floats per vector (%.1f MiB each), median of %d runs\n\n", n_elems,
           (double)(n_elems * sizeof(float)) / (1 << 20), runs);
    printf("backend %s; machine: nproc %ld, Linux %s (%s); %s; total %.0f s\n\n", backend, sysconf(_SC_NPROCESSORS_ONLN),
           u.release, u.machine, date, (now_ns() - t_start) / 1e9);
    printf("| variant | block | wall ms | min-max ms | x explicit | h2d ms | d2h ms | h2d GB/s | d2h GB/s | h2d MiB | "
           "d2h MiB | faults | evictions |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    if (csv)
        fprintf(csv, "variant,block_size,wall_ms,h2d_ms,d2h_ms,h2d_gbps,d2h_gbps,h2d_bytes,d2h_bytes,faults,evictions,"
                     "ratio_to_explicit\n");
    for (int i = 0; i < npoints; i++) {
        const point *p = &pts[i];
        char bs[16];
        size_label(p->block_size, bs, sizeof bs);
        printf("| %s | %s | %.1f | %.1f-%.1f | %.2f | %.1f | %.1f | %.2f | %.2f | %.1f | %.1f | %llu | %llu |\n",
               variant_name[p->v], bs, p->wall_ms, p->wall_min_ms, p->wall_max_ms, p->ratio, p->h2d_ms, p->d2h_ms,
               p->h2d_gbps, p->d2h_gbps, (double)p->h2d_bytes / (1 << 20), (double)p->d2h_bytes / (1 << 20),
               (unsigned long long)p->faults, (unsigned long long)p->evictions);
        if (csv)
            fprintf(csv, "%s,%zu,%.3f,%.3f,%.3f,%.4f,%.4f,%llu,%llu,%llu,%llu,%.4f\n", variant_name[p->v],
                    p->block_size, p->wall_ms, p->h2d_ms, p->d2h_ms, p->h2d_gbps, p->d2h_gbps,
                    (unsigned long long)p->h2d_bytes, (unsigned long long)p->d2h_bytes,
                    (unsigned long long)p->faults, (unsigned long long)p->evictions, p->ratio);
    }
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "vecadd: writing %s failed: %s\n", csv_path, strerror(errno));
        return 1;
    }
    free(pts);
    free(ref);
    return 0;
}
