#define ADSM_IMPLEMENTATION
#include "adsm.h"

/* bench/threads/threads.c -- faults from several threads: does one thread's copy hold up another?
 *
 * Part 1, throughput: 1, 2, 4 and 8 threads, each on its own object of 64 KiB blocks (rolling with
 * a rolling size above the block count, so nothing is evicted):
 *   write  every thread writes one byte into each block of its object (ReadOnly -> Dirty faults);
 *   fetch  a kernel fills every object, then every thread reads one byte of each block of its
 *          object (Invalid -> ReadOnly: each fault fetches 64 KiB).
 *   Faults per second over all threads (wall time of the slowest thread), median of --runs.
 * Part 2, latency: one thread writes one byte into each of 256 small objects (one page each, so
 *   each write is one ReadOnly -> Dirty fault) and times each fault (median us); alone, and
 *   while another thread's fault fetches a large object (lazy, so the whole object is one fetch;
 *   1 GiB, --quick 256 MiB). The ratio is with / alone (goal below 2: the small faults do not wait
 *   for the large copy). The small faults start once the large fetch has begun (the bench peeks
 *   at the object's busy count, which the fetch holds while it copies).
 *
 *   gcc -std=c11 -O2 -I. bench/threads/threads.c -pthread -ldl -o /tmp/bt && /tmp/bt [--quick | --full] [--runs N]
 *   (--quick: 256 MiB and 256 blocks per thread, 3 runs; --full and the default: 1 GiB, 1024, 5)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/common.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define MAX_THREADS 8
#define MAX_RUNS 15
#define SMALL_FAULTS 256

/* One body for every backend: on cuda NVRTC compiles it at its first launch (see start). */
ADSM_KERNEL_DEF(fill, (ADSM_OUT(unsigned char, a), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) a[i] = (unsigned char)(i * 7 + 1);
    }
});

static void die(const char *what) {
    fprintf(stderr, "threads: %s failed: %s\n", what, adsm_last_error());
    exit(1);
}

/* block_exact: one block per fault (part 1 counts faults, not bytes: by default a rolling fetch
 * takes its whole 2 MiB huge page and a write fault may take a run of blocks) */
static void start(adsm_protocol_kind protocol, size_t block, size_t rolling, size_t emu_memory, int block_exact) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.protocol = protocol;
    cfg.block_exact = block_exact;
    cfg.block_size = block;
    cfg.rolling_size = rolling;
    cfg.emu_memory = emu_memory;
    if (adsm_init(&cfg) != ADSM_OK) die("adsm_init");
    /* on cuda, compile the single-source kernel here, so that no measurement includes it */
    if (ADSM_PREPARE(fill) != ADSM_OK) die("ADSM_PREPARE(fill)");
}

static void fill_object(unsigned char *a, size_t n) {
    if (ADSM_CALL(fill, adsm_grid_1d((uint32_t)((n + 255) / 256), 256), a, n) != ADSM_OK) die("ADSM_CALL(fill)");
    if (adsm_sync() != ADSM_OK) die("adsm_sync");
}

/* ---- part 1 ---------------------------------------------------------------------------------- */
typedef struct worker {
    pthread_t tid;
    volatile unsigned char *obj;
    size_t blocks, block;
    int write;
    pthread_barrier_t *go;
    double seconds;
    unsigned sum;
} worker;

static void *work(void *arg) {
    worker *w = (worker *)arg;
    pthread_barrier_wait(w->go);
    double t0 = bench_now_s();
    unsigned sum = 0;
    for (size_t b = 0; b < w->blocks; b++) {
        if (w->write) w->obj[b * w->block] = 1;
        else sum += w->obj[b * w->block];
    }
    w->seconds = bench_now_s() - t0;
    w->sum = sum;
    return NULL;
}

static double throughput(int nthreads, int write, size_t blocks, size_t block) {
    worker w[MAX_THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)nthreads);
    for (int i = 0; i < nthreads; i++) {
        w[i] = (worker){.blocks = blocks, .block = block, .write = write, .go = &go};
        w[i].obj = adsm_alloc(blocks * block);
        if (!w[i].obj) die("adsm_alloc");
        if (!write) fill_object((unsigned char *)w[i].obj, blocks * block);
    }
    for (int i = 0; i < nthreads; i++) pthread_create(&w[i].tid, NULL, work, &w[i]);
    double slowest = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].seconds > slowest) slowest = w[i].seconds;
        if (!write && w[i].sum != (unsigned)blocks) { /* byte 0 of block b is b*block*7+1 = 1 mod 256 */
            fprintf(stderr, "threads: WRONG DATA (sum %u, expected %zu)\n", w[i].sum, blocks);
            exit(1);
        }
        adsm_free((void *)w[i].obj);
    }
    pthread_barrier_destroy(&go);
    return (double)nthreads * (double)blocks / slowest;
}

/* ---- part 2 ---------------------------------------------------------------------------------- */
typedef struct large_fetch {
    volatile unsigned char *obj;
    int started, done;
    unsigned char got;
} large_fetch;

