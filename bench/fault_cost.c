/*
 * fault_cost.c - measure the cost of page-protection based access tracking
 * (mprotect + SIGSEGV) as used by the adsm runtime, to choose the default
 * block size and host memory kind.
 *
 * Build: gcc -std=c11 -O2 -D_GNU_SOURCE -I. bench/fault_cost.c -o /tmp/fc
 * Run:   /tmp/fc            (prints markdown tables, < 60 s)
 *
 * Memory kinds:
 *   A  anonymous private, 4 KiB pages (MADV_NOHUGEPAGE)
 *   B  anonymous private, 2 MiB aligned, MADV_HUGEPAGE (THP checked via smaps)
 *   C  memfd, MAP_SHARED
 *   D  memfd, MAP_SHARED, 2 MiB aligned and collapsed into 2 MiB pages (MADV_COLLAPSE, whatever
 *      shmem_enabled says): what adsm gives an object's host alias on cuda (reservation.h)
 *
 * Tests:
 *   1. tracked writes: 64 MiB region, populated, PROT_READ; one byte written
 *      per 4 KiB page; the SIGSEGV handler mprotects the enclosing block RW.
 *   2. re-protect ("flush"): mprotect(PROT_READ) block by block afterwards.
 *   3. fetch into a PROT_NONE range without making it accessible:
 *      pwrite(/proc/self/mem) (A, B) or a second RW view / pwrite(memfd) (C)
 *      versus mprotect RW + memcpy + mprotect NONE.
 *   4. plain memcpy bandwidth (64 MiB).
 * Every number is the median of 5 repetitions.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench/common.h"

#define KiB (1024UL)
#define MiB (1024UL * 1024UL)
#define REGION (64 * MiB)
#define PAGE (4 * KiB)
#define HPAGE (2 * MiB)
#define REPS 5

enum kind { KIND_A, KIND_B, KIND_C, KIND_D, NKINDS };
static const char *kind_name[NKINDS] = {"A anon 4K", "B anon THP", "C memfd shared", "D memfd collapsed"};

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

/* ---------- helpers ---------- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static const char *size_str(size_t s, char *buf)
{
    if (s >= MiB)
        sprintf(buf, "%zuM", s / MiB);
    else
        sprintf(buf, "%zuK", s / KiB);
    return buf;
}

/* Sum AnonHugePages (or ShmemPmdMapped for C) in kB over all VMAs that
 * overlap [base, base+len). */
static long huge_kb(void *base, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    uintptr_t lo = (uintptr_t)base, hi = lo + len;
    char line[512];
    int in = 0;
    long total = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long s, e;
        long kb;
        /* VMA header: "start-end perms ..." (never ends in "kB") */
        if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && !strstr(line, " kB")) {
            in = (s < hi && e > lo);
            continue;
        }
        if (in && (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1 ||
                   sscanf(line, "ShmemPmdMapped: %ld kB", &kb) == 1))
            total += kb;
    }
    fclose(f);
    return total;
}

static int count_vmas(void *base, size_t len)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    uintptr_t lo = (uintptr_t)base, hi = lo + len;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long s, e;
        if (sscanf(line, "%lx-%lx", &s, &e) == 2 && s < hi && e > lo)
            n++;
    }
    fclose(f);
    return n;
}

/* ---------- memory kinds ---------- */

struct region {
    enum kind kind;
    char *base;      /* aligned, REGION bytes */
    void *map;       /* what to munmap */
    size_t maplen;
    int fd;          /* memfd for kind C, else -1 */
    char *alias;     /* second RW view (kind C) */
};

