#define ADSM_IMPLEMENTATION
#include "adsm.h"

/* bench/patterns/patterns.c -- CPU access patterns between kernel calls: what lazy, rolling (the
 * adaptive rolling size) and a hand-written explicit-copy version of the same program cost, in
 * time and in bytes moved, as ratios measured in one run (issue 15: rolling must not thrash).
 *
 * Each pattern is a program of EPOCHS epochs on one object (64 MiB; 256 MiB with --full): the CPU
 * phase below, then a kernel call and adsm_sync. The whole program is timed, setup excluded:
 *   seqinit    the CPU writes every element in order; the kernel reads the object (IN) and sums
 *              it into a small OUT object. The object starts fresh (zero on both sides).
 *   random     262,144 increments of random elements (a histogram, a scatter, a hash table)
 *   hot        262,144 random increments within a hot eighth of the object
 *   strided    one increment every 4 KiB + 4 bytes (a field of every record)
 *   colmajor   64 columns of a row-major matrix with 16 KiB rows, written column by column
 *   sweeps     three passes incrementing every element (an object larger than the window)
 *   readmostly 262,144 random reads, one in 4,096 of them also written
 * In all but seqinit the object starts Invalid on the CPU (the device filled it) and the kernel
 * increments every element (INOUT), so each epoch starts from device data again.
 * explicit: the same phases on host memory of the same kind as adsm's (2 MiB-aligned mmap +
 * madvise(MADV_HUGEPAGE)) and an adsm_dev_alloc buffer, moving what a careful programmer would:
 * seqinit uploads the object; hot downloads and uploads only the hot eighth; readmostly
 * downloads the object and uploads only the words it wrote; the others download and upload the
 * whole object around the CPU phase.
 *
 * Every run starts from adsm_init, so the adaptive rolling size learns within the run: its cost
 * is in the numbers. Each point is the median over --runs runs after one untimed warm-up run;
 * lazy's and rolling's runs at one block size alternate (so does which goes first), so both see
 * the same moments of a shared machine's load;
 * bytes are h2d + d2h from adsm_stats (the explicit copies are counted there too). After each
 * run the object is compared, element by element and untimed, with the same program run on plain
 * memory, and seqinit's sum with that program's; a difference exits 1.
 *
 *   gcc -std=c11 -O2 -Wall -Wextra -Werror -I. bench/patterns/patterns.c -pthread -ldl -o /tmp/bpat
 *   /tmp/bpat [--quick | --full] [--runs N] [--epochs N] [--only PATTERN] [--csv FILE] [--protect-delay US]
 *     --quick    64M object, blocks 64K and 2M, 3 epochs, 3 runs (default; under a minute on 2 CPUs)
 *     --full     256M object, blocks 4K, 64K, 512K, 2M, 8M, 4 epochs, 5 runs
 *     --epochs N epochs per program; --only PATTERN: that pattern alone
 *     --protect-delay US  every mprotect in the process (adsm's, lazy's and rolling's alike) spins
 *                US microseconds first: a machine whose protection changes, and so faults and
 *                evictions, are dear (issue 34: a bare write fault of 27-45 us on this machine
 *                under load, 4-7 us quiet), to see that rolling's rules follow what they cost
 * ADSM_ROLLING_SIZE=4 in the environment gives the rolling rows the paper's rule as it was before
 * issue 15 (2 per live object: the object and the kernel's small sum object), for comparison.
 *     --csv FILE one row per point:
 *                pattern,variant,block_size,size_bytes,epochs,runs,ms,h2d_bytes,d2h_bytes,faults,evictions,
 *                regrets,rolling_size   (block_size 0: explicit)
 * Progress goes to stderr, the markdown table (ratios to lazy and to explicit) to stdout. */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench/common.h"

/* ---- kernels (unsigned, not uint32_t: NVRTC has no stdint.h) -------------------------------- */
/* All single-source (pat_sum's atomic through adsm_atomic_add_ull): on cuda, start compiles them
 * with ADSM_PREPARE, before any clock. */
/* setup: the device writes the object */
ADSM_KERNEL_DEF(pat_fill, (ADSM_OUT(unsigned, x), ADSM_VALUE(size_t, n), ADSM_VALUE(unsigned, seed)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] = (unsigned)i ^ seed;
    }
});

