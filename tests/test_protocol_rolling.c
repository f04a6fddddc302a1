/* tests/test_protocol_rolling.c -- the rolling protocol, one test per state transition, plus
 * eager eviction with a fixed and an adaptive rolling size, and the adaptive size's rule (grow on
 * regret, halve at a call after an epoch that did not need the window; issue 15); what a regret
 * holds, which blocks a pass evicts and what a two-pass initialisation sends, and how the costs
 * rolling measures decide what faults take and evictions send, with those costs fixed (issue 34).
 *
 * Rolling tracks single blocks. On the emu backend (device memory really separate) each test
 * asserts the exact state of each block and the exact bytes copied (h2d_bytes / d2h_bytes after
 * adsm_reset_stats), with 4 KiB and 64 KiB blocks. Transition tests fix a large rolling size so
 * no eviction interferes; the eviction tests set it. The last tests run the main scenarios on the
 * host backend, where nothing moves. Each Criterion test runs in its own process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "tests/protocol_common.h"
#include "tests/seccomp.h"

/* These tests follow single blocks (adsm_config.block_exact); the suite rolling_ahead at the end
 * tests what a fault takes beyond its block by default. */
static void block_by_block(void) { test_block_exact = 1; }

/* a protocol bug may loop on a fault forever: fail instead of hanging. A watchdog, not a speed
 * target: alone the slowest test takes 12 s, and 2-3x that on 2 cores beside other binaries */
TestSuite(rolling, .timeout = 120, .init = block_by_block);

#define NBLOCKS 5
#define TAIL ((size_t)1000) /* the last block holds 1000 bytes: copies must be clamped */
#define SIZE(bs) (NBLOCKS * (bs) + TAIL)
#define NELEM(bs) (SIZE(bs) / sizeof(int32_t))
#define AT(p, bs, blk) ((p) + (blk) * (bs) / sizeof(int32_t)) /* first element of block blk */

static void rolling(size_t bs) { init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 4096); }

/* I -> R at adsm_sync for a small result the CPU reads after each sync (protocol_common.h). */
TEST_BLOCK_SIZES(rolling, small_results_read_after_each_sync_come_home_in_it) {
    small_results_come_home_in_the_sync(ADSM_PROTOCOL_ROLLING, bs);
}

/* ... and one the CPU also writes before each kernel keeps coming home (protocol_common.h). */
TEST_BLOCK_SIZES(rolling, small_objects_written_and_read_each_round_come_home) {
    written_small_objects_keep_coming_home(ADSM_PROTOCOL_ROLLING, bs);
}

/* ... and one adsm_memcpy sends only part of still sends the rest (protocol_common.h). */
TEST_BLOCK_SIZES(rolling, a_twin_sent_in_part_sends_the_rest) { twins_sent_in_part_send_the_rest(ADSM_PROTOCOL_ROLLING, bs); }

/* ... at most ADSM__TWIN_BYTES of them beside twins (protocol_common.h). */
TEST_BLOCK_SIZES(rolling, twins_hold_a_bounded_size) { twins_are_bounded(ADSM_PROTOCOL_ROLLING, bs); }

/* No drain for flushes a sync saw done (protocol_common.h). */
TEST_BLOCK_SIZES(rolling, flushes_a_sync_saw_done_need_no_drain) { synced_flushes_need_no_drain(ADSM_PROTOCOL_ROLLING, bs); }

/* No system call for outputs Invalid already (protocol_common.h). */
TEST_BLOCK_SIZES(rolling, outputs_invalid_already_are_not_protected_again) {
    invalid_outputs_are_not_protected_again(ADSM_PROTOCOL_ROLLING, bs);
}

/* Expected state of each of the NBLOCKS + 1 blocks of p, e.g. "RRDRRR". */
static void expect_blocks(const int32_t *p, size_t bs, const char *states) {
    for (size_t k = 0; states[k]; k++) {
        char got = adsm_block_state(AT(p, bs, k));
        cr_assert_eq(got, states[k], "block %zu: got '%c', expected '%c' (%s)", k, got ? got : '0', states[k],
                     states);
    }
}

/* A fresh object is ReadOnly everywhere, reads are free, and a kernel reading it copies nothing. */
TEST_BLOCK_SIZES(rolling, fresh_object_is_readonly_and_never_copied) {
    rolling(bs);
    size_t n = NELEM(bs);
    int32_t *a = alloc(SIZE(bs)), *c = alloc(SIZE(bs));
    expect_blocks(a, bs, "RRRRRR");
    reset();
    for (size_t i = 0; i < n; i += 100) cr_assert_eq(rd(&a[i]), 0);
    EXPECT_QUIET();
    CALL_OK(k_add, grid_for(n), c, a, a, n);
    EXPECT_QUIET();
    expect_blocks(a, bs, "RRRRRR");
    sync_ok();
    cr_assert_eq(rd(&a[n - 1]), 0);
    EXPECT_QUIET();
    adsm_shutdown();
}

/* R -> D: a write dirties only its block (one write fault, no copy); D -> D and reads are free. */
TEST_BLOCK_SIZES(rolling, write_dirties_only_its_block) {
    rolling(bs);
    int32_t *a = alloc(SIZE(bs));
    reset();
    wr(AT(a, bs, 2) + 5, 7);
    EXPECT_FAULTS(0, 1);
    EXPECT_BYTES(0, 0);
    expect_blocks(a, bs, "RRDRRR");
    wr(AT(a, bs, 2), 1);
    cr_assert_eq(rd(AT(a, bs, 2) + 5), 7);
    cr_assert_eq(rd(AT(a, bs, 3)), 0);
    cr_assert_eq(rd(AT(a, bs, 1)), 0);
    EXPECT_FAULTS(0, 1);
    wr(AT(a, bs, 5), 9); /* the short last block */
    EXPECT_FAULTS(0, 2);
    EXPECT_BYTES(0, 0);
    expect_blocks(a, bs, "RRDRRD");
    adsm_shutdown();
}

/* D -> R at a call: exactly the dirty blocks go (the last one clamped to the object), IN blocks
 * stay R, OUT blocks become I at the call; reading one block of the output fetches that block. */
TEST_BLOCK_SIZES(rolling, call_flushes_dirty_blocks_and_invalidates_outputs) {
    rolling(bs);
    size_t n = NELEM(bs);
    int32_t *a = alloc(SIZE(bs)), *b = alloc(SIZE(bs)), *c = alloc(SIZE(bs));
    wr(AT(a, bs, 1), 11);
    wr(AT(a, bs, 3) + 1, 31);
    wr(&a[n - 1], 99);
    expect_blocks(a, bs, "RDRDRD");
    reset();
    CALL_OK(k_add, grid_for(n), c, a, b, n);
    EXPECT_BYTES(2 * bs + TAIL, 0);
    expect_blocks(a, bs, "RRRRRR");
    expect_blocks(b, bs, "RRRRRR");
    expect_blocks(c, bs, "IIIIII"); /* right at the call, before adsm_sync */
    sync_ok();
    reset();
    cr_assert_eq(rd(AT(a, bs, 1)), 11); /* IN object after the call: no fault, no copy */
    cr_assert_eq(rd(&a[n - 1]), 99);
    EXPECT_QUIET();
    cr_assert_eq(rd(AT(c, bs, 3) + 1), 31);
    EXPECT_BYTES(0, bs);
    EXPECT_FAULTS(1, 0);
    expect_blocks(c, bs, "IIIRII");
    cr_assert_eq(rd(&c[n - 1]), 99);
    EXPECT_BYTES(0, bs + TAIL);
    EXPECT_FAULTS(2, 0);
    expect_blocks(c, bs, "IIIRIR");
    for (size_t i = 0; i < n; i++) cr_assert_eq(rd(&c[i]), rd(&a[i]), "c[%zu]", i);
    EXPECT_BYTES(0, SIZE(bs));
    EXPECT_FAULTS(NBLOCKS + 1, 0);
    adsm_shutdown();
}

/* At a call, adjacent Dirty blocks of one object go in one copy (one protection change): blocks
 * 1-3 and the short last block make two copies, not four. */
