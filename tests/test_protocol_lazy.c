/* tests/test_protocol_lazy.c -- the lazy protocol, one test per state transition.
 *
 * Lazy tracks whole objects: every block of an object always has the same state. On the emu
 * backend (device memory really separate) each test asserts the exact block states and the exact
 * bytes copied (h2d_bytes / d2h_bytes after adsm_reset_stats), with 4 KiB and 64 KiB blocks where
 * the block size could matter. The last tests run the same scenarios on the host backend, where
 * nothing moves. Each Criterion test runs in its own process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>

#include "tests/protocol_common.h"

/* a protocol bug may loop on a fault forever: fail instead of hanging */
TestSuite(lazy, .timeout = 120);

/* 200000 bytes: not a multiple of the page or of any block size, so copies must be clamped. */
#define N ((size_t)50000)
#define SIZE (N * sizeof(int32_t))

static void lazy(size_t bs) { init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_LAZY, bs, 0); }

/* A fresh object is ReadOnly everywhere, reads are free, and a kernel reading it copies nothing. */
TEST_BLOCK_SIZES(lazy, fresh_object_is_readonly_and_never_copied) {
    lazy(bs);
    int32_t *a = alloc(SIZE), *c = alloc(SIZE);
    expect_all(a, SIZE, 'R');
    reset();
    for (size_t i = 0; i < N; i += 1000) cr_assert_eq(rd(&a[i]), 0);
    EXPECT_QUIET();
    CALL_OK(k_add, grid_for(N), c, a, a, N);
    EXPECT_QUIET(); /* nobody wrote a or c: nothing to copy */
    expect_all(a, SIZE, 'R');
    sync_ok();
    cr_assert_eq(rd(&a[N - 1]), 0);
    EXPECT_QUIET();
    adsm_shutdown();
}

/* I -> R at adsm_sync for a small result the CPU reads after each sync (protocol_common.h). */
TEST_BLOCK_SIZES(lazy, small_results_read_after_each_sync_come_home_in_it) {
    small_results_come_home_in_the_sync(ADSM_PROTOCOL_LAZY, bs);
}

/* ... and one the CPU also writes before each kernel keeps coming home (protocol_common.h). */
TEST_BLOCK_SIZES(lazy, small_objects_written_and_read_each_round_come_home) {
    written_small_objects_keep_coming_home(ADSM_PROTOCOL_LAZY, bs);
}

/* ... and one adsm_memcpy sends only part of still sends the rest (protocol_common.h). */
TEST_BLOCK_SIZES(lazy, a_twin_sent_in_part_sends_the_rest) { twins_sent_in_part_send_the_rest(ADSM_PROTOCOL_LAZY, bs); }

/* ... at most ADSM__TWIN_BYTES of them beside twins (protocol_common.h). */
TEST_BLOCK_SIZES(lazy, twins_hold_a_bounded_size) { twins_are_bounded(ADSM_PROTOCOL_LAZY, bs); }

/* No drain for flushes a sync saw done (protocol_common.h). */
TEST_BLOCK_SIZES(lazy, flushes_a_sync_saw_done_need_no_drain) { synced_flushes_need_no_drain(ADSM_PROTOCOL_LAZY, bs); }

/* No system call for outputs Invalid already (protocol_common.h). */
TEST_BLOCK_SIZES(lazy, outputs_invalid_already_are_not_protected_again) {
    invalid_outputs_are_not_protected_again(ADSM_PROTOCOL_LAZY, bs);
}

