/* tests/test_touch.c -- adsm_is_shared and adsm_touch, the calls for code that hands shared
 * memory to something adsm cannot see (adsm_mpi.h).
 *
 * adsm_is_shared answers for ranges in, across and beside objects, and never initialises adsm.
 * adsm_touch makes the bytes current on the host as CPU accesses would, with no fault: the exact
 * states and bytes moved per protocol (rolling follows single blocks), the kernel's results seen
 * without adsm_sync (batch brings a written object home), a write making the device's copy
 * stale so the next kernel gets the host's bytes, plain memory in the range left alone, and bad
 * arguments refused with a message. Emu backend; each Criterion test runs in its own process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>

#include "tests/protocol_common.h"

static void block_by_block(void) { test_block_exact = 1; }

TestSuite(touch, .timeout = 60, .init = block_by_block);

#define BS ((size_t)4096)

static const adsm_protocol_kind tracked[] = {ADSM_PROTOCOL_LAZY, ADSM_PROTOCOL_ROLLING};

Test(touch, is_shared_answers_for_ranges_in_across_and_beside_objects) {
    char plain[64] = {0};
    cr_assert_eq(adsm_is_shared(plain, sizeof plain), 0);
    cr_assert_eq(adsm_device_count(), 0, "adsm_is_shared initialised adsm");
    init(ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, BS, 0);
    char *a = alloc(3 * BS);
    cr_assert_eq(adsm_is_shared(plain, sizeof plain), 0);
    cr_assert_eq(adsm_is_shared(a, 1), 1);
    cr_assert_eq(adsm_is_shared(a + 3 * BS - 1, 1), 1, "the last byte");
    cr_assert_eq(adsm_is_shared(a + BS + 7, 10), 1, "an interior range");
    cr_assert_eq(adsm_is_shared(a - 100, 101), 1, "a range reaching into the object from below");
    cr_assert_eq(adsm_is_shared(a - 100, 100), 0, "a range ending where the object starts");
    cr_assert_eq(adsm_is_shared(a, 0), 0, "an empty range");
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(adsm_is_shared(a, 1), 0, "a freed object");
    adsm_shutdown();
}

/* Invalid -> touch for reading: 'R', the kernel's bytes, fetched once, no fault. */
static void read_invalid(adsm_protocol_kind protocol) {
    init(ADSM_BACKEND_EMU, protocol, BS, 0);
    const size_t n = 3 * BS / sizeof(int32_t);
    int32_t *c = alloc(n * sizeof *c);
    CALL_OK(k_fill, grid_for(n), c, n, 500);
    sync_ok();
    expect_all(c, n * sizeof *c, 'I');
    reset();
    /* the middle block only under rolling; lazy fetches the whole object */
    cr_assert_eq(adsm_touch(c + BS / sizeof(int32_t) + 5, 8, 0), ADSM_OK, "%s", adsm_last_error());
    EXPECT_STATE(c + BS / sizeof(int32_t), 'R');
    EXPECT_BYTES(0, protocol == ADSM_PROTOCOL_LAZY ? 3 * BS : BS);
    EXPECT_STATE(c, protocol == ADSM_PROTOCOL_LAZY ? 'R' : 'I');
    expect_filled(c, BS / sizeof(int32_t), 2 * BS / sizeof(int32_t), 500);
    EXPECT_FAULTS(0, 0);
    adsm_free(c);
    adsm_shutdown();
}

Test(touch, read_makes_invalid_blocks_readonly_without_a_fault) {
    for (size_t p = 0; p < 2; p++) read_invalid(tracked[p]);
}

/* Invalid -> touch for writing: 'D' with the kernel's bytes kept; CPU writes then fault no more,
 * and the next kernel gets them (the device copy was stale). */
static void write_invalid(adsm_protocol_kind protocol) {
    init(ADSM_BACKEND_EMU, protocol, BS, 0);
    const size_t n = 2 * BS / sizeof(int32_t);
    int32_t *c = alloc(n * sizeof *c);
    CALL_OK(k_fill, grid_for(n), c, n, 10);
    sync_ok();
    reset();
    cr_assert_eq(adsm_touch(c, BS, 1), ADSM_OK, "%s", adsm_last_error());
    EXPECT_STATE(c, 'D');
    EXPECT_BYTES(0, protocol == ADSM_PROTOCOL_LAZY ? 2 * BS : BS);
    wr(&c[3], -7);
    EXPECT_FAULTS(0, 0);
    CALL_OK(k_incr, grid_for(n), c, n);
    sync_ok();
    cr_assert_eq(rd(&c[3]), -6, "the kernel did not get the host's write");
    cr_assert_eq(rd(&c[4]), 15, "a byte the touch did not write lost the kernel's value");
    cr_assert_eq(rd(&c[n - 1]), 10 + (int32_t)n, "the untouched block");
    adsm_free(c);
    adsm_shutdown();
}

