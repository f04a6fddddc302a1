#define ADSM_IMPLEMENTATION
#include "adsm.h"

/* bench/transfer/transfer.c -- how fast adsm moves data, against explicit copies of the same size.
 *
 * One run answers "does adsm move data at link speed" on the default backend (ADSM_BACKEND, else
 * what adsm_init picks: cuda when a GPU answers, else emu). For each object size and, for each
 * protocol (lazy, rolling) and block size, with adsm_init/adsm_shutdown around each configuration:
 *   upload    the CPU writes the whole object (a loop, timed on its own as "write" and left out
 *             of the upload), then a call of `touch` (one thread reads one element into a small
 *             OUT object) makes adsm flush what is still dirty; the call + adsm_sync is timed.
 *             h2d_bytes over write + call must equal the object size. Rolling sends most blocks
 *             while the CPU is still writing (eager eviction), so its call only drains and
 *             flushes the tail: "early MiB" says how much was queued before the call, and
 *             "w+up x expl" compares write + upload with the explicit write + copy.
 *             Checked (untimed): the probe holds the element `touch` read, and a `verify` kernel
 *             compares every element on the device with the pattern the CPU wrote.
 *   download  `fill` writes the whole object (OUT) on the device, adsm_sync (untimed, so the
 *             kernel is left out), then the CPU reads every element once and compares it with
 *             the pattern (the fetches happen inside that pass, at the faults); the pass is
 *             timed. d2h_bytes over the pass must equal the object size.
 *   explicit  the same size from adsm_host_alloc memory (huge pages as adsm's objects; page-locked on
 *             cuda, as careful CUDA code has it) through adsm_dev_alloc buffers:
 *             write loop (timed alone), adsm_copy_to_device (up), `verify` on the device buffer,
 *             `fill` on it, adsm_copy_from_device + the same CPU compare pass (down; the copy
 *             alone is the "copy GB/s" column). Same checks, same byte counts.
 * Batch is left out: it moves every object both ways at every call/sync (a lazy upload plus a
 * lazy download per call), so it has no upload or download of its own to time.
 * On cuda the whole sweep repeats for each size of the pinned staging buffers
 * (adsm_config.cuda_staging, ADSM_CUDA_STAGING; explicit copies use them too, so each staging
 * size has its own explicit baseline); on other backends the staging column is "-". On the host
 * backend (ADSM_BACKEND=host: one memory) adsm moves nothing, so its byte counts must be 0.
 *
 * Every phase is timed with clock_gettime(CLOCK_MONOTONIC); each point is the median over --runs
 * runs (after one untimed warm-up run that faults in host and device pages). GB/s = 1e9 bytes/s
 * = size / median time. Ratios ("x expl") are adsm GB/s over explicit GB/s of the same size and
 * staging in this same program run (below 1: adsm is slower): up = flush vs adsm_copy_to_device,
 * w+up = (write + flush) vs (write to the explicit host buffer + adsm_copy_to_device), down = CPU pass
 * with fetches vs adsm_copy_from_device + the same pass. "copy GB/s" is, for adsm rows, the
 * copy bandwidth adsm timed itself (adsm_stats h2d_ns/d2h_ns: the copies alone, eager ones
 * included), for the explicit row the copy calls alone. Wrong data or a wrong byte count exits 1.
 *
 *   gcc -std=c11 -O2 -Wall -Wextra -Werror -I. bench/transfer/transfer.c -pthread -ldl -o /tmp/btr
 *   /tmp/btr [--quick | --full] [--runs N] [--csv FILE]
 *     --quick    16M and 128M objects, blocks 64K and 2M, staging 2M and 8M (cuda), 3 runs (default)
 *     --full     4M, 16M, 128M, 512M; blocks 4K..8M; staging 1M..64M (cuda); 5 runs
 *     --runs N   runs per point (overrides --quick/--full)
 *     --csv FILE one row per point:
 *                staging,variant,block_size,size_bytes,runs,write_ms,up_ms,up_gbps,up_ratio,
 *                early_bytes,wup_gbps,wup_ratio,down_ms,down_gbps,down_ratio,h2d_copy_gbps,d2h_copy_gbps,
 *                h2d_bytes,d2h_bytes,faults,evictions
 *                (staging 0: not cuda; block_size 0: explicit)
 * The emulated device gets 2 GiB (cfg.emu_memory) unless ADSM_EMU_MEMORY says otherwise.
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

/* ---- kernels (unsigned, not uint32_t: NVRTC has no stdint.h) -------------------------------- */
/* The value of element i after a write with `seed`: a stale, zero or misplaced block shows. */
#define PATTERN(i, seed) ((unsigned)(i) ^ (seed))

