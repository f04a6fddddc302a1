/* tests/protocol_common.h -- helpers shared by the protocol tests (test_protocol_*.c).
 *
 * Include after "adsm.h" (which the test defines ADSM_IMPLEMENTATION for) and
 * <criterion/criterion.h>. This header is included by exactly one translation unit per test
 * binary, so it may define the kernel bodies and static helpers. Every Criterion test runs in its
 * own process: call init() first and adsm_shutdown() last in each test. */
#ifndef TESTS_PROTOCOL_COMMON_H
#define TESTS_PROTOCOL_COMMON_H

#include <stdint.h>
#include <stdlib.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* ---- kernels ---------------------------------------------------------------------------------- */

/* c[i] = base + i for i < n */
ADSM_KERNEL(k_fill, ADSM_OUT(int32_t, c), ADSM_VALUE(size_t, n), ADSM_VALUE(int32_t, base));
void k_fill(adsm_grid g, int32_t *c, size_t n, int32_t base) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = base + (int32_t)i;
    }
}

/* c[i] = a[i] + b[i] for i < n, wrapping (two's complement) as the tests' random data may overflow */
ADSM_KERNEL(k_add, ADSM_OUT(int32_t, c), ADSM_IN(int32_t, a), ADSM_IN(int32_t, b), ADSM_VALUE(size_t, n));
void k_add(adsm_grid g, int32_t *c, const int32_t *a, const int32_t *b, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = (int32_t)((uint32_t)a[i] + (uint32_t)b[i]);
    }
}

/* x[i] += 1 for i < n */
ADSM_KERNEL(k_incr, ADSM_INOUT(int32_t, x), ADSM_VALUE(size_t, n));
void k_incr(adsm_grid g, int32_t *x, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] += 1;
    }
}

/* x[i] += a[i] + b[i] for i < n */
ADSM_KERNEL(k_sum3, ADSM_INOUT(int32_t, x), ADSM_IN(int32_t, a), ADSM_IN(int32_t, b), ADSM_VALUE(size_t, n));
void k_sum3(adsm_grid g, int32_t *x, const int32_t *a, const int32_t *b, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] += a[i] + b[i];
    }
}

/* a[i] = base + i and b[i] = base - i for i < n: a kernel with two outputs */
ADSM_KERNEL(k_fill2, ADSM_OUT(int32_t, a), ADSM_OUT(int32_t, b), ADSM_VALUE(size_t, n), ADSM_VALUE(int32_t, base));
void k_fill2(adsm_grid g, int32_t *a, int32_t *b, size_t n, int32_t base) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) a[i] = base + (int32_t)i, b[i] = base - (int32_t)i;
    }
}

/* ---- runtime set-up ---------------------------------------------------------------------------- */

/* The device the protocol tests run on: the emu backend, or (built with -DTEST_ON_CUDA_DOUBLE) the
 * cuda backend loaded against the driver test double, where the same tests must move the same
 * bytes and compute the same results. */
#if defined(TEST_ON_REAL_CUDA) || defined(TEST_ON_CUDA_DOUBLE)
/* the cuda backend, on a real driver or on the double: what queues on a stream returns at once */
#define TEST_ON_CUDA 1
#endif
#if defined(TEST_ON_REAL_CUDA)
/* bench/gpu_check.sh builds the suites a third time for a real GPU: the kernels' CUDA C twins,
 * compiled by NVRTC at start-up (the same parameters, in order, as the declarations above). */
#define TEST_DEVICE_BACKEND ADSM_BACKEND_CUDA
#define TEST_DEVICE_NAME "cuda"
static const char test_kernels_cuda[] = ADSM_CUDA_SOURCE(
    extern "C" __global__ void k_fill(int *c, size_t n, int base) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) c[i] = base + (int)i;
    }
    extern "C" __global__ void k_add(int *c, const int *a, const int *b, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) c[i] = (int)((unsigned)a[i] + (unsigned)b[i]);
    }
    extern "C" __global__ void k_incr(int *x, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) x[i] += 1;
    }
    extern "C" __global__ void k_sum3(int *x, const int *a, const int *b, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) x[i] += a[i] + b[i];
    }
    extern "C" __global__ void k_fill2(int *a, int *b, size_t n, int base) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) a[i] = base + (int)i, b[i] = base - (int)i;
    });
