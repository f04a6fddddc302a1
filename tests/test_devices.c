/* tests/test_devices.c -- several emulated devices (ADSM_EMU_DEVICES): where kernels run, what the
 * directory copies, and from where (adsm_impl/directory.h). Built a second time with
 * -DTEST_ON_CUDA_DOUBLE (test_devices_cuda): the same programs on several GPUs of the driver
 * double, with the same byte counts (device-to-device copies are cuMemcpyPeerAsync there, and
 * device memory is mapped only where an object is resident, and kernels run on ADSM_STREAMS CUDA
 * streams per GPU); the tests that watch the emulated device's processes stay on emu.
 *
 * Each test counts the bytes every device received and sent (adsm_get_device_stats) and checks
 * them exactly, then checks every value: a replica used after the data changed elsewhere, or a
 * copy from a stale holder, shows as a wrong byte or a wrong count. lazy and rolling both run the
 * byte-exact tests (rolling with 64 KiB blocks: its units are blocks, lazy's whole objects). The
 * randomized cross-check is test_model's emu*_ variants with kernels on random devices. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "tests/death.h"
#include "tests/protocol_common.h"

TestSuite(devices, .timeout = 30);

#define SIZE (4 * MIB)
#define N (SIZE / sizeof(int32_t))

static adsm_device_stats dev_stats(int d) {
    adsm_device_stats s;
    cr_assert_eq(adsm_get_device_stats(d, &s), ADSM_OK, "%s", adsm_last_error());
    return s;
}

ADSM_KERNEL(k_stamp, ADSM_INOUT(int64_t, t), ADSM_IN(int64_t, in), ADSM_VALUE(int, ms), ADSM_VALUE(int, slot));
ADSM_KERNEL(k_copy_late, ADSM_IN(int32_t, in), ADSM_OUT(int32_t, out), ADSM_VALUE(size_t, n), ADSM_VALUE(int, ms));

static void init_devices(unsigned devices, adsm_protocol_kind protocol) {
    test_devices = devices;
    init(TEST_DEVICE_BACKEND, protocol, 64 * KIB, 0);
    cr_assert_eq(adsm_device_count(), (int)devices);
#ifdef TEST_ON_CUDA_DOUBLE
    const adsm_kernel_desc *const more[] = {adsm__kernel_k_stamp(), adsm__kernel_k_copy_late()};
    cr_assert_eq(cuda_double_attach(more, 2), 0, "%s", adsm_last_error());
#endif
}

#define CALL_ON_OK(dev, ...)                                                                 \
    do {                                                                                     \
        adsm_result call_r_ = ADSM_CALL_ON((dev), __VA_ARGS__);                              \
        cr_assert_eq(call_r_, ADSM_OK, "ADSM_CALL_ON(%d): %s", (dev), adsm_last_error());    \
    } while (0)

#define EXPECT_DEVICE(d, h2d, d2h, d2d)                                                             \
    do {                                                                                            \
        adsm_device_stats s_ = dev_stats(d);                                                        \
        cr_assert_eq(s_.h2d_bytes, (uint64_t)(h2d), "device %d: %llu bytes from the host, expected %zu", \
                     (d), (unsigned long long)s_.h2d_bytes, (size_t)(h2d));                         \
        cr_assert_eq(s_.d2h_bytes, (uint64_t)(d2h), "device %d: %llu bytes to the host, expected %zu", \
                     (d), (unsigned long long)s_.d2h_bytes, (size_t)(d2h));                         \
        cr_assert_eq(s_.d2d_bytes, (uint64_t)(d2d), "device %d: %llu bytes from other devices, expected %zu", \
                     (d), (unsigned long long)s_.d2d_bytes, (size_t)(d2d));                         \
    } while (0)

static void write_ramp(int32_t *x, int32_t base) {
    for (size_t i = 0; i < N; i++) wr(&x[i], base + (int32_t)i);
}

static void expect_ramp(const int32_t *x, int32_t base) {
    for (size_t i = 0; i < N; i++)
        if (rd(&x[i]) != base + (int32_t)i) cr_assert_fail("[%zu] = %d, expected %d", i, rd(&x[i]), base + (int32_t)i);
}

/* The parameters of the tests run under both protocols that track several devices' copies. */
static struct criterion_test_params lazy_and_rolling(void) {
    static adsm_protocol_kind protocols[] = {ADSM_PROTOCOL_LAZY, ADSM_PROTOCOL_ROLLING};
    return cr_make_param_array(adsm_protocol_kind, protocols, 2);
}

ParameterizedTestParameters(devices, replicas_are_invalidated_by_a_write_elsewhere) {
    return lazy_and_rolling();
}

/* x goes to device 0 (the kernel's), device 1 takes a replica from device 0 (device to device,
 * not through the CPU), keeps it while nobody writes x, loses it when device 0 writes x again,
 * and takes it again; the CPU then reads each object from the device that wrote it. */
ParameterizedTest(adsm_protocol_kind *protocol, devices, replicas_are_invalidated_by_a_write_elsewhere) {
    init_devices(2, *protocol);
    int32_t *x = alloc(SIZE), *y = alloc(SIZE), *zero = alloc(SIZE);
    reset(); /* rolling may evict while the CPU writes: counted too */
    write_ramp(x, 0);
    CALL_ON_OK(0, k_incr, grid_for(N), x, N);
    EXPECT_DEVICE(0, SIZE, 0, 0); /* the CPU's writes went to the kernel's device */
    CALL_ON_OK(1, k_add, grid_for(N), y, x, zero, N);
    EXPECT_DEVICE(1, 0, 0, SIZE); /* x from device 0; zero is current everywhere; y is output */
    CALL_ON_OK(1, k_add, grid_for(N), y, x, zero, N);
    EXPECT_DEVICE(1, 0, 0, SIZE); /* the replica is kept */
    CALL_ON_OK(0, k_incr, grid_for(N), x, N);
    EXPECT_DEVICE(0, SIZE, 0, 0); /* device 0 still held x: nothing to copy */
    CALL_ON_OK(1, k_add, grid_for(N), y, x, zero, N);
    EXPECT_DEVICE(1, 0, 0, 2 * SIZE); /* its replica was stale: copied again */
    sync_ok();
    expect_ramp(y, 2);
    expect_ramp(x, 2);
    EXPECT_DEVICE(0, SIZE, SIZE, 0); /* x came home from device 0 (its writer) */
    EXPECT_DEVICE(1, 0, SIZE, 2 * SIZE); /* y from device 1 */
    adsm_stats s = stats();
    cr_assert_eq(s.h2d_bytes, SIZE);
    cr_assert_eq(s.d2d_bytes, 2 * SIZE);
    cr_assert_eq(s.d2h_bytes, 2 * SIZE);
    adsm_shutdown();
}

/* A host copy the CPU did not change since is current: each device takes its replica from the
 * host once; a CPU write then makes every replica stale. */
Test(devices, cpu_writes_make_every_replica_stale) {
    init_devices(3, ADSM_PROTOCOL_ROLLING);
    int32_t *x = alloc(SIZE), *y[3];
    for (int d = 0; d < 3; d++) y[d] = alloc(SIZE);
    reset();
    write_ramp(x, 10);
    for (int round = 0; round < 2; round++)
        for (int d = 0; d < 3; d++) CALL_ON_OK(d, k_add, grid_for(N), y[d], x, x, N);
    for (int d = 0; d < 3; d++) EXPECT_DEVICE(d, SIZE, 0, 0);
    write_ramp(x, 20);
    CALL_ON_OK(2, k_add, grid_for(N), y[2], x, x, N);
    CALL_ON_OK(1, k_add, grid_for(N), y[1], x, x, N);
    sync_ok();
    EXPECT_DEVICE(0, SIZE, 0, 0);
    EXPECT_DEVICE(1, 2 * SIZE, 0, 0);
    EXPECT_DEVICE(2, 2 * SIZE, 0, 0);
    for (size_t i = 0; i < N; i++) {
        cr_assert_eq(rd(&y[0][i]), 2 * (10 + (int32_t)i));
        cr_assert_eq(rd(&y[1][i]), 2 * (20 + (int32_t)i));
        cr_assert_eq(rd(&y[2][i]), 2 * (20 + (int32_t)i));
    }
    adsm_shutdown();
}

/* With several devices a call sends the CPU's changes to the objects the kernel names only: the
 * others stay Dirty on the host and go straight to the device whose kernel names them (with one
 * device every Dirty object goes at every call: kernels may follow stored pointers). */
