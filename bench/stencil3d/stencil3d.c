#define ADSM_INTERPOSE_IO
#define ADSM_IMPLEMENTATION
#include "adsm.h"

/* bench/stencil3d/stencil3d.c -- the GMAC paper's Figure 9 (ASPLOS 2010, section 5.2) with adsm.
 *
 * A 3D stencil (7-point, float, two volumes swapped each time step) runs on the accelerator. Each
 * step the CPU introduces a source at one point of the current volume (a small emitter: one block
 * changes on the CPU), launches the kernel and waits for it; every --dump-every steps the whole
 * current volume is written to a file with plain fwrite, straight from shared memory (the
 * interposed fwrite). Lazy update moves the whole volume for the one-point write; rolling update
 * moves only the block holding it, so its cost depends on the block size.
 *
 * Variants, all in the same run on the same backend (ADSM_BACKEND or the default):
 *   explicit      adsm_host_alloc host buffer + adsm_dev_alloc device volumes: the source point goes to the
 *                 device with adsm_copy_to_device of that one element, the volume comes back with
 *                 adsm_copy_from_device only when it is written to the file (the hand-tuned
 *                 CUDA-style program: the least data any version can move)
 *   lazy          adsm_alloc volumes, protocol lazy (default block size)
 *   rolling-<B>   adsm_alloc volumes, protocol rolling, block size B = 4K, 256K, 1M, 32M
 *   um, um-prefetch, hmm  (cuda only) the same volumes in CUDA managed memory, or in plain host
 *                 memory where the GPU reaches pageable memory (hmm; else stderr says why not)
 * Each variant of each run does adsm_init(&cfg) ... adsm_shutdown(); the time measured goes from
 * the allocation of the volumes to the end of the last step (kernel synced, last dump written),
 * init and shutdown excluded. The final volume of every variant must equal the explicit one bit
 * for bit (same kernel, same inputs, same order), else the program exits with status 1.
 *
 * Build and run (from the repository root):
 *   gcc -std=c11 -O2 -Wall -Wextra -Werror -I. bench/stencil3d/stencil3d.c -pthread -ldl -o /tmp/bst
 *   /tmp/bst [--quick | --full] [--runs N] [--steps N] [--dump-every N] [--csv FILE] [--trace LABEL EDGE FILE]
 * --trace "rolling 256K" 192 /tmp/t.json: the last run of that variant at that volume writes an
 * ADSM_TRACE timeline (bench/trace_summary.py sums it per kind of span and per step); up to 4
 * --trace options trace as many variants in one run.
 * --quick (default): 64^3, 128^3, 192^3, 20 steps, 3 runs.  --full: adds 256^3 and 384^3, 50 steps.
 * Progress on stderr (one line per point), a markdown table on stdout.
 *
 * CSV: one row per (variant, volume):
 *   variant,volume,block_size,wall_ms,h2d_bytes,d2h_bytes,faults,evictions,ratio_to_explicit,ratio_to_lazy
 * variant is explicit, lazy or rolling; volume is the edge (64 means 64^3); block_size is 0 for
 * explicit (no tracking), the runtime's default block size (adsm_block_size(), ADSM_BLOCK_SIZE
 * honoured) for lazy (which tracks whole objects anyway), and the configured size for rolling.
 * wall_ms is the median over the runs; the byte and fault counts are those of the median run;
 * the ratios are medians over medians of the same program run (explicit and lazy included, as 1).
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench/common.h"

/* ---- the kernel ----------------------------------------------------------------------------- */
ADSM_KERNEL(stencil_step, ADSM_OUT(float, next), ADSM_IN(float, cur), ADSM_VALUE(uint32_t, nx),
            ADSM_VALUE(uint32_t, ny), ADSM_VALUE(uint32_t, nz));

#define STENCIL_C0 0.4f /* centre weight */
#define STENCIL_C1 0.1f /* weight of each of the six neighbours (diffusion, stable: 0.4 + 6 * 0.1 = 1) */

