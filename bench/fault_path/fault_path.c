#define ADSM_IMPLEMENTATION
#define ADSM_NO_INTERPOSE_SIGNALS /* the bare runs install their own SIGSEGV handler */
#include "adsm.h"

/* bench/fault_path/fault_path.c -- what one write fault costs in adsm against a bare SIGSEGV +
 * mprotect handler doing the same work on the same memory, for objects of 1, 1K, 64K and 1M
 * blocks of 4 KiB (the fault path must stay flat in the object size), with each of adsm's fault
 * engines (adsm_impl/protection.h): mprotect, and userfaultfd write-protection.
 *
 * Pattern (both sides): one byte written into each of K distinct blocks (K = min(blocks, 16384)),
 * in a random order, each block written once, nothing evicted (rolling with a rolling size above
 * K, so every fault is ReadOnly -> Dirty: one lookup, one mprotect, the FIFO).
 *   bare  an anonymous mapping of the same size from a reservation like adsm's (MADV_HUGEPAGE,
 *         PROT_READ); its handler mprotects the faulting 4 KiB page read-write.
 *   adsm  adsm_alloc of the same size under rolling, 4 KiB blocks; the handler is adsm's, once
 *         with ADSM_FAULT_ENGINE=mprotect (SIGSEGV, mprotect) and once with userfaultfd (SIGBUS,
 *         one UFFDIO_WRITEPROTECT ioctl); adsm is started for each pass and stopped after it.
 * Both are timed around the whole write loop (us per fault = time / K); each point is the median
 * of --runs runs (default 5), each on fresh memory. The ratio is adsm over bare in this run.
 * The 1-block row writes 1024 one-block objects (bare: 1024 mappings) once each, so that it too
 * is a median of many faults rather than of one. A second table takes K = 1024 in every row:
 * in the first, the large objects take 16x more faults, and every fault splits the mapping, so
 * the kernel's own cost per fault grows with the fault count; the second holds that count. The
 * last two columns are the time inside the handler alone (bare: its mprotect; adsm: its own
 * adsm_stats.fault_ns, from lookup to the end of its protection change). Under each table, the
 * slowest row's time over the fastest row's, per variant: how flat each is in the object size.
 *
 *   gcc -std=c11 -O2 -I. bench/fault_path/fault_path.c -pthread -ldl -o /tmp/fp && /tmp/fp [--quick | --full | --runs N]
 *   (--quick: 3 runs, --full: 7)
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench/common.h"

#define BLOCK ((size_t)4096)
#define MAX_WRITES 16384
#define MAX_RUNS 25

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

#define SMALL_OBJECTS 1024 /* one-block objects the 1-block row writes */
#define SAME_FAULTS 1024   /* the second table: this many faults in every row */

/* One byte into each listed block of each of n objects; us per write. */
static double write_pass(unsigned char **objs, size_t n, const size_t *order, size_t k) {
    double t0 = now_us();
    for (size_t j = 0; j < n; j++) {
        volatile unsigned char *p = objs[j];
        for (size_t i = 0; i < k; i++) p[order[i] * BLOCK] = 1;
    }
    return (now_us() - t0) / (double)(k * n);
}

/* ---- the bare handler ------------------------------------------------------------------------ */
static volatile double bare_handler_us; /* time inside the handler (its mprotect), summed over a pass */

static void bare_handler(int sig, siginfo_t *si, void *ctx) {
    (void)sig, (void)ctx;
    uintptr_t page = (uintptr_t)si->si_addr & ~(uintptr_t)(BLOCK - 1);
    double t0 = now_us(); /* clock_gettime: async-signal-safe */
    mprotect((void *)page, BLOCK, PROT_READ | PROT_WRITE);
    bare_handler_us += now_us() - t0;
}

/* One pass: us per fault for the whole write loop, and in *handler_us the time inside the handler
 * per fault (bare: its mprotect; adsm: resolving the fault, its own adsm_stats.fault_ns, lookup,
 * lock, protocol and mprotect), which leaves out the kernel's signal delivery and return. */
static double bare_run(size_t nblocks, size_t n, const size_t *order, size_t k, double *handler_us) {
    static unsigned char *raw[SMALL_OBJECTS], *objs[SMALL_OBJECTS];
    size_t size = nblocks * BLOCK, huge = (size_t)2 << 20;
    for (size_t j = 0; j < n; j++) {
        raw[j] = mmap(NULL, size + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (raw[j] == MAP_FAILED) exit(1);
        objs[j] = (unsigned char *)(((uintptr_t)raw[j] + huge - 1) & ~(uintptr_t)(huge - 1));
        madvise(objs[j], size, MADV_HUGEPAGE);
        mprotect(objs[j], size, PROT_READ);
    }
    bare_handler_us = 0;
    double us = write_pass(objs, n, order, k);
    *handler_us = bare_handler_us / (double)(k * n);
    for (size_t j = 0; j < n; j++) munmap(raw[j], size + huge);
    return us;
}

/* adsm with one fault engine, started for the pass and stopped after it (so the bare runs own
 * SIGSEGV meanwhile); NAN when the engine cannot start here. */
static int adsm_start(adsm_fault_engine_kind engine) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = BLOCK;
    cfg.rolling_size = 2 * MAX_WRITES; /* nothing is evicted */
    cfg.emu_memory = (size_t)5 << 30;
    cfg.fault_engine = engine;
    return adsm_init(&cfg) == ADSM_OK ? 0 : -1;
}