Test(devices, a_call_sends_only_what_its_kernel_names) {
    init_devices(2, ADSM_PROTOCOL_LAZY);
    int32_t *x = alloc(SIZE), *w = alloc(SIZE);
    reset();
    write_ramp(x, 1);
    write_ramp(w, 2);
    CALL_ON_OK(1, k_incr, grid_for(N), x, N);
    EXPECT_DEVICE(1, SIZE, 0, 0);
    cr_assert_eq(adsm_block_state(w), 'D', "w is not the kernel's: it stays on the host");
    CALL_ON_OK(0, k_incr, grid_for(N), w, N);
    EXPECT_DEVICE(0, SIZE, 0, 0);
    EXPECT_DEVICE(1, SIZE, 0, 0);
    sync_ok();
    expect_ramp(x, 2);
    expect_ramp(w, 3);
    adsm_shutdown();
}

/* ADSM_CALL (no device named) runs a kernel where most of the bytes it writes already are. */
Test(devices, kernels_run_where_their_output_is) {
    init_devices(3, ADSM_PROTOCOL_LAZY);
    int32_t *x = alloc(SIZE), *w = alloc(SIZE);
    CALL_ON_OK(2, k_fill, grid_for(N), x, N, 7);
    CALL_ON_OK(1, k_fill, grid_for(N), w, N, 3);
    reset();
    CALL_OK(k_incr, grid_for(N), x, N);
    CALL_OK(k_incr, grid_for(N), w, N);
    CALL_OK(k_incr, grid_for(N), x, N);
    sync_ok();
    cr_assert_eq(dev_stats(2).launches, 2, "x lives on device 2");
    cr_assert_eq(dev_stats(1).launches, 1, "w lives on device 1");
    cr_assert_eq(dev_stats(0).launches, 0);
    cr_assert_eq(stats().d2d_bytes, 0, "nothing moved between devices");
    expect_ramp(x, 9);
    expect_ramp(w, 4);
    adsm_shutdown();
}

/* Rolling's evictions go to the device that last ran a kernel on the object, so the kernel's next
 * call finds them there; a fetch reads a block from whichever device holds it. */
Test(devices, evictions_go_to_the_objects_device) {
    test_block_exact = 1;
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    int32_t *x = alloc(SIZE);
    CALL_ON_OK(1, k_fill, grid_for(N), x, N, 5);
    sync_ok();
    reset();
    for (size_t i = 0; i < N; i++) wr(&x[i], rd(&x[i]) + 1); /* fetch from device 1, write, evict */
    adsm_stats s = stats();
    cr_assert_gt(s.evictions, 0);
    EXPECT_DEVICE(1, s.evictions * 64 * KIB, SIZE, 0);
    EXPECT_DEVICE(0, 0, 0, 0);
    CALL_ON_OK(1, k_incr, grid_for(N), x, N);
    sync_ok();
    EXPECT_DEVICE(1, SIZE, SIZE, 0);
    expect_ramp(x, 7);
    adsm_shutdown();
}

#ifndef TEST_ON_CUDA_DOUBLE
Test(devices, configuration) {
    clear_adsm_env();
    cr_assert_eq(adsm_device_count(), 0, "not initialised");
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.emu_memory = 256 * MIB;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 1, "one device by default");
    adsm_shutdown();
    setenv("ADSM_EMU_DEVICES", "3", 1);
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 3);
    adsm_shutdown();
    static const char *const bad[] = {"9", "0x2", "two", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("ADSM_EMU_DEVICES", bad[i], 1);
        cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG, "ADSM_EMU_DEVICES=%s accepted", bad[i]);
        cr_assert(strstr(adsm_last_error(), "ADSM_EMU_DEVICES"), "%s", adsm_last_error());
    }
    unsetenv("ADSM_EMU_DEVICES");
    cfg.emu_devices = 9;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "emu_devices"), "%s", adsm_last_error());
    cfg.emu_devices = 2;
    cfg.protocol = ADSM_PROTOCOL_BATCH;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "batch"), "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 0, "the refused start left nothing running");
}
#endif

/* Bad device numbers are refused before anything moves; the explicit path's buffers live on
 * device 0 only. */
Test(devices, misuse) {
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    int32_t *x = alloc(SIZE);
    write_ramp(x, 1);
    reset();
    cr_assert_eq(ADSM_CALL_ON(2, k_incr, grid_for(N), x, N), ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "device 2"), "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL_ON(-5, k_incr, grid_for(N), x, N), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(stats().h2d_bytes, 0, "nothing moved");
    cr_assert_eq(adsm_block_state(x), 'D', "the CPU's data is untouched");
    adsm_device_stats s;
    cr_assert_eq(adsm_get_device_stats(2, &s), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_get_device_stats(0, NULL), ADSM_ERROR_INVALID_VALUE);
    int32_t *buf = adsm_dev_alloc(SIZE);
    cr_assert_not_null(buf, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL_ON(1, k_add, grid_for(N), x, buf, buf, N), ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "device 0"), "%s", adsm_last_error());
    CALL_OK(k_add, grid_for(N), x, buf, buf, N); /* adsm's choice: device 0 */
    sync_ok();
    cr_assert_eq(rd(&x[5]), 0);
    cr_assert_eq(adsm_dev_free(buf), ADSM_OK);
    adsm_shutdown();
}

#ifndef TEST_ON_CUDA_DOUBLE
/* White-box: the process of emulated device d dies; the runtime notices. */
static void kill_device(unsigned d) {
    adsm__emu *e = (adsm__emu *)adsm__rt.dev_ctx[d];
    cr_assert_eq(kill(e->child, SIGKILL), 0);
    for (int i = 0; i < 500 && !ADSM__LOAD(&e->lost); i++) usleep(10000);
    cr_assert(ADSM__LOAD(&e->lost), "the runtime did not notice device %u died", d);
}

/* One device of two dies: the next sync reports it once, naming it; launches there fail with
 * DEVICE_LOST; everything else keeps working: adsm's choice avoids it, what it held is taken as
 * its memory stood (as after a lone device's loss), new objects live on the others, and every
 * value stays readable on the host. */
Test(devices, one_device_lost_of_two) {
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    int32_t *x = alloc(SIZE), *w = alloc(SIZE), *y = alloc(SIZE);
    CALL_ON_OK(1, k_fill, grid_for(N), x, N, 40); /* x's only current copy: device 1 */
    CALL_ON_OK(0, k_fill, grid_for(N), w, N, 50);
    sync_ok();
    kill_device(1);

    cr_assert_eq(adsm_sync(), ADSM_ERROR_DEVICE_LOST);
    cr_assert(strstr(adsm_last_error(), "device 1"), "%s", adsm_last_error());
    sync_ok(); /* reported once: the other device is fine */
    cr_assert_eq(ADSM_CALL_ON(1, k_incr, grid_for(N), w, N), ADSM_ERROR_DEVICE_LOST);
    cr_assert(strstr(adsm_last_error(), "device 1 is lost"), "%s", adsm_last_error());
    CALL_OK(k_incr, grid_for(N), x, N); /* adsm's choice: x's holder is lost, so device 0 */
    CALL_ON_OK(0, k_add, grid_for(N), y, x, w, N);
    int32_t *fresh = alloc(SIZE);
    CALL_OK(k_fill, grid_for(N), fresh, N, 60);
    sync_ok();
    cr_assert_eq(dev_stats(1).launches, 1, "nothing more ran on the lost device");
    expect_ramp(x, 41);
    expect_ramp(w, 50);
    expect_ramp(fresh, 60);
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&y[i]), 91 + 2 * (int32_t)i);
    cr_assert_eq(adsm_free(x), ADSM_OK);
    cr_assert_eq(adsm_free(fresh), ADSM_OK);
    adsm_shutdown();
}

/* A loss the runtime finds outside a sync (here an allocation meets the dead device first) is
 * still the next sync's to report, once: it was skipped as "reported already", so a program
 * whose kernel died there with the device never heard of it. */
