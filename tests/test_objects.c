/* tests/test_objects.c -- many objects: GMAC's own tests allocate over 100k objects from 256 bytes
 * to 32 MiB. Nothing per object may stand in the way (file descriptors, mappings, linear scans),
 * and scattered protections must not break the runtime when the kernel's mapping limit
 * (vm.max_map_count, 65530 by default) is reached: by scattered writes, by strided reads of a
 * kernel's output, or by kernels writing every other object. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "tests/seccomp.h"

ADSM_KERNEL(bump, ADSM_INOUT(unsigned char, p), ADSM_VALUE(size_t, n));

void bump(adsm_grid g, unsigned char *p, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) p[i]++;
    }
}

static void init(adsm_protocol_kind protocol) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = protocol;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

static size_t live_objects(void) {
    adsm_stats s;
    adsm_get_stats(&s);
    return (size_t)s.objects;
}

/* 100k live 256-byte objects, every other one written: twice as many protection runs as the
 * default mapping limit allows if nothing merged them back. */
static void scattered_writes(adsm_protocol_kind protocol) {
    enum { N = 100000 };
    static unsigned char *p[N];
    init(protocol);
    for (size_t i = 0; i < N; i++) {
        p[i] = adsm_alloc(256);
        cr_assert_not_null(p[i], "object %zu: %s", i, adsm_last_error());
    }
    for (size_t i = 0; i < N; i += 2) p[i][7] = (unsigned char)(i % 251 + 1);
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(p[i][7], i % 2 == 0 ? i % 251 + 1 : 0, "object %zu", i);
    for (size_t i = 0; i < N; i += 1000) cr_assert_eq(ADSM_CALL(bump, adsm_grid_1d(1, 256), p[i], 256), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < N; i += 1000) cr_assert_eq(p[i][7], i % 2 == 0 ? i % 251 + 2 : 1, "object %zu", i);
    cr_assert_eq(live_objects(), N);
    for (size_t i = 0; i < N; i++) cr_assert_eq(adsm_free(p[i]), ADSM_OK, "object %zu: %s", i, adsm_last_error());
    cr_assert_eq(live_objects(), 0);
    adsm_shutdown();
}

Test(objects, scattered_writes_lazy, .timeout = 120) { scattered_writes(ADSM_PROTOCOL_LAZY); }
Test(objects, scattered_writes_rolling, .timeout = 120) { scattered_writes(ADSM_PROTOCOL_ROLLING); }

/* At vm.max_map_count the kernel refuses the protection change of a freed object's range (a split
 * needing one more mapping; here seccomp refuses every change to PROT_NONE). adsm_free still
 * frees it, keeps the range out of use, and says why: the mapping limit, not "unmapped by the
 * program", which it used to say. A new object then comes from elsewhere and works. */
Test(objects, a_free_the_mapping_limit_refuses_names_the_limit, .init = cr_redirect_stderr) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.block_size = 4096;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    unsigned char *a = adsm_alloc(64 * 1024);
    cr_assert_not_null(a, "%s", adsm_last_error());
    memset(a, 1, 64 * 1024);
    refuse_system_call_with(SYS_mprotect, 2, PROT_NONE, ENOMEM);
    cr_assert_eq(adsm_free(a), ADSM_OK, "%s", adsm_last_error());
    fflush(stderr);
    char said[1024];
    size_t got = fread(said, 1, sizeof said - 1, cr_get_redirected_stderr());
    said[got] = 0;
    cr_assert(strstr(said, "cannot be protected again") && strstr(said, "vm.max_map_count"), "adsm_free said: %s", said);
    cr_assert_null(strstr(said, "unmapped by the program"), "adsm_free said: %s", said);
    unsigned char *b = adsm_alloc(64 * 1024);
    cr_assert_not_null(b, "%s", adsm_last_error());
    cr_assert_neq(b, a, "the range kept out of use was handed out again");
    for (size_t i = 0; i < 64 * 1024; i += 4096) cr_assert_eq(b[i], 0, "a new object holds %d", b[i]);
    adsm_shutdown();
}