Test(touch, write_makes_blocks_dirty_and_keeps_their_bytes) {
    for (size_t p = 0; p < 2; p++) write_invalid(tracked[p]);
}

Test(touch, write_of_a_readonly_block_moves_nothing) {
    init(ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, BS, 0);
    int32_t *c = alloc(BS);
    EXPECT_STATE(c, 'R'); /* fresh objects are zero on both sides */
    reset();
    cr_assert_eq(adsm_touch(c, BS, 1), ADSM_OK);
    EXPECT_STATE(c, 'D');
    EXPECT_QUIET();
    adsm_free(c);
    adsm_shutdown();
}

/* batch tracks nothing: a CPU read before adsm_sync sees the host's old copy, a touch brings the
 * kernel's result home (once: adsm_sync then has nothing left to copy). */
Test(touch, batch_brings_a_kernel_output_home_before_sync) {
    init(ADSM_BACKEND_EMU, ADSM_PROTOCOL_BATCH, BS, 0);
    const size_t n = 2 * BS / sizeof(int32_t);
    int32_t *c = alloc(n * sizeof *c);
    CALL_OK(k_fill, grid_for(n), c, n, 77);
    reset();
    cr_assert_eq(adsm_touch(c + 1, 4, 0), ADSM_OK, "%s", adsm_last_error());
    expect_filled(c, 0, n, 77);
    sync_ok();
    cr_assert_eq(stats().d2h_bytes, 2 * BS, "the output came home %s", stats().d2h_bytes > 2 * BS ? "twice" : "partly");
    adsm_free(c);
    adsm_shutdown();
}

/* A range over two objects and the plain memory between them: both objects' blocks change, the
 * plain bytes are not written. */
Test(touch, ranges_across_objects_and_plain_memory) {
    init(ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, BS, 0);
    int32_t *a = alloc(BS), *b = alloc(BS);
    CALL_OK(k_fill, grid_for(BS / 4), a, BS / 4, 1);
    CALL_OK(k_fill, grid_for(BS / 4), b, BS / 4, 2);
    sync_ok();
    int32_t *lo = a < b ? a : b, *hi = a < b ? b : a;
    cr_assert_eq(adsm_touch(lo, (size_t)((char *)hi - (char *)lo) + 16, 1), ADSM_OK, "%s", adsm_last_error());
    EXPECT_STATE(lo, 'D');
    EXPECT_STATE(hi, 'D');
    expect_filled(a, 0, BS / 4, 1);
    expect_filled(b, 0, BS / 4, 2);
    adsm_free(a);
    adsm_free(b);
    adsm_shutdown();
}

/* A block whose eviction is queued (rolling size 2, eight blocks written in a row) is waited
 * for, not raced: the touch leaves it Dirty with the CPU's bytes, and a kernel sees them. */
Test(touch, write_of_blocks_being_evicted) {
    init(ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, BS, 2);
    const size_t n = 8 * BS / sizeof(int32_t);
    int32_t *c = alloc(n * sizeof *c);
    for (size_t i = 0; i < n; i++) wr(&c[i], (int32_t)i);
    cr_assert_gt(stats().evictions, 0, "nothing was evicted");
    cr_assert_eq(adsm_touch(c, n * sizeof *c, 1), ADSM_OK, "%s", adsm_last_error());
    CALL_OK(k_incr, grid_for(n), c, n);
    sync_ok();
    expect_filled(c, 0, n, 1);
    adsm_free(c);
    adsm_shutdown();
}

Test(touch, bad_arguments_are_refused_and_plain_memory_needs_no_runtime) {
    char plain[16] = {0};
    cr_assert_eq(adsm_touch(plain, sizeof plain, 1), ADSM_OK);
    cr_assert_eq(adsm_device_count(), 0, "adsm_touch on plain memory initialised adsm");
    cr_assert_eq(adsm_touch(NULL, 4, 0), ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "adsm_touch"), "message: %s", adsm_last_error());
    cr_assert_eq(adsm_touch((void *)(UINTPTR_MAX - 2), 8, 0), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_touch(NULL, 0, 0), ADSM_OK, "an empty range");
}