Test(devices, a_loss_found_by_an_allocation_is_reported_at_the_next_sync) {
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    int32_t *x = alloc(SIZE);
    CALL_ON_OK(1, k_fill, grid_for(N), x, N, 40);
    sync_ok();
    kill_device(1);
    int32_t *fresh = alloc(SIZE); /* meets device 1 lost, lives on device 0 */
    cr_assert_eq(adsm_sync(), ADSM_ERROR_DEVICE_LOST, "the loss went unreported: %s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "device 1"), "%s", adsm_last_error());
    sync_ok(); /* once */
    CALL_OK(k_fill, grid_for(N), fresh, N, 60);
    sync_ok();
    expect_ramp(fresh, 60);
    expect_ramp(x, 40);
    adsm_shutdown();
}
#endif

/* ---- policies (the multi-GPU paper's versions) ------------------------------------------------ */
/* Write-through: a kernel's output comes home before the next call (or at sync) without the CPU
 * touching it, and a device that reads it later takes it from the host, not device to device. */
ParameterizedTestParameters(devices, write_through_brings_outputs_home) {
    return lazy_and_rolling();
}

ParameterizedTest(adsm_protocol_kind *protocol, devices, write_through_brings_outputs_home) {
    test_write_through = 1;
    init_devices(2, *protocol);
    int32_t *x = alloc(SIZE), *y = alloc(SIZE), *zero = alloc(SIZE);
    reset();
    CALL_ON_OK(0, k_fill, grid_for(N), x, N, 70);
    sync_ok();
    cr_assert_eq(adsm_block_state(x), 'R', "x came home at sync");
    EXPECT_DEVICE(0, 0, SIZE, 0);
    CALL_ON_OK(1, k_add, grid_for(N), y, x, zero, N);
    CALL_ON_OK(0, k_incr, grid_for(N), zero, N); /* a call: y (device 1's output) comes home first */
    cr_assert_eq(adsm_block_state(y), 'R');
    EXPECT_DEVICE(1, SIZE, SIZE, 0); /* x from the host; y home */
    sync_ok();
    cr_assert_eq(stats().read_faults, 0, "nothing waited for the CPU to touch it");
    expect_ramp(y, 70);
    cr_assert_eq(stats().d2d_bytes, 0);
    adsm_shutdown();
}

/* Dropped replicas: a device keeps no copy of what a kernel only read there (the host holds it),
 * so reading it again takes it again; kept replicas (the default) take it once. */
ParameterizedTestParameters(devices, dropped_replicas_are_taken_again) {
    static int drop[] = {0, 1};
    return cr_make_param_array(int, drop, 2);
}

ParameterizedTest(int *drop, devices, dropped_replicas_are_taken_again) {
    test_drop_replicas = *drop;
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    int32_t *x = alloc(SIZE), *y = alloc(SIZE);
    reset();
    write_ramp(x, 3);
    for (int round = 0; round < 3; round++) CALL_ON_OK(1, k_add, grid_for(N), y, x, x, N);
    sync_ok();
    EXPECT_DEVICE(1, (*drop ? 3 : 1) * SIZE, 0, 0);
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&y[i]), 2 * (3 + (int32_t)i));
    EXPECT_DEVICE(1, (*drop ? 3 : 1) * SIZE, SIZE, 0); /* y, which the kernel wrote, stayed there */
    adsm_shutdown();
}

/* ---- capacity: device memory as a cache (adsm_impl/capacity.h) ---------------------------- */
#define EXPECT_EVICTIONS(d, count, written_back, resident)                                          \
    do {                                                                                            \
        adsm_device_stats s_ = dev_stats(d);                                                        \
        cr_assert_eq(s_.evictions, (uint64_t)(count), "device %d: %llu evictions, expected %d", (d), \
                     (unsigned long long)s_.evictions, (int)(count));                               \
        cr_assert_eq(s_.written_back_bytes, (uint64_t)(written_back), "device %d: %llu bytes written back", (d), \
                     (unsigned long long)s_.written_back_bytes);                                    \
        cr_assert_eq(s_.resident_bytes, (uint64_t)(resident), "device %d holds %llu bytes, expected %zu", (d), \
                     (unsigned long long)s_.resident_bytes, (size_t)(resident));                    \
    } while (0)

ParameterizedTestParameters(devices, a_full_device_evicts_its_least_recently_used_objects) {
    return lazy_and_rolling();
}

/* Six objects through a device that holds four: each launch past the fourth evicts the object
 * used longest ago, whose only current copy was there, so it is written back to the host first;
 * taken again later, it comes from the host. Every value survives. */
ParameterizedTest(adsm_protocol_kind *protocol, devices, a_full_device_evicts_its_least_recently_used_objects) {
    test_emu_memory = 4 * SIZE;
    init_devices(2, *protocol);
    int32_t *a[6];
    for (int i = 0; i < 6; i++) a[i] = alloc(SIZE);
    for (int i = 0; i < 6; i++) write_ramp(a[i], 100 * i);
    reset();
    for (int i = 0; i < 6; i++) CALL_ON_OK(1, k_incr, grid_for(N), a[i], N);
    EXPECT_EVICTIONS(1, 2, 2 * SIZE, 4 * SIZE); /* a[0], a[1] made room for a[4], a[5] */
    EXPECT_DEVICE(1, 6 * SIZE, 2 * SIZE, 0);
    cr_assert_eq(adsm_block_state(a[0]), 'R', "written back: the host holds it");
    CALL_ON_OK(1, k_incr, grid_for(N), a[0], N); /* a[2] goes: the least recently used now */
    EXPECT_EVICTIONS(1, 3, 3 * SIZE, 4 * SIZE);
    EXPECT_DEVICE(1, 7 * SIZE, 3 * SIZE, 0);
    sync_ok();
    expect_ramp(a[0], 2);
    for (int i = 1; i < 6; i++) expect_ramp(a[i], 100 * i + 1);
    EXPECT_DEVICE(1, 7 * SIZE, 7 * SIZE, 0); /* a[0], a[3..5] read back from device 1 */
    cr_assert_eq(stats().d2d_bytes, 0);
    adsm_shutdown();
}

/* A replica the host also holds is dropped without a copy; taken again, it comes from the host. */
Test(devices, clean_replicas_are_dropped_without_a_copy) {
    test_emu_memory = 2 * SIZE;
    init_devices(2, ADSM_PROTOCOL_LAZY);
    int32_t *x = alloc(SIZE), *y = alloc(SIZE), *z = alloc(SIZE);
    write_ramp(x, 40);
    reset();
    CALL_ON_OK(1, k_add, grid_for(N), y, x, x, N);
    CALL_ON_OK(1, k_fill, grid_for(N), y, N, 5); /* y used last: x is the older */
    CALL_ON_OK(1, k_fill, grid_for(N), z, N, 9);
    EXPECT_EVICTIONS(1, 1, 0, 2 * SIZE);
    EXPECT_DEVICE(1, SIZE, 0, 0);
    sync_ok();
    expect_ramp(x, 40);
    expect_ramp(y, 5); /* k_fill writes a ramp */
    expect_ramp(z, 9);
    CALL_ON_OK(1, k_add, grid_for(N), y, x, x, N); /* x again, from the host; y (read back) dropped */
    EXPECT_EVICTIONS(1, 2, 0, 2 * SIZE);
    EXPECT_DEVICE(1, 2 * SIZE, 2 * SIZE, 0);
    sync_ok();
    expect_ramp(x, 40);
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&y[i]), 2 * (40 + (int32_t)i));
    EXPECT_DEVICE(0, 0, 0, 0);
    adsm_shutdown();
}

/* A kernel whose own objects do not fit one device is refused with a clear error, before anything
 * moves or is evicted; the data stays as it was and smaller kernels still run. */
Test(devices, a_kernel_larger_than_a_device_is_refused) {
    test_emu_memory = 2 * SIZE;
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    int32_t *x = alloc(SIZE), *y = alloc(SIZE), *z = alloc(SIZE);
    write_ramp(x, 8);
    CALL_ON_OK(0, k_incr, grid_for(N), x, N);
    reset();
    cr_assert_eq(ADSM_CALL_ON(0, k_add, grid_for(N), y, x, z, N), ADSM_ERROR_DEVICE_OUT_OF_MEMORY);
    cr_assert(strstr(adsm_last_error(), "k_add") && strstr(adsm_last_error(), "device 0"), "%s", adsm_last_error());
    EXPECT_EVICTIONS(0, 0, 0, SIZE);
    EXPECT_DEVICE(0, 0, 0, 0);
    CALL_ON_OK(0, k_add, grid_for(N), y, x, x, N);
    sync_ok();
    for (size_t i = 0; i < N; i++) cr_assert(rd(&y[i]) == 2 * (9 + (int32_t)i) && rd(&z[i]) == 0, "[%zu]", i);
    expect_ramp(x, 9);
    cr_assert_eq(stats().launches, 1, "the refused launch is not counted");
    adsm_shutdown();
}

#ifndef TEST_ON_CUDA_DOUBLE
/* Rolling's evictions charge a block to its object's home device whether it has room or not, so
 * a full emulated device can hold more than its capacity (the double, whose memory is that small,
 * refuses to map past it, and the block stays on the host); the next launch there evicts back
 * under it, beside what it brings (it used to make room for that alone). */