/* R -> D: one write fault makes the whole object Dirty; nothing is copied. */
TEST_BLOCK_SIZES(lazy, write_to_readonly_makes_whole_object_dirty) {
    lazy(bs);
    int32_t *a = alloc(SIZE), *b = alloc(SIZE);
    reset();
    wr(&a[N / 2], 7);
    EXPECT_FAULTS(0, 1);
    EXPECT_BYTES(0, 0);
    expect_all(a, SIZE, 'D');
    expect_all(b, SIZE, 'R'); /* other objects are untouched */
    /* D -> D: further reads and writes anywhere in the object are free */
    wr(&a[0], 1);
    wr(&a[N - 1], 2);
    cr_assert_eq(rd(&a[N / 2]), 7);
    cr_assert_eq(rd(&a[1]), 0);
    EXPECT_FAULTS(0, 1);
    EXPECT_BYTES(0, 0);
    adsm_shutdown();
}

/* A read of a ReadOnly object is no fault and leaves it ReadOnly. */
Test(lazy, read_of_readonly_is_free) {
    lazy(4096);
    int32_t *a = alloc(SIZE);
    reset();
    int64_t sum = 0;
    for (size_t i = 0; i < N; i++) sum += rd(&a[i]);
    cr_assert_eq(sum, 0);
    EXPECT_QUIET();
    expect_all(a, SIZE, 'R');
    adsm_shutdown();
}

/* D -> R at a call: the whole dirty object goes to the device (size bytes), IN stays R, OUT
 * becomes I at the call; after sync reading IN is free and reading OUT fetches the object. */
TEST_BLOCK_SIZES(lazy, call_flushes_dirty_objects_and_invalidates_outputs) {
    lazy(bs);
    int32_t *a = alloc(SIZE), *b = alloc(SIZE), *c = alloc(SIZE);
    for (size_t i = 0; i < N; i++) wr(&a[i], (int32_t)i);
    reset();
    CALL_OK(k_add, grid_for(N), c, a, b, N); /* b never written: not copied */
    expect_all(a, SIZE, 'R');
    expect_all(b, SIZE, 'R');
    expect_all(c, SIZE, 'I'); /* right at the call, before adsm_sync */
    EXPECT_BYTES(SIZE, 0);
    sync_ok();
    reset();
    cr_assert_eq(rd(&a[123]), 123); /* IN object after the call: no fault, no copy */
    EXPECT_QUIET();
    cr_assert_eq(rd(&c[N - 1]), (int32_t)(N - 1));
    EXPECT_BYTES(0, SIZE);
    EXPECT_FAULTS(1, 0);
    expect_all(c, SIZE, 'R');
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&c[i]), (int32_t)i);
    EXPECT_FAULTS(1, 0);
    adsm_shutdown();
}

/* Every dirty object goes to the device at any call, passed to the kernel or not. */
Test(lazy, call_flushes_every_dirty_object) {
    lazy(4096);
    int32_t *a = alloc(SIZE), *b = alloc(3 * KIB), *d = alloc(SIZE), *c = alloc(SIZE);
    wr(&a[5], 5);
    wr(&b[5], 5);
    cr_assert_eq(rd(&d[5]), 0); /* read only: stays R, not copied */
    reset();
    CALL_OK(k_fill, grid_for(N), c, N, 0);
    EXPECT_BYTES(SIZE + 3 * KIB, 0);
    expect_all(a, SIZE, 'R');
    expect_all(b, 3 * KIB, 'R');
    expect_all(d, SIZE, 'R');
    sync_ok();
    adsm_shutdown();
}

/* OUT and INOUT objects become I at the call; IN objects stay R. */
TEST_BLOCK_SIZES(lazy, out_and_inout_become_invalid_at_call) {
    lazy(bs);
    int32_t *x = alloc(SIZE), *c = alloc(SIZE), *a = alloc(SIZE);
    for (size_t i = 0; i < N; i++) wr(&x[i], 10 * (int32_t)i);
    CALL_OK(k_incr, grid_for(N), x, N);
    expect_all(x, SIZE, 'I');
    CALL_OK(k_add, grid_for(N), c, a, a, N);
    expect_all(c, SIZE, 'I');
    expect_all(a, SIZE, 'R');
    sync_ok();
    expect_all(x, SIZE, 'I'); /* sync itself fetches nothing */
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&x[i]), 10 * (int32_t)i + 1);
    adsm_shutdown();
}