TEST_BLOCK_SIZES(rolling, call_flushes_adjacent_dirty_blocks_in_one_copy) {
    rolling(bs);
    size_t n = NELEM(bs);
    int32_t *a = alloc(SIZE(bs)), *c = alloc(SIZE(bs));
    wr(AT(a, bs, 3), 3);
    wr(AT(a, bs, 1), 1);
    wr(AT(a, bs, 2), 2);
    wr(&a[n - 1], 9);
    reset();
    CALL_OK(k_add, grid_for(n), c, a, a, n);
    EXPECT_BYTES(3 * bs + TAIL, 0);
    cr_assert_eq(stats().h2d_copies, 2);
    expect_blocks(a, bs, "RRRRRR");
    sync_ok();
    cr_assert_eq(rd(AT(c, bs, 2)), 4);
    cr_assert_eq(rd(&c[n - 1]), 18);
    adsm_shutdown();
}

/* Every dirty block of every object goes at any call, passed to the kernel or not. */
Test(rolling, call_flushes_dirty_blocks_of_every_object) {
    rolling(4096);
    int32_t *a = alloc(SIZE(4096)), *b = alloc(3 * KIB), *c = alloc(SIZE(4096));
    wr(AT(a, 4096, 4), 1);
    wr(&b[0], 1);
    reset();
    CALL_OK(k_fill, grid_for(10), c, 10, 0);
    EXPECT_BYTES(4096 + 3 * KIB, 0);
    expect_blocks(a, 4096, "RRRRRR");
    cr_assert_eq(adsm_block_state(b), 'R');
    sync_ok();
    adsm_shutdown();
}

/* An object smaller than one block is one short unit: copies are its size. */
Test(rolling, object_smaller_than_a_block) {
    rolling(65536);
    const size_t n = 2500; /* 10000 bytes */
    int32_t *c = alloc(n * sizeof *c);
    reset();
    wr(&c[0], 1);
    CALL_OK(k_incr, grid_for(n), c, n);
    EXPECT_BYTES(10000, 0);
    sync_ok();
    cr_assert_eq(rd(&c[n - 1]), 1);
    cr_assert_eq(rd(&c[0]), 2);
    EXPECT_BYTES(10000, 10000);
    adsm_shutdown();
}

/* OUT and INOUT objects become I (every block) at the call; IN objects stay R. */
TEST_BLOCK_SIZES(rolling, out_and_inout_become_invalid_at_call) {
    rolling(bs);
    size_t n = NELEM(bs);
    int32_t *x = alloc(SIZE(bs)), *c = alloc(SIZE(bs)), *a = alloc(SIZE(bs));
    wr(AT(x, bs, 2), 5);
    CALL_OK(k_incr, grid_for(n), x, n);
    expect_blocks(x, bs, "IIIIII");
    CALL_OK(k_add, grid_for(n), c, a, a, n);
    expect_blocks(c, bs, "IIIIII");
    expect_blocks(a, bs, "RRRRRR");
    sync_ok();
    expect_blocks(x, bs, "IIIIII"); /* sync itself fetches nothing */
    cr_assert_eq(rd(AT(x, bs, 2)), 6);
    cr_assert_eq(rd(AT(x, bs, 2) + 1), 1);
    adsm_shutdown();
}

/* I -> R: reading one element fetches just its block. */
TEST_BLOCK_SIZES(rolling, read_of_invalid_fetches_one_block) {
    rolling(bs);
    size_t n = NELEM(bs);
    int32_t *c = alloc(SIZE(bs));
    CALL_OK(k_fill, grid_for(n), c, n, 100);
    sync_ok();
    reset();
    int32_t *p = AT(c, bs, 2) + 17;
    cr_assert_eq(rd(p), 100 + (int32_t)(p - c));
    EXPECT_BYTES(0, bs);
    EXPECT_FAULTS(1, 0);
    expect_blocks(c, bs, "IIRIII");
    cr_assert_eq(rd(AT(c, bs, 2)), 100 + (int32_t)(AT(c, bs, 2) - c)); /* same block: free */
    EXPECT_FAULTS(1, 0);
    expect_filled(c, 0, n, 100);
    EXPECT_BYTES(0, SIZE(bs));
    EXPECT_FAULTS(NBLOCKS + 1, 0);
    adsm_shutdown();
}

/* I -> D: a write fetches its block (the rest keeps the kernel's values) and dirties it; the next
 * call sends back only that block. */
TEST_BLOCK_SIZES(rolling, write_to_invalid_fetches_block_then_dirty) {
    rolling(bs);
    size_t n = NELEM(bs);
    int32_t *c = alloc(SIZE(bs));
    CALL_OK(k_fill, grid_for(n), c, n, 100);
    sync_ok();
    reset();
    int32_t *p = AT(c, bs, 1) + 3;
    wr(p, -7);
    EXPECT_BYTES(0, bs);
    EXPECT_FAULTS(0, 1);
    expect_blocks(c, bs, "IDIIII");
    cr_assert_eq(rd(p - 1), 100 + (int32_t)(p - 1 - c));
    cr_assert_eq(rd(p + 1), 100 + (int32_t)(p + 1 - c));
    EXPECT_FAULTS(0, 1);
    reset();
    CALL_OK(k_incr, grid_for(n), c, n);
    EXPECT_BYTES(bs, 0);
    sync_ok();
    cr_assert_eq(rd(p), -6);
    cr_assert_eq(rd(&c[0]), 101);
    EXPECT_BYTES(bs, 2 * bs);
    adsm_shutdown();
}

/* Dirty output blocks are flushed before the kernel: bytes it does not write keep CPU values. */
Test(rolling, dirty_output_is_flushed_before_the_kernel) {
    rolling(4096);
    size_t n = NELEM(4096);
    int32_t *c = alloc(SIZE(4096));
    for (size_t i = 0; i < n; i++) wr(&c[i], -1);
    reset();
    CALL_OK(k_fill, grid_for(10), c + 100, 10, 5);
    EXPECT_BYTES(SIZE(4096), 0);
    sync_ok();
    cr_assert_eq(rd(&c[0]), -1);
    expect_filled(c + 100, 0, 10, 5);
    cr_assert_eq(rd(&c[110]), -1);
    cr_assert_eq(rd(&c[n - 1]), -1);
    adsm_shutdown();
}

/* Touching an output before adsm_sync waits for the kernel and sees its results. */
Test(rolling, touch_before_sync_sees_kernel_results) {
    rolling(4096);
    size_t n = NELEM(4096);
    int32_t *c = alloc(SIZE(4096));
    CALL_OK(k_fill, grid_for(n), c, n, 3);
    reset();
    cr_assert_eq(rd(&c[n - 1]), 3 + (int32_t)(n - 1));
    EXPECT_BYTES(0, TAIL);
    sync_ok();
    adsm_shutdown();
}

/* ---- eviction ---------------------------------------------------------------------------------- */

/* Fixed rolling size 4: the fifth dirty block sends the oldest to the device (R, one block of
 * h2d), a rewrite of a dirty block evicts nothing, and the kernel sees every value. */
TEST_BLOCK_SIZES(rolling, fixed_rolling_size_evicts_oldest_dirty_block) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 4);
    const size_t nb = 8, n = nb * bs / sizeof(int32_t);
    int32_t *x = alloc(nb * bs);
    reset();
    for (size_t k = 0; k < 4; k++) wr(AT(x, bs, k), (int32_t)k + 1);
    expect_blocks(x, bs, "DDDDRRRR");
    cr_assert_eq(stats().evictions, 0);
    EXPECT_BYTES(0, 0);
    wr(AT(x, bs, 4), 5);
    cr_assert_eq(stats().evictions, 1);
    EXPECT_BYTES(bs, 0);
    expect_blocks(x, bs, "RDDDDRRR");
    wr(AT(x, bs, 5), 6);
    cr_assert_eq(stats().evictions, 2);
    EXPECT_BYTES(2 * bs, 0);
    expect_blocks(x, bs, "RRDDDDRR");
    wr(AT(x, bs, 3) + 1, 40); /* already dirty */
    cr_assert_eq(stats().evictions, 2);
    wr(AT(x, bs, 0) + 1, 10); /* evicted block written again: dirty again, evicts block 2 */
    cr_assert_eq(stats().evictions, 3);
    EXPECT_BYTES(3 * bs, 0);
    EXPECT_FAULTS(0, 7);
    expect_blocks(x, bs, "DRRDDDRR");
    cr_assert_eq(stats().rolling_regrets, 1, "block 0 was written again after its eviction");
    cr_assert_eq(stats().rolling_size, 4, "a fixed rolling size does not adapt");
    CALL_OK(k_incr, grid_for(n), x, n);
    EXPECT_BYTES(7 * bs, 0);
    cr_assert_eq(stats().evictions, 3);
    sync_ok();
    for (size_t k = 0; k < 6; k++) cr_assert_eq(rd(AT(x, bs, k)), (int32_t)k + 2, "block %zu", k);
    cr_assert_eq(rd(AT(x, bs, 0) + 1), 11);
    cr_assert_eq(rd(AT(x, bs, 3) + 1), 41);
    cr_assert_eq(rd(AT(x, bs, 7)), 1);
    adsm_shutdown();
}