static double adsm_run(adsm_fault_engine_kind engine, size_t nblocks, size_t n, const size_t *order, size_t k,
                       double *handler_us) {
    static unsigned char *objs[SMALL_OBJECTS];
    *handler_us = NAN;
    if (adsm_start(engine) != 0) return NAN;
    for (size_t j = 0; j < n; j++)
        if (!(objs[j] = adsm_alloc(nblocks * BLOCK))) {
            fprintf(stderr, "fault_path: adsm_alloc: %s\n", adsm_last_error());
            exit(1);
        }
    adsm_reset_stats();
    double us = write_pass(objs, n, order, k);
    adsm_stats st;
    adsm_get_stats(&st);
    *handler_us = (double)st.fault_ns / 1e3 / (double)(st.write_faults ? st.write_faults : 1);
    for (size_t j = 0; j < n; j++) adsm_free(objs[j]);
    adsm_shutdown();
    return us;
}

enum { BARE, MPROTECT, UFFD, VARIANTS };
static const adsm_fault_engine_kind engine_of[VARIANTS] = {0, ADSM_FAULT_ENGINE_MPROTECT, ADSM_FAULT_ENGINE_USERFAULTFD};

/* One table row: K = min(nblocks, most) random distinct blocks written per object (1024 one-block
 * objects for nblocks 1), bare and adsm with each engine in turn, median of runs each; the
 * medians go to us[] for the spread line. */
static void print_row(size_t nblocks, size_t most, int runs, double us[VARIANTS]) {
    static size_t order[MAX_WRITES];
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = bare_handler;
    sa.sa_flags = SA_SIGINFO;
    double t[VARIANTS][MAX_RUNS], in[VARIANTS][MAX_RUNS], in_med[VARIANTS];
    size_t k = 0, n = nblocks == 1 ? SMALL_OBJECTS : 1;
    for (int r = 0; r < runs; r++) {
        k = bench_random_order(order, nblocks, most, (uint64_t)r + 1);
        sigaction(SIGSEGV, &sa, &old);
        t[BARE][r] = bare_run(nblocks, n, order, k, &in[BARE][r]);
        sigaction(SIGSEGV, &old, NULL);
        for (int v = MPROTECT; v < VARIANTS; v++) t[v][r] = adsm_run(engine_of[v], nblocks, n, order, k, &in[v][r]);
    }
    for (int v = 0; v < VARIANTS; v++) {
        us[v] = bench_median(t[v], runs);
        in_med[v] = bench_median(in[v], runs);
    }
    printf("| %zu%s | %zu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f / %.2f / %.2f |\n", nblocks,
           n > 1 ? " (x1024 objects)" : "", k * n, us[BARE], us[MPROTECT], us[MPROTECT] / us[BARE], us[UFFD],
           us[UFFD] / us[BARE], in_med[BARE], in_med[MPROTECT], in_med[UFFD]);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int runs = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs")) runs = (int)bench_long_arg("fault_path", "--runs", argv[++i], 1, MAX_RUNS);
        else if (!strcmp(argv[i], "--quick")) runs = 3;
        else if (!strcmp(argv[i], "--full")) runs = 7;
        else bench_unknown_arg("fault_path", argv[i], "[--quick | --full] [--runs N]");
    }
    enum { ROWS = 4 };
    static const size_t counts[ROWS] = {1, 1024, 65536, 1048576};
    if (adsm_start(ADSM_FAULT_ENGINE_MPROTECT) != 0) {
        fprintf(stderr, "fault_path: adsm_init: %s\n", adsm_last_error());
        return 1;
    }
    printf("## fault_path: one write fault (4 KiB blocks, ReadOnly -> writable), adsm's two fault engines "
           "against a bare handler\n\n");
    printf("backend %s; median of %d runs; us per fault\n", adsm_backend_name(), runs);
    adsm_shutdown();
    if (adsm_start(ADSM_FAULT_ENGINE_USERFAULTFD) != 0)
        printf("\nuserfaultfd engine: %s (its columns read nan)\n", adsm_last_error());
    else adsm_shutdown();
    static const size_t most[] = {MAX_WRITES, SAME_FAULTS};
    for (size_t t = 0; t < sizeof most / sizeof *most; t++) {
        double us[ROWS][VARIANTS], spread[VARIANTS];
        if (most[t] == SAME_FAULTS)
            printf("\nThe same number of faults in every row, %d (1 block: one in each of %d objects): the rows "
                   "differ only in the object size, and so in how far apart the written blocks lie:\n", SAME_FAULTS,
                   SMALL_OBJECTS);
        printf("\n| blocks | faults | bare us | adsm mprotect us | x bare | adsm userfaultfd us | x bare | "
               "in handler us: bare / mprotect / userfaultfd |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (size_t c = 0; c < ROWS; c++) print_row(counts[c], most[t], runs, us[c]);
        for (int v = 0; v < VARIANTS; v++) {
            double lo = us[0][v], hi = us[0][v];
            for (size_t c = 1; c < ROWS; c++) {
                lo = us[c][v] < lo ? us[c][v] : lo;
                hi = us[c][v] > hi ? us[c][v] : hi;
            }
            spread[v] = hi / lo;
        }
        printf("\nslowest row / fastest row: bare %.2f, adsm mprotect %.2f, adsm userfaultfd %.2f\n", spread[BARE],
               spread[MPROTECT], spread[UFFD]);
    }
    return 0;
}