/* One time step over the flattened volume (x fastest). Boundary points are copied unchanged. */
void stencil_step(adsm_grid g, float *next, const float *cur, uint32_t nx, uint32_t ny, uint32_t nz) {
    const size_t sy = nx, sz = (size_t)nx * ny, n = sz * nz;
    if (g.begin >= n) return;
    uint32_t x = (uint32_t)(g.begin % nx), y = (uint32_t)((g.begin / nx) % ny), z = (uint32_t)(g.begin / sz);
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= n) break;
        if (x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1)
            next[i] = cur[i];
        else
            next[i] = STENCIL_C0 * cur[i] +
                      STENCIL_C1 * ((cur[i - 1] + cur[i + 1]) + (cur[i - sy] + cur[i + sy]) + (cur[i - sz] + cur[i + sz]));
        if (++x == nx) {
            x = 0;
            if (++y == ny) {
                y = 0;
                ++z;
            }
        }
    }
}

/* The same kernel in CUDA C for the cuda backend (loaded after each adsm_init). i is the same
 * flattened global thread index as the body's (x fastest), the point is found from i as the body
 * does, and the weights are STENCIL_C0 and STENCIL_C1 written out (macros are not expanded inside
 * ADSM_CUDA_SOURCE). __fadd_rn is never contracted into a fused multiply-add, so each point is
 * computed with the body's roundings, bit for bit. */
static const char stencil_step_cuda[] = ADSM_CUDA_SOURCE(
    extern "C" __global__ void stencil_step(float *next, const float *cur, unsigned int nx, unsigned int ny,
                                            unsigned int nz) {
        size_t gx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        size_t gy = blockIdx.y * (size_t)blockDim.y + threadIdx.y;
        size_t gz = blockIdx.z * (size_t)blockDim.z + threadIdx.z;
        size_t i = (gz * gridDim.y * blockDim.y + gy) * gridDim.x * blockDim.x + gx;
        const size_t sy = nx, sz = (size_t)nx * ny, n = sz * nz;
        if (i >= n) return;
        unsigned int x = (unsigned int)(i % nx), y = (unsigned int)((i / nx) % ny), z = (unsigned int)(i / sz);
        if (x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1)
            next[i] = cur[i];
        else
            next[i] = __fadd_rn(0.4f * cur[i], 0.1f * ((cur[i - 1] + cur[i + 1]) + (cur[i - sy] + cur[i + sy]) +
                                                       (cur[i - sz] + cur[i + sz])));
    });

/* ---- helpers -------------------------------------------------------------------------------- */
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void die(const char *what) {
    fprintf(stderr, "stencil3d: %s: %s\n", what, adsm_last_error());
    exit(1);
}

static void check(adsm_result r, const char *what) {
    if (r != ADSM_OK) die(what);
}

/* The emitter: the source value introduced at step t (computed the same way for every variant). */
static float source_value(int t) { return 1.0f + 0.25f * (float)(t % 8); }

static const char *human_bytes(uint64_t b, char *buf, size_t len) {
    if (b < 1024) snprintf(buf, len, "%llu B", (unsigned long long)b);
    else if (b < 1024ull * 1024) snprintf(buf, len, "%.1f KiB", (double)b / 1024);
    else if (b < 1024ull * 1024 * 1024) snprintf(buf, len, "%.1f MiB", (double)b / (1024.0 * 1024));
    else snprintf(buf, len, "%.2f GiB", (double)b / (1024.0 * 1024 * 1024));
    return buf;
}

static const char *size_name(size_t b, char *buf, size_t len) {
    if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(buf, len, "%zuM", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) snprintf(buf, len, "%zuK", b >> 10);
    else snprintf(buf, len, "%zu", b);
    return buf;
}

/* ---- variants ------------------------------------------------------------------------------- */
enum { V_EXPLICIT, V_LAZY, V_ROLLING, V_UM, V_UM_PREFETCH, V_HMM };
typedef struct variant {
    const char *name; /* CSV name */
    int kind;
    size_t block_size; /* rolling: configured; lazy: filled in from adsm_block_size() */
} variant;

