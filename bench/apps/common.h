/* bench/apps/common.h -- what every application of the study (bench/apps/, the GMAC paper's
 * Figures 7, 8, 10 and 12) shares: arguments, deterministic input files, phase timers and the
 * one CSV row each run prints.
 *
 * Each application is three files: kernels.h (the kernels, written once with ADSM_KERNEL_DEF, or as
 * ADSM_KERNEL with a CUDA C twin where they use atomics; the input generator, the CPU reference
 * and the output check, all shared),
 * explicit.c (device buffers from adsm_dev_alloc and copies by hand, like the original CUDA code)
 * and adsm.c (the same program with the transfer code and the second set of pointers deleted). Both
 * read their inputs with plain fread (adsm.c defines ADSM_INTERPOSE_IO, so fread works on shared
 * memory) and write their output with fwrite, as the Parboil programs do.
 *
 *   <app> --gen [--full] [--data DIR]   write the inputs and the reference output, then exit
 *   <app> [--full] [--data DIR]         one run: print one CSV row (APP_CSV_HEADER) on stdout
 * Protocol, block size and rolling size come from ADSM_PROTOCOL, ADSM_BLOCK_SIZE and
 * ADSM_ROLLING_SIZE, as for any adsm program. Runs on the main thread, normal context. */
#ifndef BENCH_APPS_COMMON_H
#define BENCH_APPS_COMMON_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#ifdef APP_ON_CUDA_DOUBLE
/* Built so as //:app_<app>_adsm_double (//:apps_double_test runs them): the cuda backend over the
 * driver test double (tests/cuda), which makes host pages, page-locks, protects and copies as the
 * driver has adsm do on a GPU, so a machine without one runs each application through the cuda
 * backend's paths. The kernels' CPU bodies run on the double's stream worker in place of their
 * CUDA C twins: ADSM_PREPARE hands each to the double. */
#include "tests/cuda_double_bridge.h"
static inline adsm_result app_double_prepare(const adsm_kernel_desc *k) {
    const adsm_kernel_desc *one[1] = {k};
    return cuda_double_attach(one, 1) == 0 ? ADSM_OK : ADSM_ERROR_KERNEL_NOT_FOUND;
}
#undef ADSM_PREPARE
#define ADSM_PREPARE(kname) app_double_prepare(adsm__kernel_##kname())
#endif

#define APP_CSV_HEADER                                                                                         \
    "app,version,protocol,block_size,rolling_size,wall_ms,io_ms,kernel_ms,cpu_ms,copy_ms,fault_ms,h2d_bytes,"  \
    "d2h_bytes,faults,evictions,ok,start_ns,stop_ns"

/* Where a run's time goes, measured by the program around its own phases; copies and faults come
 * from adsm_stats (h2d_ns + d2h_ns, fault_ns). */
enum { APP_IO, APP_KERNEL, APP_CPU, APP_PHASES };

typedef struct app_run {
    const char *app, *version;
    int full;           /* Parboil-like sizes (--full) instead of the quick ones */
    int gen;            /* --gen: write the inputs and the reference, then exit */
    char data[512];     /* directory of this application's files */
    double phase_ns[APP_PHASES];
    double start_ns, wall_ns;
    int phase, phase_open;
    double phase_t0;
} app_run;

static inline double app_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline void app_die(const char *what) {
    fprintf(stderr, "%s\n", what);
    exit(1);
}

static inline void app_parse(app_run *r, const char *app, const char *version, int argc, char **argv) {
    const char *dir = getenv("ADSM_APPS_DATA") ? getenv("ADSM_APPS_DATA") : "/tmp/adsm-apps";
    memset(r, 0, sizeof *r);
    r->app = app;
    r->version = version;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--full") == 0) r->full = 1;
        else if (strcmp(argv[i], "--gen") == 0) r->gen = 1;
        else if (strcmp(argv[i], "--data") == 0 && i + 1 < argc) dir = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--gen] [--full] [--data DIR]\n", argv[0]);
            exit(2);
        }
    }
    mkdir(dir, 0755);
    snprintf(r->data, sizeof r->data, "%s/%s-%s", dir, app, r->full ? "full" : "quick");
    mkdir(r->data, 0755);
}

/* The path of one of the application's files. */
static inline const char *app_path(const app_run *r, const char *file) {
    static char path[640];
    snprintf(path, sizeof path, "%s/%s", r->data, file);
    return path;
}