#ifndef TEST_ON_REAL_CUDA
/* At the mapping limit (vm.max_map_count) the kernel refuses a protection change that needs a new
 * mapping, as an eviction's does in the middle of a run of Dirty blocks. The victim then stays
 * Dirty and queued (the window grows) and the write that asked for the eviction goes on. Before,
 * the victim left the FIFO first and, still Dirty, was sent by no release: a kernel read its old
 * bytes. Here seccomp refuses every mprotect to ReadOnly, on this thread only (a real driver's
 * calls from it might need one: not on a GPU). */
Test(rolling, an_eviction_the_mapping_limit_refuses_leaves_its_block_queued) {
    const size_t bs = 4096;
    setenv("ADSM_FAULT_ENGINE", "mprotect", 1); /* userfaultfd write-protects without mprotect */
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 3);
    int32_t *x = alloc(64 * bs);
    for (size_t k = 10; k < 13; k++) wr(AT(x, bs, k), 100);
    reset();
    refuse_system_call_with(SYS_mprotect, 2, PROT_READ, ENOMEM);
    wr(AT(x, bs, 30), 100); /* a fourth Dirty block: the oldest would go */
    cr_assert_eq(stats().evictions, 0, "an eviction the kernel refused was counted");
    adsm__object *o = adsm__object_of(adsm__tree_find(&adsm__rt.objects, (uintptr_t)x));
    cr_assert_not_null(o);
    size_t dirty = 0;
    for (size_t b = 0; b < o->nblocks; b++) {
        if (o->blocks[b].state != ADSM__DIRTY) continue;
        dirty++;
        cr_assert(o->blocks[b].in_fifo, "block %zu is Dirty outside the FIFO: no release would send it", b);
    }
    cr_assert_eq(dirty, 4, "%zu Dirty blocks", dirty);
    adsm_shutdown();
}
#endif

/* Adaptive (rolling size 0): the limit is rolling_step (2) per live object, so it grows with
 * allocations and shrinks on free. */
Test(rolling, adaptive_limit_is_step_times_live_objects) {
    const size_t bs = 4096;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *x = alloc(16 * bs);
    reset();
    for (size_t k = 0; k < 3; k++) wr(AT(x, bs, k), 1); /* limit 2 */
    cr_assert_eq(stats().evictions, 1);
    EXPECT_BYTES(bs, 0);
    cr_assert_eq(adsm_block_state(AT(x, bs, 0)), 'R');
    int32_t *y = alloc(bs); /* limit 4 */
    for (size_t k = 3; k < 5; k++) wr(AT(x, bs, k), 1);
    cr_assert_eq(stats().evictions, 1);
    wr(AT(x, bs, 5), 1);
    cr_assert_eq(stats().evictions, 2);
    cr_assert_eq(adsm_free(y), ADSM_OK); /* limit 2 again */
    wr(AT(x, bs, 6), 1);                 /* 5 dirty: 3 go */
    cr_assert_eq(stats().evictions, 5);
    EXPECT_BYTES(5 * bs, 0);
    expect_blocks(x, bs, "RRRRRDDR");
    adsm_shutdown();
}

/* rolling_step 3 with one object: limit 3. */
Test(rolling, adaptive_limit_follows_rolling_step) {
    const size_t bs = 4096;
    init_step(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0, 3);
    int32_t *x = alloc(16 * bs);
    reset();
    for (size_t k = 0; k < 3; k++) wr(AT(x, bs, k), 1);
    cr_assert_eq(stats().evictions, 0);
    wr(AT(x, bs, 3), 1);
    cr_assert_eq(stats().evictions, 1);
    expect_blocks(x, bs, "RDDDR");
    adsm_shutdown();
}

/* Sequential initialisation of three 1 MiB objects under the adaptive limit (6 blocks): every
 * block but the last 6 is evicted before the call, each block crosses once, and the kernel sees
 * all the data. */
TEST_BLOCK_SIZES(rolling, sequential_init_evicts_and_kernel_sees_all_data) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    const size_t n = MIB / sizeof(int32_t), total_blocks = 3 * MIB / bs;
    int32_t *a = alloc(MIB), *b = alloc(MIB), *c = alloc(MIB);
    reset();
    for (size_t i = 0; i < n; i++) wr(&a[i], (int32_t)i);
    for (size_t i = 0; i < n; i++) wr(&b[i], 2 * (int32_t)i);
    for (size_t i = 0; i < n; i++) wr(&c[i], 1);
    adsm_stats s = stats();
    cr_assert_gt(s.evictions, 0);
    cr_assert_eq(s.evictions, total_blocks - 6);
    cr_assert_eq(s.h2d_bytes, s.evictions * bs);
    cr_assert_eq(s.write_faults, total_blocks);
    cr_assert_eq(s.rolling_regrets, 0, "no block is written twice");
    cr_assert_eq(s.rolling_size, 6, "sequential writes keep the window at its floor");
    cr_assert_eq(adsm_block_state(a), 'R');
    cr_assert_eq(adsm_block_state(&c[n - 1]), 'D');
    CALL_OK(k_sum3, grid_for(n), c, a, b, n);
    EXPECT_BYTES(3 * MIB, 0);
    sync_ok();
    for (size_t i = 0; i < n; i++) cr_assert_eq(rd(&c[i]), 1 + 3 * (int32_t)i, "c[%zu]", i);
    EXPECT_BYTES(3 * MIB, MIB);
    adsm_shutdown();
}

/* ---- the adaptive rolling size (issue 15) ------------------------------------------------------ */

/* Regret grows the window: block 0, evicted as the third block got dirty, is written again
 * before any call. The window grows by at least its size (2 -> 4), so nothing more is evicted. */
Test(rolling, regret_grows_the_window) {
    const size_t bs = 4096;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *x = alloc(16 * bs);
    reset();
    cr_assert_eq(stats().rolling_size, 2);
    for (size_t k = 0; k < 3; k++) wr(AT(x, bs, k), 1);
    cr_assert_eq(stats().evictions, 1);
    cr_assert_eq(stats().rolling_regrets, 0);
    wr(AT(x, bs, 0) + 1, 2); /* regret: block 0 goes to the device again at the call */
    adsm_stats s = stats();
    cr_assert_eq(s.rolling_regrets, 1);
    cr_assert_eq(s.rolling_size, 4);
    cr_assert_eq(s.evictions, 1, "the grown window holds blocks 0, 1 and 2");
    expect_blocks(x, bs, "DDDR");
    wr(AT(x, bs, 3), 1);
    cr_assert_eq(stats().evictions, 1);
    adsm_shutdown();
}

/* A write to a block evicted before the last call is no regret: that call had to send it. */
Test(rolling, write_after_a_call_is_no_regret) {
    const size_t bs = 4096;
    const size_t n = 16 * bs / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *x = alloc(16 * bs), *y = alloc(bs);
    for (size_t k = 0; k < 6; k++) wr(AT(x, bs, k), 1); /* floor 4 (2 objects): blocks 0, 1 evicted */
    cr_assert_eq(stats().evictions, 2);
    CALL_OK(k_add, grid_for(bs / sizeof(int32_t)), y, x, x, bs / sizeof(int32_t));
    sync_ok();
    wr(AT(x, bs, 0), 5);
    cr_assert_eq(stats().rolling_regrets, 0);
    cr_assert_eq(stats().rolling_size, 4);
    CALL_OK(k_incr, grid_for(n), x, n);
    sync_ok();
    cr_assert_eq(rd(AT(x, bs, 0)), 6);
    adsm_shutdown();
}