Test(devices, a_device_over_its_capacity_evicts_back_under_it) {
    const size_t half = SIZE / 2, n = half / sizeof(int32_t);
    test_emu_memory = SIZE;
    test_devices = 2;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4 * KIB, 2);
    int32_t *z1 = alloc(half), *z2 = alloc(half), *x = alloc(half), *b = alloc(half);
    CALL_ON_OK(0, k_fill, grid_for(n), z1, n, 1);
    CALL_ON_OK(0, k_fill, grid_for(n), z2, n, 2);
    sync_ok();
    for (size_t i = 0; i < n; i++) x[i] = (int32_t)i; /* its evicted blocks go to device 0, full */
    cr_assert_gt(dev_stats(0).resident_bytes, SIZE, "the setting no longer overfills device 0");
    CALL_ON_OK(0, k_fill, grid_for(n), b, n, 3); /* b is made room for, and the excess goes too */
    sync_ok();
    cr_assert_leq(dev_stats(0).resident_bytes, SIZE, "device 0 holds %llu bytes, over its %zu",
                  (unsigned long long)dev_stats(0).resident_bytes, (size_t)SIZE);
    for (size_t i = 0; i < n; i++)
        cr_assert(rd(&z1[i]) == 1 + (int32_t)i && rd(&z2[i]) == 2 + (int32_t)i && rd(&b[i]) == 3 + (int32_t)i &&
                      rd(&x[i]) == (int32_t)i, "[%zu]", i);
    adsm_shutdown();
}
#endif

/* An object a copy is running on (another thread's fetch, here a mark set by hand) cannot be
 * evicted yet: a launch that needs its room waits for the copy to end instead of being refused
 * with ADSM_ERROR_DEVICE_OUT_OF_MEMORY, though its objects fit. */
static adsm__object *volatile busy_object;
static volatile int launch_returned;
static void *end_the_copy_once_waited_for(void *arg) {
    (void)arg;
    while (!ADSM__LOAD(&adsm__rt.copy_waiters) && !launch_returned) sched_yield();
    adsm__lock(&adsm__rt.lock);
    busy_object->busy_units--;
    adsm__copies_done(&adsm__rt);
    adsm__unlock(&adsm__rt.lock);
    return NULL;
}

Test(devices, a_launch_waits_for_copies_on_what_it_would_evict) {
    test_emu_memory = 2 * SIZE;
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    int32_t *x = alloc(SIZE), *y = alloc(2 * SIZE);
    CALL_ON_OK(0, k_fill, grid_for(N), x, N, 4);
    sync_ok();
    adsm__lock(&adsm__rt.lock);
    busy_object = adsm__object_of(adsm__tree_find(&adsm__rt.objects, (uintptr_t)x));
    busy_object->busy_units++;
    adsm__unlock(&adsm__rt.lock);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, end_the_copy_once_waited_for, NULL), 0);
    adsm_result r = ADSM_CALL_ON(0, k_fill, grid_for(2 * N), y, 2 * N, 6); /* room only without x */
    launch_returned = 1;
    pthread_join(t, NULL);
    cr_assert_eq(r, ADSM_OK, "%s", adsm_last_error());
    sync_ok();
    expect_ramp(x, 4);
    expect_ramp(y, 6);
    adsm_shutdown();
}

/* adsm_dev_alloc buffers live on device 0 and take their room from the shared objects there. */
Test(devices, device_buffers_evict_shared_objects) {
    test_emu_memory = 2 * SIZE;
    init_devices(2, ADSM_PROTOCOL_LAZY);
    int32_t *x = alloc(SIZE), *y = alloc(SIZE);
    write_ramp(x, 1);
    CALL_ON_OK(0, k_incr, grid_for(N), x, N);
    CALL_ON_OK(0, k_fill, grid_for(N), y, N, 4);
    reset();
    void *buf = adsm_dev_alloc(SIZE);
    cr_assert(buf, "%s", adsm_last_error());
    EXPECT_EVICTIONS(0, 1, SIZE, 2 * SIZE); /* x, the older, written back; y and the buffer held */
    cr_assert_null(adsm_dev_alloc(2 * SIZE));
    cr_assert(strstr(adsm_last_error(), "adsm_dev_alloc") && strstr(adsm_last_error(), "device 0"), "%s",
              adsm_last_error());
    EXPECT_EVICTIONS(0, 1, SIZE, 2 * SIZE); /* refused before evicting y in vain */
    cr_assert_eq(adsm_dev_free(buf), ADSM_OK);
    sync_ok();
    expect_ramp(x, 2);
    expect_ramp(y, 4);
    adsm_shutdown();
}

/* ---- a fixed affinity of objects to devices ------------------------------------------------ */
/* ADSM_AFFINITY_BLOCK=2 on three devices: objects 0-1 belong to device 0, 2-3 to device 1, 4-5
 * to device 2, and ADSM_CALL runs each kernel where its output belongs, not where its bytes are;
 * adsm_set_affinity moves one object's, and -1 goes back to where the bytes are. */
Test(devices, block_cyclic_affinity_places_kernels) {
    test_affinity_block = 2;
    init_devices(3, ADSM_PROTOCOL_LAZY);
    int32_t *a[6];
    for (int i = 0; i < 6; i++) a[i] = alloc(SIZE);
    for (int i = 0; i < 6; i++) CALL_OK(k_fill, grid_for(N), a[i], N, 10 * i);
    for (int d = 0; d < 3; d++) cr_assert_eq(dev_stats(d).launches, 2, "device %d", d);
    reset();
    cr_assert_eq(adsm_set_affinity(a[0], 2), ADSM_OK, "%s", adsm_last_error());
    CALL_OK(k_incr, grid_for(N), a[0], N); /* on device 2, a[0]'s bytes from device 0 */
    EXPECT_DEVICE(2, 0, 0, SIZE);
    cr_assert_eq(dev_stats(2).launches, 1); /* counted since reset() */
    cr_assert_eq(adsm_set_affinity(a[0] + 5, -1), ADSM_OK, "%s", adsm_last_error()); /* any address in it */
    CALL_OK(k_incr, grid_for(N), a[0], N);                                           /* where its bytes are */
    cr_assert_eq(dev_stats(2).launches, 2);
    CALL_OK(k_add, grid_for(N), a[3], a[4], a[5], N); /* a[3] belongs to device 1 */
    cr_assert_eq(dev_stats(1).launches, 1);
    sync_ok();
    expect_ramp(a[0], 2);
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&a[3][i]), 90 + 2 * (int32_t)i);
    int local = 0;
    cr_assert_eq(adsm_set_affinity(a[1], 3), ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "0..2"), "%s", adsm_last_error());
    cr_assert_eq(adsm_set_affinity(&local, 0), ADSM_ERROR_NOT_SHARED);
    adsm_shutdown();
}

/* ---- ordering: a kernel waits only for the earlier kernels it conflicts with ----------------- */
/* Stamps when it ran into t[2 * slot] (start) and t[2 * slot + 1] (end), CLOCK_MONOTONIC (one clock
 * for the program and the device processes), sleeping ms in between; reads `in`. */