/* upload: one thread reads one element, so the call moves the data and does nothing else.
 * The kernels are single-source (verify's atomic through adsm_atomic_add_ull): on cuda NVRTC
 * compiles each at its first launch, which is in the untimed warm-up run of each point. */
ADSM_KERNEL_DEF(touch, (ADSM_OUT(unsigned, probe), ADSM_IN(unsigned, a), ADSM_VALUE(size_t, idx)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i == 0) probe[0] = a[idx];
    }
});

/* upload check (untimed): counts the elements that differ from the pattern */
ADSM_KERNEL_DEF(verify, (ADSM_OUT(unsigned long long, bad), ADSM_IN(unsigned, a), ADSM_VALUE(size_t, n),
                         ADSM_VALUE(unsigned, seed)), g, {
    unsigned long long count = 0;
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n && a[i] != PATTERN(i, seed)) count++;
    }
    if (count) adsm_atomic_add_ull(bad, count);
});

/* download: the device writes the whole object */
ADSM_KERNEL_DEF(fill, (ADSM_OUT(unsigned, a), ADSM_VALUE(size_t, n), ADSM_VALUE(unsigned, seed)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) a[i] = PATTERN(i, seed);
    }
});

/* ---- configuration space -------------------------------------------------------------------- */
#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)
#define MAX_RUNS 100

static const size_t quick_sizes[] = {16 * MiB, 128 * MiB};
static const size_t full_sizes[] = {4 * MiB, 16 * MiB, 128 * MiB, 512 * MiB};
static const size_t quick_blocks[] = {64 * KiB, 2 * MiB};
static const size_t full_blocks[] = {4 * KiB,   8 * KiB,   16 * KiB, 32 * KiB, 64 * KiB, 128 * KiB,
                                     256 * KiB, 512 * KiB, 1 * MiB,  2 * MiB,  4 * MiB,  8 * MiB};
static const size_t quick_staging[] = {2 * MiB, 8 * MiB};
static const size_t full_staging[] = {1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB, 64 * MiB};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef enum { V_EXPLICIT, V_LAZY, V_ROLLING } variant;
static const char *variant_name[] = {"explicit", "lazy", "rolling"};
static const adsm_protocol_kind variant_protocol[] = {ADSM_PROTOCOL_DEFAULT, ADSM_PROTOCOL_LAZY,
                                                      ADSM_PROTOCOL_ROLLING};

/* one run of one point; times in ns */
typedef struct sample {
    double write, up, down, copy_down; /* copy_down: explicit only, the adsm_copy_from_device alone */
    double h2d_gbps, d2h_gbps;         /* adsm rows: bytes / adsm-timed copy ns; explicit: the copies */
    double early, faults, evictions;
    double staged; /* bytes adsm copied through its own staging buffers (cuda), both directions */
    uint64_t h2d, d2h;
} sample;