/* Halving at a call: after an epoch with regrets the window is kept; after an epoch that used
 * less than half of it without regret it halves, never below the floor. */
Test(rolling, window_halves_when_an_epoch_did_not_need_it) {
    const size_t bs = 4096;
    const size_t nb = 64, n = nb * bs / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *x = alloc(nb * bs);
    for (int sweep = 0; sweep < 2; sweep++) /* the second sweep regrets: the window grows to 64 */
        for (size_t k = 0; k < nb; k++) wr(AT(x, bs, k), sweep);
    cr_assert_eq(stats().rolling_size, nb);
    CALL_OK(k_incr, grid_for(n), x, n); /* regrets in this epoch: kept */
    sync_ok();
    cr_assert_eq(stats().rolling_size, nb);
    static const size_t expected[] = {32, 16, 8, 4, 2, 2};
    for (size_t step = 0; step < sizeof expected / sizeof expected[0]; step++) {
        wr(AT(x, bs, 5), 1); /* one dirty block per epoch, as in a stencil */
        CALL_OK(k_incr, grid_for(n), x, n);
        sync_ok();
        cr_assert_eq(stats().rolling_size, expected[step], "after call %zu", step + 1);
    }
    adsm_shutdown();
}

/* A window grown for one object's repeated sweeps is at most twice what that epoch dirtied, and
 * epochs that evict without regret (sequential initialisation of a larger object) shrink it back
 * to the floor, so eviction overlaps the CPU's writes again. */
Test(rolling, harmless_evictions_shrink_the_window) {
    const size_t bs = 4096;
    const size_t nx = 16, nz = 64, n = nz * bs / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *x = alloc(nx * bs), *z = alloc(nz * bs), *y = alloc(nz * bs);
    for (int sweep = 0; sweep < 2; sweep++)
        for (size_t k = 0; k < nx; k++) wr(AT(x, bs, k), sweep);
    size_t grown = stats().rolling_size;
    cr_assert(grown > nx / 2 && grown <= 2 * nx, "grown to %zu", grown);
    CALL_OK(k_add, grid_for(n), y, z, z, n);
    sync_ok();
    cr_assert_eq(stats().rolling_size, grown, "an epoch with regrets keeps the window");
    static const size_t expected[] = {16, 8, 6, 6}; /* floor: 2 per object */
    for (size_t epoch = 0; epoch < sizeof expected / sizeof expected[0]; epoch++) {
        for (size_t k = 0; k < nz; k++) wr(AT(z, bs, k), (int32_t)epoch);
        CALL_OK(k_add, grid_for(n), y, z, z, n);
        sync_ok();
        cr_assert_eq(stats().rolling_size, expected[epoch], "after epoch %zu", epoch);
    }
    cr_assert_eq(stats().rolling_regrets, nx - 6, "the blocks the first sweep evicted");
    cr_assert_eq(rd(AT(y, bs, 63)), 6);
    adsm_shutdown();
}

/* The window never exceeds the blocks of the live objects, and shrinks with them on free. */
Test(rolling, window_is_bounded_by_live_blocks) {
    const size_t bs = 4096;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *x = alloc(40 * bs), *y = alloc(8 * bs);
    for (int sweep = 0; sweep < 3; sweep++)
        for (size_t k = 0; k < 40; k++) wr(AT(x, bs, k), sweep);
    cr_assert_eq(stats().rolling_size, 48, "x and y have 48 blocks");
    cr_assert_eq(adsm_free(x), ADSM_OK);
    cr_assert_eq(stats().rolling_size, 8, "y alone has 8 blocks");
    cr_assert_eq(adsm_free(y), ADSM_OK);
    cr_assert_eq(stats().rolling_size, 2);
    adsm_shutdown();
}

/* Under valgrind (tests/valgrind_protocol.sh) every fault is a slow signal delivery: the
 * random-increment test runs at an eighth of its size there, with the same proportions. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
/* `count` increments of random elements of x (and of the model ref), drawn by xorshift64 from *r. */
static void increment_at_random(int32_t *x, int32_t *ref, size_t n, size_t count, uint64_t *r) {
    for (size_t k = 0; k < count; k++) {
        *r ^= *r << 13;
        *r ^= *r >> 7;
        *r ^= *r << 17;
        size_t i = (size_t)(*r % n);
        wr(&x[i], rd(&x[i]) + 1);
        ref[i]++;
    }
}

static int under_valgrind(void) {
#ifdef RUNNING_ON_VALGRIND
    return RUNNING_ON_VALGRIND != 0;
#else
    return 0;
#endif
}

static size_t test_scale(void) { return under_valgrind() ? 8 : 1; }

/* The program: zero a 64 MiB object, call a kernel, make 262,144 random increments into
 * it. Under the paper's fixed rule (2 per object) nearly every increment evicted a block written
 * again moments later (479 GB for 64 MiB at 2 MiB blocks). The increments must move at most twice
 * the object (fetching it is once), the next call at most half of it again in wasted evictions,
 * and every value must be right. Checked at 4 KiB, 64 KiB and 2 MiB blocks. */
typedef struct block_mode {
    size_t bs;
    int exact; /* adsm_config.block_exact */
} block_mode;

ParameterizedTestParameters(rolling, random_increments_do_not_thrash) {
    static block_mode modes[] = {{4096, 1}, {65536, 1}, {2 * MIB, 1}, {4096, 0}, {65536, 0}};
    return cr_make_param_array(block_mode, modes, sizeof modes / sizeof modes[0]);
}

ParameterizedTest(block_mode *mode, rolling, random_increments_do_not_thrash) {
    const size_t bs = mode->bs, size = 64 * MIB / test_scale(), n = size / sizeof(int32_t);
    const size_t increments = 262144 / test_scale();
    test_block_exact = mode->exact;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *x = alloc(size);
    int32_t *ref = calloc(n, sizeof *ref);
    cr_assert_not_null(ref);
    /* the CPU zeroes it: stores, not memset, whose replacement under valgrind never returns from
     * a protected shared page here (plain runs are fine with memset) */
    for (size_t i = 0; i < n; i++) wr(&x[i], 0);
    CALL_OK(k_incr, grid_for(n), x, n);
    sync_ok();
    reset();
    uint64_t r = 88172645463325252ull; /* xorshift64: the same increments on every run */
    increment_at_random(x, ref, n, increments, &r);
    adsm_stats s = stats();
    cr_assert_leq(s.h2d_bytes + s.d2h_bytes, 2 * size, "%zu-byte blocks: the increments moved %llu bytes", bs,
                  (unsigned long long)(s.h2d_bytes + s.d2h_bytes));
    cr_assert_leq(s.evictions, 2 * (size / bs), "%llu evictions", (unsigned long long)s.evictions);
    CALL_OK(k_incr, grid_for(n), x, n);
    sync_ok();
    s = stats();
    cr_assert_leq(s.h2d_bytes, size + size / 2, "%zu-byte blocks: %llu bytes to the device for one object", bs,
                  (unsigned long long)s.h2d_bytes);
    size_t wrong = 0, first_wrong = n;
    for (size_t i = 0; i < n; i++) {
        if (rd(&x[i]) == ref[i] + 2) continue;
        if (!wrong++) first_wrong = i;
    }
    cr_assert_eq(wrong, 0, "%zu wrong elements, the first x[%zu]", wrong, first_wrong);
    free(ref);
    adsm_shutdown();
}

/* ---- scenarios --------------------------------------------------------------------------------- */

TEST_BLOCK_SIZES(rolling, no_stale_read) {
    rolling(bs);
    scenario_no_stale_read();
    adsm_shutdown();
}

Test(rolling, no_stale_read_adaptive) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 0);
    scenario_no_stale_read();
    scenario_interior_pointers();
    adsm_shutdown();
}

Test(rolling, interior_pointers_as_arguments) {
    rolling(4096);
    scenario_interior_pointers();
    adsm_shutdown();
}

/* The host backend under the rolling protocol: right results, all 'D', nothing counted. */
TEST_BLOCK_SIZES(rolling, host_backend_moves_nothing) { scenario_host_moves_nothing(ADSM_PROTOCOL_ROLLING, bs); }