void k_stamp(adsm_grid g, int64_t *t, const int64_t *in, int ms, int slot) {
    if (g.begin > 0 || g.end == 0) return;
    struct timespec ts, nap = {ms / 1000, (long)(ms % 1000) * 1000000L};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t[2 * slot] = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (in[0] & 0);
    nanosleep(&nap, NULL);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t[2 * slot + 1] = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define STAMP_MS 400

static int64_t rd64(const int64_t *p) { return *(const volatile int64_t *)p; }

ParameterizedTestParameters(devices, independent_kernels_overlap_on_one_device) {
    static unsigned streams[] = {1, 4};
    return cr_make_param_array(unsigned, streams, 2);
}

/* One device, ADSM_STREAMS 1 or 4: two kernels that touch disjoint objects (both only read
 * c) overlap when the device has streams to spare; kernels that conflict never do, whatever
 * the streams: read after write, write after read, write after write. */
ParameterizedTest(unsigned *streams, devices, independent_kernels_overlap_on_one_device) {
    test_streams = *streams;
    init_devices(1, ADSM_PROTOCOL_LAZY);
    int64_t *a = alloc(4096), *b = alloc(4096), *c = alloc(4096), *d = alloc(4096);
    adsm_grid one = adsm_grid_1d(1, 1);
    CALL_OK(k_stamp, one, a, c, STAMP_MS, 0);
    CALL_OK(k_stamp, one, b, c, STAMP_MS, 0); /* independent of the first */
    sync_ok();
    if (*streams > 1) cr_assert_lt(rd64(&b[0]), rd64(&a[1]), "disjoint kernels ran one after the other");
    else cr_assert_geq(rd64(&b[0]), rd64(&a[1]), "one stream, yet two kernels overlapped");
    CALL_OK(k_stamp, one, a, c, STAMP_MS, 1);
    CALL_OK(k_stamp, one, b, a, 0, 1); /* reads what the first writes */
    CALL_OK(k_stamp, one, d, a, 0, 0); /* likewise, and writes what... */
    CALL_OK(k_stamp, one, c, d, STAMP_MS, 1); /* ...writes what the first read (c) */
    CALL_OK(k_stamp, one, c, d, 0, 2);        /* writes what the one before writes */
    sync_ok();
    cr_assert_geq(rd64(&b[2]), rd64(&a[3]), "read after write overlapped");
    cr_assert_geq(rd64(&c[2]), rd64(&a[3]), "write after read overlapped");
    cr_assert_geq(rd64(&c[4]), rd64(&c[3]), "write after write overlapped");
    adsm_shutdown();
}

/* Several devices (4 streams each by default): a kernel whose input must first be copied to its
 * device waits only for the earlier kernels that use that input, not for every earlier kernel
 * there; a copy into an object a running kernel reads waits for that kernel. */
Test(devices, a_copy_waits_only_for_kernels_using_its_object) {
    init_devices(2, ADSM_PROTOCOL_LAZY);
    int64_t *a = alloc(4096), *b = alloc(4096), *c = alloc(4096), *in = alloc(4096);
    adsm_grid one = adsm_grid_1d(1, 1);
    CALL_ON_OK(0, k_stamp, one, a, in, STAMP_MS, 0);
    for (int i = 0; i < 512; i++) b[i] = i; /* Dirty on the host: the next kernel's input goes first */
    CALL_ON_OK(0, k_stamp, one, c, b, 0, 0);
    sync_ok();
    cr_assert_lt(rd64(&c[0]), rd64(&a[1]), "the copy of b waited for a kernel that does not use b");
    CALL_ON_OK(0, k_stamp, one, a, in, STAMP_MS, 1); /* reads in */
    for (int i = 0; i < 512; i++) in[i] = 7;         /* then the CPU changes it */
    CALL_ON_OK(0, k_stamp, one, c, in, 0, 1);        /* in's copy must wait for the reader */
    sync_ok();
    cr_assert_geq(rd64(&c[2]), rd64(&a[3]), "a copy overwrote what a running kernel reads");
    adsm_shutdown();
}

/* ---- device-to-device copies outside the runtime lock (adsm_impl/peer.h) ------------------- */
typedef struct cpu_writer {
    int32_t *y;
    int64_t done_ns; /* when its write fault was resolved */
} cpu_writer;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *write_after_a_while(void *arg) {
    cpu_writer *w = (cpu_writer *)arg;
    struct timespec nap = {0, 100 * 1000000L};
    nanosleep(&nap, NULL); /* the main thread is in its launch by now, its copy waiting for the kernel */
    w->y[0] = 1;           /* a write fault: needs the runtime lock */
    w->done_ns = now_ns();
    return NULL;
}

/* A launch on device 1 takes x from device 0, whose kernel is still writing it: the copy waits
 * for that kernel with the runtime lock let go, so another thread's fault on another object is
 * resolved meanwhile, before the kernel ends. */
Test(devices, a_peer_copy_does_not_hold_up_other_faults) {
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    int64_t *x = alloc(4096), *c = alloc(4096), *in = alloc(4096);
    cpu_writer w = {alloc(4096), 0};
    adsm_grid one = adsm_grid_1d(1, 1);
    CALL_ON_OK(0, k_stamp, one, x, in, STAMP_MS, 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, write_after_a_while, &w), 0);
    CALL_ON_OK(1, k_stamp, one, c, x, 0, 0); /* x device to device, after the kernel on device 0 */
    pthread_join(t, NULL);
    sync_ok();
    cr_assert_lt(w.done_ns, rd64(&x[1]), "the fault waited for the kernel the peer copy waited for (fault done %.1f ms after the kernel started, kernel end %.1f ms)", (w.done_ns - rd64(&x[0])) / 1e6, (rd64(&x[1]) - rd64(&x[0])) / 1e6);
    cr_assert_geq(rd64(&c[0]), rd64(&x[1]), "the kernel on device 1 ran before its input was written");
    cr_assert_eq(stats().d2d_bytes, 4096);
    cr_assert_eq(rd(&w.y[0]), 1);
    adsm_shutdown();
}

/* ---- evictions wait only for the kernels using what goes (adsm_impl/capacity.h) ------------ */
#ifndef TEST_ON_CUDA_DOUBLE
/* Device 1 holds four objects: v and w, whose kernel is done, and a and in, whose kernel runs
 * for STAMP_MS. A launch that needs room for two more evicts v and w without waiting for that
 * kernel, so its own kernel starts while the first still runs; what v held survives. Emu only:
 * on cuda the evicted memory is unmapped, and cuMemUnmap is synchronous with the GPU's running
 * kernels (the driver double models it so), so there the launch does wait. */
Test(devices, an_eviction_waits_only_for_kernels_using_what_goes) {
    test_emu_memory = 4 * SIZE;
    init_devices(2, ADSM_PROTOCOL_LAZY);
    int64_t *v = alloc(SIZE), *w = alloc(SIZE), *a = alloc(SIZE), *in = alloc(SIZE), *c = alloc(SIZE),
            *x = alloc(SIZE);
    adsm_grid one = adsm_grid_1d(1, 1);
    CALL_ON_OK(1, k_stamp, one, v, w, 0, 0);
    sync_ok();
    CALL_ON_OK(1, k_stamp, one, a, in, STAMP_MS, 0);
    CALL_ON_OK(1, k_stamp, one, c, x, 0, 0); /* evicts v and w */
    sync_ok();
    EXPECT_EVICTIONS(1, 2, SIZE, 4 * SIZE); /* v written back; w, zeros the host holds, dropped */
    cr_assert_lt(rd64(&c[0]), rd64(&a[1]), "the eviction waited for a kernel that uses neither v nor w");
    cr_assert(rd64(&v[0]) > 0 && rd64(&v[1]) >= rd64(&v[0]), "v's stamps were lost in its eviction");
    adsm_shutdown();
}
#endif

/* Device 1 holds four objects; a launch evicts v and w, whose kernel is done, while the kernel
 * using a and in still runs. On cuda their memory is unmapped, which waits for the GPU's running
 * kernels (cuMemUnmap is synchronous; the double waits for running kernel bodies): that happens
 * with the runtime lock let go, so another thread's fault is resolved before the running kernel
 * ends. (Emu gives the memory back at once.) */
Test(devices, giving_evicted_memory_back_does_not_hold_up_other_faults) {
    test_emu_memory = 4 * SIZE;
    init_devices(2, ADSM_PROTOCOL_LAZY);
    int64_t *v = alloc(SIZE), *w = alloc(SIZE), *a = alloc(SIZE), *in = alloc(SIZE), *c = alloc(SIZE),
            *x = alloc(SIZE);
    cpu_writer cw = {alloc(4096), 0};
    adsm_grid one = adsm_grid_1d(1, 1);
    CALL_ON_OK(1, k_stamp, one, v, w, 0, 0);
    sync_ok();
    CALL_ON_OK(1, k_stamp, one, a, in, STAMP_MS, 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, write_after_a_while, &cw), 0);
    CALL_ON_OK(1, k_stamp, one, c, x, 0, 0); /* evicts v and w */
    pthread_join(t, NULL);
    sync_ok();
    cr_assert_lt(cw.done_ns, rd64(&a[1]), "the fault waited for a kernel that uses no evicted object (fault done "
                 "%.1f ms after it started, kernel end %.1f ms)", (cw.done_ns - rd64(&a[0])) / 1e6,
                 (rd64(&a[1]) - rd64(&a[0])) / 1e6);
    EXPECT_EVICTIONS(1, 2, SIZE, 4 * SIZE);
    cr_assert(rd64(&v[0]) > 0 && rd64(&v[1]) >= rd64(&v[0]), "v's stamps were lost in its eviction");
    cr_assert_eq(rd(&cw.y[0]), 1);
    adsm_shutdown();
}

/* Where kernels use only what they name (several devices, or one with several streams), freeing
 * an object or a device buffer waits for the kernels that named it and for no other. A kernel on
 * the last device writes a for STAMP_MS reading in: freeing v (which no kernel uses) returns while
 * it runs; freeing in returns after it ended. v and in are shared objects, or device buffers on
 * that device. */
