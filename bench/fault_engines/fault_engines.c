/* bench/fault_engines/fault_engines.c -- what one tracked write costs with two ways of seeing CPU
 * writes, per object size: mprotect + SIGSEGV, adsm's engine today, against userfaultfd
 * write-protection + SIGBUS (UFFD_FEATURE_SIGBUS: the faulting thread gets the signal and lifts
 * the protection of its page with one ioctl; UFFD_USER_MODE_ONLY, so no privilege is needed). A
 * probe for docs/design.md (issue 10, point 4: the fault path flat in the object size), not an
 * adsm feature.
 *
 * Pattern (both engines): an anonymous mapping of 1K, 64K or 1M pages of 4 KiB (MADV_HUGEPAGE,
 * 2 MiB aligned, as adsm's objects), every page write-protected, then one byte written into each
 * of K random distinct pages (K = 1024, then min(pages, 16384)), each page once. mprotect
 * splits the mapping at every isolated page it opens; write-protection marks page-table entries
 * and leaves the mapping whole. Columns: us per write (the whole loop), us inside the handler
 * (its mprotect or its ioctl), and the time to protect the whole object first. Median of --runs
 * runs (default 5), each on fresh memory. Signal handlers: async-signal-safe calls only
 * (mprotect, ioctl, clock_gettime); the rest runs on the main thread.
 *
 *   bazel run -c opt //:bench_fault_engines [-- --runs N]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench/common.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1 /* Linux 5.11 */
#endif
#define FEATURE_WP_UNPOPULATED (1u << 13) /* Linux 6.4: protection also of pages not yet touched */

#define PAGE ((size_t)4096)
#define HUGE ((size_t)2 << 20)
#define MAX_WRITES 16384
#define MAX_RUNS 25

typedef struct engine {
    const char *name;
    int (*protect)(unsigned char *p, size_t size); /* write-protects [p, p + size); 0 or -1 */
    void (*release)(unsigned char *p, size_t size);
} engine;

static int uffd = -1;
static volatile double handler_ns; /* summed by the handlers over one pass */

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ---- mprotect + SIGSEGV -------------------------------------------------------------------------- */
static void segv_handler(int sig, siginfo_t *si, void *ctx) {
    (void)sig, (void)ctx;
    double t0 = now_ns();
    mprotect((void *)((uintptr_t)si->si_addr & ~(uintptr_t)(PAGE - 1)), PAGE, PROT_READ | PROT_WRITE);
    handler_ns += now_ns() - t0;
}

static int mprotect_protect(unsigned char *p, size_t size) { return mprotect(p, size, PROT_READ); }
static void mprotect_release(unsigned char *p, size_t size) { (void)p, (void)size; }

/* ---- userfaultfd write-protection + SIGBUS --------------------------------------------------- */
static void bus_handler(int sig, siginfo_t *si, void *ctx) {
    (void)sig, (void)ctx;
    double t0 = now_ns();
    struct uffdio_writeprotect wp = {.range = {.start = (uintptr_t)si->si_addr & ~(uintptr_t)(PAGE - 1), .len = PAGE},
                                     .mode = 0};
    if (ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
        static const char msg[] = "fault_engines: lifting a write-protection failed\n";
        (void)!write(2, msg, sizeof msg - 1);
        _exit(1);
    }
    handler_ns += now_ns() - t0;
}

/* The userfaultfd, or -1 with *why set (an old kernel, or a policy that forbids it). */
static int uffd_open(const char **why) {
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_SIGBUS | FEATURE_WP_UNPOPULATED};
    if (fd < 0) *why = "userfaultfd(2) refused";
    else if (ioctl(fd, UFFDIO_API, &api) != 0) *why = "UFFDIO_API refused SIGBUS + write-protection of unpopulated pages (Linux 6.4+)";
    else return fd;
    if (fd >= 0) close(fd);
    return -1;
}

