#define ADSM_IMPLEMENTATION
#include "adsm.h"

/* bench/placement/placement.c -- where vecadd's time goes, phase by phase, under each way the cuda
 * backend can place an object's host pages; the question the first GPU run (H200, 2026-11-26)
 * raised: adsm's vecadd took 1.8-2.4x the explicit program there although its copies ran at the
 * explicit copies' rate.
 *
 * The program is vecadd's timed part (bench/vecadd): allocate three vectors of --elements floats,
 * the CPU writes two, one kernel adds them, the CPU reads the result (each element checked).
 * Phases, each timed: alloc, init (the CPU's writes), call, sync (explicit: the copy back too),
 * read, free. Variants, every one in
 * one process, run after run in turn (so drift hits all alike), median of --runs per phase:
 *   explicit     adsm_host_alloc + adsm_dev_alloc, copies by hand (the care adsm takes)
 *   batch        adsm_alloc objects under batch, in the backend's default placement
 *   lazy, rolling adsm_alloc objects, 2 MiB blocks (--block), in each placement the backend offers:
 *                  alias       (cuda, the default) shared addresses; host pages are shared
 *                              memory in 2 MiB pages where the kernel grants them (collapsed)
 *                  alias 4K    (cuda, ADSM_CUDA_ALIAS_COLLAPSE=0) the same in 4 KiB pages (where
 *                              shmem_enabled gives none): the alias before the collapse
 *                              memory with a second, page-locked view the copies use
 *                  staged      (cuda, ADSM_CUDA_DMA_VIEW=0) shared addresses; anonymous (huge)
 *                              pages, every copy through adsm's pinned staging
 *                  translated  (cuda, ADSM_CUDA_SAME_ADDRESS=0) device addresses differ from
 *                              host ones; anonymous (huge) pages, page-locked by the driver
 *                  default     (emu, host) the backend's only placement
 * The placement is chosen by setting the environment variable before each adsm_init.
 *
 *   gcc -std=c11 -O2 -I. bench/placement/placement.c -pthread -ldl -o /tmp/bp && /tmp/bp [--runs N] [--elements N]
 *       [--block BYTES]
 *   (defaults: 5 runs, 8 Mi elements = 32 MiB per vector, 2 MiB blocks). The table gives each phase's
 *   median and the fastest and slowest run's total, so a run of two speeds shows. Main thread only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/common.h"

ADSM_KERNEL_DEF(placement_add, (ADSM_OUT(float, c), ADSM_IN(float, a), ADSM_IN(float, b), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = a[i] + b[i];
    }
});

#define MAX_RUNS 31
enum { P_ALLOC, P_INIT, P_CALL, P_SYNC, P_READ, P_FREE, P_COUNT };
static const char *const phase_name[P_COUNT] = {"alloc", "init", "call", "sync", "read", "free"};

typedef struct placement {
    const char *name, *var, *value; /* the environment variable that selects it (NULL: none) */
} placement;
static const placement cuda_placements[] = {
    {"alias", NULL, NULL}, {"alias 4K", "ADSM_CUDA_ALIAS_COLLAPSE", "0"}, {"staged", "ADSM_CUDA_DMA_VIEW", "0"},
    {"translated", "ADSM_CUDA_SAME_ADDRESS", "0"}};
static const placement only_placement = {"default", NULL, NULL};

typedef struct variant {
    const char *name;
    int explicit_copies;
    adsm_protocol_kind protocol;
    placement where;
    double ms[P_COUNT][MAX_RUNS], total[MAX_RUNS];
    double changes[MAX_RUNS]; /* adsm_stats.protection_changes of the run */
} variant;

static size_t n_elems = (size_t)8 << 20, block_size = (size_t)2 << 20;

static void die(const char *what) {
    fprintf(stderr, "placement: %s failed: %s\n", what, adsm_last_error());
    exit(1);
}