typedef struct free_case {
    unsigned devices, streams;
    int buffers;
} free_case;

ParameterizedTestParameters(devices, a_free_waits_only_for_kernels_using_it) {
    static free_case cases[] = {{2, 0, 0}, {2, 0, 1}, {1, 2, 0}, {1, 2, 1}};
    return cr_make_param_array(free_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(free_case *c, devices, a_free_waits_only_for_kernels_using_it) {
    test_streams = c->streams;
    init_devices(c->devices, ADSM_PROTOCOL_LAZY);
    int dev = (int)c->devices - 1;
    int64_t *a = alloc(4096);
    int64_t *in = c->buffers ? adsm_dev_alloc_on(dev, 4096) : alloc(4096);
    int64_t *v = c->buffers ? adsm_dev_alloc_on(dev, 4096) : alloc(4096);
    cr_assert(in && v, "%s", adsm_last_error());
    if (!c->buffers) v[0] = 1;
    CALL_ON_OK(dev, k_stamp, adsm_grid_1d(1, 1), a, in, STAMP_MS, 0);
    cr_assert_eq(c->buffers ? adsm_dev_free(v) : adsm_free(v), ADSM_OK, "%s", adsm_last_error());
    int64_t v_freed = now_ns();
    cr_assert_eq(c->buffers ? adsm_dev_free(in) : adsm_free(in), ADSM_OK, "%s", adsm_last_error());
    int64_t in_freed = now_ns();
    sync_ok();
    cr_assert_lt(v_freed, rd64(&a[1]), "freeing what no kernel uses waited for a running kernel (%.1f ms after it "
                 "ended)", (v_freed - rd64(&a[1])) / 1e6);
    cr_assert_geq(in_freed, rd64(&a[1]), "the kernel reading in was still running when in was freed");
    adsm_shutdown();
}

/* Copies in to out after sleeping ms: reads its input long after it started. */
void k_copy_late(adsm_grid g, const int32_t *in, int32_t *out, size_t n, int ms) {
    if (g.begin == 0 && g.end > 0) {
        struct timespec nap = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&nap, NULL);
    }
    ADSM_FOR_EACH_THREAD(g, i) if (i < n) out[i] = in[i];
}

/* One device: adsm_free first waits for every launch so far (kernels may follow stored
 * pointers), with the runtime lock let go; a kernel another thread launches on the object
 * meanwhile must be waited for too. Here the free waits for a 400 ms kernel; 100 ms in, another
 * thread launches a kernel that writes the object 200 ms after it starts (it runs after the
 * first). Freeing the object under it made that kernel fault on freed device memory. */
typedef struct late_launch {
    int32_t *src, *dst;
    adsm_result got;
} late_launch;

static void *launch_after_a_while(void *arg) {
    late_launch *l = (late_launch *)arg;
    struct timespec nap = {0, 100 * 1000000L};
    nanosleep(&nap, NULL);
    l->got = ADSM_CALL(k_copy_late, grid_for(N), l->src, l->dst, N, 200);
    return NULL;
}

Test(devices, a_free_waits_for_kernels_naming_the_object_launched_meanwhile) {
    init_devices(1, ADSM_PROTOCOL_LAZY);
    int64_t *a = alloc(4096), *in = alloc(4096);
    late_launch l = {alloc(SIZE), alloc(SIZE), ADSM_ERROR_INVALID_VALUE};
    CALL_OK(k_stamp, adsm_grid_1d(1, 1), a, in, STAMP_MS, 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, launch_after_a_while, &l), 0);
    cr_assert_eq(adsm_free(l.dst), ADSM_OK, "%s", adsm_last_error());
    pthread_join(t, NULL);
    cr_assert_eq(l.got, ADSM_OK, "the second launch: %s", adsm_result_string(l.got));
    cr_assert_eq(adsm_sync(), ADSM_OK, "the second kernel ran on freed memory: %s", adsm_last_error());
    adsm_shutdown();
}

/* A running kernel still reads the object a launch evicts: the eviction waits for it before the
 * memory goes, so the kernel reads what the object held, not what the device was given back. */
Test(devices, an_eviction_waits_for_a_kernel_reading_what_goes) {
    test_emu_memory = 2 * SIZE;
    init_devices(2, ADSM_PROTOCOL_LAZY);
    int32_t *in = alloc(SIZE), *out = alloc(SIZE), *c = alloc(SIZE);
    write_ramp(in, 30);
    CALL_ON_OK(1, k_copy_late, grid_for(N), in, out, N, STAMP_MS); /* device 1 full */
    CALL_ON_OK(1, k_add, grid_for(N), c, out, out, N);              /* room for c: in goes */
    sync_ok();
    EXPECT_EVICTIONS(1, 1, 0, 2 * SIZE); /* in, which the host holds, dropped */
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&c[i]), 2 * (30 + (int32_t)i), "[%zu]", i);
    expect_ramp(out, 30);
    expect_ramp(in, 30);
    adsm_shutdown();
}

/* The kernel using what must go still runs: the launch waits for it with the runtime lock let go,
 * so another thread's fault on another object is resolved before that kernel ends, and the
 * evicted object comes home with what the kernel wrote. */
Test(devices, an_eviction_waiting_for_a_kernel_does_not_hold_up_other_faults) {
    test_emu_memory = 4 * SIZE;
    init_devices(2, ADSM_PROTOCOL_LAZY);
    int64_t *v = alloc(SIZE), *in = alloc(SIZE), *p = alloc(SIZE), *q = alloc(SIZE), *c = alloc(SIZE),
            *x = alloc(SIZE);
    cpu_writer cw = {alloc(4096), 0};
    adsm_grid one = adsm_grid_1d(1, 1);
    CALL_ON_OK(1, k_stamp, one, v, in, STAMP_MS, 0);
    CALL_ON_OK(1, k_stamp, one, p, q, 0, 0); /* device 1 full; v and in used least recently */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, write_after_a_while, &cw), 0);
    CALL_ON_OK(1, k_stamp, one, c, x, 0, 0); /* evicts v and in: waits for the first kernel */
    pthread_join(t, NULL);
    sync_ok();
    cr_assert_lt(cw.done_ns, rd64(&v[1]), "the fault waited for the kernel the eviction waited for (fault done "
                 "%.1f ms after the kernel started, kernel end %.1f ms)", (cw.done_ns - rd64(&v[0])) / 1e6,
                 (rd64(&v[1]) - rd64(&v[0])) / 1e6);
    cr_assert_geq(rd64(&c[0]), rd64(&v[1]), "the kernel ran before the eviction it needed");
    EXPECT_EVICTIONS(1, 2, SIZE, 4 * SIZE);
    cr_assert(rd64(&v[0]) > 0 && rd64(&v[1]) - rd64(&v[0]) >= (int64_t)STAMP_MS * 900000, "v came home without "
              "what its kernel wrote");
    cr_assert_eq(rd(&cw.y[0]), 1);
    adsm_shutdown();
}

/* ---- the explicit path on several devices -------------------------------------------------- */
/* A hand-written multi-device program: buffers on chosen devices, copies to and from each,
 * kernels where their buffers live, a buffer copied from one device to another; each device's
 * counters see its own bytes. */