/* the kernel of every epoch but seqinit's: updates every element */
ADSM_KERNEL_DEF(pat_bump, (ADSM_INOUT(unsigned, x), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] += 1;
    }
});

/* seqinit's kernel: reads the object, sums it */
ADSM_KERNEL_DEF(pat_sum, (ADSM_OUT(unsigned long long, sum), ADSM_IN(unsigned, x), ADSM_VALUE(size_t, n)), g, {
    unsigned long long s = 0;
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) s += x[i];
    }
    if (s) adsm_atomic_add_ull(sum, s);
});

/* ---- configuration -------------------------------------------------------------------------- */
#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)
#define MAX_RUNS 100
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define OPS 262144                  /* random accesses per epoch */
#define STRIDE (1024 + 1)           /* elements: 4 KiB + 4 bytes */
#define ROW 4096                    /* elements per matrix row: 16 KiB */
#define COLUMNS 64
#define WRITE_EVERY 4096            /* readmostly: one write per this many reads */
#define MAX_WRITES (OPS / WRITE_EVERY)

static const size_t quick_blocks[] = {64 * KiB, 2 * MiB};
static const size_t full_blocks[] = {4 * KiB, 64 * KiB, 512 * KiB, 2 * MiB, 8 * MiB};

typedef enum { P_SEQINIT, P_RANDOM, P_HOT, P_STRIDED, P_COLMAJOR, P_SWEEPS, P_READMOSTLY, P_COUNT } pattern;
static const char *pattern_name[] = {"seqinit", "random", "hot", "strided", "colmajor", "sweeps", "readmostly"};

/* um and um-prefetch (CUDA managed memory, the driver's coherence) run on cuda only, beside the
 * others (issue 30: Unified Memory measured beside adsm), and hmm (plain host memory) where the
 * GPU reaches pageable memory */
typedef enum { V_EXPLICIT, V_LAZY, V_ROLLING, V_UM, V_UM_PREFETCH, V_HMM } variant;
static const char *variant_name[] = {"explicit", "lazy", "rolling", "um", "um-prefetch", "hmm"};
static const adsm_protocol_kind variant_protocol[] = {ADSM_PROTOCOL_DEFAULT, ADSM_PROTOCOL_LAZY,
                                                      ADSM_PROTOCOL_ROLLING, ADSM_PROTOCOL_UM,
                                                      ADSM_PROTOCOL_UM_PREFETCH, ADSM_PROTOCOL_HMM};

typedef struct sample {
    double ns;
    uint64_t h2d, d2h, faults, evictions, regrets, rolling_size;
} sample;

typedef struct point {
    pattern p;
    variant v;
    size_t block; /* 0: explicit */
    double ms, h2d, d2h, faults, evictions, regrets, rolling_size;
} point;

static size_t size = 64 * MiB;
static int epochs = 3, runs = 3, full = 0, only = -1;
static char backend[64] = "?";

/* ---- helpers ---------------------------------------------------------------------------------- */
/* --protect-delay: this definition takes the place of libc's mprotect for the whole program (adsm
 * is compiled into it), spins, then makes the system call. Signal-safe (adsm changes protections
 * in its fault handler): clock_gettime and syscall only. */
static long protect_delay_ns;

int mprotect(void *addr, size_t len, int prot) {
    if (protect_delay_ns > 0) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do clock_gettime(CLOCK_MONOTONIC, &t);
        while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < protect_delay_ns);
    }
    return (int)syscall(SYS_mprotect, addr, len, prot);
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what, const char *where) {
    fprintf(stderr, "patterns: %s failed (%s): %s\n", what, where, adsm_last_error());
    exit(1);
}

static void size_label(size_t bytes, char *buf, size_t len) {
    if (bytes == 0) snprintf(buf, len, "-");
    else if (bytes >= MiB && bytes % MiB == 0) snprintf(buf, len, "%zuM", bytes / MiB);
    else snprintf(buf, len, "%zuK", bytes / KiB);
}

static adsm_grid grid_for(size_t n) { return adsm_grid_1d((uint32_t)((n + 255) / 256), 256); }

