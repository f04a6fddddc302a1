/* tests/test_protocol_batch.c -- the batch protocol: no tracking, everything moves.
 *
 * Objects are always 'D' (writable) and never fault. On the emu backend every kernel call copies
 * every live object to the device and the next adsm_sync copies every object back; a sync with no
 * call since the last one moves nothing. Bytes are asserted exactly (after adsm_reset_stats),
 * with 4 KiB and 64 KiB blocks where the block size could matter (it must not). The last tests
 * run the main scenarios on the host backend, where nothing moves. Each Criterion test runs in
 * its own process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>

#include "tests/protocol_common.h"

/* a protocol bug may loop on a fault forever: fail instead of hanging */
TestSuite(batch, .timeout = 20);

#include <unistd.h>

/* Sizes that are not multiples of the page or of any block size. */
#define NA ((size_t)50000)
#define NB ((size_t)777)
#define NC ((size_t)70001)
#define SA (NA * sizeof(int32_t))
#define SB (NB * sizeof(int32_t))
#define SC (NC * sizeof(int32_t))
#define SUM (SA + SB + SC)

static void batch(size_t bs) { init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_BATCH, bs, 0); }

/* Objects are Dirty from the start and stay so; CPU reads and writes never fault or copy. */
TEST_BLOCK_SIZES(batch, objects_are_always_dirty_and_never_fault) {
    batch(bs);
    int32_t *a = alloc(SA), *c = alloc(SC);
    expect_all(a, SA, 'D');
    expect_all(c, SC, 'D');
    reset();
    for (size_t i = 0; i < NA; i++) wr(&a[i], (int32_t)i);
    for (size_t i = 0; i < NC; i += 1000) cr_assert_eq(rd(&c[i]), 0);
    EXPECT_QUIET();
    expect_all(a, SA, 'D');
    CALL_OK(k_fill, grid_for(NC), c, NC, 1);
    expect_all(c, SC, 'D'); /* OUT objects are not invalidated */
    expect_all(a, SA, 'D');
    sync_ok();
    expect_all(c, SC, 'D');
    reset();
    cr_assert_eq(rd(&c[5]), 6);
    wr(&c[5], 0);
    wr(&a[5], 0);
    EXPECT_QUIET();
    adsm_shutdown();
}

/* A call copies every live object, argument or not, whole (clamped to its size). */
TEST_BLOCK_SIZES(batch, call_copies_every_live_object) {
    batch(bs);
    int32_t *a = alloc(SA), *b = alloc(SB), *c = alloc(SC);
    (void)b; /* never written, never passed: still copied */
    reset();
    CALL_OK(k_fill, grid_for(NA), a, NA, 0);
    EXPECT_BYTES(SUM, 0);
    cr_assert_eq(stats().h2d_copies, 3);
    cr_assert_eq(stats().launches, 1);
    EXPECT_FAULTS(0, 0);
    sync_ok();
    (void)c;
    adsm_shutdown();
}

/* adsm_sync copies every object back; a second sync with no call in between moves nothing. */
TEST_BLOCK_SIZES(batch, sync_copies_every_object_back_once) {
    batch(bs);
    int32_t *a = alloc(SA), *b = alloc(SB), *c = alloc(SC);
    for (size_t i = 0; i < NA; i++) wr(&a[i], (int32_t)i);
    for (size_t i = 0; i < NB; i++) wr(&b[i], 5 * (int32_t)i);
    reset();
    CALL_OK(k_add, grid_for(NB), c, a, b, NB);
    EXPECT_BYTES(SUM, 0);
    sync_ok();
    EXPECT_BYTES(SUM, SUM);
    cr_assert_eq(stats().d2h_copies, 3);
    for (size_t i = 0; i < NB; i++) cr_assert_eq(rd(&c[i]), 6 * (int32_t)i, "c[%zu]", i);
    cr_assert_eq(rd(&c[NB]), 0);
    cr_assert_eq(rd(&a[NA - 1]), (int32_t)(NA - 1)); /* inputs come back unchanged */
    sync_ok();
    EXPECT_BYTES(SUM, SUM);
    EXPECT_FAULTS(0, 0);
    adsm_shutdown();
}