/* one point: medians over the runs */
typedef struct point {
    size_t staging; /* 0: not cuda */
    variant v;
    size_t block; /* 0 for explicit */
    size_t size;
    double write_ms, up_ms, down_ms, copy_down_ms;
    double up_gbps, wup_gbps, down_gbps, h2d_copy_gbps, d2h_copy_gbps;
    double up_ratio, wup_ratio, down_ratio;
    double early, faults, evictions;
    double staged_per_byte; /* staged bytes over bytes moved: 0 where the DMA uses the pages */
    uint64_t h2d, d2h;
} point;

static char backend[64] = "?";
static int moves = 1; /* 0 on the host backend: one memory, adsm moves nothing (explicit copies still copy) */
static int runs = 3;
static int full = 0;

/* ---- helpers ---------------------------------------------------------------------------------- */
static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what, const char *where) {
    fprintf(stderr, "transfer: %s failed (%s): %s\n", what, where, adsm_last_error());
    exit(1);
}

static void wrong(const char *where, const char *fmt, unsigned long long a, unsigned long long b) {
    fprintf(stderr, "transfer: WRONG RESULT in %s: ", where);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    exit(1);
}

static void size_label(size_t bytes, char *buf, size_t len) {
    if (bytes == 0) snprintf(buf, len, "-");
    else if (bytes >= MiB && bytes % MiB == 0) snprintf(buf, len, "%zuM", bytes / MiB);
    else snprintf(buf, len, "%zuK", bytes / KiB);
}

static adsm_stats stats(const char *where) {
    adsm_stats s;
    if (adsm_get_stats(&s) != ADSM_OK) die("adsm_get_stats", where);
    return s;
}

static adsm_grid grid_for(size_t n) { return adsm_grid_1d((uint32_t)((n + 255) / 256), 256); }

/* The CPU side of both directions: the same loops for adsm objects and malloc'd buffers. */
static void write_pattern(unsigned *a, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) a[i] = PATTERN(i, seed);
}

/* Reads every element once; 0 when all match. */
static unsigned read_check(const unsigned *a, size_t n, unsigned seed) {
    unsigned diff = 0;
    for (size_t i = 0; i < n; i++) diff |= a[i] ^ PATTERN(i, seed);
    return diff;
}

static void report_bad_read(const char *where, const unsigned *a, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != PATTERN(i, seed)) {
            fprintf(stderr, "transfer: WRONG RESULT in %s: element %zu of %zu is %#x, expected %#x\n", where, i, n,
                    a[i], PATTERN(i, seed));
            exit(1);
        }
    wrong(where, "the read pass saw a difference the second pass did not (%llu, %llu)", 0, 0);
}

/* Device-side check of what the upload left there (untimed). */
static void check_device(const char *where, unsigned long long *bad, const unsigned *a, size_t n, unsigned seed) {
    bad[0] = 0;
    if (ADSM_CALL(verify, grid_for(n), bad, a, n, seed) != ADSM_OK) die("ADSM_CALL(verify)", where);
    if (adsm_sync() != ADSM_OK) die("adsm_sync after verify", where);
    if (bad[0] != 0)
        wrong(where, "the device holds %llu of %llu elements that differ from what the CPU wrote", bad[0],
              (unsigned long long)n);
}

static void start(size_t staging, adsm_protocol_kind protocol, size_t block, const char *where) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.protocol = protocol;
    cfg.block_size = block;
    cfg.cuda_staging = staging;
    if (!getenv("ADSM_EMU_MEMORY")) cfg.emu_memory = (size_t)2 << 30;
    if (adsm_init(&cfg) != ADSM_OK) die("adsm_init", where);
    snprintf(backend, sizeof backend, "%s", adsm_backend_name());
    moves = strcmp(backend, "host") != 0;
    if (block && adsm_block_size() != block) {
        fprintf(stderr, "transfer: asked for block size %zu, runtime uses %zu\n", block, adsm_block_size());
        exit(1);
    }
}