Test(rolling, host_backend_no_stale_read) {
    init(ADSM_BACKEND_HOST, ADSM_PROTOCOL_ROLLING, 4096, 0);
    reset();
    scenario_no_stale_read();
    scenario_interior_pointers();
    EXPECT_QUIET();
    cr_assert_eq(stats().evictions, 0);
    adsm_shutdown();
}

/* Regression (found by fuzz/fuzz_protocol.c): one store spanning two blocks needs both Dirty at
 * once; a rolling size of 1 made them evict each other forever. The limit is at least 2 (1 is
 * refused: test_config.c::rolling_size_1_in_the_config_is_refused), and 2 is enough. */
Test(rolling, store_across_blocks_with_the_smallest_rolling_size, .timeout = 120) {
    adsm_config cfg = {0};
    cfg.backend = TEST_DEVICE_BACKEND;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = 4096;
    cfg.rolling_size = 2;
    cfg.emu_memory = (size_t)256 << 20; /* small, like the other tests: fits valgrind's address space */
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    unsigned char *a = adsm_alloc(2 * 4096);
    static unsigned char src[64];
    memset(src, 1, sizeof src);
    volatile size_t n = 32; /* not a constant: a real (unaligned, possibly vector) copy */
    memcpy(a + 4096 - 16, src, n);
    cr_assert_eq(a[4095], 1);
    cr_assert_eq(a[4096], 1);
    adsm_shutdown();
}

/* A CPU write to a block whose eager eviction may still be copying its pages waits for that copy
 * first (white-box: the unit's flush ticket), so the copy never reads a page being written. */
Test(rolling, write_to_an_evicted_block_waits_for_its_copy) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 4096, 2);
    int32_t *p = alloc(4 * 4096);
    wr(&p[0], 1);
    wr(&p[1024], 2);
    wr(&p[2048], 3); /* a third dirty block: block 0 is evicted asynchronously */
    adsm__object *o = adsm__object_of(adsm__tree_find(&adsm__rt.objects, (uintptr_t)p));
    cr_assert_not_null(o);
    EXPECT_STATE(p, 'R');
    cr_assert(adsm__flushing(&adsm__rt, &o->blocks[0]), "the eviction is marked on its unit");
    wr(&p[1], 5);
    cr_assert(!adsm__flushing(&adsm__rt, &o->blocks[0]), "the write fault waited for the copy, which settled the mark");
    EXPECT_STATE(p, 'D');
    CALL_OK(k_incr, grid_for(4096), p, (size_t)4096);
    sync_ok();
    cr_assert_eq(rd(&p[0]), 2);
    cr_assert_eq(rd(&p[1]), 6);
    cr_assert_eq(rd(&p[1024]), 3);
    cr_assert_eq(rd(&p[2048]), 4);
    adsm_shutdown();
}

/* ---- what a fault takes beyond its block (the default; adsm_config.block_exact turns it off) ---- */
/* With blocks smaller than a huge page, rolling's per-block faults cost up to 2.9x lazy's time on
 * dense patterns (issue 15): a fetch takes the Invalid blocks of its huge page, a sequential
 * write phase makes runs of blocks Dirty (write-ahead), and once the window holds most live
 * blocks a write fault takes its huge page. Each test fails when the fault takes its block alone,
 * and checks every value. Costs are fixed at "nothing measured" (tests/protocol_common.h), where
 * runs grow to a huge page; the suite rolling_costs tests how costs change that. */
TestSuite(rolling_ahead, .timeout = 120);

#define AHEAD_BS ((size_t)64 << 10)

/* The CPU writes base + i into every element, in order; returns the write faults it took. */
static uint64_t write_in_order(int32_t *x, size_t n, int32_t base) {
    uint64_t before = stats().write_faults;
    for (size_t i = 0; i < n; i++) wr(&x[i], base + (int32_t)i);
    return stats().write_faults - before;
}

static void expect_values(const int32_t *x, size_t n, int32_t base) {
    for (size_t i = 0; i < n; i++)
        if (rd(&x[i]) != base + (int32_t)i) cr_assert_fail("x[%zu] = %d, expected %d", i, rd(&x[i]), base + (int32_t)i);
}

/* Sequential writes double their run up to a huge page (32 blocks of 64 KiB): a handful of faults
 * per 2 MiB instead of 32, the same bytes (each block sent once), also in a second pass whose
 * blocks were flushed asynchronously at the call (their copies must be known done first). */
Test(rolling_ahead, sequential_writes_make_runs_of_blocks_dirty) {
    const size_t size = 32 * MIB, n = size / sizeof(int32_t), nblocks = size / AHEAD_BS;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, AHEAD_BS, 0);
    int32_t *x = alloc(size), *y = alloc(size), *z = alloc(size);
    for (int pass = 0; pass < 2; pass++) {
        reset();
        uint64_t faults = write_in_order(x, n, 100 * pass);
        cr_assert_leq(faults, nblocks / 8, "pass %d: %llu write faults for %zu blocks", pass,
                      (unsigned long long)faults, nblocks);
        cr_assert_gt(stats().evictions, 0, "pass %d: the window still rolls", pass);
        CALL_OK(k_add, grid_for(n), y, x, z, n);
        sync_ok();
        cr_assert_eq(stats().h2d_bytes, size, "pass %d: every block sent once", pass);
        expect_values(y, n, 100 * pass);
    }
    adsm_shutdown();
}

/* Arrays filled side by side (a[i] = ..., b[i] = ..., as vecadd does) are each a sequential
 * phase: every object keeps its own run, so the faults stay a handful per 2 MiB of each, each
 * block is sent once, and the window keeps both runs (no regret). With one run for the whole
 * runtime every fault was a new run of one block. */
Test(rolling_ahead, arrays_filled_side_by_side_each_make_runs) {
    const size_t size = 16 * MIB, n = size / sizeof(int32_t), nblocks = size / AHEAD_BS;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, AHEAD_BS, 0);
    int32_t *a = alloc(size), *b = alloc(size), *c = alloc(size);
    for (int pass = 0; pass < 2; pass++) {
        reset();
        for (size_t i = 0; i < n; i++) {
            wr(&a[i], (int32_t)i + pass);
            wr(&b[i], 3 * (int32_t)i);
        }
        adsm_stats s = stats();
        cr_assert_leq(s.write_faults, 2 * nblocks / 8, "pass %d: %llu write faults for 2 x %zu blocks", pass,
                      (unsigned long long)s.write_faults, nblocks);
        cr_assert_gt(s.evictions, 0, "pass %d: the window still rolls", pass);
        cr_assert_eq(s.rolling_regrets, 0, "pass %d: no run was evicted before it was written", pass);
        CALL_OK(k_add, grid_for(n), c, a, b, n);
        sync_ok();
        cr_assert_eq(stats().h2d_bytes, 2 * size, "pass %d: every block sent once", pass);
        for (size_t i = 0; i < n; i++)
            if (rd(&c[i]) != 4 * (int32_t)i + pass) cr_assert_fail("c[%zu] = %d", i, rd(&c[i]));
    }
    adsm_shutdown();
}

/* A read of an Invalid block fetches the Invalid blocks of its huge page in one copy; the other
 * blocks there are then read without a fault. */
Test(rolling_ahead, read_fetches_the_huge_page) {
    const size_t size = 8 * MIB, n = size / sizeof(int32_t), per_page = 2 * MIB / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, AHEAD_BS, 0);
    int32_t *x = alloc(size);
    cr_assert_eq((uintptr_t)x % (2 * MIB), 0, "objects of 2 MiB and more start on a huge page here");
    CALL_OK(k_fill, grid_for(n), x, n, 7);
    sync_ok();
    reset();
    cr_assert_eq(rd(&x[per_page + 5 * AHEAD_BS / sizeof(int32_t)]), 7 + (int32_t)(per_page + 5 * AHEAD_BS / 4));
    adsm_stats s = stats();
    cr_assert_eq(s.d2h_bytes, 2 * MIB, "the huge page's blocks came home: %llu bytes", (unsigned long long)s.d2h_bytes);
    if (fetched_in_place(x, size)) /* locked pages (DMA) or the host alias */
        cr_assert_eq(s.d2h_moved_bytes + s.d2h_forced_bytes, 0, "written in place, no filler copy");
    else /* under valgrind, which refuses MREMAP_DONTUNMAP, by a move without it (copy.h) */
        cr_assert_eq(s.d2h_moved_bytes, 2 * MIB, "in whole huge pages: one mremap, nothing bounced");
    if (under_valgrind()) cr_assert(adsm__rt.fill.plain_moves, "valgrind took MREMAP_DONTUNMAP");
    for (size_t i = per_page; i < 2 * per_page; i++) cr_assert_eq(rd(&x[i]), 7 + (int32_t)i);
    cr_assert_eq(stats().read_faults, 1, "the rest of the huge page was already home");
    cr_assert_eq(adsm_block_state(x), 'I', "other huge pages stay on the device");
    expect_values(x, n, 7);
    adsm_shutdown();
}

