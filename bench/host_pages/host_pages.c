/* bench/host_pages/host_pages.c -- what the cuda driver's page-locking and the CPU's first writes
 * cost on each kind of host memory adsm can give an object, without adsm: the measurement behind
 * the placement choice in docs/design.md (section "Where objects' host pages live on cuda").
 *
 * For --mib MiB (default 96, vecadd's three vectors), median of --runs (default 3):
 *   anonymous THP      private anonymous memory, 2 MiB aligned, MADV_HUGEPAGE: what
 *                      adsm_host_alloc, translated objects and ADSM_CUDA_DMA_VIEW=0 objects get
 *   shmem, cold        a memfd mapped twice (adsm's host alias under shared addresses): the driver
 *                      locks the second view, then the CPU writes through the first
 *   shmem, populated   the same, with both views populated first (MADV_POPULATE_WRITE)
 *   shmem, collapsed   what adsm does now: one byte per 2 MiB written through the lock view, which
 *                      is then collapsed into 2 MiB pages (MADV_COLLAPSE, whatever shmem_enabled
 *                      says), page-locked, and the program's view mapped onto it
 *                      (MADV_POPULATE_READ)
 *   ... by threads     anonymous THP populated (MADV_POPULATE_WRITE) and shmem collapsed by --threads
 *                      threads (default: the CPUs, up to 8), each a run of whole 2 MiB pages, before
 *                      the locking: whether preparing memory on idle CPUs would pay
 * A second table does the same for --objects objects of 1 MiB (default 32) packed one after
 * another, as adsm packs objects under its block size, so two share each 2 MiB page, made one at a
 * time (page-locked, the program's view mapped ahead, written):
 *   anonymous, 4 KiB   each a buffer of its own (what an explicit program's 1 MiB pinned buffer gets)
 *   shmem, 4 KiB       adsm's alias before 2026-11-28: the driver's page-locking allocates the pages
 *   shmem, shared 2 MiB pages   adsm now: the first object covering half of a 2 MiB page collapses
 *                      the whole page, its neighbour finds it made (reservation.h)
 * with a protection change per object (read-only, writable again) and a second write pass (a view
 * that had mapped a shared page whole would fault every page in again), and a read pass of the
 * lock view (the side a DMA reads).
 * Both views of the memfd sit at 2 MiB-aligned addresses, as adsm's do. Columns: prepare ms (what
 * comes before or after the locking: populating, or collapsing and mapping ahead), register ms
 * (cuMemHostRegister), write ms (the CPU's first pass of writes through the program's view),
 * total and its ratio to anonymous THP; protect us (one 2 MiB block of the program's view made
 * read-only and writable again, as a protocol does, mean over the blocks); read ms (a CPU pass
 * reading the lock view, the side a DMA reads). Needs a GPU and its driver (libcuda.so.1, or
 * $ADSM_CUDA_DRIVER, loaded at run time: the driver test double, which page-locks as the driver
 * does, makes it run anywhere); says so and exits 1 without.
 *
 *   gcc -std=c11 -O2 -I. bench/host_pages/host_pages.c -pthread -ldl -o /tmp/bh && /tmp/bh [--mib N] [--runs N]
 *       [--threads N] [--objects N]
 * Main thread only. */
#ifndef _GNU_SOURCE /* memfd_create; the build may define it already */
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench/common.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
#define MAX_RUNS 15
#define HUGE ((size_t)2 << 20)

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_retain_fn)(void **, int);
typedef int (*cu_set_current_fn)(void *);
typedef int (*cu_register_fn)(void *, size_t, unsigned);
typedef int (*cu_unregister_fn)(void *);
static cu_register_fn cu_register;
static cu_unregister_fn cu_unregister;

enum { K_ANON, K_SHMEM_COLD, K_SHMEM_POPULATED, K_SHMEM_COLLAPSED, K_ANON_THREADS, K_SHMEM_COLLAPSED_THREADS, K_COUNT };
static const char *const kind_name[K_COUNT] = {"anonymous THP", "shmem, cold", "shmem, populated",
                                               "shmem, collapsed", "anonymous THP, populated by threads",
                                               "shmem, collapsed by threads"};
static int prep_threads = 1; /* the threads of the last two kinds (--threads; default: the CPUs, up to 8) */

enum { C_PREPARE, C_REGISTER, C_WRITE, C_TOTAL, C_PROTECT, C_READ, C_COUNT };

typedef struct timing {
    double prepare, reg, write, protect_us, read;
} timing;

static volatile unsigned long long read_sink;

static void die(const char *what) {
    fprintf(stderr, "host_pages: %s\n", what);
    exit(1);
}

