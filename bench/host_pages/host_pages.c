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
 * Columns: populate ms (shmem, populated only: the lock view, then the program's view), register
 * ms (cuMemHostRegister), write ms (the CPU's first pass of writes through the program's view),
 * total. Needs a GPU and its driver (libcuda.so.1, or $ADSM_CUDA_DRIVER, loaded at run time); says
 * so and exits 1 without.
 *
 *   gcc -std=c11 -O2 -I. bench/host_pages/host_pages.c -ldl -o /tmp/bh && /tmp/bh [--mib N] [--runs N]
 * Main thread only. */
#ifndef _GNU_SOURCE /* memfd_create; the build may define it already */
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench/common.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
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

enum { K_ANON, K_SHMEM_COLD, K_SHMEM_POPULATED, K_COUNT };
static const char *const kind_name[K_COUNT] = {"anonymous THP", "shmem, cold", "shmem, populated"};

typedef struct timing {
    double populate, reg, write;
} timing;

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

static void locked_write(char *lock, char *program, size_t bytes, timing *t) {
    double t0 = bench_now_s();
    if (cu_register(lock, bytes, 0)) die("cuMemHostRegister failed");
    double t1 = bench_now_s();
    memset(program, 1, bytes);
    double t2 = bench_now_s();
    cu_unregister(lock);
    t->reg = (t1 - t0) * 1e3, t->write = (t2 - t1) * 1e3;
}

static timing measure(int kind, size_t bytes) {
    timing t = {0, 0, 0};
    if (kind == K_ANON) {
        char *raw = mmap(NULL, bytes + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) die("mmap failed");
        char *p = (char *)(((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
        madvise(p, bytes, MADV_HUGEPAGE);
        locked_write(p, p, bytes, &t);
        munmap(raw, bytes + HUGE);
        return t;
    }
    int fd = memfd_create("host_pages", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) die("memfd failed");
    char *program = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *lock = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (program == MAP_FAILED || lock == MAP_FAILED) die("mmap failed");
    if (kind == K_SHMEM_POPULATED) {
        double t0 = bench_now_s();
        if (madvise(lock, bytes, MADV_POPULATE_WRITE) || madvise(program, bytes, MADV_POPULATE_WRITE))
            die("MADV_POPULATE_WRITE refused (Linux before 5.14?)");
        t.populate = (bench_now_s() - t0) * 1e3;
    }
    locked_write(lock, program, bytes, &t);
    munmap(program, bytes);
    munmap(lock, bytes);
    return t;
}

int main(int argc, char **argv) {
    size_t mib = 96;
    int runs = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else die("usage: host_pages [--mib N] [--runs N (1-15)]");
    }
    if (mib < 1 || runs < 1 || runs > MAX_RUNS) die("usage: host_pages [--mib N] [--runs N (1-15)]");
    open_driver();
    double ms[K_COUNT][4][MAX_RUNS];
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < K_COUNT; k++) {
            timing t = measure(k, mib << 20);
            ms[k][0][r] = t.populate, ms[k][1][r] = t.reg, ms[k][2][r] = t.write;
            ms[k][3][r] = t.populate + t.reg + t.write;
        }
    printf("## host_pages: page-locking and first writes, %zu MiB, median of %d runs\n\n", mib, runs);
    printf("| host memory | populate ms | register ms | write ms | total ms |\n| --- | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < K_COUNT; k++)
        printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", kind_name[k], bench_median_of(ms[k][0], runs),
               bench_median_of(ms[k][1], runs), bench_median_of(ms[k][2], runs), bench_median_of(ms[k][3], runs));
    return 0;
}