static inline void attach_test_kernels(void) {
    cr_assert_eq(adsm_module_load_source(test_kernels_cuda, NULL), ADSM_OK, "%s", adsm_last_error());
}
#elif defined(TEST_ON_CUDA_DOUBLE)
#include "tests/cuda_double_bridge.h"
#define TEST_DEVICE_BACKEND ADSM_BACKEND_CUDA
#define TEST_DEVICE_NAME "cuda"
__attribute__((constructor)) static void use_cuda_double(void) { cuda_double_use(); }
static inline void attach_test_kernels(void) {
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_k_fill(), adsm__kernel_k_add(), adsm__kernel_k_incr(),
                                               adsm__kernel_k_sum3(), adsm__kernel_k_fill2()};
    cr_assert_eq(cuda_double_attach(kernels, sizeof kernels / sizeof *kernels), 0,
                 "cannot attach the kernels to the driver double (%s): %s", cuda_double_path(), adsm_last_error());
}
#else
#define TEST_DEVICE_BACKEND ADSM_BACKEND_EMU
#define TEST_DEVICE_NAME "emu"
static inline void attach_test_kernels(void) {}
#endif

static inline adsm_grid grid_for(size_t n) { return adsm_grid_1d((uint32_t)((n + 255) / 256), 256); }