static void open_driver(void) {
    const char *path = getenv("ADSM_CUDA_DRIVER"); /* as adsm: another driver library (a test double) */
    void *lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW);
    if (!lib) die("no CUDA driver (libcuda.so.1): this benchmark needs a GPU");
    cu_init_fn init = (cu_init_fn)dlsym(lib, "cuInit");
    cu_device_get_fn device_get = (cu_device_get_fn)dlsym(lib, "cuDeviceGet");
    cu_retain_fn retain = (cu_retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
    cu_set_current_fn set_current = (cu_set_current_fn)dlsym(lib, "cuCtxSetCurrent");
    cu_register = (cu_register_fn)dlsym(lib, "cuMemHostRegister_v2");
    if (!cu_register) cu_register = (cu_register_fn)dlsym(lib, "cuMemHostRegister");
    cu_unregister = (cu_unregister_fn)dlsym(lib, "cuMemHostUnregister");
    int dev;
    void *ctx;
    if (!init || !device_get || !retain || !set_current || !cu_register || !cu_unregister)
        die("the driver lacks an entry point");
    if (init(0) || device_get(&dev, 0) || retain(&ctx, dev) || set_current(ctx))
        die("no GPU context (cuInit, cuDevicePrimaryCtxRetain or cuCtxSetCurrent failed)");
}