static void start(const variant *v) {
    unsetenv("ADSM_CUDA_DMA_VIEW");
    unsetenv("ADSM_CUDA_SAME_ADDRESS");
    unsetenv("ADSM_CUDA_ALIAS_COLLAPSE");
    if (v->where.var) setenv(v->where.var, v->where.value, 1);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.protocol = v->protocol;
    cfg.block_size = block_size;
    if (adsm_init(&cfg) != ADSM_OK) die("adsm_init");
    if (ADSM_PREPARE(placement_add) != ADSM_OK) die("ADSM_PREPARE"); /* NVRTC before the clock */
}

/* One run of the program; t[0..P_COUNT] are the phases' boundaries in seconds. Exits on a wrong
 * element. */
static void run_once(const variant *v, double t[P_COUNT + 1]) {
    const size_t n = n_elems, bytes = n * sizeof(float);
    const adsm_grid grid = adsm_grid_1d((uint32_t)((n + 255) / 256), 256);
    float *a, *b, *c, *da = NULL, *db = NULL, *dc = NULL;
    t[P_ALLOC] = bench_now_s();
    if (v->explicit_copies) {
        a = adsm_host_alloc(bytes), b = adsm_host_alloc(bytes), c = adsm_host_alloc(bytes);
        da = adsm_dev_alloc(bytes), db = adsm_dev_alloc(bytes), dc = adsm_dev_alloc(bytes);
        if (!da || !db || !dc) die("adsm_dev_alloc");
    } else {
        a = adsm_alloc(bytes), b = adsm_alloc(bytes), c = adsm_alloc(bytes);
    }
    if (!a || !b || !c) die("allocation");
    t[P_INIT] = bench_now_s();
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i & 1023);
        b[i] = 1.0f;
    }
    t[P_CALL] = bench_now_s();
    if (v->explicit_copies) {
        if (adsm_copy_to_device(da, a, bytes) != ADSM_OK || adsm_copy_to_device(db, b, bytes) != ADSM_OK)
            die("adsm_copy_to_device");
        if (ADSM_CALL(placement_add, grid, dc, da, db, n) != ADSM_OK) die("ADSM_CALL");
    } else if (ADSM_CALL(placement_add, grid, c, a, b, n) != ADSM_OK) {
        die("ADSM_CALL");
    }
    t[P_SYNC] = bench_now_s();
    if (adsm_sync() != ADSM_OK) die("adsm_sync");
    if (v->explicit_copies && adsm_copy_from_device(c, dc, bytes) != ADSM_OK) die("adsm_copy_from_device");
    t[P_READ] = bench_now_s();
    size_t wrong = 0, first_wrong = 0; /* every element checked where it lies (a sum would not see a
                                          block landing at another block's place) */
    for (size_t i = 0; i < n; i++)
        if (c[i] != (float)(i & 1023) + 1.0f && wrong++ == 0) first_wrong = i;
    t[P_FREE] = bench_now_s();
    if (v->explicit_copies) {
        if (adsm_dev_free(da) != ADSM_OK || adsm_dev_free(db) != ADSM_OK || adsm_dev_free(dc) != ADSM_OK ||
            adsm_host_free(a) != ADSM_OK || adsm_host_free(b) != ADSM_OK || adsm_host_free(c) != ADSM_OK)
            die("free");
    } else if (adsm_free(a) != ADSM_OK || adsm_free(b) != ADSM_OK || adsm_free(c) != ADSM_OK) {
        die("adsm_free");
    }
    t[P_COUNT] = bench_now_s();
    if (wrong) {
        fprintf(stderr, "placement: WRONG RESULT in %s/%s: %zu elements wrong, the first at %zu (expected %g)\n",
                v->name, v->where.name, wrong, first_wrong, (double)(first_wrong & 1023) + 1);
        exit(2);
    }
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--runs N (1-%d)] [--elements N] [--block BYTES]\n", argv0, MAX_RUNS);
    exit(2);
}