static variant variants[] = {
    {"explicit", V_EXPLICIT, 0},
    {"lazy", V_LAZY, 0},
    {"rolling", V_ROLLING, 4u << 10},
    {"rolling", V_ROLLING, 256u << 10},
    {"rolling", V_ROLLING, 1u << 20},
    {"rolling", V_ROLLING, 32u << 20},
    /* cuda only (unified memory is the CUDA driver's): the last three, left out elsewhere; hmm
     * (plain host memory) only where the GPU reaches pageable memory */
    {"um", V_UM, 0},
    {"um-prefetch", V_UM_PREFETCH, 0},
    {"hmm", V_HMM, 0},
};
#define NVARIANTS (sizeof variants / sizeof variants[0])
/* the variants this backend runs: all on cuda (hmm where it runs), all but unified memory's
 * elsewhere */
static size_t nvariants = NVARIANTS - 3;
static int hmm_runs; /* bench_hmm_runs, asked once before the runs */

typedef struct measure {
    double ms;
    adsm_stats st;
} measure;

typedef struct bench_ctx {
    FILE *dump;      /* the temporary file the volume is written to */
    int dump_fd;
    int steps, dump_every;
    char backend[32];
} bench_ctx;

static void dump_volume(bench_ctx *c, const float *vol, size_t n) {
    /* The file holds the latest snapshot: each dump rewrites it from the start. */
    if (fseek(c->dump, 0, SEEK_SET) != 0 || fwrite(vol, sizeof *vol, n, c->dump) != n || fflush(c->dump) != 0) {
        fprintf(stderr, "stencil3d: writing the volume failed: %s\n", strerror(errno));
        exit(1);
    }
}

/* Runs one variant on an edge^3 volume; leaves the final volume in `final` (plain memory). */
static measure run_variant(bench_ctx *c, variant *v, uint32_t edge, float *final) {
    const size_t n = (size_t)edge * edge * edge, bytes = n * sizeof(float);
    const size_t src = ((size_t)(edge / 2) * edge + edge / 2) * edge + edge / 2; /* centre */
    const adsm_grid grid = adsm_grid_1d((uint32_t)((n + 255) / 256), 256);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (v->kind == V_LAZY) cfg.protocol = ADSM_PROTOCOL_LAZY;
    if (v->kind == V_UM) cfg.protocol = ADSM_PROTOCOL_UM;
    if (v->kind == V_UM_PREFETCH) cfg.protocol = ADSM_PROTOCOL_UM_PREFETCH;
    if (v->kind == V_HMM) cfg.protocol = ADSM_PROTOCOL_HMM;
    if (v->kind == V_ROLLING) {
        cfg.protocol = ADSM_PROTOCOL_ROLLING;
        cfg.block_size = v->block_size;
    }
    check(adsm_init(&cfg), "adsm_init");
    check(adsm_module_load_source(stencil_step_cuda, NULL), "adsm_module_load_source");
    if (!c->backend[0]) {
        snprintf(c->backend, sizeof c->backend, "%s", adsm_backend_name());
        if (!strcmp(c->backend, "cuda")) nvariants = NVARIANTS - !hmm_runs;
    }
    if (v->kind == V_LAZY) v->block_size = adsm_block_size();
    /* every run starts with an empty file, so no variant inherits another's page cache */
    if (ftruncate(c->dump_fd, 0) != 0) {
        fprintf(stderr, "stencil3d: ftruncate: %s\n", strerror(errno));
        exit(1);
    }
    check(adsm_reset_stats(), "adsm_reset_stats");

    measure m;
    double t0 = now_ms();
    if (v->kind == V_EXPLICIT) {
        /* the host copy, refreshed only for the dumps; adsm's memory kind (page-locked on cuda) */
        float *host = adsm_host_alloc(bytes);
        float *d_cur = adsm_dev_alloc(bytes), *d_next = adsm_dev_alloc(bytes); /* zero-filled */
        if (!host) die("adsm_host_alloc");
        if (!d_cur || !d_next) die("adsm_dev_alloc");
        for (int t = 1; t <= c->steps; t++) {
            float s = source_value(t);
            check(adsm_copy_to_device(d_cur + src, &s, sizeof s), "adsm_copy_to_device (source)");
            check(ADSM_CALL(stencil_step, grid, d_next, d_cur, edge, edge, edge), "launch");
            check(adsm_sync(), "adsm_sync");
            float *tmp = d_cur;
            d_cur = d_next;
            d_next = tmp;
            if (t % c->dump_every == 0) {
                check(adsm_copy_from_device(host, d_cur, bytes), "adsm_copy_from_device (dump)");
                dump_volume(c, host, n);
            }
        }
        m.ms = now_ms() - t0;
        check(adsm_get_stats(&m.st), "adsm_get_stats");
        check(adsm_copy_from_device(final, d_cur, bytes), "adsm_copy_from_device (final)");
        check(adsm_host_free(host), "adsm_host_free");
        check(adsm_dev_free(d_cur), "adsm_dev_free");
        check(adsm_dev_free(d_next), "adsm_dev_free");
    } else {
        float *cur = adsm_alloc(bytes), *next = adsm_alloc(bytes); /* zero-filled on both sides */
        if (!cur || !next) die("adsm_alloc");
        for (int t = 1; t <= c->steps; t++) {
            cur[src] = source_value(t); /* the emitter: a CPU write into one block */
            check(ADSM_CALL(stencil_step, grid, next, cur, edge, edge, edge), "launch");
            check(adsm_sync(), "adsm_sync");
            float *tmp = cur;
            cur = next;
            next = tmp;
            if (t % c->dump_every == 0) dump_volume(c, cur, n); /* plain fwrite on shared memory */
        }
        m.ms = now_ms() - t0;
        check(adsm_get_stats(&m.st), "adsm_get_stats");
        memcpy(final, cur, bytes); /* the CPU reads the result; adsm fetches what it must */
        check(adsm_free(cur), "adsm_free");
        check(adsm_free(next), "adsm_free");
    }
    adsm_shutdown();
    return m;
}