/* I -> R: reading one element fetches the whole object, once. */
TEST_BLOCK_SIZES(lazy, read_of_invalid_fetches_whole_object) {
    lazy(bs);
    int32_t *c = alloc(SIZE);
    CALL_OK(k_fill, grid_for(N), c, N, 100);
    sync_ok();
    reset();
    cr_assert_eq(rd(&c[N / 3]), 100 + (int32_t)(N / 3));
    EXPECT_BYTES(0, SIZE);
    EXPECT_FAULTS(1, 0);
    expect_all(c, SIZE, 'R');
    expect_filled(c, 0, N, 100);
    EXPECT_BYTES(0, SIZE);
    EXPECT_FAULTS(1, 0);
    adsm_shutdown();
}

/* I -> D: a write fetches the whole object (the rest keeps the kernel's values) and dirties it;
 * the next call sends it back whole. */
TEST_BLOCK_SIZES(lazy, write_to_invalid_fetches_then_dirty) {
    lazy(bs);
    int32_t *c = alloc(SIZE);
    CALL_OK(k_fill, grid_for(N), c, N, 100);
    sync_ok();
    reset();
    wr(&c[7], -7);
    EXPECT_BYTES(0, SIZE);
    EXPECT_FAULTS(0, 1);
    expect_all(c, SIZE, 'D');
    cr_assert_eq(rd(&c[7]), -7);
    expect_filled(c, 8, N, 100);
    EXPECT_FAULTS(0, 1);
    reset();
    CALL_OK(k_incr, grid_for(N), c, N);
    EXPECT_BYTES(SIZE, 0);
    sync_ok();
    cr_assert_eq(rd(&c[7]), -6);
    cr_assert_eq(rd(&c[8]), 109);
    EXPECT_BYTES(SIZE, SIZE);
    adsm_shutdown();
}

/* A dirty OUT object is flushed before the kernel runs: bytes the kernel does not write keep the
 * CPU's values. */
Test(lazy, dirty_output_is_flushed_before_the_kernel) {
    lazy(4096);
    int32_t *c = alloc(SIZE);
    for (size_t i = 0; i < N; i++) wr(&c[i], -1);
    reset();
    CALL_OK(k_fill, grid_for(10), c + 100, 10, 5);
    EXPECT_BYTES(SIZE, 0);
    expect_all(c, SIZE, 'I');
    sync_ok();
    cr_assert_eq(rd(&c[0]), -1);
    expect_filled(c + 100, 0, 10, 5);
    cr_assert_eq(rd(&c[110]), -1);
    cr_assert_eq(rd(&c[N - 1]), -1);
    EXPECT_BYTES(SIZE, SIZE);
    adsm_shutdown();
}

/* Touching an output before adsm_sync waits for the kernel and sees its results. */
Test(lazy, touch_before_sync_sees_kernel_results) {
    lazy(4096);
    int32_t *c = alloc(SIZE);
    CALL_OK(k_fill, grid_for(N), c, N, 3);
    reset();
    cr_assert_eq(rd(&c[N - 1]), 3 + (int32_t)(N - 1));
    EXPECT_BYTES(0, SIZE);
    sync_ok();
    expect_filled(c, 0, N, 3);
    adsm_shutdown();
}

/* A dirty object freed before the call is not copied. */
Test(lazy, freed_dirty_object_is_not_flushed) {
    lazy(4096);
    int32_t *a = alloc(SIZE), *c = alloc(SIZE);
    wr(&a[0], 1);
    cr_assert_eq(adsm_free(a), ADSM_OK);
    reset();
    CALL_OK(k_fill, grid_for(N), c, N, 0);
    EXPECT_BYTES(0, 0);
    sync_ok();
    adsm_shutdown();
}

