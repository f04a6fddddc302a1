#define ADSM_IMPLEMENTATION
#include "adsm.h"

/* bench/objects/objects.c -- what a shared object costs to make and to free, by size: adsm_alloc
 * with the CPU's first write to it, and adsm_free, against what the explicit program does for the same data, a host buffer and a
 * device buffer (adsm_host_alloc + adsm_dev_alloc, then adsm_dev_free + adsm_host_free: on cuda
 * page-locked host memory and device memory, the care adsm takes for an object), with malloc +
 * free as the floor. A program with many small objects (lists, trees) pays this per node.
 *
 * On cuda each object's host pages are page-locked with the driver (one cuMemHostRegister, and one
 * cuMemHostUnregister at the free), like adsm_host_alloc's buffers: at allocation, or under lazy
 * and rolling at the object's first use (ADSM_HOST_ON_FIRST_USE), here its first write. So "make"
 * is the allocation and that first write together, for every variant: this is the benchmark that
 * says what making a used object costs on a real driver.
 *
 * Per size, N objects are made one after another, then freed in the order they were made; the
 * times are per object, median of --runs, every variant in one process, one after another.
 *
 *   gcc -std=c11 -O2 -I. bench/objects/objects.c -pthread -ldl -o /tmp/bo && /tmp/bo [--quick | --full] [--runs N]
 *   (--quick: 64 B to 1 MiB, up to 2,048 objects, 3 runs; --full and the default: 64 B to 16 MiB,
 *   up to 8,192 objects, 5 runs). Main thread only. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/common.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define MAX_RUNS 15
#define LIVE_BYTES (256 * MiB) /* at most this much of each kind alive at once */

enum { V_ADSM, V_EXPLICIT, V_MALLOC, V_COUNT };

typedef struct timing {
    double make_us, free_us; /* per object: allocation and first write; free */
} timing;

static void die(const char *what, size_t size) {
    fprintf(stderr, "objects: %s (%zu bytes) failed: %s\n", what, size, adsm_last_error());
    exit(1);
}

/* One round of variant v: n objects of `size` made and written once (their first byte, the first
 * use that makes an adsm object's host pages where they wait for it), then freed. */
static timing round_of(int v, size_t size, size_t n, void **host, void **dev) {
    double t0 = bench_now_s();
    for (size_t i = 0; i < n; i++) {
        if (v == V_ADSM && !(host[i] = adsm_alloc(size))) die("adsm_alloc", size);
        if (v == V_EXPLICIT && (!(host[i] = adsm_host_alloc(size)) || !(dev[i] = adsm_dev_alloc(size))))
            die("adsm_host_alloc + adsm_dev_alloc", size);
        if (v == V_MALLOC && !(host[i] = malloc(size))) die("malloc", size);
    }
    for (size_t i = 0; i < n; i++) ((volatile unsigned char *)host[i])[0] = (unsigned char)i;
    double t2 = bench_now_s();
    for (size_t i = 0; i < n; i++) {
        if (v == V_ADSM && adsm_free(host[i]) != ADSM_OK) die("adsm_free", size);
        if (v == V_EXPLICIT && (adsm_dev_free(dev[i]) != ADSM_OK || adsm_host_free(host[i]) != ADSM_OK))
            die("adsm_dev_free + adsm_host_free", size);
        if (v == V_MALLOC) free(host[i]);
    }
    double t3 = bench_now_s();
    timing t = {(t2 - t0) * 1e6 / (double)n, (t3 - t2) * 1e6 / (double)n};
    return t;
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--quick | --full] [--runs N]\n"
            "  --quick   64 B .. 1 MiB objects, up to 2048 of each size, 3 runs\n"
            "  --full    64 B .. 16 MiB objects, up to 8192 of each size, 5 runs (default)\n"
            "  --runs N  runs per point, 1..%d\n",
            argv0, MAX_RUNS);
}

int main(int argc, char **argv) {
    int full = 1, runs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
            if (runs < 1 || runs > MAX_RUNS) {
                usage(argv[0]);
                return 1;
            }
        } else {
            usage(argv[0]);
            return !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ? 0 : 1;
        }
    }
    if (!runs) runs = full ? 5 : 3;
    static const size_t sizes[] = {64, 4 * KiB, 64 * KiB, MiB, 16 * MiB};
    size_t nsizes = full ? 5 : 4, most = full ? 8192 : 2048;

    if (adsm_init(NULL) != ADSM_OK) die("adsm_init", 0);
    void **host = calloc(most, sizeof *host), **dev = calloc(most, sizeof *dev);
    if (!host || !dev) die("calloc", most);
    printf("Objects made and freed one at a time, us per object (median of %d); backend %s, block %zu KiB.\n"
           "make = allocation and the first write; explicit = adsm_host_alloc + adsm_dev_alloc (and their frees); x = adsm / explicit.\n\n",
           runs, adsm_backend_name(), adsm_block_size() / KiB);
    printf("| size | objects | adsm make | explicit make | x | adsm free | explicit free | x | malloc+free |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (size_t s = 0; s < nsizes; s++) {
        size_t size = sizes[s], n = LIVE_BYTES / size < most ? LIVE_BYTES / size : most;
        double a[V_COUNT][MAX_RUNS], f[V_COUNT][MAX_RUNS];
        for (int v = 0; v < V_COUNT; v++) (void)round_of(v, size, n < 64 ? n : 64, host, dev); /* warm-up */
        for (int r = 0; r < runs; r++)
            for (int v = 0; v < V_COUNT; v++) { /* interleaved, so drift hits every variant alike */
                timing t = round_of(v, size, n, host, dev);
                a[v][r] = t.make_us;
                f[v][r] = t.free_us;
            }
        double am[V_COUNT], fm[V_COUNT];
        for (int v = 0; v < V_COUNT; v++) {
            am[v] = bench_median(a[v], runs);
            fm[v] = bench_median(f[v], runs);
        }
        char label[32];
        if (size >= MiB) snprintf(label, sizeof label, "%zu MiB", size / MiB);
        else if (size >= KiB) snprintf(label, sizeof label, "%zu KiB", size / KiB);
        else snprintf(label, sizeof label, "%zu B", size);
        printf("| %s | %zu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", label, n, am[V_ADSM],
               am[V_EXPLICIT], am[V_ADSM] / am[V_EXPLICIT], fm[V_ADSM], fm[V_EXPLICIT], fm[V_ADSM] / fm[V_EXPLICIT],
               am[V_MALLOC] + fm[V_MALLOC]);
        fflush(stdout);
    }
    free(host);
    free(dev);
    adsm_shutdown();
    return 0;
}