/* A sequential read pass reads ahead, at any block size: with 2 MiB blocks each fetch fault takes
 * twice the blocks the last one did, so 32 MiB come home in 5 faults, not 16, and never more than
 * the object (lazy's bytes). Reads that jump take their block alone. Every value right. */
Test(rolling_ahead, sequential_reads_read_ahead_and_jumps_do_not) {
    const size_t bs = 2 * MIB, size = 32 * MIB, n = size / sizeof(int32_t), per_block = bs / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *x = alloc(size);
    CALL_OK(k_fill, grid_for(n), x, n, 7);
    sync_ok();
    reset();
    expect_values(x, n, 7);
    adsm_stats s = stats();
    cr_assert_eq(s.read_faults, 5, "1 + 2 + 4 + 8 blocks, then the last: %llu faults", (unsigned long long)s.read_faults);
    cr_assert_eq(s.d2h_bytes, size, "no more than the object: %llu bytes", (unsigned long long)s.d2h_bytes);
    CALL_OK(k_fill, grid_for(n), x, n, 9);
    sync_ok();
    reset();
    const size_t jumps[] = {0, 8, 3, 12};
    for (size_t j = 0; j < sizeof jumps / sizeof *jumps; j++)
        cr_assert_eq(rd(&x[jumps[j] * per_block + 5]), 9 + (int32_t)(jumps[j] * per_block + 5));
    s = stats();
    cr_assert_eq(s.d2h_bytes, 4 * bs, "reads that jump take their block alone: %llu bytes", (unsigned long long)s.d2h_bytes);
    expect_values(x, n, 9);
    adsm_shutdown();
}

/* A store into a kernel's output with no read before it (a spot update, stencil3d's emitter) is
 * the object's first fetch of the epoch and takes its block alone; a second store in that epoch
 * takes the Invalid blocks of its huge page, as a read does. After the next call, the first store
 * is alone again. Every value right. */
Test(rolling_ahead, a_lone_store_fetches_its_block_alone) {
    const size_t size = 8 * MIB, n = size / sizeof(int32_t), per_block = AHEAD_BS / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, AHEAD_BS, 0);
    int32_t *x = alloc(size);
    for (int32_t round = 0; round < 2; round++) {
        CALL_OK(k_fill, grid_for(n), x, n, 7 + round);
        sync_ok();
        reset();
        size_t spot = 2 * MIB / sizeof(int32_t) + 3 * per_block + 11; /* in the second huge page */
        wr(&x[spot], -1);
        adsm_stats s = stats();
        cr_assert_eq(s.d2h_bytes, AHEAD_BS, "round %d: %llu bytes came home for one store", round,
                     (unsigned long long)s.d2h_bytes);
        cr_assert_eq(adsm_block_state(&x[spot + per_block]), 'I', "the next block came home too");
        /* a second store: the Invalid blocks of its huge page next to it, up to the Dirty block 3 */
        wr(&x[spot + 5 * per_block], -2);
        cr_assert_eq(stats().d2h_bytes, AHEAD_BS + 2 * MIB - 4 * AHEAD_BS,
                     "round %d: the second store did not take its huge page: %llu bytes", round,
                     (unsigned long long)stats().d2h_bytes);
        for (size_t i = 0; i < n; i++) {
            int32_t want = i == spot ? -1 : i == spot + 5 * per_block ? -2 : 7 + round + (int32_t)i;
            if (rd(&x[i]) != want) cr_assert_fail("round %d: x[%zu] = %d, expected %d", round, i, rd(&x[i]), want);
        }
    }
    adsm_shutdown();
}

/* The same read with adsm_config.block_exact fetches its block alone. */
Test(rolling_ahead, block_exact_fetches_one_block) {
    const size_t size = 8 * MIB, n = size / sizeof(int32_t);
    test_block_exact = 1;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, AHEAD_BS, 0);
    int32_t *x = alloc(size);
    CALL_OK(k_fill, grid_for(n), x, n, 7);
    sync_ok();
    reset();
    cr_assert_eq(rd(&x[5]), 12);
    cr_assert_eq(stats().d2h_bytes, AHEAD_BS);
    cr_assert_eq(write_in_order(x, n, 1), size / AHEAD_BS, "one write fault per block");
    adsm_shutdown();
}

/* Once regrets grew the window to hold the object, a write fault takes the object's idle
 * ReadOnly blocks and a fetch its Invalid ones: lazy's few faults, not one per block. */
Test(rolling_ahead, dense_random_writes_take_runs_of_the_object) {
    const size_t size = 16 * MIB, n = size / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, AHEAD_BS, 0);
    int32_t *x = alloc(size);
    int32_t *ref = calloc(n, sizeof *ref);
    cr_assert_not_null(ref);
    uint64_t r = 88172645463325252ull;
    for (int epoch = 0; epoch < 2; epoch++) {
        reset();
        increment_at_random(x, ref, n, 65536, &r);
        adsm_stats s = stats();
        if (epoch == 1) {
            cr_assert_geq(s.rolling_size, size / AHEAD_BS / 2, "the window grew to the object");
            cr_assert_leq(s.write_faults, 2 * size / (2 * MIB), "%llu write faults", (unsigned long long)s.write_faults);
            cr_assert_leq(s.read_faults, 2, "%llu read faults", (unsigned long long)s.read_faults);
        }
        CALL_OK(k_incr, grid_for(n), x, n);
        sync_ok();
        for (size_t i = 0; i < n; i++) ref[i]++;
    }
    for (size_t i = 0; i < n; i++)
        if (rd(&x[i]) != ref[i]) cr_assert_fail("x[%zu] = %d, expected %d", i, rd(&x[i]), ref[i]);
    free(ref);
    adsm_shutdown();
}

/* A sequential pass's runs of a huge page end on huge-page boundaries: past the first huge page
 * every write fault falls on a block at a boundary (runs doubling from one block used to end at
 * 31, 63, ..., and every protection change split two 2 MiB mappings). */
Test(rolling_ahead, runs_end_on_huge_page_boundaries) {
    const size_t size = 16 * MIB, per_block = AHEAD_BS / sizeof(int32_t), hp = 2 * MIB / AHEAD_BS;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, AHEAD_BS, 0);
    int32_t *x = alloc(size);
    cr_assert_eq((uintptr_t)x % (2 * MIB), 0);
    uint64_t faults = stats().write_faults;
    size_t past_first = 0;
    for (size_t b = 0; b < size / AHEAD_BS; b++) {
        for (size_t i = 0; i < per_block; i += 1024) wr(&x[b * per_block + i], (int32_t)b);
        uint64_t now = stats().write_faults;
        if (now != faults && b >= hp) {
            cr_assert_eq(b % hp, 0, "a write fault at block %zu, inside a huge page", b);
            past_first++;
        }
        faults = now;
    }
    cr_assert_eq(past_first, size / (2 * MIB) - 1, "one fault per huge page past the first");
    adsm_shutdown();
}