static inline FILE *app_open(const app_run *r, const char *file, const char *mode) {
    FILE *f = fopen(app_path(r, file), mode);
    if (!f) {
        fprintf(stderr, "%s: %s: %s (run with --gen first)\n", r->app, app_path(r, file), strerror(errno));
        exit(1);
    }
    return f;
}

/* The output: a short write or a failed close (a full disk) fails the run, as a wrong result
 * does (the check reads memory, not the file). */
static inline void app_fwrite(const void *buf, size_t size, size_t n, FILE *out) {
    if (fwrite(buf, size, n, out) != n) app_die("writing the output failed");
}

static inline void app_fclose(FILE *out) {
    if (fclose(out) != 0) app_die("writing the output failed (at its close)");
}

/* Writes a whole file (input generation and reference outputs: plain memory). */
static inline void app_write_file(const app_run *r, const char *file, const void *buf, size_t n) {
    FILE *f = app_open(r, file, "wb");
    if (fwrite(buf, 1, n, f) != n || fclose(f) != 0) app_die("writing a data file failed");
}

/* Reads a whole file into plain memory (the reference output). */
static inline void *app_read_plain(const app_run *r, const char *file, size_t n) {
    void *buf = malloc(n);
    FILE *f = app_open(r, file, "rb");
    if (!buf || fread(buf, 1, n, f) != n) app_die("reading a data file failed");
    fclose(f);
    return buf;
}

/* Phases: the program brackets its I/O, its kernel calls (launch to sync) and its own CPU work. */
static inline void app_start(app_run *r) { r->start_ns = app_now_ns(); }

static inline void app_phase(app_run *r, int phase) {
    double now = app_now_ns();
    if (r->phase_open) r->phase_ns[r->phase] += now - r->phase_t0;
    r->phase = phase;
    r->phase_open = 1;
    r->phase_t0 = now;
}

static inline void app_stop(app_run *r) {
    app_phase(r, APP_CPU);
    r->phase_open = 0;
    r->wall_ns = app_now_ns() - r->start_ns;
}

/* Relative-or-absolute float comparison, as Parboil's compare tools do (tolerance per app). */
static inline int app_close(double got, double want, double tol) {
    double diff = fabs(got - want), scale = fabs(want) > 1.0 ? fabs(want) : 1.0;
    return diff <= tol * scale;
}

/* Deterministic data: xorshift64*, seeded per input. */
typedef struct app_rng {
    uint64_t s;
} app_rng;

static inline uint64_t app_rng_next(app_rng *g) {
    g->s ^= g->s >> 12;
    g->s ^= g->s << 25;
    g->s ^= g->s >> 27;
    return g->s * 2685821657736338717ull;
}

static inline double app_rng_unit(app_rng *g) { return (double)(app_rng_next(g) >> 11) / 9007199254740992.0; }

/* One CSV row: the measured phases, adsm's counters for this run, and whether the output matched
 * the reference. Exits non-zero on a wrong output (benchmarks assert correctness, not time). */
static inline int app_report(const app_run *r, int ok) {
    adsm_stats st;
    adsm_get_stats(&st);
    const char *protocol = strcmp(r->version, "explicit") == 0 ? "explicit" : adsm_protocol_name();
    printf("%s,%s,%s,%zu,%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%llu,%llu,%llu,%llu,%d,%.0f,%.0f\n", r->app, r->version,
           protocol, adsm_block_size(), (unsigned long long)st.rolling_size, r->wall_ns / 1e6,
           r->phase_ns[APP_IO] / 1e6, r->phase_ns[APP_KERNEL] / 1e6, r->phase_ns[APP_CPU] / 1e6,
           (double)(st.h2d_ns + st.d2h_ns) / 1e6, (double)st.fault_ns / 1e6, (unsigned long long)st.h2d_bytes,
           (unsigned long long)st.d2h_bytes, (unsigned long long)(st.read_faults + st.write_faults),
           (unsigned long long)st.evictions, ok, r->start_ns, r->start_ns + r->wall_ns);
    if (!ok) fprintf(stderr, "%s (%s): WRONG OUTPUT\n", r->app, r->version);
    return ok ? 0 : 1;
}

#endif /* BENCH_APPS_COMMON_H */