static int uffd_protect(unsigned char *p, size_t size) {
    struct uffdio_register reg = {.range = {.start = (uintptr_t)p, .len = size}, .mode = UFFDIO_REGISTER_MODE_WP};
    struct uffdio_writeprotect wp = {.range = {.start = (uintptr_t)p, .len = size}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    return ioctl(uffd, UFFDIO_REGISTER, &reg) == 0 && ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) == 0 ? 0 : -1;
}

static void uffd_release(unsigned char *p, size_t size) {
    struct uffdio_range range = {.start = (uintptr_t)p, .len = size};
    (void)ioctl(uffd, UFFDIO_UNREGISTER, &range);
}

/* ---- the measurement ------------------------------------------------------------------------- */
/* One run: us per write, us in the handler per write, us to protect the object. -1 on failure. */
static int run_once(const engine *e, size_t npages, const size_t *order, size_t k, double out[3]) {
    size_t size = npages * PAGE;
    unsigned char *raw = mmap(NULL, size + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                              -1, 0);
    if (raw == MAP_FAILED) return -1;
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    madvise(p, size, MADV_HUGEPAGE);
    double t0 = now_ns();
    int rc = e->protect(p, size);
    out[2] = (now_ns() - t0) / 1e3;
    handler_ns = 0;
    t0 = now_ns();
    for (size_t i = 0; rc == 0 && i < k; i++) ((volatile unsigned char *)p)[order[i] * PAGE] = 1;
    out[0] = (now_ns() - t0) / 1e3 / (double)k;
    out[1] = handler_ns / 1e3 / (double)k;
    e->release(p, size);
    munmap(raw, size + HUGE);
    return rc;
}

static void row(const engine *e, size_t npages, size_t most, int runs) {
    static size_t order[MAX_WRITES];
    double per_write[MAX_RUNS], in_handler[MAX_RUNS], protect_all[MAX_RUNS], r[3];
    size_t k = 0;
    for (int i = 0; i < runs; i++) {
        k = bench_random_order(order, npages, most, (uint64_t)i + 1);
        if (run_once(e, npages, order, k, r) != 0) {
            printf("| %s | %zu | %zu | failed | | |\n", e->name, npages, k);
            return;
        }
        per_write[i] = r[0], in_handler[i] = r[1], protect_all[i] = r[2];
    }
    printf("| %s | %zu | %zu | %.2f | %.2f | %.0f |\n", e->name, npages, k, bench_median(per_write, runs),
           bench_median(in_handler, runs), bench_median(protect_all, runs));
    fflush(stdout);
}

int main(int argc, char **argv) {
    int runs = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs")) runs = (int)bench_long_arg("fault_engines", "--runs", argv[++i], 1, MAX_RUNS);
        else bench_unknown_arg("fault_engines", argv[i], "[--runs N]");
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = SA_SIGINFO;
    sa.sa_sigaction = segv_handler;
    sigaction(SIGSEGV, &sa, NULL);
    sa.sa_sigaction = bus_handler;
    sigaction(SIGBUS, &sa, NULL);
    const char *why = NULL;
    uffd = uffd_open(&why);
    static const engine engines[] = {{"mprotect + SIGSEGV", mprotect_protect, mprotect_release},
                                     {"userfaultfd-wp + SIGBUS", uffd_protect, uffd_release}};
    static const size_t sizes[] = {1024, 65536, 1048576}, most[] = {1024, MAX_WRITES};
    printf("## fault_engines: one tracked write (4 KiB pages), mprotect against userfaultfd write-protection\n\n");
    printf("median of %d runs; us per write, us inside the handler per write, us to protect the object\n", runs);
    if (uffd < 0) printf("\nuserfaultfd: %s; its rows are left out\n", why);
    for (size_t m = 0; m < sizeof most / sizeof *most; m++) {
        printf("\n| engine | pages | writes | us per write | us in handler | protect all us |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (size_t e = 0; e < (uffd < 0 ? 1u : 2u); e++)
            for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) row(&engines[e], sizes[s], most[m], runs);
    }
    return 0;
}