/* A fixed ADSM_ROLLING_SIZE stays the window: write-ahead runs hold at most half of it. */
Test(rolling_ahead, fixed_rolling_size_bounds_write_ahead) {
    const size_t size = 4 * MIB, n = size / sizeof(int32_t), nblocks = size / AHEAD_BS;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, AHEAD_BS, 4);
    int32_t *x = alloc(size);
    for (size_t i = 0; i < n; i++) {
        wr(&x[i], (int32_t)i);
        if (i % (AHEAD_BS / sizeof(int32_t)) != 0) continue;
        size_t dirty = 0;
        for (size_t b = 0; b < nblocks; b++) dirty += adsm_block_state(&x[b * AHEAD_BS / sizeof(int32_t)]) == 'D';
        cr_assert_leq(dirty, 4, "%zu dirty blocks with ADSM_ROLLING_SIZE=4", dirty);
    }
    cr_assert_lt(stats().write_faults, nblocks, "runs of two blocks");
    cr_assert_geq(stats().write_faults, nblocks / 2);
    adsm_shutdown();
}

/* ---- the costs that decide (issue 34) -------------------------------------------------------- */
/* How long a sequential run grows and how many blocks an eviction sends are decided from what a
 * fault, an eviction and a copy cost, measured as the program runs (adsm_impl/protocol_rolling.h). The
 * tests fix those costs (adsm__rolling_costs_pin) and count what the rule then does: faults,
 * copies, Dirty blocks. Nothing here measures time. */
TestSuite(rolling_costs, .timeout = 120);

#define COSTS_BS ((size_t)64 << 10)
#define COSTS_COPY_PS 1000 /* 1 GB/s: a 64 KiB block copies in 65.5 us */

/* A 32 MiB object written in order, under the given fault cost; returns its write faults. Each
 * block is sent once and every value is right. */
static uint64_t sweep_with_fault_cost(uint64_t fault_ns, uint64_t *evictions) {
    const size_t size = 32 * MIB, n = size / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, COSTS_BS, 0);
    adsm__rolling_costs_pin(&adsm__rt, fault_ns, 0, COSTS_COPY_PS);
    int32_t *x = alloc(size), *y = alloc(size), *z = alloc(size);
    reset();
    uint64_t faults = write_in_order(x, n, 3);
    *evictions = stats().evictions;
    CALL_OK(k_add, grid_for(n), y, x, z, n);
    sync_ok();
    cr_assert_eq(stats().h2d_bytes, size, "fault cost %llu ns: every block sent once", (unsigned long long)fault_ns);
    expect_values(y, n, 3);
    adsm_shutdown();
    return faults;
}

/* Cheap faults (1 us against 65.5 us to copy a block) keep sequential runs at a huge page (32
 * blocks: 21 faults for 512 blocks), and the window rolls behind the writes. Dear faults (2 ms,
 * 30 blocks' copy): runs start at a huge page and double past it up to 256 blocks (the fault an
 * eighth of the run's copy), 6 faults. Fails if runs ignore the fault cost. */
Test(rolling_costs, sequential_runs_grow_with_the_fault_cost) {
    const size_t nblocks = 32 * MIB / COSTS_BS;
    uint64_t ev_cheap, ev_dear;
    uint64_t cheap = sweep_with_fault_cost(1000, &ev_cheap);
    uint64_t dear = sweep_with_fault_cost(2000000, &ev_dear);
    cr_assert_leq(cheap, nblocks / 16, "cheap faults: %llu write faults for %zu blocks", (unsigned long long)cheap, nblocks);
    cr_assert_geq(cheap, nblocks / 32, "cheap faults: runs of a huge page, %llu faults", (unsigned long long)cheap);
    cr_assert_gt(ev_cheap, 0, "cheap faults: the window rolls");
    cr_assert_leq(dear, 8, "dear faults: %llu write faults", (unsigned long long)dear);
}

/* Scattered writes take their block alone, even where faults are dear (2 ms): every other block
 * of a fresh object, one fault and one Dirty block each, its neighbours left ReadOnly. */
Test(rolling_costs, scattered_writes_stay_block_by_block) {
    const size_t per_block = COSTS_BS / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, COSTS_BS, 0);
    adsm__rolling_costs_pin(&adsm__rt, 2000000, 0, COSTS_COPY_PS);
    int32_t *x = alloc(64 * COSTS_BS);
    reset();
    for (size_t b = 0; b < 64; b += 2) wr(&x[b * per_block + 7], (int32_t)b);
    EXPECT_FAULTS(0, 32);
    for (size_t b = 1; b < 64; b += 2) cr_assert_eq(adsm_block_state(&x[b * per_block]), 'R', "block %zu taken", b);
    cr_assert_eq(stats().evictions + adsm__rt.fifo_len, 32, "32 blocks made Dirty");
    adsm_shutdown();
}

/* Every other block of a 16 MiB object written, in order (each write a fault of its own block),
 * with evictions of the given cost. Returns how many of those writes evicted (eviction rounds),
 * with the most Dirty blocks seen in *most_dirty. Every written block is sent once. */
static uint64_t eviction_rounds(uint64_t evict_ns, size_t *most_dirty) {
    const size_t size = 16 * MIB, nblocks = size / COSTS_BS, per_block = COSTS_BS / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, COSTS_BS, 0);
    adsm__rolling_costs_pin(&adsm__rt, 1000, evict_ns, COSTS_COPY_PS);
    int32_t *x = alloc(size), *y = alloc(size);
    reset();
    uint64_t rounds = 0, evicted = 0;
    *most_dirty = 0;
    for (size_t b = 0; b < nblocks; b += 2) {
        wr(&x[b * per_block], (int32_t)b);
        uint64_t now = stats().evictions;
        rounds += now != evicted;
        evicted = now;
        if (adsm__rt.fifo_len > *most_dirty) *most_dirty = adsm__rt.fifo_len;
    }
    cr_assert_eq(stats().h2d_bytes, evicted * COSTS_BS, "evictions send their blocks");
    CALL_OK(k_add, grid_for(size / sizeof(int32_t)), y, x, x, size / sizeof(int32_t));
    sync_ok();
    cr_assert_eq(stats().h2d_bytes, nblocks / 2 * COSTS_BS, "every written block sent once");
    for (size_t b = 0; b < nblocks; b += 2) cr_assert_eq(rd(&y[b * per_block]), 2 * (int32_t)b, "block %zu", b);
    adsm_shutdown();
    return rounds;
}

/* Cheap evictions go one block at a time, as soon as the window (4 blocks: 2 objects) is full:
 * every write past it evicts. An eviction that costs as much as copying 16 blocks (1 ms) waits
 * until 16 blocks are Dirty past the window and sends them together: a sixteenth of the rounds,
 * its fixed cost (a protection change, waking the copy engine) paid that much less often. Fails
 * if evictions ignore their cost. */
Test(rolling_costs, dear_evictions_go_in_batches) {
    size_t dirty_cheap, dirty_dear;
    uint64_t cheap = eviction_rounds(1000, &dirty_cheap);
    uint64_t dear = eviction_rounds(1000000, &dirty_dear);
    cr_assert_eq(cheap, 128 - 4, "cheap: %llu rounds", (unsigned long long)cheap);
    cr_assert_leq(dirty_cheap, 4, "cheap: %zu Dirty blocks at most", dirty_cheap);
    cr_assert_leq(dear, (128 - 4) / 16, "dear: %llu rounds", (unsigned long long)dear);
    cr_assert_geq(dear, 4, "dear: the window still rolls");
    cr_assert_eq(dirty_dear, 4 + 16 - 1, "dear: %zu Dirty blocks at most", dirty_dear);
}

/* The costs are measured while the program runs (not asserted as timings: only that faults,
 * evictions and copies have been timed, and that nothing is left to a constant). */
Test(rolling_costs, costs_are_measured_as_the_program_runs) {
    const size_t size = 16 * MIB, n = size / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, COSTS_BS, 0);
    adsm__rolling_costs_reset(&adsm__rt); /* what protocol_common.h's init fixed: measure instead */
    int32_t *x = alloc(size), *y = alloc(size);
    cr_assert_eq(adsm__rt.cost_fault_ns + adsm__rt.cost_evict_ns, 0, "nothing measured yet");
    for (size_t i = 0; i < n; i++) wr(&x[i], (int32_t)i);
    CALL_OK(k_add, grid_for(n), y, x, x, n);
    sync_ok();
    cr_assert_gt(adsm__rt.cost_fault_ns, 0, "faults timed");
    cr_assert_gt(adsm__rt.cost_evict_ns, 0, "evictions timed");
    cr_assert_gt(adsm__cost_copy_ps(&adsm__rt), 0, "copies timed");
    expect_values(x, n, 0);
    adsm_shutdown();
    cr_assert_eq(adsm__rt.cost_fault_ns + adsm__rt.cost_evict_ns + adsm__rt.cost_pinned, 0,
                 "the next runtime measures afresh");
}