/* Host memory of the kind adsm gives its objects: 2 MiB-aligned, transparent huge pages asked for. */
static unsigned *huge_alloc(size_t bytes) {
    size_t span = bytes + 2 * MiB;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "patterns: mmap(%zu) failed: %s\n", span, strerror(errno));
        exit(1);
    }
    char *aligned = (char *)(((uintptr_t)p + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
    (void)madvise(aligned, bytes, MADV_HUGEPAGE);
    return (unsigned *)aligned;
}

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- the CPU phases: one code path for adsm objects, explicit buffers and the reference ------ */
static size_t written[MAX_WRITES]; /* readmostly: the elements the last phase wrote */
static size_t nwritten;
static volatile unsigned long long sink; /* keeps readmostly's reads */

static size_t hot_elems(size_t n) { return n / 8; }

static void cpu_phase(pattern p, unsigned *x, size_t n, int epoch) {
    uint64_t r = 0x9e3779b97f4a7c15ull + (uint64_t)epoch * 7919u;
    unsigned long long s = 0;
    switch (p) {
    case P_SEQINIT:
        for (size_t i = 0; i < n; i++) x[i] = (unsigned)i * 3u + (unsigned)epoch;
        break;
    case P_RANDOM:
        for (size_t k = 0; k < OPS; k++) x[xorshift(&r) % n] += 1;
        break;
    case P_HOT:
        for (size_t k = 0; k < OPS; k++) x[xorshift(&r) % hot_elems(n)] += 1;
        break;
    case P_STRIDED:
        for (size_t i = 0; i < n; i += STRIDE) x[i] += 1;
        break;
    case P_COLMAJOR:
        for (size_t c = 0; c < COLUMNS; c++)
            for (size_t row = 0; row < n / ROW; row++) x[row * ROW + c] = (unsigned)(row ^ c) + (unsigned)epoch;
        break;
    case P_SWEEPS:
        for (int pass = 0; pass < 3; pass++)
            for (size_t i = 0; i < n; i++) x[i] += 1;
        break;
    case P_READMOSTLY:
        nwritten = 0;
        for (size_t k = 0; k < OPS; k++) {
            size_t i = xorshift(&r) % n;
            s += x[i];
            if (k % WRITE_EVERY == WRITE_EVERY - 1) {
                x[i] += 1;
                written[nwritten++] = i;
            }
        }
        sink = s;
        break;
    default: break;
    }
}

/* seqinit's kernels read the object and add it up into the sum object, epoch after epoch: what
 * the sum must be afterwards (the object's own check cannot see whether the device ever had its
 * bytes, the kernel only reading them). */
static unsigned long long want_sum;

/* The whole program on plain memory: what the object must hold afterwards (and want_sum). */
static void reference(pattern p, unsigned *x, size_t n) {
    want_sum = 0;
    for (size_t i = 0; i < n; i++) x[i] = p == P_SEQINIT ? 0 : (unsigned)i ^ 0xabcd1234u;
    for (int e = 0; e < epochs; e++) {
        cpu_phase(p, x, n, e);
        if (p != P_SEQINIT)
            for (size_t i = 0; i < n; i++) x[i] += 1;
        else
            for (size_t i = 0; i < n; i++) want_sum += x[i];
    }
}

static void check_sum(const char *where, pattern p, const unsigned long long *sum) {
    if (p != P_SEQINIT || *sum == want_sum) return;
    fprintf(stderr, "patterns: WRONG RESULT in %s: the kernels' sum is %llu, expected %llu\n", where, *sum, want_sum);
    exit(1);
}

static void check(const char *where, const unsigned *got, const unsigned *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "patterns: WRONG RESULT in %s: element %zu is %u, expected %u\n", where, i, got[i],
                    want[i]);
            exit(1);
        }
}

/* ---- runs ------------------------------------------------------------------------------------- */
static void start(adsm_protocol_kind protocol, size_t block, const char *where) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.protocol = protocol;
    cfg.block_size = block;
    if (!getenv("ADSM_EMU_MEMORY")) cfg.emu_memory = 4 * size;
    if (adsm_init(&cfg) != ADSM_OK) die("adsm_init", where);
    /* on cuda, compile the single-source kernels here, so that no epoch's time includes it */
    if (ADSM_PREPARE(pat_fill) != ADSM_OK || ADSM_PREPARE(pat_bump) != ADSM_OK || ADSM_PREPARE(pat_sum) != ADSM_OK)
        die("ADSM_PREPARE", where);
    snprintf(backend, sizeof backend, "%s", adsm_backend_name());
    if (block && adsm_block_size() != block) {
        fprintf(stderr, "patterns: asked for block size %zu, runtime uses %zu\n", block, adsm_block_size());
        exit(1);
    }
}