/* R -> R: an IN object stays valid on the CPU across calls; reading it never copies. */
Test(lazy, input_stays_readonly_across_calls) {
    lazy(4096);
    int32_t *a = alloc(SIZE), *c = alloc(SIZE);
    for (size_t i = 0; i < N; i++) wr(&a[i], 2 * (int32_t)i);
    CALL_OK(k_add, grid_for(N), c, a, a, N);
    sync_ok();
    reset();
    CALL_OK(k_add, grid_for(N), c, a, a, N);
    sync_ok();
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&a[i]), 2 * (int32_t)i);
    EXPECT_QUIET();
    expect_all(a, SIZE, 'R');
    cr_assert_eq(rd(&c[N - 1]), 4 * (int32_t)(N - 1));
    EXPECT_BYTES(0, SIZE);
    adsm_shutdown();
}

/* A call's outputs that lie side by side become Invalid in one protection change; an object
 * between two outputs stays as it was. */
Test(lazy, outputs_side_by_side_change_protection_together) {
    lazy(4096);
    const size_t n = 3 * 1024; /* 12 KiB: whole pages, so objects made in a row touch */
    int32_t *x = alloc(n * sizeof *x), *y = alloc(n * sizeof *y), *z = alloc(n * sizeof *z);
    cr_assert(y == x + n && z == y + n, "objects made one after another lie side by side (x %p, y %p, z %p): the "
              "test needs that", (void *)x, (void *)y, (void *)z);
    for (size_t i = 0; i < n; i++) wr(&y[i], 7);
    reset();
    CALL_OK(k_fill2, grid_for(n), x, z, n, 100); /* y, between them, is only flushed */
    EXPECT_PROTECTION_CHANGES(3);                /* y made ReadOnly, then x and z apart */
    expect_all(y, n * sizeof *y, 'R');
    sync_ok();
    reset();
    for (size_t i = 0; i < n; i++) cr_assert_eq(rd(&y[i]), 7);
    EXPECT_FAULTS(0, 0);
    expect_filled(x, 0, n, 100);
    for (size_t i = 0; i < n; i++) cr_assert_eq(rd(&z[i]), 100 - (int32_t)i);
    EXPECT_FAULTS(2, 0);
    reset();
    CALL_OK(k_fill2, grid_for(n), x, y, n, 300); /* x and y touch: one change for both */
    EXPECT_PROTECTION_CHANGES(1);
    expect_all(x, n * sizeof *x, 'I');
    expect_all(y, n * sizeof *y, 'I');
    expect_all(z, n * sizeof *z, 'R'); /* next to y, but no output */
    sync_ok();
    reset();
    cr_assert_eq(rd(&z[5]), 100 - 5);
    EXPECT_FAULTS(0, 0);
    expect_filled(x, 0, n, 300);
    for (size_t i = 0; i < n; i++) cr_assert_eq(rd(&y[i]), 300 - (int32_t)i);
    EXPECT_FAULTS(2, 0);
    adsm_shutdown();
}

/* A fault that fetches changes the protection once: the retry after the copy finds the unit
 * ReadOnly (a read) or Dirty (a write) and leaves it so. */
Test(lazy, a_fetching_fault_changes_protection_once) {
    lazy(4096);
    int32_t *c = alloc(SIZE), *d = alloc(SIZE);
    CALL_OK(k_fill2, grid_for(N), c, d, N, 9);
    sync_ok();
    reset();
    cr_assert_eq(rd(&c[N / 2]), 9 + (int32_t)(N / 2));
    EXPECT_FAULTS(1, 0);
    EXPECT_PROTECTION_CHANGES(1);
    expect_all(c, SIZE, 'R');
    reset();
    wr(&d[0], 5);
    EXPECT_FAULTS(0, 1);
    EXPECT_PROTECTION_CHANGES(1);
    expect_all(d, SIZE, 'D');
    cr_assert_eq(rd(&d[N - 1]), 9 - (int32_t)(N - 1)); /* the rest of d came home with the fault */
    adsm_shutdown();
}