/* ---- a regret holds its object; a sequential pass evicts what it left behind (issue 34) ------- */

/* After a regret (block 0 written again after its eviction) the object is held: its blocks stay
 * Dirty until the call, so none crosses twice; the next epoch evicts again. */
Test(rolling, a_regret_holds_the_object_until_the_call) {
    const size_t bs = 4096, nb = 16, n = nb * bs / sizeof(int32_t);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *x = alloc(nb * bs);
    reset();
    for (size_t k = 0; k < 3; k++) wr(AT(x, bs, k), 1);
    cr_assert_eq(stats().evictions, 1);
    wr(AT(x, bs, 0) + 1, 2); /* regret */
    cr_assert_eq(stats().rolling_regrets, 1);
    for (size_t k = 3; k < nb; k++) wr(AT(x, bs, k), 1);
    cr_assert_eq(stats().evictions, 1, "held: nothing more evicted");
    expect_all(x, nb * bs, 'D');
    CALL_OK(k_incr, grid_for(n), x, n);
    EXPECT_BYTES((nb + 1) * bs, 0); /* block 0 twice, every other once */
    sync_ok();
    reset();
    for (size_t k = 0; k < nb; k++) wr(AT(x, bs, k), rd(AT(x, bs, k)) + 1);
    cr_assert_gt(stats().evictions, 0, "the next epoch evicts again");
    cr_assert_eq(stats().rolling_regrets, 0);
    CALL_OK(k_incr, grid_for(n), x, n);
    sync_ok();
    cr_assert_eq(rd(AT(x, bs, 0)), 4);
    cr_assert_eq(rd(AT(x, bs, 0) + 1), 4);
    cr_assert_eq(rd(AT(x, bs, 5)), 4);
    adsm_shutdown();
}

/* A sequential pass over b evicts the blocks of b it left behind, not the older blocks of a,
 * which the CPU then writes again without a fault or a regret (the window: 2 per object, 4).
 * Oldest first, a went as b was written, and came back as regrets. */
Test(rolling, a_pass_evicts_what_it_left_behind) {
    const size_t bs = 4096;
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, bs, 0);
    int32_t *a = alloc(3 * bs), *b = alloc(8 * bs);
    for (size_t k = 0; k < 3; k++) wr(AT(a, bs, k), 1);
    reset();
    for (size_t k = 0; k < 8; k++) wr(AT(b, bs, k), 2);
    cr_assert_eq(stats().evictions, 7);
    expect_blocks(a, bs, "DDD");
    expect_blocks(b, bs, "RRRRRRRD");
    for (size_t k = 0; k < 3; k++) wr(AT(a, bs, k) + 1, 3);
    EXPECT_FAULTS(0, 8);
    cr_assert_eq(stats().rolling_regrets, 0);
    CALL_OK(k_add, grid_for(3 * bs / sizeof(int32_t)), b, a, a, 3 * bs / sizeof(int32_t));
    EXPECT_BYTES(8 * bs + 3 * bs, 0); /* b's blocks and a's, once each */
    sync_ok();
    cr_assert_eq(rd(AT(b, bs, 2) + 1), 6);
    adsm_shutdown();
}

/* ---- two-pass initialisation (issue 34, Needleman-Wunsch as in Rodinia) --------------------------- */
/* The score matrix zeroed, its first column and row written, the reference matrix filled from
 * them, the first column and row written again; then one kernel. Returns the bytes sent to the
 * device before and at the call, and the regrets. */
typedef struct two_pass {
    uint64_t h2d, regrets;
} two_pass;

static uint64_t two_pass_pin_fault_ns; /* faults of this cost, copies at 150 ps/B (0: neither) */

static two_pass initialise_in_two_passes(adsm_protocol_kind protocol, size_t bs, size_t cols) {
    const size_t n = cols * cols;
    init(TEST_DEVICE_BACKEND, protocol, bs, 0);
    if (two_pass_pin_fault_ns) adsm__rolling_costs_pin(&adsm__rt, two_pass_pin_fault_ns, 0, 150);
    int32_t *score = alloc(n * sizeof(int32_t)), *ref = alloc(n * sizeof(int32_t));
    reset();
    for (size_t i = 0; i < n; i++) wr(&score[i], 0);
    for (size_t i = 1; i < cols; i++) wr(&score[i * cols], (int32_t)(i % 10) + 1);
    for (size_t j = 1; j < cols; j++) wr(&score[j], (int32_t)(j % 7) + 1);
    for (size_t i = 1; i < cols; i++)
        for (size_t j = 1; j < cols; j++) wr(&ref[i * cols + j], rd(&score[i * cols]) * rd(&score[j]));
    for (size_t i = 1; i < cols; i++) wr(&score[i * cols], -(int32_t)i);
    for (size_t j = 1; j < cols; j++) wr(&score[j], -(int32_t)j);
    CALL_OK(k_sum3, grid_for(n), score, ref, ref, n);
    sync_ok();
    two_pass r = {stats().h2d_bytes, stats().rolling_regrets};
    cr_assert_eq(rd(&score[0]), 0);
    cr_assert_eq(rd(&score[5 * cols]), -5);
    cr_assert_eq(rd(&score[5 * cols + 3]), 2 * ((5 % 10) + 1) * ((3 % 7) + 1));
    adsm_shutdown();
    return r;
}

/* At the application's size (1025 x 1025 ints, 4.2 MB per matrix) and 2 MiB blocks (the
 * default), rolling sends what lazy sends: 8.4 MB, where the oldest-first rule sent 12.6 (the
 * score matrix's blocks, evicted while the reference matrix was filled, went again after its
 * first column was written again). */
Test(rolling, two_pass_initialisation_sends_what_lazy_sends) {
    test_block_exact = 0;
    two_pass lazy = initialise_in_two_passes(ADSM_PROTOCOL_LAZY, 2 * MIB, 1025);
    two_pass rolling = initialise_in_two_passes(ADSM_PROTOCOL_ROLLING, 2 * MIB, 1025);
    cr_assert_eq(lazy.h2d, 2 * 1025 * 1025 * sizeof(int32_t));
    cr_assert_eq(rolling.h2d, lazy.h2d, "%llu bytes, %llu regrets", (unsigned long long)rolling.h2d,
                 (unsigned long long)rolling.regrets);
}

/* Where the score matrix's first pass does not fit the window (2049 x 2049, 16.8 MB per matrix;
 * smaller blocks), its early blocks go before the CPU comes back to them. What README states
 * holds: at most lazy's bytes plus one block per regret, each block at most twice, so at most
 * twice lazy's bytes. Block by block, and with runs of the build machine's costs. */
typedef struct two_pass_case {
    size_t bs, cols;
    uint64_t fault_ns; /* 0: block by block */
} two_pass_case;

ParameterizedTestParameters(rolling, two_pass_initialisation_keeps_the_bound) {
    static two_pass_case cases[] = {{2 * MIB, 2049, 0}, {64 * KIB, 1025, 0}, {4 * KIB, 1025, 0}, {64 * KIB, 2049, 8000}};
    return cr_make_param_array(two_pass_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(two_pass_case *c, rolling, two_pass_initialisation_keeps_the_bound) {
    test_block_exact = 0;
    two_pass lazy = initialise_in_two_passes(ADSM_PROTOCOL_LAZY, c->bs, c->cols);
    two_pass_pin_fault_ns = c->fault_ns;
    two_pass rolling = initialise_in_two_passes(ADSM_PROTOCOL_ROLLING, c->bs, c->cols);
    cr_assert_leq(rolling.h2d, lazy.h2d + rolling.regrets * c->bs, "%zu-byte blocks: %llu bytes, %llu regrets", c->bs,
                  (unsigned long long)rolling.h2d, (unsigned long long)rolling.regrets);
    cr_assert_leq(rolling.regrets * c->bs, c->cols * c->cols * sizeof(int32_t) + c->bs,
                  "regrets only in the score matrix, once each");
    cr_assert_leq(rolling.h2d, 2 * lazy.h2d);
}