/* 4000 alloc/free cycles with sizes from 256 bytes to 32 MiB, a few dozen live at a time: the
 * address space and device memory are reused, nothing leaks. */
Test(objects, churn_256B_to_32MiB, .timeout = 120) {
    enum { CYCLES = 4000, LIVE = 48 };
    unsigned char *live[LIVE] = {0};
    size_t sizes[LIVE] = {0};
    unsigned seed = 12345;
    init(ADSM_PROTOCOL_ROLLING);
    for (size_t c = 0; c < CYCLES; c++) {
        size_t slot = (seed = seed * 1103515245u + 12345u) % LIVE;
        if (live[slot]) {
            cr_assert_eq(live[slot][0], (unsigned char)sizes[slot], "cycle %zu", c);
            cr_assert_eq(live[slot][sizes[slot] - 1], 0xA5, "cycle %zu", c);
            cr_assert_eq(adsm_free(live[slot]), ADSM_OK, "%s", adsm_last_error());
        }
        unsigned shift = 8 + (seed >> 8) % 18; /* 256 B .. 32 MiB */
        sizes[slot] = ((size_t)1 << shift) - (seed >> 20) % 64;
        live[slot] = adsm_alloc(sizes[slot]);
        cr_assert_not_null(live[slot], "cycle %zu, %zu bytes: %s", c, sizes[slot], adsm_last_error());
        cr_assert_eq(live[slot][sizes[slot] / 2], 0, "new objects start zeroed");
        live[slot][0] = (unsigned char)sizes[slot];
        live[slot][sizes[slot] - 1] = 0xA5;
    }
    for (size_t i = 0; i < LIVE; i++) cr_assert_eq(adsm_free(live[i]), ADSM_OK);
    cr_assert_eq(live_objects(), 0);
    adsm_shutdown();
}

/* Reads alone past the mapping limit (issue 11, item 5): a kernel writes a large object, then the
 * CPU reads every other 4 KiB block. Each read block becomes ReadOnly between Invalid ones, two
 * more mappings each: 48k reads need about 96k, past the default limit of 65530. adsm must
 * fetch more (merging runs) and compute the right answer, not die in the fault handler. */
ADSM_KERNEL(stamp, ADSM_OUT(unsigned, p), ADSM_VALUE(size_t, n));

void stamp(adsm_grid g, unsigned *p, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) p[i] = (unsigned)(i * 2654435761u);
    }
}

Test(objects, strided_reads_past_the_mapping_limit, .timeout = 120) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = 4096;
    cfg.block_exact = 1; /* one block per read fault: by default a read takes its huge page */
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    const size_t blocks = 96 * 1024, per_block = 4096 / sizeof(unsigned), n = blocks * per_block;
    unsigned *p = adsm_alloc(n * sizeof *p);
    cr_assert_not_null(p, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(stamp, adsm_grid_1d((uint32_t)(n / 1024), 1024), p, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t b = 0; b < blocks; b += 2) {
        size_t i = b * per_block + b % per_block;
        cr_assert_eq(p[i], (unsigned)(i * 2654435761u), "block %zu", b);
    }
    for (size_t i = 0; i < n; i += 997) cr_assert_eq(p[i], (unsigned)(i * 2654435761u), "element %zu", i);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_gt(s.map_limit_merges, 0, "the limit was never reached: the test proves nothing");
    cr_assert_eq(adsm_free(p), ADSM_OK);
    adsm_shutdown();
}

/* Launches past the mapping limit: kernels write every other one of 140k one-page objects, so
 * Invalid and ReadOnly objects alternate (two mappings each). At the limit an invalidation takes
 * its clean ReadOnly neighbours along, and reads join ReadOnly runs, instead of failing with
 * "mprotect failed: Cannot allocate memory". */