/* A Dirty output at a call. Where copies read the host alias (cuda under shared addresses) it goes
 * straight to Invalid: one protection change, and the launch waits for none of its copies.
 * Elsewhere the flush reads the program's view, made ReadOnly first: two. Either way the kernel
 * sees the CPU's writes, and a write right after the call lands after the kernel's. */
Test(lazy, a_dirty_output_at_a_call) {
    lazy(4096);
    int32_t *x = alloc(SIZE);
    for (size_t i = 0; i < N; i++) wr(&x[i], (int32_t)i);
    int by_alias = adsm__host_dma(&adsm__rt, (uintptr_t)x) != (uintptr_t)x;
#ifdef TEST_ON_CUDA_DOUBLE
    if (!getenv("ADSM_CUDA_SAME_ADDRESS") && !getenv("ADSM_CUDA_DMA_VIEW"))
        cr_assert(by_alias, "shared addresses on the double: copies should read the host alias");
#endif
    reset();
    CALL_OK(k_incr, grid_for(N), x, N);
    EXPECT_PROTECTION_CHANGES(by_alias ? 1 : 2);
    EXPECT_BYTES(SIZE, 0);
    expect_all(x, SIZE, 'I');
    wr(&x[7], -1); /* waits for the kernel, fetches, then writes */
    sync_ok();
    cr_assert_eq(rd(&x[7]), -1);
    for (size_t i = 0; i < N; i++)
        if (i != 7) cr_assert_eq(rd(&x[i]), (int32_t)i + 1, "x[%zu] = %d", i, rd(&x[i]));
    adsm_shutdown();
}

/* The runtime's own accesses (adsm_memset, adsm_memcpy) to units that already allow them change
 * no protection; one that does not (a write to a ReadOnly object) changes it once. */
Test(lazy, runtime_accesses_change_protection_only_where_needed) {
    lazy(4096);
    int32_t *a = alloc(SIZE), *b = alloc(SIZE), *c = alloc(SIZE);
    for (size_t i = 0; i < N; i++) wr(&a[i], (int32_t)i);
    reset();
    cr_assert_eq(adsm_memset(a, 0, SIZE / 2), ADSM_OK, "%s", adsm_last_error()); /* a is Dirty */
    cr_assert_eq(adsm_memcpy(a + N / 2, b, SIZE / 2), ADSM_OK, "%s", adsm_last_error()); /* b ReadOnly */
    EXPECT_PROTECTION_CHANGES(0);
    EXPECT_FAULTS(0, 0);
    for (size_t i = 0; i < N; i++) cr_assert_eq(rd(&a[i]), 0, "a[%zu]", i);
    /* part of c (ReadOnly): a CPU write, now Dirty (the whole of it would be a device copy) */
    cr_assert_eq(adsm_memcpy(c, a, SIZE / 2), ADSM_OK, "%s", adsm_last_error());
    EXPECT_PROTECTION_CHANGES(1);
    expect_all(c, SIZE, 'D');
    adsm_shutdown();
}

TEST_BLOCK_SIZES(lazy, no_stale_read) {
    lazy(bs);
    scenario_no_stale_read();
    adsm_shutdown();
}

Test(lazy, interior_pointers_as_arguments) {
    lazy(4096);
    scenario_interior_pointers();
    adsm_shutdown();
}

/* The host backend under the lazy protocol: right results, all 'D', nothing counted. */
TEST_BLOCK_SIZES(lazy, host_backend_moves_nothing) { scenario_host_moves_nothing(ADSM_PROTOCOL_LAZY, bs); }

Test(lazy, host_backend_no_stale_read) {
    init(ADSM_BACKEND_HOST, ADSM_PROTOCOL_LAZY, 4096, 0);
    reset();
    scenario_no_stale_read();
    scenario_interior_pointers();
    EXPECT_QUIET();
    adsm_shutdown();
}
