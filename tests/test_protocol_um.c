/* tests/test_protocol_um.c -- the unified-memory protocols (adsm_impl/protocol_um.h): um, whose
 * objects are CUDA managed memory kept coherent by the driver, um-prefetch, which adds prefetches
 * from the kernel annotations, and hmm, whose objects are plain host memory the GPU reaches
 * itself. Built for the cuda backend on the driver test double (tests/cuda/, which models
 * cuMemAllocManaged memory as host pages every device reaches, counts prefetches by destination,
 * and with CUDADOUBLE_PAGEABLE=1 reaches pageable host memory, as HMM does) and, by
 * bench/gpu_check.sh, for a real GPU (where hmm runs if the GPU reports pageable memory access,
 * and is checked to be refused, saying why, if not). Each test runs in its own process, under
 * every protocol that applies. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/protocol_common.h"
#include "tests/death.h"

TestSuite(um, .timeout = 120);

/* The parameters of a test that runs under um, um-prefetch and hmm. */
static struct criterion_test_params all_three(void) {
    static adsm_protocol_kind kinds[] = {ADSM_PROTOCOL_UM, ADSM_PROTOCOL_UM_PREFETCH, ADSM_PROTOCOL_HMM};
    return cr_make_param_array(adsm_protocol_kind, kinds, sizeof kinds / sizeof kinds[0]);
}

#define N ((size_t)300000) /* not a multiple of a page or a block */
#define S (N * sizeof(int32_t))

ParameterizedTestParameters(um, every_protocol) { return all_three(); }

#ifndef TEST_ON_CUDA_DOUBLE
/* A real GPU runs hmm only if it reports pageable memory access; one that does not must refuse
 * it at adsm_init, naming the attribute, and the test ends there (the double is told to reach
 * pageable memory: protocol_common.h). */
static int gpu_refuses_hmm(adsm_protocol_kind protocol) {
    if (protocol != ADSM_PROTOCOL_HMM) return 0;
    clear_adsm_env();
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.protocol = ADSM_PROTOCOL_HMM;
    adsm_result r = adsm_init(&cfg);
    if (r == ADSM_OK) {
        adsm_shutdown();
        return 0;
    }
    cr_assert_eq(r, ADSM_ERROR_UNSUPPORTED, "adsm_init(hmm): %s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS"), "error: %s", adsm_last_error());
    cr_log_info("this GPU does not reach pageable memory: hmm refused (%s)", adsm_last_error());
    return 1;
}
#else
static int gpu_refuses_hmm(adsm_protocol_kind protocol) {
    (void)protocol;
    return 0;
}
#endif

/* init() for the protocol, or 0 where a real GPU refused hmm as it should. */
static int um_init(adsm_protocol_kind protocol) {
    if (gpu_refuses_hmm(protocol)) return 0;
    init(TEST_DEVICE_BACKEND, protocol, 2 * MIB, 0);
    return 1;
}

static void expect_no_faults(void) {
    adsm_stats s = stats();
    cr_assert_eq(s.read_faults + s.write_faults, 0, "%llu faults: nothing is protected under um",
                 (unsigned long long)(s.read_faults + s.write_faults));
}

/* The CPU writes inputs in place, a kernel reads them and writes its output, the CPU reads the
 * result after adsm_sync; no fault reaches adsm, and one pointer serves both sides. */
static void inputs_in_and_results_out(adsm_protocol_kind protocol) {
    if (!um_init(protocol)) return;
    int32_t *a = alloc(S), *b = alloc(S), *c = alloc(S);
    cr_assert_eq(adsm_safe(a), (void *)a, "%s memory has one address for the CPU and the device", adsm_protocol_name());
    reset();
    for (size_t i = 0; i < N; i++) wr(&a[i], (int32_t)i), wr(&b[i], (int32_t)(2 * i));
    CALL_OK(k_add, grid_for(N), c, a, b, N);
    sync_ok();
    for (size_t i = 0; i < N; i++)
        if (rd(&c[i]) != (int32_t)(3 * i)) cr_assert_fail("c[%zu] = %d, expected %d", i, rd(&c[i]), (int)(3 * i));
    CALL_OK(k_incr, grid_for(N), c, N); /* INOUT: the kernel reads what it wrote before */
    sync_ok();
    cr_assert_eq(rd(&c[N - 1]), (int32_t)(3 * (N - 1) + 1));
    expect_no_faults();
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(adsm_free(b), ADSM_OK);
    cr_assert_eq(adsm_free(c), ADSM_OK);
    adsm_shutdown();
}