static void call(pattern p, unsigned long long *sum, unsigned *x, size_t n, const char *where) {
    adsm_result r = p == P_SEQINIT ? ADSM_CALL(pat_sum, grid_for(n), sum, x, n) : ADSM_CALL(pat_bump, grid_for(n), x, n);
    if (r != ADSM_OK) die("ADSM_CALL", where);
    if (adsm_sync() != ADSM_OK) die("adsm_sync", where);
}

static sample measure(const adsm_stats *a, const adsm_stats *b, double ns) {
    sample s = {ns, b->h2d_bytes - a->h2d_bytes, b->d2h_bytes - a->d2h_bytes,
                b->read_faults + b->write_faults - a->read_faults - a->write_faults, b->evictions - a->evictions,
                b->rolling_regrets - a->rolling_regrets, b->rolling_size};
    return s;
}

static adsm_stats stats(const char *where) {
    adsm_stats s;
    if (adsm_get_stats(&s) != ADSM_OK) die("adsm_get_stats", where);
    return s;
}

static sample run_adsm(pattern p, variant v, size_t block, const unsigned *want, const char *where) {
    const size_t n = size / sizeof(unsigned);
    start(variant_protocol[v], block, where);
    unsigned *x = adsm_alloc(size);
    unsigned long long *sum = adsm_alloc(sizeof *sum);
    if (!x || !sum) die("adsm_alloc", where);
    if (p != P_SEQINIT) {
        if (ADSM_CALL(pat_fill, grid_for(n), x, n, 0xabcd1234u) != ADSM_OK) die("ADSM_CALL(pat_fill)", where);
        if (adsm_sync() != ADSM_OK) die("adsm_sync", where);
    }
    adsm_stats s0 = stats(where);
    double t0 = now_ns();
    for (int e = 0; e < epochs; e++) {
        cpu_phase(p, x, n, e);
        call(p, sum, x, n, where);
    }
    double t1 = now_ns();
    adsm_stats s1 = stats(where);
    check(where, x, want, n);
    check_sum(where, p, sum);
    if (adsm_free(x) != ADSM_OK || adsm_free(sum) != ADSM_OK) die("adsm_free", where);
    adsm_shutdown();
    return measure(&s0, &s1, t1 - t0);
}

/* What the explicit program downloads before and uploads after the CPU phase. */
static void explicit_copies(pattern p, unsigned *host, unsigned *dev, size_t n, int up, const char *where) {
    size_t len = p == P_HOT ? hot_elems(n) * sizeof(unsigned) : n * sizeof(unsigned);
    adsm_result r = ADSM_OK;
    if (p == P_SEQINIT && !up) return; /* the CPU overwrites everything */
    if (p == P_READMOSTLY && up) {
        for (size_t k = 0; k < nwritten && r == ADSM_OK; k++)
            r = adsm_copy_to_device(dev + written[k], host + written[k], sizeof(unsigned));
    } else {
        r = up ? adsm_copy_to_device(dev, host, len) : adsm_copy_from_device(host, dev, len);
    }
    if (r != ADSM_OK) die(up ? "adsm_copy_to_device" : "adsm_copy_from_device", where);
}

static sample run_explicit(pattern p, unsigned *host, const unsigned *want, const char *where) {
    const size_t n = size / sizeof(unsigned);
    start(ADSM_PROTOCOL_DEFAULT, 0, where);
    unsigned *dev = adsm_dev_alloc(size);
    unsigned long long *sum = adsm_alloc(sizeof *sum);
    if (!dev || !sum) die("adsm_dev_alloc", where);
    if (p != P_SEQINIT) {
        if (ADSM_CALL(pat_fill, grid_for(n), dev, n, 0xabcd1234u) != ADSM_OK) die("ADSM_CALL(pat_fill)", where);
        if (adsm_sync() != ADSM_OK) die("adsm_sync", where);
    } else {
        memset(host, 0, size);
    }
    adsm_stats s0 = stats(where);
    double t0 = now_ns();
    for (int e = 0; e < epochs; e++) {
        explicit_copies(p, host, dev, n, 0, where);
        cpu_phase(p, host, n, e);
        explicit_copies(p, host, dev, n, 1, where);
        call(p, sum, dev, n, where);
    }
    double t1 = now_ns();
    adsm_stats s1 = stats(where);
    if (adsm_copy_from_device(host, dev, size) != ADSM_OK) die("adsm_copy_from_device", where);
    check(where, host, want, n);
    check_sum(where, p, sum);
    if (adsm_dev_free(dev) != ADSM_OK || adsm_free(sum) != ADSM_OK) die("adsm_dev_free", where);
    adsm_shutdown();
    return measure(&s0, &s1, t1 - t0);
}