/* ---- one run ---------------------------------------------------------------------------------- */
static sample run_adsm(unsigned *a, unsigned *probe, unsigned long long *bad, size_t size, unsigned seed,
                       const char *where) {
    const size_t n = size / sizeof(unsigned);
    const size_t idx = (n - 1) - (size_t)(seed * 7919u) % n;
    sample s;
    memset(&s, 0, sizeof s);

    /* upload */
    adsm_stats s0 = stats(where);
    double t0 = now_ns();
    write_pattern(a, n, seed);
    double t1 = now_ns();
    adsm_stats s1 = stats(where);
    double t2 = now_ns();
    if (ADSM_CALL(touch, adsm_grid_1d(1, 1), probe, a, idx) != ADSM_OK) die("ADSM_CALL(touch)", where);
    if (adsm_sync() != ADSM_OK) die("adsm_sync after touch", where);
    double t3 = now_ns();
    adsm_stats s2 = stats(where);
    s.write = t1 - t0;
    s.up = t3 - t2;
    s.h2d = s2.h2d_bytes - s0.h2d_bytes;
    s.early = (double)(s1.h2d_bytes - s0.h2d_bytes);
    s.h2d_gbps = s2.h2d_ns > s0.h2d_ns ? (double)s.h2d / (double)(s2.h2d_ns - s0.h2d_ns) : 0;
    s.faults = (double)(s2.read_faults + s2.write_faults - s0.read_faults - s0.write_faults);
    s.evictions = (double)(s2.evictions - s0.evictions);
    if (s.h2d != (moves ? size : 0)) wrong(where, "upload moved %llu bytes host to device, expected %llu", s.h2d,
                                     moves ? size : 0);
    if (probe[0] != PATTERN(idx, seed)) wrong(where, "touch read %#llx, expected %#llx", probe[0], PATTERN(idx, seed));
    check_device(where, bad, a, n, seed);

    /* download */
    const unsigned seed2 = ~seed;
    if (ADSM_CALL(fill, grid_for(n), a, n, seed2) != ADSM_OK) die("ADSM_CALL(fill)", where);
    if (adsm_sync() != ADSM_OK) die("adsm_sync after fill", where);
    adsm_stats s3 = stats(where);
    double t4 = now_ns();
    unsigned diff = read_check(a, n, seed2);
    double t5 = now_ns();
    adsm_stats s4 = stats(where);
    if (diff) report_bad_read(where, a, n, seed2);
    s.down = t5 - t4;
    s.d2h = s4.d2h_bytes - s3.d2h_bytes;
    s.d2h_gbps = s4.d2h_ns > s3.d2h_ns ? (double)s.d2h / (double)(s4.d2h_ns - s3.d2h_ns) : 0;
    s.faults += (double)(s4.read_faults + s4.write_faults - s3.read_faults - s3.write_faults);
    if (s.d2h != (moves ? size : 0)) wrong(where, "download moved %llu bytes device to host, expected %llu", s.d2h,
                                     moves ? size : 0);
    s.staged = (double)(s2.staged_bytes - s0.staged_bytes + s4.staged_bytes - s3.staged_bytes);
    return s;
}