int main(int argc, char **argv) {
    int runs = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--elements") && i + 1 < argc) n_elems = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--block") && i + 1 < argc) block_size = strtoull(argv[++i], NULL, 10);
        else usage(argv[0]);
    }
    if (runs < 1 || runs > MAX_RUNS || n_elems < 1 || block_size < 4096) usage(argv[0]);

    /* which placements the default backend offers: ask it */
    if (adsm_init(NULL) != ADSM_OK) die("adsm_init");
    char backend[32];
    snprintf(backend, sizeof backend, "%s", adsm_backend_name());
    adsm_shutdown();
    int on_cuda = !strcmp(backend, "cuda");
    const placement *where = on_cuda ? cuda_placements : &only_placement;
    int nwhere = on_cuda ? (int)(sizeof cuda_placements / sizeof *cuda_placements) : 1;

    static variant v[2 + 2 * sizeof cuda_placements / sizeof *cuda_placements];
    int nv = 0;
    v[nv++] = (variant){.name = "explicit", .explicit_copies = 1, .protocol = ADSM_PROTOCOL_LAZY, .where = only_placement};
    v[nv++] = (variant){.name = "batch", .protocol = ADSM_PROTOCOL_BATCH, .where = where[0]};
    for (int w = 0; w < nwhere; w++) {
        v[nv++] = (variant){.name = "lazy", .protocol = ADSM_PROTOCOL_LAZY, .where = where[w]};
        v[nv++] = (variant){.name = "rolling", .protocol = ADSM_PROTOCOL_ROLLING, .where = where[w]};
    }
    for (int r = 0; r < runs; r++) {
        fprintf(stderr, "placement: round %d of %d\n", r + 1, runs);
        for (int k = 0; k < nv; k++) {
            variant *x = &v[(k + r) % nv]; /* a different variant first each round */
            double t[P_COUNT + 1];
            start(x);
            run_once(x, t);
            adsm_stats st;
            if (adsm_get_stats(&st) != ADSM_OK) die("adsm_get_stats");
            x->changes[r] = (double)st.protection_changes;
            adsm_shutdown();
            for (int p = 0; p < P_COUNT; p++) x->ms[p][r] = (t[p + 1] - t[p]) * 1e3;
            x->total[r] = (t[P_COUNT] - t[0]) * 1e3;
        }
    }
    unsetenv("ADSM_CUDA_DMA_VIEW");
    unsetenv("ADSM_CUDA_SAME_ADDRESS");
    unsetenv("ADSM_CUDA_ALIAS_COLLAPSE");

    printf("## placement: vecadd's phases by where the objects' host pages live (backend %s, %zu floats per "
           "vector, %zu KiB blocks, median of %d runs)\n\n",
           backend, n_elems, block_size >> 10, runs);
    printf("ms per phase; total = alloc to free; x expl = total over the explicit program's; changes = page "
           "protection changes adsm's protocol made in the run (adsm_stats.protection_changes); min-max = the "
           "fastest and slowest run's total.\n\n");
    printf("| variant | placement |");
    for (int p = 0; p < P_COUNT; p++) printf(" %s ms |", phase_name[p]);
    printf(" total ms | min-max ms | x expl | changes |\n| --- | --- |");
    for (int p = 0; p <= P_COUNT + 3; p++) printf(" ---: |");
    printf("\n");
    double base = bench_median_of(v[0].total, runs);
    for (int k = 0; k < nv; k++) {
        printf("| %s | %s |", v[k].name, k == 0 ? "-" : v[k].where.name);
        for (int p = 0; p < P_COUNT; p++) printf(" %.1f |", bench_median_of(v[k].ms[p], runs));
        double total = bench_median_of(v[k].total, runs), lo, hi;
        bench_range(v[k].total, runs, &lo, &hi);
        printf(" %.1f | %.1f-%.1f | %.2f | %.0f |\n", total, lo, hi, total / base, bench_median_of(v[k].changes, runs));
    }
    return 0;
}