static void *fetch_large(void *arg) {
    large_fetch *l = (large_fetch *)arg;
    __atomic_store_n(&l->started, 1, __ATOMIC_RELEASE);
    l->got = l->obj[0];
    __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* median us of one write fault on each of SMALL_FAULTS fresh small objects */
static double small_faults(unsigned char *const *small, int *during, const large_fetch *l) {
    double us[SMALL_FAULTS];
    for (int i = 0; i < SMALL_FAULTS; i++) {
        double t0 = bench_now_s();
        *(volatile unsigned char *)small[i] = 1;
        us[i] = (bench_now_s() - t0) * 1e6;
    }
    if (during) *during = l && !__atomic_load_n(&l->done, __ATOMIC_ACQUIRE);
    return bench_median(us, SMALL_FAULTS);
}

static void new_small(unsigned char **small) {
    for (int i = 0; i < SMALL_FAULTS; i++)
        if (!(small[i] = adsm_alloc(4096))) die("adsm_alloc(small)");
}

static void free_small(unsigned char **small) {
    for (int i = 0; i < SMALL_FAULTS; i++) adsm_free(small[i]);
}

/* Whether the fetch of o is running (its unit is busy): read from adsm's internals, as there is
 * no public call for it. */
static int fetch_running(const volatile unsigned char *o) {
    adsm__lock(&adsm__rt.lock);
    adsm__object *obj = adsm__object_of(adsm__tree_find(&adsm__rt.objects, (uintptr_t)o));
    int busy = obj && obj->busy_units;
    adsm__unlock(&adsm__rt.lock);
    return busy;
}

int main(int argc, char **argv) {
    int runs = 5, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1, runs = 3;
        else if (!strcmp(argv[i], "--full")) quick = 0, runs = 5;
        else if (!strcmp(argv[i], "--runs")) runs = (int)bench_long_arg("threads", "--runs", argv[++i], 1, MAX_RUNS);
        else bench_unknown_arg("threads", argv[i], "[--quick | --full] [--runs N]");
    }
    size_t large = quick ? 256 * MiB : 1024 * MiB, blocks = quick ? 256 : 1024, block = 64 * KiB;

    start(ADSM_PROTOCOL_ROLLING, block, 4 * MAX_THREADS * blocks, (size_t)MAX_THREADS * blocks * block + 64 * MiB, 1);
    printf("## threads: faults from several threads (backend %s, fault engine %s, median of %d runs)\n\n",
           adsm_backend_name(), adsm_fault_engine_name(), runs);
    printf("Part 1: every thread faults on its own object of %zu blocks of 64 KiB; faults/s over all threads.\n\n",
           blocks);
    printf("| threads | write faults/s | x 1 thread | fetch faults/s | x 1 thread |\n| ---: | ---: | ---: | ---: | ---: |\n");
    double base[2] = {0, 0};
    for (int t = 1; t <= MAX_THREADS; t *= 2) {
        double rate[2];
        for (int write = 1; write >= 0; write--) {
            double v[MAX_RUNS];
            for (int r = 0; r < runs; r++) v[r] = throughput(t, write, blocks, block);
            rate[write] = bench_median(v, runs);
            if (t == 1) base[write] = rate[write];
        }
        printf("| %d | %.0f | %.2f | %.0f | %.2f |\n", t, rate[1], rate[1] / base[1], rate[0], rate[0] / base[0]);
        fflush(stdout);
    }
    adsm_shutdown();

    start(ADSM_PROTOCOL_LAZY, block, 0, large + 64 * MiB, 0);
    double alone[MAX_RUNS], with[MAX_RUNS];
    int overlapped = 0;
    unsigned char *small[SMALL_FAULTS];
    for (int r = 0; r < runs; r++) {
        new_small(small);
        alone[r] = small_faults(small, NULL, NULL);
        free_small(small);
        new_small(small);
        large_fetch l = {adsm_alloc(large), 0, 0, 0};
        if (!l.obj) die("adsm_alloc(large)");
        fill_object((unsigned char *)l.obj, large);
        pthread_t tid;
        pthread_create(&tid, NULL, fetch_large, &l);
        while (!fetch_running(l.obj) && !__atomic_load_n(&l.done, __ATOMIC_ACQUIRE)) {}
        int during = 0;
        with[r] = small_faults(small, &during, &l);
        overlapped += during;
        pthread_join(tid, NULL);
        free_small(small);
        if (l.got != 1) {
            fprintf(stderr, "threads: WRONG DATA in the large object\n");
            return 1;
        }
        adsm_free((void *)l.obj);
    }
    double a = bench_median(alone, runs), w = bench_median(with, runs);
    printf("\nPart 2: one thread's write faults (64 KiB blocks) alone and while another thread fetches %zu MiB.\n\n",
           large / MiB);
    printf("| fault alone us | during the fetch us | ratio | runs where all %d faults ended before the fetch |\n",
           SMALL_FAULTS);
    printf("| ---: | ---: | ---: | ---: |\n| %.2f | %.2f | %.2f | %d of %d |\n", a, w, w / a, overlapped, runs);
    adsm_shutdown();
    return 0;
}
