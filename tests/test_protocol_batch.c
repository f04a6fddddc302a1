/* tests/test_protocol_batch.c -- the batch protocol: no tracking, everything moves.
 *
 * Objects are always 'D' (writable) and never fault. On the emu backend every kernel call copies
 * every live object to the device (except those an earlier kernel still owns) and adsm_sync
 * copies back the objects kernels were given to write, and only those; a sync with no call since
 * the last one moves nothing. Threads that each launch and sync see their own kernels' results. Bytes are asserted exactly (after adsm_reset_stats),
 * with 4 KiB and 64 KiB blocks where the block size could matter (it must not). The last tests
 * run the main scenarios on the host backend, where nothing moves. Each Criterion test runs in
 * its own process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>

#include "tests/protocol_common.h"

/* a protocol bug may loop on a fault forever: fail instead of hanging */
TestSuite(batch, .timeout = 120);

#include <pthread.h>
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

/* adsm_sync copies back what kernels were given to write (c), not their inputs; a second sync
 * with no call in between moves nothing. */
TEST_BLOCK_SIZES(batch, sync_copies_written_objects_back_once) {
    batch(bs);
    int32_t *a = alloc(SA), *b = alloc(SB), *c = alloc(SC);
    for (size_t i = 0; i < NA; i++) wr(&a[i], (int32_t)i);
    for (size_t i = 0; i < NB; i++) wr(&b[i], 5 * (int32_t)i);
    reset();
    CALL_OK(k_add, grid_for(NB), c, a, b, NB);
    EXPECT_BYTES(SUM, 0);
    sync_ok();
    EXPECT_BYTES(SUM, SC);
    cr_assert_eq(stats().d2h_copies, 1);
    for (size_t i = 0; i < NB; i++) cr_assert_eq(rd(&c[i]), 6 * (int32_t)i, "c[%zu]", i);
    cr_assert_eq(rd(&c[NB]), 0);
    cr_assert_eq(rd(&a[NA - 1]), (int32_t)(NA - 1));
    sync_ok();
    EXPECT_BYTES(SUM, SC);
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
 * second call leaves c (the first kernel's output, newer on the device) where it is and copies
 * only the others; the sync then brings c home once. */
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
    EXPECT_BYTES(2 * SUM - SC, 0);
    sync_ok();
    EXPECT_BYTES(2 * SUM - SC, SC);
    expect_filled(c, 0, NC, 11);
    sync_ok();
    EXPECT_BYTES(2 * SUM - SC, SC);
    adsm_shutdown();
}

/* CPU writes between a call and adsm_sync to an object no kernel was given are the program's:
 * the sync must not overwrite them with the device copy. */
Test(batch, cpu_writes_to_objects_no_kernel_writes_survive_sync) {
    batch(4096);
    int32_t *a = alloc(SA), *c = alloc(SC);
    CALL_OK(k_fill, grid_for(NC), c, NC, 3);
    for (size_t i = 0; i < NA; i++) wr(&a[i], 7);
    sync_ok();
    expect_filled(c, 0, NC, 3);
    for (size_t i = 0; i < NA; i++) cr_assert_eq(rd(&a[i]), 7, "a[%zu]", i);
    adsm_shutdown();
}

/* adsm_memcpy sees a kernel's result before adsm_sync, as after it. */
Test(batch, memcpy_out_of_an_output_before_sync_sees_the_kernel_result) {
    batch(4096);
    int32_t *c = alloc(SC);
    int32_t *plain = malloc(SC);
    CALL_OK(k_fill, grid_for(NC), c, NC, 100);
    cr_assert_eq(adsm_memcpy(plain, c, SC), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < NC; i++) cr_assert_eq(plain[i], 100 + (int32_t)i, "plain[%zu]", i);
    wr(&c[0], -1); /* the object came home: this write is the program's and survives sync */
    sync_ok();
    cr_assert_eq(rd(&c[0]), -1);
    cr_assert_eq(rd(&c[1]), 101);
    free(plain);
    adsm_shutdown();
}

/* Threads that each launch on their own object and sync, round after round: a sync must not copy
 * back another thread's object while that thread's kernel is still writing it, nor count that
 * kernel's results as home. */
#define RING_THREADS 4
#define RING_N ((size_t)1 << 19)
#define RING_ROUNDS 12

static void *launch_and_sync_rounds(void *arg) {
    int32_t *x = arg;
    int32_t base = (int32_t)(((uintptr_t)x >> 12) & 0xffff);
    for (int r = 0; r < RING_ROUNDS; r++) {
        if (ADSM_CALL(k_fill, grid_for(RING_N), x, RING_N, base + r) != ADSM_OK || adsm_sync() != ADSM_OK)
            return "call or sync failed";
        for (size_t i = 0; i < RING_N; i += 4093)
            if (x[i] != base + r + (int32_t)i) return "stale data after the thread's own sync";
        if (x[RING_N - 1] != base + r + (int32_t)(RING_N - 1)) return "stale last element";
    }
    return NULL;
}

Test(batch, threads_each_launching_and_syncing_see_their_own_results) {
    batch(65536);
    pthread_t t[RING_THREADS];
    int32_t *x[RING_THREADS];
    for (int i = 0; i < RING_THREADS; i++) x[i] = alloc(RING_N * sizeof(int32_t));
    for (int i = 0; i < RING_THREADS; i++) cr_assert_eq(pthread_create(&t[i], NULL, launch_and_sync_rounds, x[i]), 0);
    for (int i = 0; i < RING_THREADS; i++) {
        void *failure;
        pthread_join(t[i], &failure);
        cr_expect_null(failure, "thread %d: %s", i, (const char *)failure);
    }
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

/* The same with one shared object cut into slabs, one per thread (GMAC's threads multiplying
 * slabs of a shared matrix): each kernel writes its slab through an interior pointer; after its
 * own sync each thread reads its slab's values. */
static int32_t *slab_matrix;

static void *slab_rounds(void *arg) {
    size_t t = (size_t)(uintptr_t)arg, n = RING_N / RING_THREADS;
    int32_t *slab = slab_matrix + t * n;
    for (int r = 0; r < RING_ROUNDS; r++) {
        int32_t base = (int32_t)(t * 1000000 + (size_t)r);
        if (ADSM_CALL(k_fill, grid_for(n), slab, n, base) != ADSM_OK || adsm_sync() != ADSM_OK)
            return "call or sync failed";
        for (size_t i = 0; i < n; i += 1021)
            if (slab[i] != base + (int32_t)i) return "stale slab after the thread's own sync";
        if (slab[n - 1] != base + (int32_t)(n - 1)) return "stale last element of the slab";
    }
    return NULL;
}

Test(batch, threads_writing_slabs_of_one_object_see_their_own_results) {
    batch(65536);
    slab_matrix = alloc(RING_N * sizeof(int32_t));
    pthread_t t[RING_THREADS];
    for (size_t i = 0; i < RING_THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, slab_rounds, (void *)(uintptr_t)i), 0);
    for (int i = 0; i < RING_THREADS; i++) {
        void *failure;
        pthread_join(t[i], &failure);
        cr_expect_null(failure, "thread %d: %s", i, (const char *)failure);
    }
    adsm_shutdown();
}