Test(devices, explicit_buffers_live_on_their_device) {
    init_devices(2, ADSM_PROTOCOL_LAZY);
    const size_t bytes = N * sizeof(int32_t);
    int32_t *host = adsm_host_alloc(bytes), *d0 = adsm_dev_alloc_on(0, bytes), *d1 = adsm_dev_alloc_on(1, bytes);
    int32_t *e1 = adsm_dev_alloc_on(1, bytes);
    cr_assert(host && d0 && d1 && e1, "%s", adsm_last_error());
    for (size_t i = 0; i < N; i++) host[i] = (int32_t)i;
    reset();
    cr_assert_eq(adsm_copy_to_device(d0, host, bytes), ADSM_OK, "%s", adsm_last_error());
    CALL_OK(k_incr, grid_for(N), d0, N);                   /* on device 0, where d0 lives */
    cr_assert_eq(adsm_memcpy(d1, d0, bytes), ADSM_OK, "%s", adsm_last_error()); /* device 0 -> 1 */
    CALL_OK(k_add, grid_for(N), e1, d1, d1, N);             /* on device 1 */
    cr_assert_eq(adsm_copy_from_device(host, e1, bytes), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < N; i++) cr_assert_eq(host[i], 2 * ((int32_t)i + 1), "[%zu]", i);
    EXPECT_DEVICE(0, bytes, 0, 0);
    EXPECT_DEVICE(1, 0, bytes, bytes);
    cr_assert_eq(dev_stats(0).launches, 1);
    cr_assert_eq(dev_stats(1).launches, 1);
    cr_assert_eq(adsm_memset(e1, 0, bytes), ADSM_OK, "%s", adsm_last_error()); /* on device 1 */
    cr_assert_eq(adsm_copy_from_device(host, e1, bytes), ADSM_OK);
    for (size_t i = 0; i < N; i++) cr_assert_eq(host[i], 0);
    /* a kernel may not mix devices, nor run away from its buffers */
    cr_assert_eq(ADSM_CALL_ON(0, k_incr, grid_for(N), d1, N), ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "lives on device 1"), "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(k_add, grid_for(N), e1, d0, d1, N), ADSM_ERROR_INVALID_VALUE);
    cr_assert_null(adsm_dev_alloc_on(2, 64));
    cr_assert(strstr(adsm_last_error(), "0..1"), "%s", adsm_last_error());
    sync_ok();
    cr_assert(adsm_dev_free(d0) == ADSM_OK && adsm_dev_free(d1) == ADSM_OK && adsm_dev_free(e1) == ADSM_OK, "%s",
              adsm_last_error());
    cr_assert_eq(adsm_host_free(host), ADSM_OK);
    adsm_shutdown();
}

/* ---- several GPUs (the driver double) ------------------------------------------------------- */
#ifdef TEST_ON_CUDA_DOUBLE
static adsm_result init_gpus(const char *devices_env, const char *devices_cfg, adsm_protocol_kind protocol) {
    clear_adsm_env();
    unsetenv("ADSM_DEVICE");
    if (devices_env) setenv("ADSM_DEVICES", devices_env, 1);
    else unsetenv("ADSM_DEVICES");
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.protocol = protocol;
    cfg.devices = devices_cfg;
    return adsm_init(&cfg);
}

/* One GPU unless told: ADSM_DEVICES (or adsm_config.devices) lists them, or says all; bad lists,
 * GPUs that do not exist, both variables at once and the batch protocol on several are refused
 * with a message naming the setting, and leave nothing running. */
Test(devices, cuda_configuration) {
    setenv("CUDADOUBLE_DEVICES", "3", 1);
    cr_assert_eq(init_gpus(NULL, NULL, ADSM_PROTOCOL_LAZY), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 1, "one GPU by default");
    adsm_shutdown();
    cr_assert_eq(init_gpus("all", NULL, ADSM_PROTOCOL_LAZY), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 3);
    adsm_shutdown();
    cr_assert_eq(init_gpus("2,0", NULL, ADSM_PROTOCOL_ROLLING), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 2);
    adsm_shutdown();
    cr_assert_eq(init_gpus("0,1,2", "1", ADSM_PROTOCOL_LAZY), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 1, "adsm_config.devices wins over ADSM_DEVICES");
    adsm_shutdown();
    static const char *const bad[] = {"0,0", "x", "1,", "0;1", "-1", "0,1,2,3,4,5,6,7,8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(init_gpus(bad[i], NULL, ADSM_PROTOCOL_LAZY), ADSM_ERROR_INVALID_CONFIG, "ADSM_DEVICES=%s", bad[i]);
        cr_assert(strstr(adsm_last_error(), "ADSM_DEVICES"), "%s", adsm_last_error());
    }
    cr_assert_eq(init_gpus(NULL, "1,x", ADSM_PROTOCOL_LAZY), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "adsm_config.devices"), "%s", adsm_last_error());
    cr_assert_eq(init_gpus("0,3", NULL, ADSM_PROTOCOL_LAZY), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "GPU 3") && strstr(adsm_last_error(), "only 3"), "%s", adsm_last_error());
    setenv("ADSM_DEVICE", "1", 1);
    setenv("ADSM_DEVICES", "0,1", 1);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_CUDA;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "both set"), "%s", adsm_last_error());
    cr_assert_eq(init_gpus("all", NULL, ADSM_PROTOCOL_BATCH), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "batch") && strstr(adsm_last_error(), "ADSM_DEVICES"), "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 0, "the refused start left nothing running");
}

/* A kernel that faults like a GPU (illegal address): its context is lost for good. */
ADSM_KERNEL(k_crash, ADSM_OUT(int32_t, x), ADSM_VALUE(size_t, n));
void k_crash(adsm_grid g, int32_t *x, size_t n) { (void)g, (void)x, (void)n; }
static void crash_body(const cudadouble_launch *l, void *user) {
    (void)l, (void)user;
    cuda_double.kernel_fault(700); /* CUDA_ERROR_ILLEGAL_ADDRESS */
}

/* One GPU of two crashes: the next sync reports it once, naming it; launches there fail with
 * DEVICE_LOST; the other GPU keeps working, new objects live there, and the CPU's data stays
 * readable. A CUDA context does not recover, so what only the lost GPU held cannot be read: a
 * launch that needs it fails naming the object, and freeing it works. */
static void attach_crash_kernel(void) {
    const adsm_kernel_desc *const more[] = {adsm__kernel_k_crash()};
    cr_assert_eq(cuda_double_attach(more, 1), 0, "%s", adsm_last_error());
    cr_assert_eq(cuda_double.register_kernel("k_crash", crash_body, NULL), 0);
}

Test(devices, cuda_one_gpu_lost_of_two) {
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    attach_crash_kernel();
    int32_t *x = alloc(SIZE), *w = alloc(SIZE), *y = alloc(SIZE), *host = alloc(SIZE);
    CALL_ON_OK(1, k_fill, grid_for(N), x, N, 40); /* x's only current copy: GPU 1 */
    CALL_ON_OK(0, k_fill, grid_for(N), w, N, 50);
    write_ramp(host, 70); /* Dirty on the host */
    sync_ok();
    CALL_ON_OK(1, k_crash, grid_for(1), y, 1);
    cr_assert_eq(adsm_sync(), ADSM_ERROR_KERNEL_CRASHED);
    cr_assert(strstr(adsm_last_error(), "device 1") && strstr(adsm_last_error(), "CUDA_ERROR_ILLEGAL_ADDRESS"), "%s",
              adsm_last_error());
    sync_ok(); /* reported once: the other GPU is fine */
    cr_assert_eq(ADSM_CALL_ON(1, k_incr, grid_for(N), w, N), ADSM_ERROR_DEVICE_LOST);
    cr_assert(strstr(adsm_last_error(), "device 1 is lost"), "%s", adsm_last_error());
    CALL_OK(k_incr, grid_for(N), w, N); /* adsm's choice: GPU 0 */
    int32_t *fresh = alloc(SIZE);
    CALL_OK(k_fill, grid_for(N), fresh, N, 60);
    int32_t *z = alloc(SIZE);
    CALL_ON_OK(0, k_add, grid_for(N), z, host, w, N);
    cr_assert_eq(ADSM_CALL_ON(0, k_incr, grid_for(N), x, N), ADSM_ERROR_DEVICE_LOST, "x's only copy was on the lost GPU");
    cr_assert(strstr(adsm_last_error(), "device 1, which is lost"), "%s", adsm_last_error());
    sync_ok();
    expect_ramp(w, 51);
    expect_ramp(fresh, 60);
    expect_ramp(host, 70);
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&z[i]), 121 + 2 * (int32_t)i);
    cr_assert_eq(dev_stats(1).launches, 2, "nothing more ran on the lost GPU");
    cr_assert_eq(adsm_free(x), ADSM_OK);
    cr_assert_eq(adsm_free(y), ADSM_OK);
    cr_assert_eq(adsm_free(fresh), ADSM_OK);
    adsm_shutdown();
}

/* The CPU reads data whose only copy was on a GPU that crashed: adsm cannot bring it home, and
 * says which object and which lost device before the process dies. */
static void read_what_only_a_lost_gpu_held(void) {
    init_devices(2, ADSM_PROTOCOL_ROLLING);
    attach_crash_kernel();
    int32_t *x = alloc(SIZE), *y = alloc(SIZE);
    CALL_ON_OK(1, k_fill, grid_for(N), x, N, 40); /* x's only current copy: GPU 1 */
    CALL_ON_OK(1, k_crash, grid_for(1), y, 1);
    if (adsm_sync() != ADSM_ERROR_KERNEL_CRASHED) _exit(3); /* GPU 1 is lost from here on */
    (void)rd(&x[7]);
}