/* The samples of one point, reduced to their medians. */
typedef struct samples {
    double ms[MAX_RUNS], h2d[MAX_RUNS], d2h[MAX_RUNS], f[MAX_RUNS], ev[MAX_RUNS], rg[MAX_RUNS], rs[MAX_RUNS];
} samples;

static void keep(samples *x, int r, const sample *s) {
    x->ms[r] = s->ns / 1e6;
    x->h2d[r] = (double)s->h2d;
    x->d2h[r] = (double)s->d2h;
    x->f[r] = (double)s->faults;
    x->ev[r] = (double)s->evictions;
    x->rg[r] = (double)s->regrets;
    x->rs[r] = (double)s->rolling_size;
}

static point reduce(pattern p, variant v, size_t block, samples *x) {
    point pt = {p, v, block, bench_median(x->ms, runs), bench_median(x->h2d, runs), bench_median(x->d2h, runs),
                bench_median(x->f, runs), bench_median(x->ev, runs), bench_median(x->rg, runs), bench_median(x->rs, runs)};
    return pt;
}

static sample run_one(pattern p, variant v, size_t block, unsigned *host, const unsigned *want) {
    char where[96], bs[24];
    size_label(block, bs, sizeof bs);
    snprintf(where, sizeof where, "%s, %s %s", pattern_name[p], variant_name[v], bs);
    return v == V_EXPLICIT ? run_explicit(p, host, want, where) : run_adsm(p, v, block, want, where);
}

/* One point: a warm-up run, then the median of `runs` runs. */
static point run_point(pattern p, variant v, size_t block, unsigned *host, const unsigned *want) {
    static samples x;
    for (int r = -1; r < runs; r++) {
        sample s = run_one(p, v, block, host, want);
        if (r >= 0) keep(&x, r, &s);
    }
    return reduce(p, v, block, &x);
}

/* Lazy and rolling at one block size: a warm-up run of each, then their runs alternating (which
 * goes first alternating too), so that both meet the same moments of a shared machine's load and
 * their ratio is not skewed by it. */
static void run_pair(pattern p, size_t block, unsigned *host, const unsigned *want, point *lazy, point *rolling) {
    static samples xl, xr;
    for (int r = -1; r < runs; r++) {
        int rolling_first = r > 0 && r % 2;
        sample a = run_one(p, rolling_first ? V_ROLLING : V_LAZY, block, host, want);
        sample b = run_one(p, rolling_first ? V_LAZY : V_ROLLING, block, host, want);
        if (r < 0) continue;
        keep(&xl, r, rolling_first ? &b : &a);
        keep(&xr, r, rolling_first ? &a : &b);
    }
    *lazy = reduce(p, V_LAZY, block, &xl);
    *rolling = reduce(p, V_ROLLING, block, &xr);
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--quick | --full] [--runs N] [--epochs N] [--only PATTERN] [--csv FILE]\n"
            "  --quick     64M object; blocks 64K, 2M; 3 epochs; 3 runs (default)\n"
            "  --full      256M object; blocks 4K, 64K, 512K, 2M, 8M; 4 epochs; 5 runs\n"
            "  --runs N    runs per point, 1..%d\n"
            "  --epochs N  epochs (CPU phase + call) per program, 1..100\n"
            "  --only P    one pattern: seqinit random hot strided colmajor sweeps readmostly\n"
            "  --protect-delay US  every mprotect spins US microseconds first (dear protection changes)\n"
            "  --csv FILE  write one CSV row per point\n",
            argv0, MAX_RUNS);
}

static double mib(double bytes) { return bytes / (double)MiB; }

/* cuda: unified memory beside the explicit program and rolling at the largest block. um[k i + j]
 * is pattern i's j-th of the k unified points (um, um-prefetch, and hmm where it runs). */