ParameterizedTest(adsm_protocol_kind *protocol, um, every_protocol) { inputs_in_and_results_out(*protocol); }

#ifdef TEST_ON_CUDA_DOUBLE
static cudadouble_counters counters(void) {
    cudadouble_counters c;
    cuda_double.get_counters(&c);
    return c;
}

/* um-prefetch sends every object a kernel names to the device before it runs, and at adsm_sync
 * brings back those it may have written, once; um asks for nothing. Prefetched bytes count in
 * adsm_stats. */
ParameterizedTestParameters(um, prefetches_follow_the_annotations) {
    static adsm_protocol_kind kinds[] = {ADSM_PROTOCOL_UM, ADSM_PROTOCOL_UM_PREFETCH};
    return cr_make_param_array(adsm_protocol_kind, kinds, sizeof kinds / sizeof kinds[0]);
}

ParameterizedTest(adsm_protocol_kind *protocol, um, prefetches_follow_the_annotations) {
    int prefetch = *protocol == ADSM_PROTOCOL_UM_PREFETCH;
    init(TEST_DEVICE_BACKEND, *protocol, 2 * MIB, 0);
    int32_t *a = alloc(S), *b = alloc(2 * S), *c = alloc(S), *idle = alloc(S);
    cr_assert_eq(cuda_double_open(), 0);
    (void)idle; /* named by no kernel: never prefetched */
    reset();
    cudadouble_counters before = counters();
    CALL_OK(k_add, grid_for(N), c, a, b, N);
    sync_ok();
    cudadouble_counters after = counters();
    unsigned long long to_device = after.prefetch_device_bytes - before.prefetch_device_bytes;
    unsigned long long to_host = after.prefetch_host_bytes - before.prefetch_host_bytes;
    cr_assert_eq(to_device, prefetch ? 4 * S : 0, "%llu bytes prefetched to the device", to_device);
    cr_assert_eq(to_host, prefetch ? S : 0, "%llu bytes prefetched home: only the kernel's output", to_host);
    adsm_stats s = stats();
    cr_assert_eq(s.h2d_bytes, to_device);
    cr_assert_eq(s.d2h_bytes, to_host);
    cr_assert_eq(s.h2d_copies, prefetch ? 3 : 0, "%llu copies: one prefetch per object named", (unsigned long long)s.h2d_copies);
    adsm_device_stats dev;
    cr_assert_eq(adsm_get_device_stats(0, &dev), ADSM_OK);
    cr_assert_eq(dev.h2d_bytes, to_device, "device 0 counts %llu bytes to it", (unsigned long long)dev.h2d_bytes);
    cr_assert_eq(dev.d2h_bytes, to_host, "device 0 counts %llu bytes from it", (unsigned long long)dev.d2h_bytes);
    sync_ok(); /* nothing ran since: nothing more comes home */
    cr_assert_eq(counters().prefetch_host_bytes, after.prefetch_host_bytes);
    cr_assert_eq(counters().managed_allocs - before.managed_allocs, 0);
    adsm_shutdown();
}

/* Objects live in managed (or host) memory here, so adsm_init maps no device memory ahead for
 * them (cuda_memory.h), unless the program asks for it (ADSM_CUDA_MAP_AHEAD). */
ParameterizedTestParameters(um, no_device_memory_is_mapped_ahead) { return all_three(); }