static sample run_explicit(unsigned *host, unsigned *dev, unsigned long long *bad, size_t size, unsigned seed,
                           const char *where) {
    const size_t n = size / sizeof(unsigned);
    sample s;
    memset(&s, 0, sizeof s);

    /* upload */
    adsm_stats s0 = stats(where);
    double t0 = now_ns();
    write_pattern(host, n, seed);
    double t1 = now_ns();
    if (adsm_copy_to_device(dev, host, size) != ADSM_OK) die("adsm_copy_to_device", where);
    double t2 = now_ns();
    adsm_stats s1 = stats(where);
    s.write = t1 - t0;
    s.up = t2 - t1;
    s.h2d = s1.h2d_bytes - s0.h2d_bytes;
    s.h2d_gbps = (double)size / s.up;
    if (s.h2d != size) wrong(where, "adsm_copy_to_device moved %llu bytes, expected %llu", s.h2d, size);
    check_device(where, bad, dev, n, seed);

    /* download */
    const unsigned seed2 = ~seed;
    if (ADSM_CALL(fill, grid_for(n), dev, n, seed2) != ADSM_OK) die("ADSM_CALL(fill)", where);
    if (adsm_sync() != ADSM_OK) die("adsm_sync after fill", where);
    adsm_stats s2 = stats(where);
    double t3 = now_ns();
    if (adsm_copy_from_device(host, dev, size) != ADSM_OK) die("adsm_copy_from_device", where);
    double t4 = now_ns();
    unsigned diff = read_check(host, n, seed2);
    double t5 = now_ns();
    adsm_stats s3 = stats(where);
    if (diff) report_bad_read(where, host, n, seed2);
    s.down = t5 - t3;
    s.copy_down = t4 - t3;
    s.d2h = s3.d2h_bytes - s2.d2h_bytes;
    s.d2h_gbps = (double)size / s.copy_down;
    if (s.d2h != size) wrong(where, "adsm_copy_from_device moved %llu bytes, expected %llu", s.d2h, size);
    return s;
}

/* ---- one point: warm-up + runs, medians ------------------------------------------------------- */
static point summarise(const sample *smp, int nruns) {
    double w[MAX_RUNS], u[MAX_RUNS], d[MAX_RUNS], cd[MAX_RUNS], hb[MAX_RUNS], db[MAX_RUNS];
    double e[MAX_RUNS], f[MAX_RUNS], ev[MAX_RUNS], h2d[MAX_RUNS], d2h[MAX_RUNS], sb[MAX_RUNS];
    for (int r = 0; r < nruns; r++) {
        w[r] = smp[r].write;
        u[r] = smp[r].up;
        d[r] = smp[r].down;
        cd[r] = smp[r].copy_down;
        hb[r] = smp[r].h2d_gbps;
        db[r] = smp[r].d2h_gbps;
        e[r] = smp[r].early;
        f[r] = smp[r].faults;
        ev[r] = smp[r].evictions;
        h2d[r] = (double)smp[r].h2d;
        d2h[r] = (double)smp[r].d2h;
        sb[r] = smp[r].h2d + smp[r].d2h ? smp[r].staged / (double)(smp[r].h2d + smp[r].d2h) : 0;
    }
    point p;
    memset(&p, 0, sizeof p);
    p.write_ms = bench_median_of(w, nruns) / 1e6;
    p.up_ms = bench_median_of(u, nruns) / 1e6;
    p.down_ms = bench_median_of(d, nruns) / 1e6;
    p.copy_down_ms = bench_median_of(cd, nruns) / 1e6;
    p.h2d_copy_gbps = bench_median_of(hb, nruns);
    p.d2h_copy_gbps = bench_median_of(db, nruns);
    p.early = bench_median_of(e, nruns);
    p.faults = bench_median_of(f, nruns);
    p.evictions = bench_median_of(ev, nruns);
    p.h2d = (uint64_t)bench_median_of(h2d, nruns);
    p.d2h = (uint64_t)bench_median_of(d2h, nruns);
    p.staged_per_byte = bench_median_of(sb, nruns);
    return p;
}

static void finish_point(point *p) {
    p->up_gbps = p->up_ms > 0 ? (double)p->size / (p->up_ms * 1e6) : 0;
    p->wup_gbps = (double)p->size / ((p->write_ms + p->up_ms) * 1e6);
    p->down_gbps = p->down_ms > 0 ? (double)p->size / (p->down_ms * 1e6) : 0;
}

