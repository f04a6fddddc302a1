/* bench/common.h -- what the benchmarks share: a monotonic clock, the median each table reports
 * (ratios of medians of variants measured in one run), and a fixed-seed random order of distinct
 * indices for the fault benchmarks, and a strict reading of numeric options. Header-only, main
 * thread; include as "bench/common.h" (build with -I.). */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The value of option `opt` (text), a whole number in [lo, hi]; anything else (junk after the
 * digits, out of range, missing) ends the program with a message naming the option, status 2. */
static inline long bench_long_arg(const char *prog, const char *opt, const char *text, long lo, long hi) {
    char *end = NULL;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || end == text || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s %s: expected a whole number from %ld to %ld\n", prog, opt, text ? text : "(missing)",
                lo, hi);
        exit(2);
    }
    return v;
}

/* An option this program does not know: said, status 2 (a typo must not run a full measurement). */
static inline void bench_unknown_arg(const char *prog, const char *arg, const char *usage) {
    fprintf(stderr, "%s: unknown option %s\nusage: %s %s\n", prog, arg, prog, usage);
    exit(2);
}

/* Seconds on the monotonic clock. */
static inline double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* qsort order of doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n), n >= 1; sorts v. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The median of in[0..n), 1 <= n <= 256, leaving in as it is. */
static inline double bench_median_of(const double *in, int n) {
    double v[256];
    if (n > 256) n = 256;
    memcpy(v, in, (size_t)n * sizeof *v);
    return bench_median(v, n);
}

/* The smallest and largest of v[0..n), n >= 1: a run's fastest and slowest beside its median. */
static inline void bench_range(const double *v, int n, double *lo, double *hi) {
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) {
        if (v[i] < *lo) *lo = v[i];
        if (v[i] > *hi) *hi = v[i];
    }
}

/* K = min(n, most) distinct indices below n, spread evenly over [0, n) and shuffled (xorshift,
 * the same order for the same seed). Returns K. */
static inline size_t bench_random_order(size_t *order, size_t n, size_t most, uint64_t seed) {
    size_t k = n < most ? n : most;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < k; i++) order[i] = n <= most ? i : (size_t)((double)i * (double)n / (double)k);
    for (size_t i = k; i > 1; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = (size_t)(x % i), t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    return k;
}

#ifdef ADSM_H_INCLUDED
#include <stdio.h>
/* Whether protocol hmm (plain host memory the GPU reaches itself) runs on the default backend:
 * only on cuda, where the GPU reports pageable memory access. Where a GPU does not, says why on
 * stderr, so that a table without the hmm rows tells its reader (elsewhere no table has unified
 * memory's rows, and nothing is said). */
static inline int bench_hmm_runs(const char *bench) {
    if (adsm_init(NULL) != ADSM_OK) return 0;
    int on_cuda = strcmp(adsm_backend_name(), "cuda") == 0;
    adsm_shutdown();
    if (!on_cuda) return 0;
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.protocol = ADSM_PROTOCOL_HMM;
    if (adsm_init(&cfg) == ADSM_OK) {
        adsm_shutdown();
        return 1;
    }
    fprintf(stderr, "%s: no hmm rows: %s\n", bench, adsm_last_error());
    return 0;
}
#endif

#endif /* BENCH_COMMON_H */