ParameterizedTest(adsm_protocol_kind *protocol, um, no_device_memory_is_mapped_ahead) {
    for (int asked = 0; asked < 2; asked++) { /* the counter: device memory mapped now */
        if (asked) setenv("ADSM_CUDA_MAP_AHEAD", "4M", 1);
        init(TEST_DEVICE_BACKEND, *protocol, 2 * MIB, 0);
        unsetenv("ADSM_CUDA_MAP_AHEAD");
        cr_assert_eq(cuda_double_open(), 0);
        unsigned long long mapped = counters().device_bytes_mapped;
        cr_assert_eq(mapped, asked ? 4 * MIB : 0, "%s: %llu bytes mapped at start", asked ? "asked for 4 MiB" : "by default",
                     mapped);
        int32_t *a = alloc(S);
        for (size_t i = 0; i < N; i++) a[i] = (int32_t)i;
        CALL_OK(k_incr, grid_for(N), a, N);
        sync_ok();
        for (size_t i = 0; i < N; i += 997) cr_assert_eq(a[i], (int32_t)i + 1, "a[%zu]", i);
        adsm_shutdown();
    }
}

/* hmm's objects are plain host memory: the driver makes no managed allocation, adsm moves and
 * prefetches nothing, and what the CPU writes in place is what the kernel reads (the double's GPU
 * reaches the pages themselves, as HMM does). The object is an anonymous private mapping of the
 * process, outside adsm's reservation. */
Test(um, hmm_objects_are_plain_host_memory) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_HMM, 2 * MIB, 0);
    cr_assert_eq(cuda_double_open(), 0);
    cudadouble_counters before = counters();
    int32_t *a = alloc(S), *b = alloc(S), *c = alloc(S);
    cr_assert_eq(counters().managed_allocs, before.managed_allocs, "hmm made managed allocations");
    cr_assert((uintptr_t)a < adsm__rt.va_shared.base || (uintptr_t)a >= adsm__rt.va_shared.base + adsm__rt.va_shared.size,
              "hmm object %p inside adsm's reservation", (void *)a);
    reset();
    for (size_t i = 0; i < N; i++) a[i] = (int32_t)i, b[i] = 7;
    CALL_OK(k_add, grid_for(N), c, a, b, N);
    sync_ok();
    for (size_t i = 0; i < N; i++)
        if (c[i] != (int32_t)i + 7) cr_assert_fail("c[%zu] = %d, expected %d", i, c[i], (int)i + 7);
    adsm_stats s = stats();
    cr_assert_eq(s.h2d_bytes + s.d2h_bytes, 0, "hmm moved %llu bytes", (unsigned long long)(s.h2d_bytes + s.d2h_bytes));
    cr_assert_eq(counters().prefetch_device_bytes + counters().prefetch_host_bytes,
                 before.prefetch_device_bytes + before.prefetch_host_bytes, "hmm prefetched");
    expect_no_faults();
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(adsm_free(b), ADSM_OK);
    cr_assert_eq(adsm_free(c), ADSM_OK);
    adsm_shutdown();
}

/* hmm's objects still alive at adsm_shutdown go with it, as adsm_free would give them back: their
 * mappings lie outside adsm's reservation, which the shutdown releases, so nothing else unmaps
 * them (each adsm_init and adsm_shutdown of a program leaked them all). */
Test(um, hmm_objects_left_at_shutdown_are_unmapped) {
    unsigned char resident;
    for (int round = 0; round < 2; round++) {
        init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_HMM, 2 * MIB, 0);
        int32_t *a = alloc(S);
        memset(a, 1, S);
        cr_assert_eq(mincore(a, 4096, &resident), 0, "round %d: the object is not mapped: %s", round, strerror(errno));
        adsm_shutdown();
        cr_assert_eq(mincore(a, 4096, &resident), -1, "round %d: the object at %p outlived adsm_shutdown", round,
                     (void *)a);
        cr_assert_eq(errno, ENOMEM);
    }
}

/* A GPU that does not reach pageable memory (the double's default, as the H200 measured in
 * docs/gpu/) refuses hmm at adsm_init, naming the attribute and what to use instead; the
 * runtime then starts as before under um. */