Test(devices, cuda_reading_what_only_a_lost_gpu_held_says_why_before_dying) {
    expect_death_message(read_what_only_a_lost_gpu_held, "device 1, which is lost");
}

/* Loses GPU `lost` with a kernel that faults (y: its output, not otherwise used). */
static void lose_gpu(int lost, int32_t *y) {
    CALL_ON_OK(lost, k_crash, grid_for(1), y, 1);
    cr_assert_eq(adsm_sync(), ADSM_ERROR_KERNEL_CRASHED, "%s", adsm_last_error());
    sync_ok();
}

/* The memory calls on what only the lost GPU held fail as a CPU read of it would: DEVICE_LOST,
 * naming the object and the device (they said "making shared memory accessible failed" and
 * whatever errno a call before had left: "File exists"). */
Test(devices, cuda_memory_calls_on_what_only_a_lost_gpu_held_say_so) {
    init_devices(2, ADSM_PROTOCOL_LAZY);
    attach_crash_kernel();
    int32_t *x = alloc(SIZE), *y = alloc(SIZE), *mine = malloc(4096);
    CALL_ON_OK(1, k_fill, grid_for(N), x, N, 40); /* x's only current copy: GPU 1 */
    lose_gpu(1, y);
    errno = EEXIST;
    cr_assert_eq(adsm_memcpy(mine, x, 4096), ADSM_ERROR_DEVICE_LOST, "%s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "device 1, which is lost"), "%s", adsm_last_error());
    errno = EEXIST;
    cr_assert_eq(adsm_memset(x + 1, 0, 8), ADSM_ERROR_DEVICE_LOST, "%s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "device 1, which is lost"), "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(x, 7, SIZE), ADSM_OK, "a whole overwrite needs nothing from GPU 1: %s", adsm_last_error());
    cr_assert_eq(rd(&x[N - 1]), 0x07070707);
    free(mine);
    adsm_shutdown();
}

ParameterizedTestParameters(devices, cuda_an_eviction_writes_back_what_a_lost_gpu_also_held) {
    return lazy_and_rolling();
}

/* x, written on GPU 0 and read on GPU 1 (a replica there), is evicted from a full GPU 0 after GPU 1
 * is lost: the lost replica cannot be read, so x is written back first. It was not (GPU 1 counted
 * as a second holder), and the CPU's read of x then died: "its only current copy is on device 1". */
ParameterizedTest(adsm_protocol_kind *protocol, devices, cuda_an_eviction_writes_back_what_a_lost_gpu_also_held) {
    test_emu_memory = 4 * SIZE;
    init_devices(2, *protocol);
    attach_crash_kernel();
    int32_t *x = alloc(SIZE), *y = alloc(SIZE), *crash = alloc(SIZE), *more[4];
    CALL_ON_OK(0, k_fill, grid_for(N), x, N, 40);
    CALL_ON_OK(1, k_add, grid_for(N), y, x, x, N); /* a replica of x on GPU 1 */
    lose_gpu(1, crash);
    for (int i = 0; i < 4; i++) {
        more[i] = alloc(SIZE);
        CALL_ON_OK(0, k_fill, grid_for(N), more[i], N, 100 * i); /* the last one evicts x from GPU 0 */
    }
    sync_ok();
    cr_assert_geq(dev_stats(0).evictions, 1);
    expect_ramp(x, 40);
    for (int i = 0; i < 4; i++) expect_ramp(more[i], 100 * i);
    adsm_shutdown();
}

/* Rolling sends the blocks the CPU wrote past its window to their object's home GPU; when that GPU
 * is lost, they stay on the host (as when it has no room), and the other GPU takes them at its
 * launch. The eviction failed instead, and with it the CPU's write: the program died. */
Test(devices, cuda_rolling_evictions_to_a_lost_gpu_stay_on_the_host) {
    const size_t n = 64 * KIB / sizeof(int32_t), step = 4 * KIB / sizeof(int32_t);
    test_devices = 2;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4 * KIB, 2);
    attach_crash_kernel();
    int32_t *x = alloc(n * sizeof *x), *crash = alloc(4096);
    CALL_ON_OK(1, k_fill, grid_for(n), x, n, 10); /* x's home: GPU 1 */
    sync_ok();
    for (size_t i = 0; i < n; i++) cr_assert_eq(rd(&x[i]), 10 + (int32_t)i); /* current on the host too */
    lose_gpu(1, crash);
    for (size_t i = 0; i < n; i += step) x[i] = -1; /* past the window of 2: evictions to GPU 1 */
    CALL_ON_OK(0, k_incr, grid_for(n), x, n);
    sync_ok();
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(rd(&x[i]), i % step == 0 ? 0 : 11 + (int32_t)i, "x[%zu]", i);
    adsm_shutdown();
}

ParameterizedTestParameters(devices, cuda_peer_copies) {
    static int peer_access[] = {1, 0};
    return cr_make_param_array(int, peer_access, 2);
}

/* Data a kernel wrote on GPU 0 and a kernel on GPU 1 reads goes GPU to GPU (cuMemcpyPeerAsync),
 * directly where the GPUs have peer access (adsm grants it on what it maps), staged by the driver
 * where they do not; GPU 1 runs on translated addresses (one address names one mapping in the
 * process), GPU 0 on the host's; device memory is mapped only on the GPUs that hold an object,
 * and given back when it leaves. */
ParameterizedTest(int *peer_access, devices, cuda_peer_copies) {
    if (!*peer_access) setenv("CUDADOUBLE_NO_PEER", "1", 1);
    test_devices = 2;
    init_devices(2, ADSM_PROTOCOL_LAZY);
    cudadouble_counters c0 = cuda_double_counters();
    int32_t *x = alloc(SIZE), *y = alloc(SIZE);
    cr_assert_eq(cuda_double_counters().device_bytes_mapped, c0.device_bytes_mapped, "mapped at adsm_alloc");
    reset();
    CALL_ON_OK(0, k_fill, grid_for(N), x, N, 11);
    cr_assert_eq(stats().translated_args, 0, "GPU 0 has the host's addresses");
    cr_assert_eq(cuda_double_counters().device_bytes_mapped - c0.device_bytes_mapped, SIZE, "x on GPU 0 only");
    CALL_ON_OK(1, k_add, grid_for(N), y, x, x, N);
    cr_assert_eq(stats().translated_args, 3, "GPU 1's pointer arguments");
    cr_assert_eq(cuda_double_counters().device_bytes_mapped - c0.device_bytes_mapped, 3 * SIZE,
                 "x on both GPUs, y on GPU 1: %llu bytes mapped",
                 cuda_double_counters().device_bytes_mapped - c0.device_bytes_mapped);
    EXPECT_DEVICE(1, 0, 0, SIZE);
    cudadouble_counters c1 = cuda_double_counters();
    cr_assert_eq(c1.peer_bytes - c0.peer_bytes, SIZE);
    cr_assert_eq(c1.peer_direct_bytes - c0.peer_direct_bytes, *peer_access ? SIZE : 0);
    sync_ok();
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&y[i]), 2 * (11 + (int32_t)i), "[%zu]", i);
    expect_ramp(x, 11);
    cr_assert_eq(adsm_free(x), ADSM_OK);
    cr_assert_eq(adsm_free(y), ADSM_OK);
    cr_assert_eq(cuda_double_counters().device_bytes_mapped, c0.device_bytes_mapped, "freed objects stay mapped");
    adsm_shutdown();
}
/* Freeing an object GPU 1 holds unmaps its memory there, which waits for the GPU (the double's
 * unmap takes 600 ms): adsm does it with the runtime lock let go, so another thread's fault on
 * another object is resolved long before the free returns. */
Test(devices, cuda_freeing_does_not_hold_up_other_faults) {
    setenv("CUDADOUBLE_UNMAP_US", "600000", 1);
    init_devices(2, ADSM_PROTOCOL_LAZY);
    int32_t *v = alloc(SIZE);
    cpu_writer cw = {alloc(4096), 0};
    CALL_ON_OK(1, k_fill, grid_for(N), v, N, 40);
    sync_ok();
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, write_after_a_while, &cw), 0);
    cr_assert_eq(adsm_free(v), ADSM_OK, "%s", adsm_last_error());
    int64_t freed_ns = now_ns();
    pthread_join(t, NULL);
    cr_assert_lt(cw.done_ns, freed_ns - 200 * 1000000L, "the fault waited for the unmap (fault done %.1f ms before "
                 "the free returned)", (freed_ns - cw.done_ns) / 1e6);
    cr_assert_eq(rd(&cw.y[0]), 1);
    adsm_shutdown();
}
#endif