/* All sizes of the explicit baseline for one staging size: one init. */
static void measure_explicit(size_t staging, const size_t *sizes, size_t nsizes, point *out) {
    char where[128], st[24];
    size_label(staging, st, sizeof st);
    snprintf(where, sizeof where, "explicit, staging %s", st);
    start(staging, ADSM_PROTOCOL_DEFAULT, 0, where);
    unsigned long long *bad = adsm_alloc(sizeof *bad);
    if (!bad) die("adsm_alloc(bad)", where);
    for (size_t k = 0; k < nsizes; k++) {
        size_t size = sizes[k];
        char sz[24];
        size_label(size, sz, sizeof sz);
        snprintf(where, sizeof where, "explicit %s, staging %s", sz, st);
        unsigned *host = adsm_host_alloc(size); /* adsm's memory kind: huge pages, page-locked on cuda */
        if (!host) die("adsm_host_alloc", where);
        unsigned *dev = adsm_dev_alloc(size);
        if (!dev) die("adsm_dev_alloc", where);
        sample smp[MAX_RUNS];
        (void)run_explicit(host, dev, bad, size, 0x5a5a0000u, where); /* warm-up */
        for (int r = 0; r < runs; r++) smp[r] = run_explicit(host, dev, bad, size, 0x5a5a0001u + (unsigned)r, where);
        out[k] = summarise(smp, runs);
        out[k].staging = staging;
        out[k].v = V_EXPLICIT;
        out[k].size = size;
        finish_point(&out[k]);
        if (adsm_dev_free(dev) != ADSM_OK) die("adsm_dev_free", where);
        if (adsm_host_free(host) != ADSM_OK) die("adsm_host_free", where);
    }
    if (adsm_free(bad) != ADSM_OK) die("adsm_free(bad)", where);
    adsm_shutdown();
}

/* All sizes of one (staging, protocol, block) configuration: one init. */
static void measure_adsm(size_t staging, variant v, size_t block, const size_t *sizes, size_t nsizes, point *out) {
    char where[128], st[24], bs[24];
    size_label(staging, st, sizeof st);
    size_label(block, bs, sizeof bs);
    snprintf(where, sizeof where, "%s %s, staging %s", variant_name[v], bs, st);
    start(staging, variant_protocol[v], block, where);
    unsigned long long *bad = adsm_alloc(sizeof *bad);
    unsigned *probe = adsm_alloc(sizeof *probe);
    if (!bad || !probe) die("adsm_alloc(bad, probe)", where);
    for (size_t k = 0; k < nsizes; k++) {
        size_t size = sizes[k];
        char sz[24];
        size_label(size, sz, sizeof sz);
        snprintf(where, sizeof where, "%s %s, %s object, staging %s", variant_name[v], bs, sz, st);
        unsigned *a = adsm_alloc(size);
        if (!a) die("adsm_alloc", where);
        sample smp[MAX_RUNS];
        (void)run_adsm(a, probe, bad, size, 0x3c3c0000u, where); /* warm-up */
        for (int r = 0; r < runs; r++) smp[r] = run_adsm(a, probe, bad, size, 0x3c3c0001u + (unsigned)r, where);
        out[k] = summarise(smp, runs);
        out[k].staging = staging;
        out[k].v = v;
        out[k].block = block;
        out[k].size = size;
        finish_point(&out[k]);
        if (adsm_free(a) != ADSM_OK) die("adsm_free", where);
    }
    if (adsm_free(bad) != ADSM_OK || adsm_free(probe) != ADSM_OK) die("adsm_free(bad, probe)", where);
    adsm_shutdown();
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--quick | --full] [--runs N] [--csv FILE]\n"
            "  --quick     16M, 128M objects; blocks 64K, 2M; cuda staging 2M, 8M; 3 runs (default)\n"
            "  --full      4M..512M objects; blocks 4K..8M; cuda staging 1M..64M; 5 runs\n"
            "  --runs N    runs per point, 1..%d\n"
            "  --csv FILE  write one CSV row per point\n",
            argv0, MAX_RUNS);
}