Test(um, hmm_refused_where_the_gpu_cannot_reach_pageable_memory) {
    clear_adsm_env();
    unsetenv("CUDADOUBLE_PAGEABLE");
    adsm_config cfg = {0};
    cfg.backend = TEST_DEVICE_BACKEND;
    cfg.protocol = ADSM_PROTOCOL_HMM;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_UNSUPPORTED, "%s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "ADSM_PROTOCOL=hmm"), "error: %s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS"), "error: %s", adsm_last_error());
    cfg.protocol = ADSM_PROTOCOL_UM;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_not_null(adsm_alloc(S));
    adsm_shutdown();
}

/* Where the driver has no managed memory, making an object fails with an error that says so, and
 * nothing is left behind. */
Test(um, no_managed_memory_fails_the_allocation) {
    setenv("CUDADOUBLE_NO_MANAGED", "1", 1);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_UM, 2 * MIB, 0);
    cr_assert_null(adsm_alloc(S));
    cr_assert(strstr(adsm_last_error(), "cuMemAllocManaged"), "error: %s", adsm_last_error());
    adsm_stats s = stats();
    cr_assert_eq(s.objects, 0);
    adsm_shutdown();
}
#endif

/* adsm_memset, adsm_memcpy and adsm_read/adsm_write work on managed memory in place, and what
 * they write is what a kernel reads. */
ParameterizedTestParameters(um, memops_work_in_place) { return all_three(); }

ParameterizedTest(adsm_protocol_kind *protocol, um, memops_work_in_place) {
    if (!um_init(*protocol)) return;
    int32_t *a = alloc(S), *b = alloc(S), *c = alloc(S);
    cr_assert_eq(adsm_memset(a, 0x01, S), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_memcpy(b, a, S), ADSM_OK, "%s", adsm_last_error());
    CALL_OK(k_add, grid_for(N), c, a, b, N);
    sync_ok();
    cr_assert_eq(rd(&c[0]), 2 * 0x01010101);
    cr_assert_eq(rd(&c[N - 1]), 2 * 0x01010101);
    expect_no_faults();
    adsm_shutdown();
}

/* adsm_memcpy, adsm_memset and the I/O calls on a kernel's output, between the call and
 * adsm_sync, come after the kernel, as under batch, lazy and rolling: they read and wrote managed
 * memory while the kernel ran. On the double every stream operation waits 50 ms first
 * (CUDADOUBLE_DELAY_US), so that a call that does not wait runs well before the kernel. */
ParameterizedTestParameters(um, memops_on_an_output_come_after_its_kernel) { return all_three(); }

ParameterizedTest(adsm_protocol_kind *protocol, um, memops_on_an_output_come_after_its_kernel) {
    setenv("CUDADOUBLE_DELAY_US", "50000", 1);
    if (!um_init(*protocol)) return;
    int32_t *a = alloc(S), *c = alloc(S), *plain = malloc(S);
    cr_assert_not_null(plain);
    cr_assert_eq(adsm_memset(a, 0x01, S), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(c, 0, S), ADSM_OK, "%s", adsm_last_error());
    CALL_OK(k_add, grid_for(N), c, a, a, N);
    cr_assert_eq(adsm_memcpy(plain, c, S), ADSM_OK, "%s", adsm_last_error()); /* out of the output */
    cr_assert_eq(plain[0], 2 * 0x01010101, "adsm_memcpy read the output before its kernel wrote it");
    cr_assert_eq(plain[N - 1], 2 * 0x01010101);
    CALL_OK(k_incr, grid_for(N), c, N);
    cr_assert_eq(adsm_memset(c, 0x07, S), ADSM_OK, "%s", adsm_last_error()); /* over it */
    int fd = open("/dev/zero", O_RDONLY);
    cr_assert_geq(fd, 0);
    CALL_OK(k_incr, grid_for(N), c, N);
    cr_assert_eq(adsm_read(fd, c, 4096), 4096, "%s", strerror(errno)); /* into it */
    close(fd);
    sync_ok();
    cr_assert_eq(rd(&c[0]), 0, "c[0] = %#x: the read's zeros came before the kernel it followed", rd(&c[0]));
    cr_assert_eq(rd(&c[N - 1]), 0x07070707 + 1, "c[N - 1] = %#x: the memset came before the kernel it followed", rd(&c[N - 1]));
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(adsm_free(c), ADSM_OK);
    free(plain);
    adsm_shutdown();
    unsetenv("CUDADOUBLE_DELAY_US");
}