/* bytes of MAP_SHARED fd (or anonymous memory, fd < 0) at a 2 MiB-aligned address */
static char *map_aligned(size_t bytes, int fd) {
    char *raw = mmap(NULL, bytes + HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) die("mmap failed");
    char *p = (char *)(((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    int flags = MAP_FIXED | (fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS : MAP_SHARED);
    if (mmap(p, bytes, PROT_READ | PROT_WRITE, flags, fd, 0) == MAP_FAILED) die("mmap failed");
    return p;
}

/* what a protocol does to a block: read-only, then writable again; us per 2 MiB block */
static double protect_blocks(char *p, size_t bytes) {
    double t0 = bench_now_s();
    for (size_t off = 0; off + HUGE <= bytes; off += HUGE) {
        mprotect(p + off, HUGE, PROT_READ);
        mprotect(p + off, HUGE, PROT_READ | PROT_WRITE);
    }
    return (bench_now_s() - t0) * 1e6 / (double)(bytes / HUGE);
}

static double read_pass_ms(const char *p, size_t bytes) {
    double t0 = bench_now_s();
    unsigned long long sum = 0;
    for (size_t off = 0; off < bytes; off += sizeof sum) sum += *(const unsigned long long *)(p + off);
    read_sink = sum;
    return (bench_now_s() - t0) * 1e3;
}

/* registers the lock view, runs `after` (mapping the program's view ahead), then the program's
 * first writes, protection changes and a read of the lock view */
static void locked_write(char *lock, char *program, size_t bytes, int map_ahead, timing *t) {
    double t0 = bench_now_s();
    if (cu_register(lock, bytes, 0)) die("cuMemHostRegister failed");
    double t1 = bench_now_s();
    if (map_ahead) {
        madvise(program, bytes, MADV_POPULATE_READ);
        t->prepare += (bench_now_s() - t1) * 1e3;
        t1 = bench_now_s();
    }
    memset(program, 1, bytes);
    double t2 = bench_now_s();
    t->reg = (t1 - t0) * 1e3, t->write = (t2 - t1) * 1e3;
    t->protect_us = protect_blocks(program, bytes);
    t->read = read_pass_ms(lock, bytes);
    cu_unregister(lock);
}

/* one byte per 2 MiB, then MADV_COLLAPSE, as adsm's reservation.h does for a new object */
static void collapse(char *lock, size_t bytes) {
    for (size_t off = 0; off < bytes; off += HUGE) lock[off] = 0;
    int r = -1;
    for (int tries = 0; tries < 3 && r != 0; tries++) r = madvise(lock, bytes, MADV_COLLAPSE);
    if (r != 0) die("MADV_COLLAPSE refused (Linux before 6.1, or shmem_enabled deny?)");
}

static void populate(char *p, size_t bytes) {
    if (madvise(p, bytes, MADV_POPULATE_WRITE) != 0) die("MADV_POPULATE_WRITE refused (Linux before 5.14?)");
}

/* The kernel zeroes the huge pages a collapse or a first touch takes on the calling thread (the
 * driver's registration of anonymous memory faults it in there too): about 5 GB/s on the GPU
 * machine's CPUs, so that 96 MiB took 18-19 ms either way in its fourth run. The same work split
 * over threads, each a run of whole 2 MiB pages, tells whether a runtime that prepares memory
 * on the idle CPUs would make objects faster there. */
typedef struct chunk {
    char *p;
    size_t bytes;
    void (*work)(char *, size_t);
} chunk;

static void *chunk_main(void *arg) {
    chunk *c = (chunk *)arg;
    c->work(c->p, c->bytes);
    return NULL;
}

static void in_threads(char *p, size_t bytes, void (*work)(char *, size_t)) {
    pthread_t tid[64];
    chunk c[64];
    size_t pages = bytes / HUGE, per = (pages + (size_t)prep_threads - 1) / (size_t)prep_threads * HUGE;
    if (per == 0) per = bytes; /* under a huge page: one thread */
    int n = 0;
    for (size_t off = 0; off < bytes && n < 64; off += per, n++) c[n] = (chunk){p + off, off + per <= bytes ? per : bytes - off, work};
    if (n == 0) return;
    for (int i = 1; i < n; i++)
        if (pthread_create(&tid[i], NULL, chunk_main, &c[i]) != 0) die("pthread_create failed");
    work(c[0].p, c[0].bytes);
    for (int i = 1; i < n; i++) pthread_join(tid[i], NULL);
}

static timing measure(int kind, size_t bytes) {
    timing t = {0, 0, 0, 0, 0};
    if (kind == K_ANON || kind == K_ANON_THREADS) {
        char *p = map_aligned(bytes, -1);
        madvise(p, bytes, MADV_HUGEPAGE);
        double t0 = bench_now_s();
        if (kind == K_ANON_THREADS) in_threads(p, bytes, populate);
        t.prepare = (bench_now_s() - t0) * 1e3;
        locked_write(p, p, bytes, 0, &t);
        munmap(p, bytes);
        return t;
    }
    int fd = memfd_create("host_pages", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) die("memfd failed");
    char *program = map_aligned(bytes, fd), *lock = map_aligned(bytes, fd);
    close(fd);
    double t0 = bench_now_s();
    if (kind == K_SHMEM_POPULATED) {
        populate(lock, bytes);
        populate(program, bytes);
    }
    if (kind == K_SHMEM_COLLAPSED) collapse(lock, bytes);
    if (kind == K_SHMEM_COLLAPSED_THREADS) in_threads(lock, bytes, collapse);
    t.prepare = (bench_now_s() - t0) * 1e3;
    locked_write(lock, program, bytes, kind == K_SHMEM_COLLAPSED || kind == K_SHMEM_COLLAPSED_THREADS, &t);
    munmap(program, bytes);
    munmap(lock, bytes);
    return t;
}

/* ---- objects of 1 MiB, two to a 2 MiB page ---- */
enum { P_ANON_SMALL, P_SHMEM_SMALL, P_SHMEM_SHARED, P_COUNT };
static const char *const packed_name[P_COUNT] = {"anonymous, 4 KiB pages (a buffer each)", "shmem, 4 KiB pages",
                                                 "shmem, shared 2 MiB pages collapsed"};
enum { Q_MAKE, Q_WRITE, Q_TOTAL, Q_PROTECT, Q_REWRITE, Q_READ, Q_COUNT };

/* all in us per object, the read in ms for all */
static void measure_packed(int kind, size_t count, double out[Q_COUNT]) {
    const size_t obj = HUGE / 2, bytes = (count * obj + HUGE - 1) / HUGE * HUGE;
    char *program, *lock;
    if (kind == P_ANON_SMALL) {
        program = lock = map_aligned(bytes, -1);
        madvise(program, bytes, MADV_NOHUGEPAGE); /* separate 1 MiB buffers get no huge page */
    } else {
        int fd = memfd_create("host_pages_packed", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) die("memfd failed");
        program = map_aligned(bytes, fd), lock = map_aligned(bytes, fd);
        close(fd);
    }
    double make = 0, write = 0;
    for (size_t i = 0; i < count; i++) {
        size_t off = i * obj;
        double t0 = bench_now_s();
        if (kind == P_SHMEM_SHARED && off % HUGE == 0) collapse(lock + off, HUGE); /* the page's first object */
        if (cu_register(lock + off, obj, 0)) die("cuMemHostRegister failed");
        if (kind != P_ANON_SMALL) madvise(program + off, obj, MADV_POPULATE_READ);
        double t1 = bench_now_s();
        memset(program + off, 1, obj);
        double t2 = bench_now_s();
        make += t1 - t0, write += t2 - t1;
    }
    double t0 = bench_now_s();
    for (size_t i = 0; i < count; i++) {
        mprotect(program + i * obj, obj, PROT_READ);
        mprotect(program + i * obj, obj, PROT_READ | PROT_WRITE);
    }
    double t1 = bench_now_s();
    for (size_t i = 0; i < count; i++) memset(program + i * obj, 2, obj);
    double t2 = bench_now_s();
    out[Q_MAKE] = make * 1e6 / (double)count, out[Q_WRITE] = write * 1e6 / (double)count;
    out[Q_TOTAL] = out[Q_MAKE] + out[Q_WRITE];
    out[Q_PROTECT] = (t1 - t0) * 1e6 / (double)count, out[Q_REWRITE] = (t2 - t1) * 1e6 / (double)count;
    out[Q_READ] = read_pass_ms(lock, count * obj);
    for (size_t i = 0; i < count; i++) cu_unregister(lock + i * obj);
    munmap(program, bytes);
    if (lock != program) munmap(lock, bytes);
}

static void packed_table(size_t count, int runs) {
    double v[P_COUNT][Q_COUNT][MAX_RUNS], med[P_COUNT][Q_COUNT], one[Q_COUNT];
    for (int k = 0; k < P_COUNT; k++) measure_packed(k, count, one); /* unmeasured, as above */
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < P_COUNT; k++) {
            measure_packed(k, count, one);
            for (int c = 0; c < Q_COUNT; c++) v[k][c][r] = one[c];
        }
    for (int k = 0; k < P_COUNT; k++)
        for (int c = 0; c < Q_COUNT; c++) med[k][c] = bench_median_of(v[k][c], runs);
    printf("\n## host_pages: %zu objects of 1 MiB packed two to a 2 MiB page, made one at a time, median of %d runs\n\n",
           count, runs);
    printf("make = page-locking (and the collapse, and the view mapped ahead, where they apply), us per object; write = "
           "the first write pass; protect = read-only and writable again, per object; rewrite = a second write pass; "
           "read = a pass over all through the lock view. x anon: over the first row's total.\n\n");
    printf("| host memory | make us | write us | total us | x anon | protect us | rewrite us | read ms | GB/s |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < P_COUNT; k++)
        printf("| %s | %.0f | %.0f | %.0f | %.2f | %.1f | %.0f | %.2f | %.1f |\n", packed_name[k], med[k][Q_MAKE],
               med[k][Q_WRITE], med[k][Q_TOTAL], med[k][Q_TOTAL] / med[P_ANON_SMALL][Q_TOTAL], med[k][Q_PROTECT],
               med[k][Q_REWRITE], med[k][Q_READ], (double)(count << 20) / (med[k][Q_READ] * 1e6));
}

int main(int argc, char **argv) {
    size_t mib = 96, objects = 32;
    int runs = 3;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    prep_threads = cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) prep_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--objects") && i + 1 < argc) objects = strtoull(argv[++i], NULL, 10);
        else die("usage: host_pages [--mib N] [--runs N (1-15)] [--threads N (1-64)] [--objects N (0: no second table)]");
    }
    if (!prep_threads) prep_threads = 1;
    if (mib < 1 || runs < 1 || runs > MAX_RUNS || prep_threads < 1 || prep_threads > 64)
        die("usage: host_pages [--mib N] [--runs N (1-15)] [--threads N (1-64)]");
    open_driver();
    double ms[K_COUNT][C_COUNT][MAX_RUNS];
    /* one round unmeasured: the first huge pages a process takes may wait for the kernel to
     * compact memory (200 ms for 96 MiB once on the build machine), which no kind should be
     * charged with */
    for (int k = 0; k < K_COUNT; k++) measure(k, mib << 20);
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < K_COUNT; k++) {
            timing t = measure(k, mib << 20);
            ms[k][C_PREPARE][r] = t.prepare, ms[k][C_REGISTER][r] = t.reg, ms[k][C_WRITE][r] = t.write;
            ms[k][C_TOTAL][r] = t.prepare + t.reg + t.write;
            ms[k][C_PROTECT][r] = t.protect_us, ms[k][C_READ][r] = t.read;
        }
    double med[K_COUNT][C_COUNT];
    for (int k = 0; k < K_COUNT; k++)
        for (int c = 0; c < C_COUNT; c++) med[k][c] = bench_median_of(ms[k][c], runs);
    printf("## host_pages: page-locking and first writes, %zu MiB, median of %d runs\n\n", mib, runs);
    printf("x anon: over anonymous THP's median, same column. \"by threads\": the populating or the collapse "
           "split over %d threads (runs of whole 2 MiB pages).\n\n", prep_threads);
    printf("| host memory | prepare ms | register ms | write ms | total ms | x anon | protect us | x anon | read ms "
           "| x anon |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < K_COUNT; k++)
        printf("| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f |\n", kind_name[k], med[k][C_PREPARE],
               med[k][C_REGISTER], med[k][C_WRITE], med[k][C_TOTAL], med[k][C_TOTAL] / med[K_ANON][C_TOTAL],
               med[k][C_PROTECT], med[k][C_PROTECT] / med[K_ANON][C_PROTECT], med[k][C_READ],
               med[k][C_READ] / med[K_ANON][C_READ]);
    if (objects) packed_table(objects, runs);
    return 0;
}