/* A sync before any call moves nothing. */
Test(batch, sync_without_call_moves_nothing) {
    batch(4096);
    int32_t *a = alloc(SA);
    wr(&a[0], 1);
    reset();
    sync_ok();
    sync_ok();
    EXPECT_QUIET();
    cr_assert_eq(rd(&a[0]), 1);
    adsm_shutdown();
}

/* Two calls with no sync in between: the second kernel must see the first one's results, so the
 * second call first brings them home (one d2h of every object) before copying everything out
 * again; the sync then copies back once more. */
Test(batch, two_calls_one_sync_second_kernel_sees_first) {
    batch(4096);
    int32_t *a = alloc(SA), *b = alloc(SB), *c = alloc(SC);
    (void)a;
    (void)b;
    reset();
    CALL_OK(k_fill, grid_for(NC), c, NC, 10);
    EXPECT_BYTES(SUM, 0);
    usleep(20000); /* let the first kernel finish: copying stale host data over it must not lose it */
    CALL_OK(k_incr, grid_for(NC), c, NC);
    EXPECT_BYTES(2 * SUM, SUM);
    sync_ok();
    EXPECT_BYTES(2 * SUM, 2 * SUM);
    expect_filled(c, 0, NC, 11);
    sync_ok();
    EXPECT_BYTES(2 * SUM, 2 * SUM);
    adsm_shutdown();
}

/* CPU writes made after a sync reach the kernel at the next call (the whole object is copied). */
Test(batch, cpu_writes_after_sync_reach_next_kernel) {
    batch(65536);
    int32_t *x = alloc(SA);
    CALL_OK(k_fill, grid_for(NA), x, NA, 0);
    sync_ok();
    wr(&x[3], 1000);
    wr(&x[NA - 1], -1);
    reset();
    CALL_OK(k_incr, grid_for(NA), x, NA);
    sync_ok();
    EXPECT_BYTES(SA, SA);
    cr_assert_eq(rd(&x[3]), 1001);
    cr_assert_eq(rd(&x[2]), 3);
    cr_assert_eq(rd(&x[NA - 1]), 0);
    adsm_shutdown();
}

/* Freed objects are no longer copied. */
Test(batch, freed_objects_are_not_copied) {
    batch(4096);
    int32_t *a = alloc(SA), *b = alloc(SB), *c = alloc(SC);
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(adsm_free(b), ADSM_OK);
    reset();
    CALL_OK(k_fill, grid_for(NC), c, NC, 0);
    sync_ok();
    EXPECT_BYTES(SC, SC);
    cr_assert_eq(stats().objects, 1);
    cr_assert_eq(stats().object_bytes, SC);
    adsm_shutdown();
}

/* The emu device really is separate: batch's copies are what make results right. The untouched
 * part of an OUT object keeps the CPU's values because the whole object went to the device. */
Test(batch, untouched_output_bytes_keep_cpu_values) {
    batch(4096);
    int32_t *c = alloc(SC);
    for (size_t i = 0; i < NC; i++) wr(&c[i], -1);
    CALL_OK(k_fill, grid_for(10), c + 100, 10, 5);
    sync_ok();
    cr_assert_eq(rd(&c[0]), -1);
    expect_filled(c + 100, 0, 10, 5);
    cr_assert_eq(rd(&c[110]), -1);
    cr_assert_eq(rd(&c[NC - 1]), -1);
    adsm_shutdown();
}

TEST_BLOCK_SIZES(batch, no_stale_read) {
    batch(bs);
    scenario_no_stale_read();
    adsm_shutdown();
}

Test(batch, interior_pointers_as_arguments) {
    batch(4096);
    scenario_interior_pointers();
    adsm_shutdown();
}

/* The host backend under the batch protocol: right results, all 'D', nothing counted. */
TEST_BLOCK_SIZES(batch, host_backend_moves_nothing) { scenario_host_moves_nothing(ADSM_PROTOCOL_BATCH, bs); }

Test(batch, host_backend_no_stale_read) {
    init(ADSM_BACKEND_HOST, ADSM_PROTOCOL_BATCH, 4096, 0);
    reset();
    scenario_no_stale_read();
    scenario_interior_pointers();
    EXPECT_QUIET();
    adsm_shutdown();
}