/* adsm_memcpy, adsm_memset and the I/O calls into a kernel's input, between the call and
 * adsm_sync, come after the kernel too: under batch, lazy and rolling it reads its own copy of
 * what the object held at the call, so it must here. 50 ms per stream operation, as above. */
ParameterizedTestParameters(um, memops_on_an_input_come_after_its_kernel) { return all_three(); }

ParameterizedTest(adsm_protocol_kind *protocol, um, memops_on_an_input_come_after_its_kernel) {
    setenv("CUDADOUBLE_DELAY_US", "50000", 1);
    if (!um_init(*protocol)) return;
    int32_t *a = alloc(S), *c = alloc(S), *d = alloc(S), *e = alloc(S), *plain = malloc(S);
    cr_assert_not_null(plain);
    memset(plain, 0x09, S);
    char file[] = "/tmp/adsm_um_input_XXXXXX";
    int fd = mkstemp(file);
    cr_assert_geq(fd, 0);
    unlink(file);
    cr_assert_eq(write(fd, plain, 4096), 4096);
    cr_assert_eq(adsm_memset(a, 0x01, S), ADSM_OK, "%s", adsm_last_error());
    CALL_OK(k_add, grid_for(N), c, a, a, N);
    cr_assert_eq(adsm_memcpy(a, plain, S), ADSM_OK, "%s", adsm_last_error()); /* over the input */
    CALL_OK(k_add, grid_for(N), d, a, a, N);
    cr_assert_eq(adsm_memset(a, 0, S), ADSM_OK, "%s", adsm_last_error());
    CALL_OK(k_add, grid_for(N), e, a, a, N);
    cr_assert_eq(adsm_pread(fd, a, 4096, 0), 4096, "%s", strerror(errno));
    close(fd);
    sync_ok();
    cr_assert_eq(rd(&c[0]), 2 * 0x01010101, "c[0] = %#x: the kernel read the adsm_memcpy that followed it", rd(&c[0]));
    cr_assert_eq(rd(&d[N - 1]), 2 * 0x09090909, "d[N - 1] = %#x: the kernel read the adsm_memset that followed it",
                 rd(&d[N - 1]));
    cr_assert_eq(rd(&e[0]), 0, "e[0] = %#x: the kernel read the adsm_pread that followed it", rd(&e[0]));
    cr_assert_eq(rd(&a[0]), 0x09090909);
    free(plain);
    adsm_shutdown();
    unsetenv("CUDADOUBLE_DELAY_US");
}

/* Objects start zero-filled under every protocol, here too, though cuMemAllocManaged documents
 * its memory as not cleared: adsm leaves the clearing to the driver, which populates managed
 * pages fresh (zeroed) on first touch, on either side. Checked where it matters, on a real GPU
 * (bench/gpu_check.sh runs this suite), as objects come and go over memory a freed object dirtied
 * on the device and on the CPU: a kernel's first read of a new object sees zeros, and so does
 * the CPU's. */
ParameterizedTestParameters(um, new_objects_hold_zeros_after_freed_ones_were_written) { return all_three(); }

ParameterizedTest(adsm_protocol_kind *protocol, um, new_objects_hold_zeros_after_freed_ones_were_written) {
    if (!um_init(*protocol)) return;
    for (int round = 0; round < 8; round++) {
        int32_t *x = alloc(S), *y = alloc(S);
        CALL_OK(k_incr, grid_for(N), x, N); /* the device's first read of x */
        sync_ok();
        for (size_t i = 0; i < N; i++)
            cr_assert_eq(rd(&x[i]), 1, "round %d: a kernel read %d at x[%zu] of a new object", round, rd(&x[i]) - 1, i);
        for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&y[i]), 0, "round %d: the CPU read %d at y[%zu] of a new object", round, rd(&y[i]), i);
        CALL_OK(k_fill, grid_for(N), x, N, -7); /* both dirtied, then given back */
        sync_ok();
        for (size_t i = 0; i < N; i++) wr(&y[i], -5);
        cr_assert_eq(adsm_free(x), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_free(y), ADSM_OK, "%s", adsm_last_error());
    }
    adsm_shutdown();
}