static void variant_label(const variant *v, char *buf, size_t len) {
    char b[32];
    if (v->kind == V_ROLLING) snprintf(buf, len, "rolling %s", size_name(v->block_size, b, sizeof b));
    else snprintf(buf, len, "%s", v->name);
}

/* Compares a final volume with the explicit one; exits with a message on any difference. */
static void verify(const float *ref, const float *got, size_t n, const variant *v, uint32_t edge, int run) {
    if (memcmp(ref, got, n * sizeof *ref) == 0) return;
    size_t bad = 0, first = n;
    double maxdiff = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&ref[i], &got[i], sizeof *ref) != 0) {
            if (first == n) first = i;
            bad++;
            double d = (double)ref[i] - (double)got[i];
            if (d < 0) d = -d;
            if (d > maxdiff) maxdiff = d;
        }
    }
    char label[48];
    variant_label(v, label, sizeof label);
    fprintf(stderr,
            "stencil3d: WRONG RESULT: %s on %u^3 (run %d): %zu of %zu points differ from explicit "
            "(first at %zu: %.9g instead of %.9g; max |diff| %.3g)\n",
            label, edge, run + 1, bad, n, first, (double)got[first], (double)ref[first], maxdiff);
    exit(1);
}

/* ---- main ----------------------------------------------------------------------------------- */
static char dump_path[4096]; /* removed at exit, whatever the exit path */
static void remove_dump(void) {
    if (dump_path[0]) unlink(dump_path);
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--quick | --full] [--runs N] [--steps N] [--dump-every N] [--csv FILE]\n"
            "  --quick        64^3, 128^3, 192^3; 20 steps (default)\n"
            "  --full         64^3 .. 384^3; 50 steps\n"
            "  --runs N       runs per point, the median is reported (default 3)\n"
            "  --steps N      time steps per run\n"
            "  --dump-every N write the volume to a file every N steps (default 10)\n"
            "  --csv FILE     also write one CSV row per (variant, volume)\n"
            "  --trace LABEL EDGE FILE  the last run of variant LABEL (as the table names it) at EDGE^3\n"
            "                 writes an ADSM_TRACE timeline to FILE (up to 4 of them)\n",
            argv0);
}

/* A positive count option (bench/common.h's reading, the bound this program always had). */
static long parse_positive(const char *s, const char *opt) { return bench_long_arg("stencil3d", opt, s, 1, 1000000); }