/* The environment must not override what a test asks for (fields left zero read it). */
static inline void clear_adsm_env(void) {
    static const char *const vars[] = {"ADSM_BACKEND",      "ADSM_PROTOCOL",     "ADSM_BLOCK_SIZE",
                                       "ADSM_ROLLING_SIZE", "ADSM_ROLLING_STEP", "ADSM_EMU_MEMORY",
                                       "ADSM_EMU_WORKERS",  "ADSM_LOG",          "ADSM_BLOCK_EXACT",
                                       "ADSM_EMU_DEVICES",  "ADSM_WRITE_THROUGH", "ADSM_DROP_REPLICAS",
                                       "ADSM_AFFINITY_BLOCK", "ADSM_STREAMS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

/* adsm_config.block_exact for the next init: rolling's white-box tests follow single blocks. */
static int test_block_exact;
/* ADSM_SYNC_HOME for the next init: small outputs home at adsm_sync (off in these suites unless set) */
static int test_sync_home;
/* adsm_config.emu_devices for the next init (0: one device) */
static unsigned test_devices;
/* adsm_config.write_through and .drop_replicas for the next init */
static int test_write_through, test_drop_replicas;
/* adsm_config.emu_memory for the next init (0: 256 MiB) */
static size_t test_emu_memory;
/* adsm_config.affinity_block and .streams for the next init */
static size_t test_affinity_block;
static unsigned test_streams;
/* adsm_config.fault_engine for the next init (0: ADSM_FAULT_ENGINE, else auto) */
static adsm_fault_engine_kind test_fault_engine;

static inline void init_step(adsm_backend_kind backend, adsm_protocol_kind protocol, size_t block_size,
                             size_t rolling_size, size_t rolling_step) {
    static const char *const protocol_names[] = {"", "batch", "lazy", "rolling", "um", "um-prefetch", "hmm"};
    clear_adsm_env();
    /* the suites follow each transition the CPU's faults make: a sync bringing small outputs
     * home would skip them, so it is on only where a test asks (test_sync_home) */
    setenv("ADSM_SYNC_HOME", test_sync_home ? "1" : "0", 1);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = backend;
    cfg.protocol = protocol;
    cfg.block_size = block_size;
    cfg.rolling_size = rolling_size;
    cfg.rolling_step = rolling_step;
    cfg.block_exact = test_block_exact;
#ifndef TEST_ON_CUDA_DOUBLE
    cfg.emu_devices = test_devices;
#endif
    cfg.write_through = test_write_through;
    cfg.drop_replicas = test_drop_replicas;
    cfg.affinity_block = test_affinity_block;
    cfg.streams = test_streams;
    cfg.fault_engine = test_fault_engine;
    cfg.emu_memory = test_emu_memory ? test_emu_memory : (size_t)256 << 20;
    cfg.emu_workers = 2;
#ifdef TEST_ON_CUDA_DOUBLE
    /* several GPUs of the double, each with test_emu_memory bytes (read at its cuInit, once per
     * test process) */
    char count[16], bytes[32];
    if (test_devices > 1) {
        snprintf(count, sizeof count, "%u", test_devices);
        setenv("CUDADOUBLE_DEVICES", count, 1);
        cfg.devices = "all";
    }
    if (test_emu_memory) {
        snprintf(bytes, sizeof bytes, "%zu", test_emu_memory);
        setenv("CUDADOUBLE_MEMORY", bytes, 1);
    }
    /* hmm: the double's GPU reaches pageable host memory, as HMM gives (read at its cuInit) */
    if (protocol == ADSM_PROTOCOL_HMM) setenv("CUDADOUBLE_PAGEABLE", "1", 1);
#endif
    adsm_result r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_OK, "adsm_init: %s", adsm_last_error());
    /* rolling decides how much a fault takes and an eviction sends from the costs it measures
     * (protocol_rolling.h): fixed here, so that what the tests count does not depend on the machine's
     * load. Nothing measured: the rules do what they did before costs decided (sequential runs
     * up to a huge page, one block per scattered write, evictions as the window lets blocks
     * go). Tests of the rule itself pin their own costs. */
    adsm__rolling_costs_pin(&adsm__rt, 0, 0, 0);
    if (backend == ADSM_BACKEND_CUDA) attach_test_kernels();
    cr_assert_str_eq(adsm_protocol_name(), protocol_names[protocol]);
    cr_assert_str_eq(adsm_backend_name(), backend == ADSM_BACKEND_HOST ? "host" : TEST_DEVICE_NAME);
    cr_assert_eq(adsm_block_size(), block_size);
}

static inline void init(adsm_backend_kind backend, adsm_protocol_kind protocol, size_t block_size,
                        size_t rolling_size) {
    init_step(backend, protocol, block_size, rolling_size, 0);
}

static inline adsm_stats stats(void) {
    adsm_stats s;
    cr_assert_eq(adsm_get_stats(&s), ADSM_OK);
    return s;
}

static inline void reset(void) { cr_assert_eq(adsm_reset_stats(), ADSM_OK); }

/* Whether fetches into [p, p + n) skip copy.h's staging slots and /proc/self/mem: the backend's
 * DMA writes the pages whatever their protection (cuda, page-locked objects), or the bytes go in
 * through the host alias, which is always writable (cuda under shared addresses). */
static inline int fetched_in_place(const void *p, size_t n) {
    const adsm__backend_vtbl *be = adsm__rt.be;
    return adsm__host_dma(&adsm__rt, (uintptr_t)p) != (uintptr_t)p ||
           (be->host_direct && be->host_direct(adsm__rt.be_ctx, (uintptr_t)p, n));
}

static inline void *alloc(size_t size) {
    void *p = adsm_alloc(size);
    cr_assert_not_null(p, "adsm_alloc(%zu): %s", size, adsm_last_error());
    return p;
}

static inline void sync_ok(void) {
    adsm_result r = adsm_sync();
    cr_assert_eq(r, ADSM_OK, "adsm_sync: %s", adsm_last_error());
}

#define CALL_OK(...)                                                                 \
    do {                                                                             \
        adsm_result call_r_ = ADSM_CALL(__VA_ARGS__);                                \
        cr_assert_eq(call_r_, ADSM_OK, "ADSM_CALL: %s", adsm_last_error());          \
    } while (0)

/* Accesses the compiler may not drop, merge or move: each one really touches memory. */
static inline int32_t rd(const int32_t *p) { return *(const volatile int32_t *)p; }
static inline void wr(int32_t *p, int32_t v) { *(volatile int32_t *)p = v; }

/* Small outputs home at adsm_sync (protocol.h), for lazy and rolling with block size bs: a kernel's
 * result of 4000 bytes that the CPU reads after every sync faults once, then comes home in the next
 * ADSM__HOME_SYNCS syncs without a fault, then faults again; one it stops reading costs exactly
 * ADSM__HOME_SYNCS copies more; one over 64 KiB faults at every read; ADSM_SYNC_HOME=0 leaves every
 * read to its fault. */
static inline void small_results_come_home_in_the_sync(adsm_protocol_kind protocol, size_t bs) {
    const int32_t habit = ADSM__HOME_SYNCS, rounds = habit + 2;
    const size_t n = 1000, big = 20000; /* 4000 bytes; 80000 */
    for (int on = 1; on >= 0; on--) {
        test_sync_home = on;
        init(TEST_DEVICE_BACKEND, protocol, bs, 0);
        int32_t *r = adsm_alloc(n * sizeof *r), *large = adsm_alloc(big * sizeof *large);
        cr_assert(r && large, "%s", adsm_last_error());
        reset();
        for (int32_t k = 0; k < rounds; k++) {
            CALL_OK(k_fill, grid_for(n), r, n, k);
            sync_ok();
            cr_assert_eq(rd(&r[n - 1]), k + (int32_t)n - 1, "round %d", k);
            cr_assert_eq(rd(&r[0]), k, "round %d", k);
        }
        adsm_stats s = stats();
        cr_assert_eq(s.read_faults, on ? 2 : (uint64_t)rounds, "sync_home %d: %llu read faults", on,
                     (unsigned long long)s.read_faults);
        cr_assert_eq(s.sync_fetches, on ? (uint64_t)habit : 0, "sync_home %d: brought home at a sync: %llu", on,
                     (unsigned long long)s.sync_fetches);
        cr_assert_eq(s.d2h_bytes, rounds * n * sizeof *r, "the result once a round: %llu bytes",
                     (unsigned long long)s.d2h_bytes);
        if (!on) {
            adsm_shutdown();
            break;
        }
        reset(); /* the CPU stops reading it */
        for (int32_t k = 0; k < 3 * habit; k++) {
            CALL_OK(k_fill, grid_for(n), r, n, k);
            sync_ok();
        }
        s = stats();
        cr_assert_eq(s.sync_fetches, (uint64_t)habit, "a result nobody reads: %llu copies", (unsigned long long)s.sync_fetches);
        cr_assert_eq(s.d2h_bytes, habit * n * sizeof *r);
        cr_assert_eq(rd(&r[5]), 3 * habit - 1 + 5, "and it still comes home when read");
        reset(); /* too large to learn it */
        for (int32_t k = 0; k < 3; k++) {
            CALL_OK(k_fill, grid_for(big), large, big, k);
            sync_ok();
            cr_assert_eq(rd(&large[big - 1]), k + (int32_t)big - 1);
        }
        s = stats();
        cr_assert_eq(s.sync_fetches, 0);
        cr_assert_geq(s.read_faults, 3);
        adsm_shutdown();
    }
}

/* A small object the CPU sets before each kernel and reads after each sync (histo's ranges, with
 * other kernels between that do not name it): its first read faults; then the write fault of the
 * next round (the CPU writes what the sync brought home) has the syncs bring it home Dirty, beside
 * a twin of its bytes, where it stands through the other launches: no round faults again, read or
 * write, and only the releases that find it changed copy it. Once the CPU only reads it, nothing
 * is copied, and the syncs bring it home ReadOnly again. And after a flush (a release's, or
 * adsm_memcpy's sending its source) the twin no longer speaks for the device copy. */
static inline void written_small_objects_keep_coming_home(adsm_protocol_kind protocol, size_t bs) {
    const int32_t rounds = 4 * ADSM__HOME_SYNCS, reads = ADSM__HOME_SYNCS - 2; /* the habit outlives these */
    const size_t n = 2;
    test_sync_home = 1;
    init(TEST_DEVICE_BACKEND, protocol, bs, 0);
    int32_t *r = adsm_alloc(n * sizeof *r), *other = adsm_alloc(64 * sizeof *other);
    cr_assert(r && other, "%s", adsm_last_error());
    reset();
    for (int32_t k = 0; k < rounds; k++) {
        wr(&r[0], 10 * k);
        wr(&r[1], 10 * k + 1);
        CALL_OK(k_incr, grid_for(n), r, n);
        sync_ok();
        cr_assert_eq(rd(&r[0]), 10 * k + 1, "round %d: the kernel did not see the CPU's write", k);
        cr_assert_eq(rd(&r[1]), 10 * k + 2, "round %d", k);
        CALL_OK(k_fill, grid_for(64), other, 64, k); /* a kernel that does not name it */
        if (k >= 2) cr_assert_eq(adsm_block_state(r), 'D', "round %d: it left its twin", k);
    }
    adsm_stats s = stats();
    cr_assert_eq(s.read_faults, 1, "%llu read faults in %d rounds", (unsigned long long)s.read_faults, rounds);
    cr_assert_eq(s.write_faults, 2, "%llu write faults in %d rounds", (unsigned long long)s.write_faults, rounds);
    cr_assert_eq(s.sync_fetches, (uint64_t)rounds - 1, "brought home at a sync: %llu", (unsigned long long)s.sync_fetches);
    cr_assert_eq(s.h2d_bytes, rounds * n * sizeof *r, "each round's changes once: %llu bytes",
                 (unsigned long long)s.h2d_bytes);
    cr_assert_eq(adsm_block_state(r), 'D', "brought home as it is used: '%c'", adsm_block_state(r));
    reset();
    for (int32_t k = 0; k < reads; k++) { /* the CPU only reads it now */
        CALL_OK(k_incr, grid_for(n), r, n);
        sync_ok();
        cr_assert_eq(rd(&r[0]), 10 * (rounds - 1) + 2 + k, "read-only round %d", k);
    }
    s = stats();
    cr_assert_eq(s.h2d_bytes, 0, "an unchanged object was copied: %llu bytes", (unsigned long long)s.h2d_bytes);
    cr_assert_eq(s.read_faults + s.write_faults, 0);
    cr_assert_eq(adsm_block_state(r), 'R', "read only, it comes home ReadOnly: '%c'", adsm_block_state(r));
    /* a flush ends the twin's say: home Dirty again, a change goes to a kernel that only reads it,
     * then the CPU writes the twin's bytes back, and the next kernel must see them */
    int32_t *c = adsm_alloc(n * sizeof *c), *zero = adsm_alloc(n * sizeof *zero);
    cr_assert(c && zero, "%s", adsm_last_error());
    wr(&r[0], 5);
    CALL_OK(k_incr, grid_for(n), r, n);
    sync_ok();
    cr_assert_eq(adsm_block_state(r), 'D');
    int32_t twin = rd(&r[0]); /* 6 */
    wr(&r[0], 777);
    CALL_OK(k_add, grid_for(n), c, r, zero, n);
    sync_ok();
    cr_assert_eq(rd(&c[0]), 777);
    wr(&r[0], twin);
    CALL_OK(k_add, grid_for(n), c, r, zero, n);
    sync_ok();
    cr_assert_eq(rd(&c[0]), twin, "the kernel read %d, not the CPU's %d", rd(&c[0]), twin);
    /* ... and so does a flush by adsm_memcpy sending it as a source: the twin's bytes written back
     * after it reach the kernel that next writes the object */
    wr(&r[0], 5);
    CALL_OK(k_incr, grid_for(n), r, n);
    sync_ok();
    cr_assert_eq(adsm_block_state(r), 'D');
    twin = rd(&r[0]); /* 6 */
    wr(&r[0], 555);
    adsm__rt.send_source_always = 1;
    cr_assert_eq(adsm_memcpy(c, r, n * sizeof *r), ADSM_OK, "%s", adsm_last_error());
    adsm__rt.send_source_always = 0;
    cr_assert_eq(adsm_block_state(r), 'R', "adsm_memcpy did not send its source: '%c'", adsm_block_state(r));
    cr_assert_eq(rd(&c[0]), 555);
    wr(&r[0], twin);
    CALL_OK(k_incr, grid_for(n), r, n);
    sync_ok();
    cr_assert_eq(rd(&r[0]), twin + 1, "the kernel started from %d, not the CPU's %d", rd(&r[0]) - 1, twin);
    adsm_shutdown();
}

/* An object standing beside its twin that adsm_memcpy sends only part of (a source range covering
 * its second half): the twin speaks for the device copy no more, so the CPU's other changes, in
 * blocks the copy did not send, still go to the next kernel. With blocks under half the object
 * (rolling at 4 KiB) the copy sends one of them alone; otherwise the unit is the whole object. */
static inline void twins_sent_in_part_send_the_rest(adsm_protocol_kind protocol, size_t bs) {
    const size_t n = 2 * 4096 / sizeof(int32_t), half = n / 2;
    test_sync_home = 1;
    init(TEST_DEVICE_BACKEND, protocol, bs, 0);
    int32_t *r = adsm_alloc(n * sizeof *r), *c = adsm_alloc(n * sizeof *c), *zero = adsm_alloc(n * sizeof *zero);
    int32_t *d = adsm_alloc(half * sizeof *d); /* one whole unit: copied on the device */
    cr_assert(r && c && zero && d, "%s", adsm_last_error());
    for (int32_t k = 0; k < 3; k++) { /* a read teaches the habit, a write the twin */
        wr(&r[0], 10 * k);
        wr(&r[half], 10 * k + 1);
        CALL_OK(k_incr, grid_for(n), r, n);
        sync_ok();
        cr_assert_eq(rd(&r[0]), 10 * k + 1, "round %d", k);
    }
    cr_assert_eq(adsm_block_state(r), 'D', "not beside a twin: '%c'", adsm_block_state(r));
    wr(&r[0], 777); /* no fault: the first half changes beside the twin */
    wr(&r[half], 888);
    adsm__rt.send_source_always = 1;
    cr_assert_eq(adsm_memcpy(d, &r[half], half * sizeof *r), ADSM_OK, "%s", adsm_last_error());
    adsm__rt.send_source_always = 0;
    cr_assert_eq(adsm_block_state(&r[half]), 'R', "adsm_memcpy did not send its source: '%c'",
                 adsm_block_state(&r[half]));
    cr_assert_eq(rd(&d[0]), 888);
    CALL_OK(k_add, grid_for(n), c, r, zero, n);
    sync_ok();
    cr_assert_eq(rd(&c[0]), 777, "the kernel read %d, not the CPU's 777 (the half not sent was lost)", rd(&c[0]));
    cr_assert_eq(rd(&c[half]), 888);
    adsm_shutdown();
}

/* Every launch compares the objects standing beside twins, so they hold at most ADSM__TWIN_BYTES
 * at once: of six such objects of 64 KiB, four come home Dirty, the others ReadOnly as before, and
 * every one's values stay right. */
static inline void twins_are_bounded(adsm_protocol_kind protocol, size_t bs) {
    enum { OBJECTS = 6 };
    const size_t n = ADSM__SMALL_OUTPUT / sizeof(int32_t);
    cr_assert_eq(ADSM__TWIN_BYTES / ADSM__SMALL_OUTPUT, 4, "the test counts on four");
    test_sync_home = 1;
    init(TEST_DEVICE_BACKEND, protocol, bs, 0);
    int32_t *o[OBJECTS];
    for (int i = 0; i < OBJECTS; i++) cr_assert_not_null(o[i] = adsm_alloc(n * sizeof(int32_t)), "%s", adsm_last_error());
    for (int round = 0; round < 3; round++) { /* the reads teach the habit, the writes the twin */
        for (int i = 0; i < OBJECTS; i++) wr(&o[i][0], 100 * round + i);
        for (int i = 0; i < OBJECTS; i++) CALL_OK(k_incr, grid_for(1), o[i], 1);
        sync_ok();
        for (int i = 0; i < OBJECTS; i++) cr_assert_eq(rd(&o[i][0]), 100 * round + i + 1, "round %d, object %d", round, i);
    }
    int dirty = 0;
    for (int i = 0; i < OBJECTS; i++) dirty += adsm_block_state(o[i]) == 'D';
    cr_assert_eq(dirty, 4, "%d objects beside twins", dirty);
    adsm_shutdown();
}

/* A flush queued before a kernel that adsm_sync saw done is done too (stream order), so neither a
 * CPU write to what it sent nor that object's invalidation as the next kernel's output waits for
 * every queued copy again (a drain: on cuda a round trip to the engine thread, which histo paid
 * once an iteration). Without the sync in between, the write does wait. Lazy and rolling, block
 * size bs. */
static inline void synced_flushes_need_no_drain(adsm_protocol_kind protocol, size_t bs) {
    const size_t n = 50000;
    init(TEST_DEVICE_BACKEND, protocol, bs, 0);
    int32_t *a = alloc(n * sizeof(int32_t)), *b = alloc(n * sizeof(int32_t));
    wr(&a[0], 1); /* Dirty: flushed, asynchronously, at the call (an input) */
    CALL_OK(k_add, grid_for(n), b, a, a, n);
    uint64_t drains = adsm__rt.drains;
    wr(&a[1], 2); /* its flush may still be reading it */
    cr_assert_gt(adsm__rt.drains, drains, "a write to a unit whose flush ran unsynced waited for nothing");
    CALL_OK(k_add, grid_for(n), b, a, a, n);
    sync_ok();
    drains = adsm__rt.drains;
    wr(&a[2], 3);
    cr_assert_eq(adsm__rt.drains, drains, "a write after the sync waited for copies already done");
    CALL_OK(k_add, grid_for(n), b, a, a, n);
    sync_ok();
    drains = adsm__rt.drains;
    CALL_OK(k_fill, grid_for(n), a, n, 10); /* a, flushed before the synced kernel, is its output */
    cr_assert_eq(adsm__rt.drains, drains, "invalidating an output waited for copies already done");
    sync_ok();
    cr_assert_eq(rd(&b[2]), 6);
    cr_assert_eq(rd(&b[3]), 0);
    cr_assert_eq(rd(&a[n - 1]), 10 + (int32_t)n - 1);
    adsm_shutdown();
}

/* A kernel's output that is Invalid already (a grid only kernels write, as a stencil's two are)
 * costs no protection change at the next launch that writes it; side-by-side outputs the same;
 * one that the CPU read is protected again. Lazy and rolling, block size bs. */
static inline void invalid_outputs_are_not_protected_again(adsm_protocol_kind protocol, size_t bs) {
    const size_t n = 50000;
    init(TEST_DEVICE_BACKEND, protocol, bs, 0);
    int32_t *a = alloc(n * sizeof(int32_t)), *b = alloc(n * sizeof(int32_t));
    CALL_OK(k_fill2, grid_for(n), a, b, n, 1); /* both ReadOnly before: protected */
    uint64_t changes = stats().protection_changes;
    CALL_OK(k_fill2, grid_for(n), a, b, n, 2);
    CALL_OK(k_fill, grid_for(n), a, n, 3);
    cr_assert_eq(stats().protection_changes, changes, "%llu protection changes for outputs Invalid already",
                 (unsigned long long)(stats().protection_changes - changes));
    sync_ok();
    cr_assert_eq(rd(&b[n - 1]), 2 - (int32_t)(n - 1)); /* b ReadOnly now (a fetch) */
    changes = stats().protection_changes;
    CALL_OK(k_fill2, grid_for(n), a, b, n, 4);
    cr_assert_gt(stats().protection_changes, changes, "an output the CPU read was not protected again");
    sync_ok();
    cr_assert_eq(rd(&a[7]), 4 + 7);
    cr_assert_eq(rd(&b[7]), 4 - 7);
    adsm_shutdown();
}

/* Defines Test(suite, name_4k) and Test(suite, name_64k) running `static void name(size_t bs)`
 * with 4 KiB and 64 KiB blocks; write the body of name right after the macro. */
#define TEST_BLOCK_SIZES(suite, name)              \
    static void name(size_t bs);                   \
    Test(suite, name##_4k) { name((size_t)4096); } \
    Test(suite, name##_64k) { name((size_t)65536); } \
    static void name(size_t bs)

/* ---- expectations ------------------------------------------------------------------------------ */

#define EXPECT_STATE(ptr, st)                                                                    \
    do {                                                                                         \
        char got_ = adsm_block_state(ptr);                                                       \
        cr_assert_eq(got_, (st), "state of %s: got '%c', expected '%c'", #ptr, got_ ? got_ : '0', \
                     (st));                                                                      \
    } while (0)

/* Every block of [p, p + size) is in state st. */
static inline void expect_all(const void *p, size_t size, char st) {
    size_t bs = adsm_block_size();
    for (size_t off = 0; off < size; off += bs) {
        char got = adsm_block_state((const char *)p + off);
        cr_assert_eq(got, st, "block at offset %zu: got '%c', expected '%c'", off, got ? got : '0', st);
    }
}

/* Bytes moved since the last reset. */
#define EXPECT_BYTES(h2d, d2h)                                                                          \
    do {                                                                                                \
        adsm_stats s_ = stats();                                                                        \
        cr_assert_eq(s_.h2d_bytes, (uint64_t)(h2d), "h2d_bytes: got %llu, expected %llu",               \
                     (unsigned long long)s_.h2d_bytes, (unsigned long long)(h2d));                      \
        cr_assert_eq(s_.d2h_bytes, (uint64_t)(d2h), "d2h_bytes: got %llu, expected %llu",               \
                     (unsigned long long)s_.d2h_bytes, (unsigned long long)(d2h));                      \
    } while (0)

/* CPU faults since the last reset. */
#define EXPECT_FAULTS(reads, writes)                                                                    \
    do {                                                                                                \
        adsm_stats s_ = stats();                                                                        \
        cr_assert_eq(s_.read_faults, (uint64_t)(reads), "read_faults: got %llu, expected %llu",         \
                     (unsigned long long)s_.read_faults, (unsigned long long)(reads));                  \
        cr_assert_eq(s_.write_faults, (uint64_t)(writes), "write_faults: got %llu, expected %llu",      \
                     (unsigned long long)s_.write_faults, (unsigned long long)(writes));                \
    } while (0)

/* Changes of page protection the protocol made since the last reset. */
#define EXPECT_PROTECTION_CHANGES(n)                                                                    \
    do {                                                                                                \
        adsm_stats s_ = stats();                                                                        \
        cr_assert_eq(s_.protection_changes, (uint64_t)(n), "protection_changes: got %llu, expected %llu", \
                     (unsigned long long)s_.protection_changes, (unsigned long long)(n));               \
    } while (0)

/* Nothing moved and nothing faulted since the last reset. */
#define EXPECT_QUIET()         \
    do {                       \
        EXPECT_BYTES(0, 0);    \
        EXPECT_FAULTS(0, 0);   \
    } while (0)

/* c[i] == base + i for i in [from, to) */
static inline void expect_filled(const int32_t *c, size_t from, size_t to, int32_t base) {
    for (size_t i = from; i < to; i++)
        cr_assert_eq(rd(&c[i]), base + (int32_t)i, "element %zu: got %d, expected %d", i, rd(&c[i]),
                     base + (int32_t)i);
}

/* ---- scenarios shared by every protocol ------------------------------------------------------ */

/* The original GMAC returned stale data here: the second kernel's results must be seen. */
static inline void scenario_no_stale_read(void) {
    const size_t n = 20000; /* 80000 bytes: several blocks at 4 KiB, two at 64 KiB */
    int32_t *c = alloc(n * sizeof *c);
    CALL_OK(k_fill, grid_for(n), c, n, 1000);
    sync_ok();
    expect_filled(c, 0, n, 1000);
    CALL_OK(k_fill, grid_for(n), c, n, -5000);
    sync_ok();
    expect_filled(c, 0, n, -5000);
    /* and a third time, touching one element only before the next call */
    CALL_OK(k_fill, grid_for(n), c, n, 7);
    sync_ok();
    cr_assert_eq(rd(&c[n - 1]), 7 + (int32_t)(n - 1));
    CALL_OK(k_fill, grid_for(n), c, n, 70000);
    sync_ok();
    expect_filled(c, 0, n, 70000);
    cr_assert_eq(adsm_free(c), ADSM_OK);
}

/* Interior pointers as kernel arguments: only the addressed part is written. */
static inline void scenario_interior_pointers(void) {
    const size_t n = 4096; /* 16 KiB */
    int32_t *a = alloc(n * sizeof *a), *b = alloc(n * sizeof *b), *c = alloc(n * sizeof *c);
    for (size_t i = 0; i < n; i++) {
        wr(&a[i], (int32_t)i);
        wr(&b[i], 3 * (int32_t)i);
        wr(&c[i], -1);
    }
    CALL_OK(k_add, grid_for(n - 300), c + 100, a + 200, b + 300, n - 300);
    sync_ok();
    for (size_t i = 0; i < 100; i++) cr_assert_eq(rd(&c[i]), -1, "c[%zu] was not a kernel output", i);
    for (size_t i = 100; i < n - 200; i++)
        cr_assert_eq(rd(&c[i]), (int32_t)(i + 100) + 3 * (int32_t)(i + 200), "c[%zu]", i);
    for (size_t i = n - 200; i < n; i++) cr_assert_eq(rd(&c[i]), -1, "c[%zu] was not a kernel output", i);
    CALL_OK(k_fill, grid_for(10), c + n - 10, 10, 42);
    sync_ok();
    expect_filled(c + n - 10, 0, 10, 42);
    cr_assert_eq(rd(&c[n - 11]), -1);
    adsm_free(a);
    adsm_free(b);
    adsm_free(c);
}

/* The host backend: write a and b, call a kernel writing c only, read a then c. Results right,
 * every block 'D', no byte and no fault counted. */
static inline void scenario_host_moves_nothing(adsm_protocol_kind protocol, size_t block_size) {
    init(ADSM_BACKEND_HOST, protocol, block_size, 0);
    const size_t n = 50000; /* 200000 bytes, not a multiple of any block size */
    const size_t size = n * sizeof(int32_t);
    int32_t *a = alloc(size), *b = alloc(size), *c = alloc(size);
    expect_all(a, size, 'D');
    expect_all(c, size, 'D');
    reset();
    for (size_t i = 0; i < n; i++) {
        wr(&a[i], (int32_t)i);
        wr(&b[i], 2 * (int32_t)i);
    }
    expect_all(a, size, 'D');
    CALL_OK(k_add, grid_for(n), c, a, b, n);
    expect_all(c, size, 'D');
    expect_all(a, size, 'D');
    sync_ok();
    cr_assert_eq(rd(&a[n / 2]), (int32_t)(n / 2));
    cr_assert_eq(rd(&c[n / 2]), 3 * (int32_t)(n / 2));
    for (size_t i = 0; i < n; i++) cr_assert_eq(rd(&c[i]), 3 * (int32_t)i);
    expect_all(c, size, 'D');
    sync_ok();
    EXPECT_QUIET();
    cr_assert_eq(stats().evictions, 0);
    cr_assert_eq(stats().launches, 1);
    adsm_free(a);
    adsm_free(b);
    adsm_free(c);
    adsm_shutdown();
}

#endif /* TESTS_PROTOCOL_COMMON_H */