static void print_um_table(const point *pts, size_t npts, size_t nblocks, const point *um, size_t npatterns,
                           size_t k) {
    size_t per = 1 + 2 * nblocks;
    printf("\n### Unified memory beside them (cuda: um, um-prefetch; CUDA managed memory, the driver migrates%s)\n\n",
           k > 2 ? "; hmm: plain host memory the GPU reaches" : "");
    printf("| pattern | explicit ms | rolling %s ms | um ms | um-prefetch ms |%s rolling x expl | um x expl | "
           "um-prefetch x expl |%s\n| --- | ---: | ---: | ---: | ---: |%s ---: | ---: | ---: |%s\n",
           "(largest block)", k > 2 ? " hmm ms |" : "", k > 2 ? " hmm x expl |" : "", k > 2 ? " ---: |" : "",
           k > 2 ? " ---: |" : "");
    for (size_t i = 0; i < npatterns && (i + 1) * per <= npts; i++) {
        const point *e = &pts[i * per], *r = &pts[i * per + per - 1], *u = &um[k * i];
        printf("| %s | %.1f | %.1f | %.1f | %.1f |", pattern_name[e->p], e->ms, r->ms, u[0].ms, u[1].ms);
        if (k > 2) printf(" %.1f |", u[2].ms);
        printf(" %.2f | %.2f | %.2f |", r->ms / e->ms, u[0].ms / e->ms, u[1].ms / e->ms);
        if (k > 2) printf(" %.2f |", u[2].ms / e->ms);
        printf("\n");
    }
}