int main(int argc, char **argv) {
    int full = 0, runs = 3, steps = 0, dump_every = 10;
    const char *csv_path = NULL;
    struct {
        const char *label, *file;
        long edge;
    } traces[4];
    int ntraces = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quick")) full = 0;
        else if (!strcmp(a, "--full")) full = 1;
        else if (!strcmp(a, "--runs")) runs = (int)bench_long_arg("stencil3d", a, i + 1 < argc ? argv[++i] : NULL, 1, 64);
        else if (!strcmp(a, "--steps")) steps = (int)parse_positive(i + 1 < argc ? argv[++i] : NULL, a);
        else if (!strcmp(a, "--dump-every")) dump_every = (int)parse_positive(i + 1 < argc ? argv[++i] : NULL, a);
        else if (!strcmp(a, "--csv") && i + 1 < argc) csv_path = argv[++i];
        else if (!strcmp(a, "--trace") && i + 3 < argc && ntraces < 4) {
            traces[ntraces].label = argv[++i];
            traces[ntraces].edge = parse_positive(argv[++i], a);
            traces[ntraces++].file = argv[++i];
        }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(argv[0]);
            return 0;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    if (!steps) steps = full ? 50 : 20;
    static const uint32_t edges_all[] = {64, 128, 192, 256, 384};
    const size_t nedges = full ? 5 : 3;

    bench_ctx c;
    memset(&c, 0, sizeof c);
    c.steps = steps;
    c.dump_every = dump_every;
    const char *tmpdir = getenv("TMPDIR");
    char *path = dump_path;
    snprintf(path, sizeof dump_path, "%s/stencil3d-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    c.dump_fd = mkstemp(path);
    if (c.dump_fd < 0 || !(c.dump = fdopen(c.dump_fd, "w+"))) {
        fprintf(stderr, "stencil3d: cannot create a temporary file %s: %s\n", path, strerror(errno));
        return 1;
    }
    atexit(remove_dump);
    FILE *csv = NULL;
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
        fprintf(stderr, "stencil3d: cannot open %s: %s\n", csv_path, strerror(errno));
        return 1;
    }

    hmm_runs = bench_hmm_runs("stencil3d");
    /* results[e][v][r] */
    measure(*results)[NVARIANTS][64] = calloc(nedges, sizeof *results);
    if (!results) return 1;

    double t_start = now_ms();
    for (size_t e = 0; e < nedges; e++) {
        const uint32_t edge = edges_all[e];
        const size_t n = (size_t)edge * edge * edge;
        float *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
        if (!ref || !got) {
            fprintf(stderr, "stencil3d: out of memory\n");
            return 1;
        }
        /* Runs are interleaved (every variant once, then again), so slow drift of a shared
         * machine spreads over all variants; the explicit run of each round is the reference. */
        for (int r = 0; r < runs; r++) {
            for (size_t v = 0; v < nvariants; v++) {
                char name[48];
                variant_label(&variants[v], name, sizeof name);
                int traced = 0;
                for (int t = 0; t < ntraces && !traced && r == runs - 1; t++)
                    if (edge == traces[t].edge && !strcmp(name, traces[t].label)) {
                        setenv("ADSM_TRACE", traces[t].file, 1); /* read at adsm_init, written at shutdown */
                        traced = 1;
                    }
                results[e][v][r] = run_variant(&c, &variants[v], edge, v == V_EXPLICIT ? ref : got);
                if (traced) unsetenv("ADSM_TRACE");
                if (v != V_EXPLICIT) verify(ref, got, n, &variants[v], edge, r);
                if (r == runs - 1) {
                    double t[64];
                    for (int k = 0; k < runs; k++) t[k] = results[e][v][k].ms;
                    qsort(t, (size_t)runs, sizeof t[0], bench_cmp_double);
                    char label[48], h[32], d[32];
                    const adsm_stats *s = &results[e][v][r].st;
                    variant_label(&variants[v], label, sizeof label);
                    fprintf(stderr, "[%6.1fs] %3u^3 %-13s median %9.1f ms (min %.1f, max %.1f), h2d %s, d2h %s, %llu faults, ok\n",
                            (now_ms() - t_start) / 1e3, edge, label, runs % 2 ? t[runs / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2,
                            t[0], t[runs - 1], human_bytes(s->h2d_bytes, h, sizeof h),
                            human_bytes(s->d2h_bytes, d, sizeof d), (unsigned long long)(s->read_faults + s->write_faults));
                }
            }
        }
        free(ref);
        free(got);
    }
    fclose(c.dump);

    /* ---- report ---- */
    struct utsname un;
    char kernel[160] = "?";
    if (uname(&un) == 0) snprintf(kernel, sizeof kernel, "%s %s", un.sysname, un.release);
    char cpu[128] = "";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    if (ci) {
        char line[256];
        while (fgets(line, sizeof line, ci))
            if (!strncmp(line, "model name", 10)) {
                char *p = strchr(line, ':');
                if (p) {
                    p++;
                    while (*p == ' ') p++;
                    p[strcspn(p, "\n")] = 0;
                    snprintf(cpu, sizeof cpu, ", %s", p);
                }
                break;
            }
        fclose(ci);
    }
    char date[64];
    time_t tt = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", localtime(&tt));

    printf("## stencil3d (GMAC Figure 9): backend %s, %ld CPUs%s, %s, %s\n\n", c.backend,
           sysconf(_SC_NPROCESSORS_ONLN), cpu, kernel, date);
    printf("%s mode: %d steps, source written by the CPU every step, volume written to a file every %d steps; "
           "wall time = median of %d runs (allocation to end of last step); bytes and faults of the median run; "
           "ratios of medians.\n\n",
           full ? "full" : "quick", steps, dump_every, runs);
    printf("| volume | variant | wall ms | h2d | d2h | faults | evictions | x explicit | x lazy |\n");
    printf("| ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    if (csv) fprintf(csv, "variant,volume,block_size,wall_ms,h2d_bytes,d2h_bytes,faults,evictions,ratio_to_explicit,ratio_to_lazy\n");
    for (size_t e = 0; e < nedges; e++) {
        double med[NVARIANTS];
        int med_run[NVARIANTS];
        for (size_t v = 0; v < nvariants; v++) {
            double t[64];
            for (int k = 0; k < runs; k++) t[k] = results[e][v][k].ms;
            qsort(t, (size_t)runs, sizeof t[0], bench_cmp_double);
            med[v] = runs % 2 ? t[runs / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2;
            med_run[v] = 0; /* the run whose time is the (lower) median */
            for (int k = 0; k < runs; k++)
                if (results[e][v][k].ms == t[(runs - 1) / 2]) med_run[v] = k;
        }
        for (size_t v = 0; v < nvariants; v++) {
            const adsm_stats *s = &results[e][v][med_run[v]].st;
            char label[48], h[32], d[32];
            variant_label(&variants[v], label, sizeof label);
            double rx = med[v] / med[V_EXPLICIT], rl = med[v] / med[V_LAZY];
            unsigned long long faults = (unsigned long long)(s->read_faults + s->write_faults);
            printf("| %u^3 | %s | %.1f | %s | %s | %llu | %llu | %.2f | %.2f |\n", edges_all[e], label, med[v],
                   human_bytes(s->h2d_bytes, h, sizeof h), human_bytes(s->d2h_bytes, d, sizeof d), faults,
                   (unsigned long long)s->evictions, rx, rl);
            if (csv)
                fprintf(csv, "%s,%u,%zu,%.3f,%llu,%llu,%llu,%llu,%.4f,%.4f\n", variants[v].name, edges_all[e],
                        variants[v].kind == V_EXPLICIT ? (size_t)0 : variants[v].block_size, med[v],
                        (unsigned long long)s->h2d_bytes, (unsigned long long)s->d2h_bytes, faults,
                        (unsigned long long)s->evictions, rx, rl);
        }
    }
    printf("\ntotal benchmark time %.1f s\n", (now_ms() - t_start) / 1e3);
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "stencil3d: writing %s failed\n", csv_path);
        return 1;
    }
    free(results);
    return 0;
}