int main(int argc, char **argv) {
    int runs_set = 0;
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || v < 1 || v > MAX_RUNS) {
                usage(argv[0]);
                return 1;
            }
            runs = (int)v;
            runs_set = 1;
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
    if (!runs_set) runs = full ? 5 : 3;

    FILE *csv = NULL;
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
        fprintf(stderr, "transfer: cannot open %s: %s\n", csv_path, strerror(errno));
        return 1;
    }

    const size_t *sizes = full ? full_sizes : quick_sizes;
    const size_t nsizes = full ? COUNT(full_sizes) : COUNT(quick_sizes);
    const size_t *blocks = full ? full_blocks : quick_blocks;
    const size_t nblocks = full ? COUNT(full_blocks) : COUNT(quick_blocks);

    /* Which backend is the default here? Staging sizes are swept on cuda only. */
    double t_start = now_ns();
    start(0, ADSM_PROTOCOL_DEFAULT, 0, "probing the backend");
    int cuda = !strcmp(backend, "cuda");
    adsm_shutdown();
    static const size_t no_staging[] = {0};
    const size_t *stagings = !cuda ? no_staging : full ? full_staging : quick_staging;
    const size_t nstagings = !cuda ? 1 : full ? COUNT(full_staging) : COUNT(quick_staging);

    /* per staging: nsizes explicit points, then per variant, per block, nsizes points */
    const size_t per_staging = nsizes * (1 + 2 * nblocks);
    const size_t npoints = nstagings * per_staging;
    point *pts = calloc(npoints, sizeof *pts);
    if (!pts) return 1;
    size_t k = 0;
    fprintf(stderr, "transfer: backend %s, %zu configurations x %zu sizes, %d runs each\n", backend,
            nstagings * (1 + 2 * nblocks), nsizes, runs);
    for (size_t si = 0; si < nstagings; si++) {
        size_t staging = stagings[si];
        char st[24];
        size_label(staging, st, sizeof st);
        point *expl = &pts[k];
        measure_explicit(staging, sizes, nsizes, expl);
        for (size_t z = 0; z < nsizes; z++) {
            point *p = &pts[k + z];
            p->up_ratio = p->wup_ratio = p->down_ratio = 1.0;
            char sz[24];
            size_label(p->size, sz, sizeof sz);
            fprintf(stderr, "[%3zu/%zu] staging %-4s explicit       %5s  up %7.2f GB/s  down %7.2f GB/s  %.0f s\n",
                    k + z + 1, npoints, st, sz, p->up_gbps, p->down_gbps, (now_ns() - t_start) / 1e9);
        }
        k += nsizes;
        for (variant v = V_LAZY; v <= V_ROLLING; v++) {
            for (size_t b = 0; b < nblocks; b++) {
                measure_adsm(staging, v, blocks[b], sizes, nsizes, &pts[k]);
                for (size_t z = 0; z < nsizes; z++) {
                    point *p = &pts[k + z];
                    const point *e = &expl[z];
                    p->up_ratio = p->up_gbps / e->up_gbps;
                    p->wup_ratio = (e->write_ms + e->up_ms) / (p->write_ms + p->up_ms);
                    p->down_ratio = p->down_gbps / e->down_gbps;
                    char sz[24], bs[24];
                    size_label(p->size, sz, sizeof sz);
                    size_label(p->block, bs, sizeof bs);
                    fprintf(stderr,
                            "[%3zu/%zu] staging %-4s %-7s %5s %5s  up %7.2f GB/s (x%.2f, w+up x%.2f)  "
                            "down %7.2f GB/s (x%.2f)  faults %.0f  %.0f s\n",
                            k + z + 1, npoints, st, variant_name[v], bs, sz, p->up_gbps, p->up_ratio, p->wup_ratio,
                            p->down_gbps, p->down_ratio, p->faults, (now_ns() - t_start) / 1e9);
                }
                k += nsizes;
            }
        }
    }

    /* header: backend, machine, date */
    struct utsname u;
    char date[64] = "?";
    time_t t = time(NULL);
    struct tm tm;
    if (uname(&u) != 0) snprintf(u.release, sizeof u.release, "?");
    if (localtime_r(&t, &tm)) strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", &tm);
    printf("## transfer: adsm uploads and downloads against explicit copies, median of %d runs\n\n", runs);
    printf("backend %s; machine: nproc %ld, Linux %s (%s); %s; total %.0f s\n\n", backend,
           sysconf(_SC_NPROCESSORS_ONLN), u.release, u.machine, date, (now_ns() - t_start) / 1e9);
    printf("up = call + adsm_sync after the CPU wrote the object (explicit: adsm_copy_to_device); "
           "w+up = write + up; down = the CPU's read pass with its fetches (explicit: adsm_copy_from_device "
           "+ the same pass); x expl = GB/s over explicit GB/s (same size, same staging); early = MiB queued "
           "to the device before the call (rolling evictions); copy GB/s = adsm's own copy timing "
           "(explicit: the copy calls); staged/B = bytes adsm copied through its pinned staging per byte "
           "moved (cuda; 0 where the objects are page-locked). GB/s = 1e9 B/s.\n\n");
    printf("| staging | variant | block | size | write ms | up ms | up GB/s | up x expl | early MiB | w+up GB/s | "
           "w+up x expl | down ms | down GB/s | down x expl | copy GB/s h2d / d2h | staged/B | faults |\n");
    printf("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: | ---: |\n");
    if (csv)
        fprintf(csv, "staging,variant,block_size,size_bytes,runs,write_ms,up_ms,up_gbps,up_ratio,early_bytes,wup_gbps,"
                     "wup_ratio,down_ms,down_gbps,down_ratio,h2d_copy_gbps,d2h_copy_gbps,h2d_bytes,d2h_bytes,faults,"
                     "evictions\n");
    for (size_t i = 0; i < npoints; i++) {
        const point *p = &pts[i];
        char st[24], bs[24], sz[24], early[32], staged[32];
        size_label(p->staging, st, sizeof st);
        size_label(p->block, bs, sizeof bs);
        size_label(p->size, sz, sizeof sz);
        if (p->v == V_EXPLICIT) snprintf(early, sizeof early, "-");
        else snprintf(early, sizeof early, "%.1f", p->early / (double)MiB);
        if (p->v == V_EXPLICIT || !p->staging) snprintf(staged, sizeof staged, "-");
        else snprintf(staged, sizeof staged, "%.2f", p->staged_per_byte);
        printf("| %s | %s | %s | %s | %.1f | %.1f | %.2f | %.2f | %s | %.2f | %.2f | %.1f | %.2f | %.2f | %.2f / %.2f "
               "| %s | %.0f |\n",
               st, variant_name[p->v], bs, sz, p->write_ms, p->up_ms, p->up_gbps, p->up_ratio, early, p->wup_gbps,
               p->wup_ratio, p->down_ms, p->down_gbps, p->down_ratio, p->h2d_copy_gbps, p->d2h_copy_gbps, staged,
               p->faults);
        if (csv)
            fprintf(csv,
                    "%zu,%s,%zu,%zu,%d,%.3f,%.3f,%.4f,%.4f,%.0f,%.4f,%.4f,%.3f,%.4f,%.4f,%.4f,%.4f,%llu,%llu,%.0f,"
                    "%.0f\n",
                    p->staging, variant_name[p->v], p->block, p->size, runs, p->write_ms, p->up_ms, p->up_gbps,
                    p->up_ratio, p->early, p->wup_gbps, p->wup_ratio, p->down_ms, p->down_gbps, p->down_ratio,
                    p->h2d_copy_gbps, p->d2h_copy_gbps, (unsigned long long)p->h2d, (unsigned long long)p->d2h,
                    p->faults, p->evictions);
    }
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "transfer: writing %s failed: %s\n", csv_path, strerror(errno));
        return 1;
    }
    free(pts);
    return 0;
}