static void region_alloc(struct region *r, enum kind k, size_t len)
{
    memset(r, 0, sizeof *r);
    r->kind = k;
    r->fd = -1;
    if (k == KIND_C || k == KIND_D) {
        r->fd = memfd_create("adsm-bench", MFD_CLOEXEC);
        if (r->fd < 0)
            die("memfd_create");
        if (ftruncate(r->fd, (off_t)len))
            die("ftruncate");
        /* D: at a 2 MiB-aligned address (inside a larger reservation), as adsm maps its views */
        r->maplen = len + (k == KIND_D ? HPAGE : 0);
        r->map = mmap(NULL, r->maplen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r->map == MAP_FAILED)
            die("mmap reservation");
        uintptr_t b = (uintptr_t)r->map;
        if (k == KIND_D)
            b = (b + HPAGE - 1) & ~(uintptr_t)(HPAGE - 1);
        r->base = mmap((void *)b, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->fd, 0);
        if (r->base == MAP_FAILED)
            die("mmap memfd");
        if (k == KIND_D) {
            for (size_t off = 0; off < len; off += HPAGE)
                r->base[off] = 0;
            if (madvise(r->base, len, MADV_COLLAPSE))
                die("MADV_COLLAPSE (Linux before 6.1, or shmem_enabled deny?)");
        }
    } else {
        size_t extra = (k == KIND_B) ? HPAGE : 0;
        r->maplen = len + extra;
        r->map = mmap(NULL, r->maplen, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (r->map == MAP_FAILED)
            die("mmap anon");
        uintptr_t b = (uintptr_t)r->map;
        if (k == KIND_B)
            b = (b + HPAGE - 1) & ~(uintptr_t)(HPAGE - 1);
        r->base = (char *)b;
        if (madvise(r->base, len, k == KIND_B ? MADV_HUGEPAGE : MADV_NOHUGEPAGE))
            die("madvise");
    }
    /* populate (write every page) */
    for (size_t off = 0; off < len; off += PAGE)
        r->base[off] = (char)(off >> 12);
}

static void region_free(struct region *r)
{
    if (r->alias)
        munmap(r->alias, r->maplen);
    munmap(r->map, r->maplen);
    if (r->fd >= 0)
        close(r->fd);
}

/* ---------- SIGSEGV tracking ---------- */

static char *volatile g_base;
static volatile size_t g_len, g_bs;
static volatile long g_faults;

static void segv_handler(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr, b = (uintptr_t)g_base;
    if (a < b || a >= b + g_len) {
        signal(sig, SIG_DFL); /* genuine crash: re-fault with default action */
        return;
    }
    uintptr_t blk = b + ((a - b) / g_bs) * g_bs;
    if (mprotect((void *)blk, g_bs, PROT_READ | PROT_WRITE) != 0)
        _exit(99);
    g_faults++;
}

/* ---------- test 1 + 2 ---------- */

static const size_t bsizes[] = {4 * KiB,   16 * KiB, 64 * KiB, 256 * KiB, 512 * KiB,
                                1 * MiB,   2 * MiB,  4 * MiB,  8 * MiB};
#define NBS (sizeof bsizes / sizeof bsizes[0])

struct t12 {
    double us_fault, gbs_write, us_reprot, gbs_reprot;
    long faults;
    long thp_pop, thp_prot, thp_written, thp_reprot; /* kB, rep 0, kind B */
    int vmas_written;
};

static void test12(enum kind k, size_t bs, struct t12 *out)
{
    double tw[REPS], tr[REPS];
    long faults = 0;
    for (int rep = 0; rep < REPS; rep++) {
        struct region r;
        region_alloc(&r, k, REGION);
        long thp_pop = huge_kb(r.base, REGION);
        if (mprotect(r.base, REGION, PROT_READ))
            die("mprotect R");
        long thp_prot = huge_kb(r.base, REGION);

        g_base = r.base;
        g_len = REGION;
        g_bs = bs;
        g_faults = 0;
        volatile char *p = r.base;
        double t0 = now();
        for (size_t off = 0; off < REGION; off += PAGE)
            p[off] = 1;
        double t1 = now();
        tw[rep] = t1 - t0;
        faults = g_faults;
        long thp_written = huge_kb(r.base, REGION);
        int vmas = count_vmas(r.base, REGION);

        t0 = now();
        for (size_t off = 0; off < REGION; off += bs)
            if (mprotect(r.base + off, bs, PROT_READ))
                die("mprotect flush");
        t1 = now();
        tr[rep] = t1 - t0;
        long thp_reprot = huge_kb(r.base, REGION);
        if (rep == 0) {
            out->thp_pop = thp_pop;
            out->thp_prot = thp_prot;
            out->thp_written = thp_written;
            out->thp_reprot = thp_reprot;
            out->vmas_written = vmas;
        }
        g_len = 0;
        region_free(&r);
    }
    double mw = bench_median_of(tw, REPS), mr = bench_median_of(tr, REPS);
    long nblocks = (long)(REGION / bs);
    out->faults = faults;
    out->us_fault = mw * 1e6 / (double)faults;
    out->gbs_write = (double)REGION / mw / 1e9;
    out->us_reprot = mr * 1e6 / (double)nblocks;
    out->gbs_reprot = (double)REGION / mr / 1e9;
}

/* ---------- test 3 ---------- */

enum fetch_method { F_PROCMEM, F_MPROT, F_ALIAS, F_PWRITE_FD };

static int g_memfd = -1;

/* returns seconds for copying REGION bytes in bs chunks, or -errno */
static double fetch_once(struct region *r, const char *src, size_t bs, enum fetch_method m)
{
    double t0 = now();
    for (size_t off = 0; off < REGION; off += bs) {
        char *dst = r->base + off;
        switch (m) {
        case F_PROCMEM: {
            ssize_t w = pwrite(g_memfd, src + off, bs, (off_t)(uintptr_t)dst);
            if (w != (ssize_t)bs)
                return w < 0 ? -(double)errno : -1e9;
            break;
        }
        case F_MPROT:
            if (mprotect(dst, bs, PROT_READ | PROT_WRITE))
                die("mprotect RW");
            memcpy(dst, src + off, bs);
            if (mprotect(dst, bs, PROT_NONE))
                die("mprotect NONE");
            break;
        case F_ALIAS:
            memcpy(r->alias + off, src + off, bs);
            break;
        case F_PWRITE_FD: {
            ssize_t w = pwrite(r->fd, src + off, bs, (off_t)off);
            if (w != (ssize_t)bs)
                return w < 0 ? -(double)errno : -1e9;
            break;
        }
        }
    }
    return now() - t0;
}

struct t3 {
    double gbs;  /* <0: failed, value is -errno */
    int verified;
    long thp_before, thp_after;
};

static void test3(enum kind k, size_t bs, enum fetch_method m, const char *src, struct t3 *out)
{
    struct region r;
    region_alloc(&r, k, REGION);
    if (m == F_ALIAS) {
        r.alias = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
        if (r.alias == MAP_FAILED)
            die("mmap alias");
    }
    if (mprotect(r.base, REGION, PROT_NONE))
        die("mprotect NONE");
    out->thp_before = huge_kb(r.base, REGION);
    double t[REPS];
    out->gbs = 0;
    for (int rep = 0; rep < REPS; rep++) {
        double s = fetch_once(&r, src, bs, m);
        if (s < 0) {
            out->gbs = s;
            break;
        }
        t[rep] = s;
    }
    out->thp_after = huge_kb(r.base, REGION);
    out->verified = 0;
    if (out->gbs >= 0) {
        out->gbs = (double)REGION / bench_median_of(t, REPS) / 1e9;
        /* verify content and that the range is still inaccessible-by-protection */
        if (mprotect(r.base, REGION, PROT_READ))
            die("mprotect verify");
        out->verified = memcmp(r.base, src, REGION) == 0;
    }
    region_free(&r);
}

/* ---------- main ---------- */

static void print_file_line(const char *path)
{
    char buf[256] = "?";
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f))
            strcpy(buf, "?");
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
    printf("- `%s`: %s\n", path, buf);
}