static void print_table(const point *pts, size_t npts, size_t nblocks, double total_s, FILE *csv) {
    struct utsname u;
    char date[64] = "?";
    time_t t = time(NULL);
    struct tm tm;
    if (uname(&u) != 0) snprintf(u.release, sizeof u.release, "?");
    if (localtime_r(&t, &tm)) strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", &tm);
    char sz[24];
    size_label(size, sz, sizeof sz);
    printf("## patterns: CPU access patterns between kernel calls, %s object, %d epochs, median of %d runs\n\n",
           sz, epochs, runs);
    printf("backend %s; machine: nproc %ld, Linux %s (%s); %s; total %.0f s\n\n", backend,
           sysconf(_SC_NPROCESSORS_ONLN), u.release, u.machine, date, total_s);
    printf("ms = the whole program (CPU phases, copies, calls, syncs); MiB = h2d + d2h; ratios of medians from "
           "this run. roll/lazy: rolling over lazy (goal: time <= 1.2, bytes <= 1.5); x expl: over the explicit "
           "program. evict/regret/size: rolling's evictions, regretted evictions, final rolling size (blocks).\n\n");
    printf("| pattern | block | explicit ms | lazy ms | rolling ms | roll/lazy time | lazy x expl | rolling x expl "
           "| explicit MiB | lazy MiB | rolling MiB | roll/lazy bytes | evict / regret / size |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    /* per pattern: explicit, then per block lazy and rolling */
    size_t per = 1 + 2 * nblocks;
    for (size_t k = 0; k + per <= npts; k += per) {
        const point *e = &pts[k];
        for (size_t b = 0; b < nblocks; b++) {
            const point *l = &pts[k + 1 + 2 * b], *r = &pts[k + 2 + 2 * b];
            char bs[24];
            size_label(l->block, bs, sizeof bs);
            double eb = e->h2d + e->d2h, lb = l->h2d + l->d2h, rb = r->h2d + r->d2h;
            printf("| %s | %s | %.1f | %.1f | %.1f | **%.2f** | %.2f | %.2f | %.1f | %.1f | %.1f | **%.2f** | "
                   "%.0f / %.0f / %.0f |\n",
                   pattern_name[e->p], bs, e->ms, l->ms, r->ms, r->ms / l->ms, l->ms / e->ms, r->ms / e->ms, mib(eb),
                   mib(lb), mib(rb), lb > 0 ? rb / lb : 0, r->evictions, r->regrets, r->rolling_size);
        }
    }
    if (!csv) return;
    fprintf(csv, "pattern,variant,block_size,size_bytes,epochs,runs,ms,h2d_bytes,d2h_bytes,faults,evictions,regrets,"
                 "rolling_size\n");
    for (size_t i = 0; i < npts; i++) {
        const point *p = &pts[i];
        fprintf(csv, "%s,%s,%zu,%zu,%d,%d,%.3f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f\n", pattern_name[p->p],
                variant_name[p->v], p->block, size, epochs, runs, p->ms, p->h2d, p->d2h, p->faults, p->evictions,
                p->regrets, p->rolling_size);
    }
}

int main(int argc, char **argv) {
    int runs_set = 0, epochs_set = 0;
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
        } else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) {
            epochs = atoi(argv[++i]);
            epochs_set = 1;
            if (epochs < 1 || epochs > 100) {
                usage(argv[0]);
                return 1;
            }
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            const char *name = argv[++i];
            for (int p = 0; p < P_COUNT; p++)
                if (!strcmp(name, pattern_name[p])) only = p;
            if (only < 0) {
                usage(argv[0]);
                return 1;
            }
        } else if (!strcmp(argv[i], "--protect-delay") && i + 1 < argc) {
            protect_delay_ns = (long)atoi(argv[++i]) * 1000;
            if (protect_delay_ns < 0 || protect_delay_ns > 100000000) {
                usage(argv[0]);
                return 1;
            }
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
    if (full) {
        size = 256 * MiB;
        if (!epochs_set) epochs = 4;
    }
    if (!runs_set) runs = full ? 5 : 3;
    FILE *csv = NULL;
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
        fprintf(stderr, "patterns: cannot open %s: %s\n", csv_path, strerror(errno));
        return 1;
    }
    const size_t *blocks = full ? full_blocks : quick_blocks;
    const size_t nblocks = full ? COUNT(full_blocks) : COUNT(quick_blocks);
    const size_t n = size / sizeof(unsigned), npts = (only < 0 ? P_COUNT : 1) * (1 + 2 * nblocks);
    point *pts = calloc(npts, sizeof *pts), *um = calloc(3 * P_COUNT, sizeof *um);
    unsigned *want = malloc(size), *host = huge_alloc(size);
    if (!pts || !um || !want) return 1;
    start(ADSM_PROTOCOL_DEFAULT, 0, "the backend"); /* which backend the default picks */
    adsm_shutdown();
    int on_cuda = strcmp(backend, "cuda") == 0;
    variant last_unified = on_cuda && bench_hmm_runs("patterns") ? V_HMM : V_UM_PREFETCH;
    size_t nu = 0;
    double t_start = now_ns();
    size_t k = 0;
    for (pattern p = 0; p < P_COUNT; p++) {
        if (only >= 0 && (int)p != only) continue;
        reference(p, want, n);
        pts[k++] = run_point(p, V_EXPLICIT, 0, host, want);
        for (size_t b = 0; b < nblocks; b++) {
            run_pair(p, blocks[b], host, want, &pts[k], &pts[k + 1]);
            for (int i = 0; i < 2; i++, k++) {
                const point *pt = &pts[k];
                char bs[24];
                size_label(blocks[b], bs, sizeof bs);
                fprintf(stderr, "[%2zu/%zu] %-10s %-7s %4s %8.1f ms  %8.1f MiB  evictions %.0f  regrets %.0f  %.0f s\n",
                        k + 1, npts, pattern_name[p], variant_name[pt->v], bs, pt->ms, mib(pt->h2d + pt->d2h),
                        pt->evictions, pt->regrets, (now_ns() - t_start) / 1e9);
            }
        }
        for (variant v = V_UM; on_cuda && v <= last_unified; v++, nu++) {
            um[nu] = run_point(p, v, blocks[nblocks - 1], host, want);
            fprintf(stderr, "[um] %-10s %-11s %8.1f ms  %8.1f MiB prefetched  %.0f s\n", pattern_name[p],
                    variant_name[v], um[nu].ms, mib(um[nu].h2d + um[nu].d2h), (now_ns() - t_start) / 1e9);
        }
    }
    print_table(pts, npts, nblocks, (now_ns() - t_start) / 1e9, csv);
    size_t per_pattern = (size_t)(last_unified - V_UM) + 1;
    if (on_cuda) print_um_table(pts, npts, nblocks, um, nu / per_pattern, per_pattern);
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "patterns: writing %s failed: %s\n", csv_path, strerror(errno));
        return 1;
    }
    free(pts);
    free(um);
    free(want);
    return 0;
}