ADSM_KERNEL(stamp16, ADSM_OUT(int, a0), ADSM_OUT(int, a1), ADSM_OUT(int, a2), ADSM_OUT(int, a3),
            ADSM_OUT(int, a4), ADSM_OUT(int, a5), ADSM_OUT(int, a6), ADSM_OUT(int, a7), ADSM_OUT(int, a8),
            ADSM_OUT(int, a9), ADSM_OUT(int, a10), ADSM_OUT(int, a11), ADSM_OUT(int, a12), ADSM_OUT(int, a13),
            ADSM_OUT(int, a14), ADSM_VALUE(int, base));

void stamp16(adsm_grid g, int *a0, int *a1, int *a2, int *a3, int *a4, int *a5, int *a6, int *a7, int *a8, int *a9,
             int *a10, int *a11, int *a12, int *a13, int *a14, int base) {
    int *all[15] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14};
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < 15) all[i][0] = base + (int)i;
    }
}

Test(objects, alternating_kernel_outputs_past_the_mapping_limit, .timeout = 120) {
    enum { N = 140000 / 30 * 30 };
    static int *p[N];
    init(ADSM_PROTOCOL_ROLLING);
    for (size_t i = 0; i < N; i++) {
        p[i] = adsm_alloc(4096);
        cr_assert_not_null(p[i], "object %zu: %s", i, adsm_last_error());
    }
    for (size_t i = 0; i < N; i += 30) { /* objects i, i + 2, ..., i + 28 */
        int **q = &p[i];
        adsm_result r = ADSM_CALL(stamp16, adsm_grid_1d(1, 32), q[0], q[2], q[4], q[6], q[8], q[10], q[12], q[14],
                                  q[16], q[18], q[20], q[22], q[24], q[26], q[28], (int)i);
        cr_assert_eq(r, ADSM_OK, "launch at object %zu: %s", i, adsm_last_error());
    }
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(p[i][0], i % 2 ? 0 : (int)(i - i % 30 + (i % 30) / 2), "object %zu", i);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_gt(s.map_limit_merges, 0, "the limit was never reached: the test proves nothing");
    for (size_t i = 0; i < N; i++) cr_assert_eq(adsm_free(p[i]), ADSM_OK);
    adsm_shutdown();
}

/* The program's own mappings take nearly all of vm.max_map_count: an allocation is either made,
 * or refused naming the limit and the remedy (under userfaultfd it said only "mprotect of a new
 * object failed: Cannot allocate memory"). Both fault engines. Not under the sanitizers, whose
 * own allocator needs new mappings at the limit and dies there. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
static int count_maps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    int c = 0, ch;
    while (f && (ch = fgetc(f)) != EOF) c += ch == '\n';
    if (f) fclose(f);
    return c;
}

static void allocation_at_the_mapping_limit(const char *engine) {
    setenv("ADSM_FAULT_ENGINE", engine, 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.block_size = 4096;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    int limit = 65530;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f && fscanf(f, "%d", &limit) != 1) limit = 65530;
    if (f) fclose(f);
    size_t need = (size_t)(limit - count_maps()) * 2, page = 4096;
    char *m = mmap(NULL, (need + 4) * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    for (size_t i = 1; i < need; i += 2)
        if (mprotect(m + i * page, page, PROT_NONE) != 0) break;
    int refused = 0;
    for (int k = 0; k < 8; k++) {
        char *o = adsm_alloc(3 * page);
        if (o) continue;
        refused++;
        cr_assert(strstr(adsm_last_error(), "vm.max_map_count"), "%s: %s", engine, adsm_last_error());
    }
    munmap(m, (need + 4) * page);
    cr_log_info("%s: %d of 8 allocations refused at the limit", engine, refused);
    adsm_shutdown();
    unsetenv("ADSM_FAULT_ENGINE");
}

Test(objects, an_allocation_at_the_mapping_limit_names_it_mprotect, .timeout = 120) {
    allocation_at_the_mapping_limit("mprotect");
}
Test(objects, an_allocation_at_the_mapping_limit_names_it_userfaultfd, .timeout = 120) {
    allocation_at_the_mapping_limit("userfaultfd");
}
#endif