int main(void)
{
    double tstart = now();
    struct utsname u;
    uname(&u);
    printf("# adsm fault_cost benchmark\n\n");
    printf("- kernel %s %s, %ld CPUs online, region %lu MiB, median of %d reps\n",
           u.release, u.machine, sysconf(_SC_NPROCESSORS_ONLN), REGION / MiB, REPS);
    print_file_line("/sys/kernel/mm/transparent_hugepage/enabled");
    print_file_line("/sys/kernel/mm/transparent_hugepage/defrag");
    print_file_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    printf("\n");

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);

    /* source buffer for test 3/4 */
    char *src = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *dst = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED || dst == MAP_FAILED)
        die("mmap src");
    for (size_t i = 0; i < REGION; i++)
        src[i] = (char)(i * 2654435761u >> 13);
    memset(dst, 0, REGION);

    /* ---- test 4 first: reference ---- */
    double tm[REPS];
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = now();
        memcpy(dst, src, REGION);
        tm[rep] = now() - t0;
        __asm__ volatile("" ::"r"(dst) : "memory");
    }
    double memcpy_gbs = (double)REGION / bench_median_of(tm, REPS) / 1e9;

    /* ---- test 1 + 2 ---- */
    static struct t12 res12[NKINDS][NBS];
    for (int k = 0; k < NKINDS; k++)
        for (size_t i = 0; i < NBS; i++)
            test12((enum kind)k, bsizes[i], &res12[k][i]);

    char sb[32];
    printf("## 1. Tracked writes (64 MiB, 1 byte per 4 KiB page, SIGSEGV -> mprotect RW block)\n\n");
    printf("| block | faults |");
    for (int k = 0; k < NKINDS; k++)
        printf(" %s µs/fault | %s GB/s |", kind_name[k], kind_name[k]);
    printf("\n|---|---|");
    for (int k = 0; k < NKINDS; k++)
        printf("---|---|");
    printf("\n");
    for (size_t i = 0; i < NBS; i++) {
        printf("| %s | %ld |", size_str(bsizes[i], sb), res12[0][i].faults);
        for (int k = 0; k < NKINDS; k++)
            printf(" %.2f | %.1f |", res12[k][i].us_fault, res12[k][i].gbs_write);
        printf("\n");
    }

    printf("\n## 2. Re-protect / flush (mprotect PROT_READ block by block over 64 MiB)\n\n");
    printf("| block | blocks |");
    for (int k = 0; k < NKINDS; k++)
        printf(" %s µs/block | %s GB/s |", kind_name[k], kind_name[k]);
    printf("\n|---|---|");
    for (int k = 0; k < NKINDS; k++)
        printf("---|---|");
    printf("\n");
    for (size_t i = 0; i < NBS; i++) {
        printf("| %s | %lu |", size_str(bsizes[i], sb), REGION / bsizes[i]);
        for (int k = 0; k < NKINDS; k++)
            printf(" %.2f | %.1f |", res12[k][i].us_reprot, res12[k][i].gbs_reprot);
        printf("\n");
    }

    printf("\n### Round trip (tracked writes + flush), GB/s = 64 MiB / (write time + flush time)\n\n");
    printf("| block |");
    for (int k = 0; k < NKINDS; k++)
        printf(" %s |", kind_name[k]);
    printf("\n|---|");
    for (int k = 0; k < NKINDS; k++)
        printf("---|");
    printf("\n");
    for (size_t i = 0; i < NBS; i++) {
        printf("| %s |", size_str(bsizes[i], sb));
        for (int k = 0; k < NKINDS; k++)
            printf(" %.1f |", 1.0 / (1.0 / res12[k][i].gbs_write + 1.0 / res12[k][i].gbs_reprot));
        printf("\n");
    }

    printf("\n### THP in kind B (AnonHugePages kB of %lu, first rep)\n\n", REGION / KiB);
    printf("| block | populated | after PROT_READ | after tracked writes | after flush | VMAs after writes |\n");
    printf("|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < NBS; i++) {
        struct t12 *t = &res12[KIND_B][i];
        printf("| %s | %ld | %ld | %ld | %ld | %d |\n", size_str(bsizes[i], sb), t->thp_pop,
               t->thp_prot, t->thp_written, t->thp_reprot, t->vmas_written);
    }
    printf("\n(kind A AnonHugePages after populate: %ld kB; kind C ShmemPmdMapped: %ld kB; kind D: %ld kB)\n",
           res12[KIND_A][0].thp_pop, res12[KIND_C][0].thp_pop, res12[KIND_D][0].thp_pop);

    /* ---- test 3 ---- */
    g_memfd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    int memfd_errno = g_memfd < 0 ? errno : 0;
    static const size_t fbs[] = {4 * KiB, 64 * KiB, 512 * KiB, 2 * MiB};
    printf("\n## 3. Fetch into PROT_NONE range (64 MiB in block-sized copies), GB/s\n\n");
    if (g_memfd < 0)
        printf("open(/proc/self/mem) failed: %s\n\n", strerror(memfd_errno));
    printf("| kind | block | pwrite /proc/self/mem | 2nd RW view memcpy | pwrite(memfd) | mprotect RW+memcpy+NONE | THP kB before→after (pwrite/mem) | THP kB before→after (mprotect) |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < NKINDS; k++) {
        for (size_t i = 0; i < sizeof fbs / sizeof fbs[0]; i++) {
            struct t3 pm = {0}, mp = {0}, al = {0}, pf = {0};
            int have_pm = g_memfd >= 0;
            if (have_pm)
                test3((enum kind)k, fbs[i], F_PROCMEM, src, &pm);
            test3((enum kind)k, fbs[i], F_MPROT, src, &mp);
            if (k == KIND_C || k == KIND_D) {
                test3((enum kind)k, fbs[i], F_ALIAS, src, &al);
                test3((enum kind)k, fbs[i], F_PWRITE_FD, src, &pf);
            }
            char c1[64], c2[64], c3[64], c4[64];
            if (!have_pm)
                strcpy(c1, "n/a");
            else if (pm.gbs < 0)
                snprintf(c1, sizeof c1, "FAILS (%s)",
                         pm.gbs > -1e8 ? strerror((int)-pm.gbs) : "short write");
            else
                snprintf(c1, sizeof c1, "%.2f%s", pm.gbs, pm.verified ? "" : " (BAD DATA)");
            if (k == KIND_C || k == KIND_D) {
                snprintf(c2, sizeof c2, "%.2f%s", al.gbs, al.verified ? "" : " (BAD DATA)");
                snprintf(c3, sizeof c3, "%.2f%s", pf.gbs, pf.verified ? "" : " (BAD DATA)");
            } else {
                strcpy(c2, "n/a");
                strcpy(c3, "n/a");
            }
            snprintf(c4, sizeof c4, "%.2f%s", mp.gbs, mp.verified ? "" : " (BAD DATA)");
            printf("| %s | %s | %s | %s | %s | %s | %ld→%ld | %ld→%ld |\n", kind_name[k],
                   size_str(fbs[i], sb), c1, c2, c3, c4, pm.thp_before, pm.thp_after,
                   mp.thp_before, mp.thp_after);
        }
    }

    printf("\n## 4. Reference\n\n| test | GB/s |\n|---|---|\n| memcpy 64 MiB (anon, populated) | %.2f |\n",
           memcpy_gbs);
    printf("\n_total runtime %.1f s_\n", now() - tstart);
    return 0;
}