/* Objects come and go: each free gives its managed memory back; a second free of the same
 * pointer, or one inside an object, is refused as with the other protocols. */
ParameterizedTestParameters(um, objects_come_and_go) { return all_three(); }

ParameterizedTest(adsm_protocol_kind *protocol, um, objects_come_and_go) {
    if (!um_init(*protocol)) return;
    for (int round = 0; round < 50; round++) {
        int32_t *x = alloc(S);
        wr(&x[7], round);
        CALL_OK(k_incr, grid_for(N), x, N);
        sync_ok();
        cr_assert_eq(rd(&x[7]), round + 1);
        cr_assert_eq(adsm_free(&x[1]), ADSM_ERROR_NOT_OBJECT_START);
        cr_assert_eq(adsm_free(x), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_free(x), ADSM_ERROR_NOT_SHARED);
    }
    cr_assert_eq(stats().objects, 0);
    adsm_shutdown();
}

/* The CPU touching an object after adsm_free dies, as without adsm, but saying why, as under the
 * other protocols (docs/misuse.md), though um and hmm objects lie outside adsm's reservation. */
static adsm_protocol_kind death_protocol;

static void touch_after_free(void) {
    init(TEST_DEVICE_BACKEND, death_protocol, 2 * MIB, 0);
    int32_t *x = alloc(S);
    wr(&x[5], 5);
    if (adsm_free(x) != ADSM_OK) _exit(3);
    ((volatile int32_t *)x)[5] = 6;
}

ParameterizedTestParameters(um, touch_after_free_says_why_before_dying) { return all_three(); }

ParameterizedTest(adsm_protocol_kind *protocol, um, touch_after_free_says_why_before_dying) {
    if (gpu_refuses_hmm(*protocol)) return;
    death_protocol = *protocol;
    expect_death_message(touch_after_free, "no live object holds");
}

/* The freed ranges the fault handler names are forgotten where a new object takes the addresses
 * (white-box: hmm's munmap and mmap of one size give the same range back, so the new object lies
 * where the old one was; a fault there must not be called a use after adsm_free). */
Test(um, a_new_object_over_a_freed_one_is_not_called_freed) {
    if (!um_init(ADSM_PROTOCOL_HMM)) return; /* a GPU without pageable memory access refused it */
    int32_t *x = alloc(S);
    uintptr_t old = (uintptr_t)x;
    cr_assert_eq(adsm_free(x), ADSM_OK);
    cr_assert(adsm__freed_outside(&adsm__rt, old + 8), "the freed object's range is not remembered");
    int32_t *y = alloc(S);
    cr_assert_eq((uintptr_t)y, old, "the kernel put the new object elsewhere: nothing to check");
    cr_assert(!adsm__freed_outside(&adsm__rt, old + 8), "the new object's memory is still called freed");
    adsm_shutdown();
}

/* Unified memory is the CUDA driver's: the emulated device refuses the protocols at adsm_init,
 * naming the setting, rather than running something else under their name. */
ParameterizedTestParameters(um, refused_on_the_emulated_device) { return all_three(); }

ParameterizedTest(adsm_protocol_kind *protocol, um, refused_on_the_emulated_device) {
    clear_adsm_env();
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = *protocol;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    char setting[64];
    snprintf(setting, sizeof setting, "ADSM_PROTOCOL=%s:", *protocol == ADSM_PROTOCOL_HMM ? "hmm"
                                                         : *protocol == ADSM_PROTOCOL_UM ? "um" : "um-prefetch");
    cr_assert(strstr(adsm_last_error(), setting), "error: %s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "the emu backend has none"), "error: %s", adsm_last_error());
}
