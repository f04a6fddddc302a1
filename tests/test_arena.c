/* tests/test_arena.c -- white-box tests of the virtual-address range allocator (adsm_impl/arena.h).
 *
 * Random alloc/free sequences are checked against a reference: an ownership map with one byte per
 * granule, which catches any overlap between live allocations, plus exact free-byte accounting,
 * alignment and bounds. Coalescing is proven by allocating the whole arena once everything is
 * freed. Runs in ordinary test-process context; the arena only does arithmetic on addresses, so no
 * memory is actually mapped. */
#include "adsm_impl/common.h"
#include "adsm_impl/blocktree.h"
#include "adsm_impl/arena.h"
#include <criterion/criterion.h>

#define GRANULE ((size_t)4096)
#define BASE ((uintptr_t)0x200000000000ull)

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t rng_below(size_t n) { return (size_t)(rng_next() % n); }

/* ---- reference: who owns each granule -------------------------------------------------------- */

typedef struct {
    uintptr_t addr;
    size_t size; /* as passed to alloc */
    size_t rounded;
} live_alloc;

typedef struct {
    unsigned char *owned; /* one byte per granule of the arena */
    size_t granules;
    live_alloc *live;
    size_t live_count;
    size_t live_bytes;
} reference;

static void ref_init(reference *r, size_t arena_size, size_t max_live) {
    r->granules = arena_size / GRANULE;
    r->owned = calloc(r->granules, 1);
    r->live = calloc(max_live, sizeof(live_alloc));
    r->live_count = r->live_bytes = 0;
}

static void ref_destroy(reference *r) {
    free(r->owned);
    free(r->live);
}

static void ref_mark(reference *r, uintptr_t addr, size_t rounded, unsigned char value) {
    size_t first = (addr - BASE) / GRANULE;
    for (size_t g = first; g < first + rounded / GRANULE; g++) {
        cr_assert_neq(r->owned[g], value, "granule %zu %s twice", g, value ? "allocated" : "freed");
        r->owned[g] = value;
    }
}

static size_t round_to_granule(size_t size) { return size ? (size + GRANULE - 1) / GRANULE * GRANULE : GRANULE; }

/* Allocates through the arena and checks the answer against the reference. Returns 0 on no fit. */
static uintptr_t checked_alloc(adsm__arena *a, reference *r, size_t arena_size, size_t size, size_t align) {
    uintptr_t addr = adsm__arena_alloc(a, size, align);
    if (!addr) return 0;
    size_t rounded = round_to_granule(size);
    cr_assert_eq(addr % (align > GRANULE ? align : GRANULE), 0, "misaligned %#lx for align %zu",
                 (unsigned long)addr, align);
    cr_assert_geq(addr, BASE);
    cr_assert_leq(addr + rounded, BASE + arena_size, "allocation runs past the arena");
    ref_mark(r, addr, rounded, 1);
    r->live[r->live_count++] = (live_alloc){addr, size, rounded};
    r->live_bytes += rounded;
    cr_assert_eq(adsm__arena_free_bytes(a), arena_size - r->live_bytes);
    return addr;
}

static void checked_free(adsm__arena *a, reference *r, size_t arena_size, size_t i) {
    live_alloc victim = r->live[i];
    adsm__arena_free(a, victim.addr, victim.size);
    ref_mark(r, victim.addr, victim.rounded, 0);
    r->live[i] = r->live[--r->live_count];
    r->live_bytes -= victim.rounded;
    cr_assert_eq(adsm__arena_free_bytes(a), arena_size - r->live_bytes);
}

static void free_all(adsm__arena *a, reference *r, size_t arena_size) {
    while (r->live_count) checked_free(a, r, arena_size, rng_below(r->live_count));
}

/* ---- tests ----------------------------------------------------------------------------------- */

Test(arena, basic_alloc_free_and_rounding) {
    adsm__arena a;
    const size_t size = 64 * GRANULE;
    cr_assert_eq(adsm__arena_init(&a, BASE, size, GRANULE), 0);
    cr_assert_eq(adsm__arena_free_bytes(&a), size);
    uintptr_t p = adsm__arena_alloc(&a, 1, GRANULE);
    cr_assert_eq(p, BASE);
    cr_assert_eq(adsm__arena_free_bytes(&a), size - GRANULE, "1 byte must cost a whole granule");
    uintptr_t q = adsm__arena_alloc(&a, GRANULE + 1, GRANULE);
    cr_assert_eq(q, BASE + GRANULE);
    cr_assert_eq(adsm__arena_free_bytes(&a), size - 3 * GRANULE);
    adsm__arena_free(&a, p, 1);
    adsm__arena_free(&a, q, GRANULE + 1);
    cr_assert_eq(adsm__arena_free_bytes(&a), size);
    cr_assert_eq(adsm__arena_alloc(&a, size, GRANULE), BASE, "freed ranges must coalesce");
    adsm__arena_destroy(&a);
}

Test(arena, exhaustion_returns_zero) {
    adsm__arena a;
    const size_t size = 16 * GRANULE;
    cr_assert_eq(adsm__arena_init(&a, BASE, size, GRANULE), 0);
    cr_assert_eq(adsm__arena_alloc(&a, size + GRANULE, GRANULE), 0, "bigger than the arena");
    cr_assert_eq(adsm__arena_alloc(&a, SIZE_MAX, GRANULE), 0, "size overflow");
    uintptr_t p = adsm__arena_alloc(&a, size, GRANULE);
    cr_assert_eq(p, BASE);
    cr_assert_eq(adsm__arena_free_bytes(&a), 0);
    cr_assert_eq(adsm__arena_alloc(&a, 1, GRANULE), 0);
    adsm__arena_free(&a, p, size);
    /* Fragmented exhaustion: enough bytes in total but no single range large enough. */
    uintptr_t blocks[16];
    for (int i = 0; i < 16; i++) blocks[i] = adsm__arena_alloc(&a, GRANULE, GRANULE);
    for (int i = 0; i < 16; i += 2) adsm__arena_free(&a, blocks[i], GRANULE);
    cr_assert_eq(adsm__arena_free_bytes(&a), 8 * GRANULE);
    cr_assert_eq(adsm__arena_alloc(&a, 2 * GRANULE, GRANULE), 0);
    uintptr_t even = adsm__arena_alloc(&a, GRANULE, 2 * GRANULE);
    cr_assert_neq(even, 0, "an aligned single granule still fits");
    cr_assert_eq((even - BASE) % (2 * GRANULE), 0, "only the even-numbered granules were freed");
    adsm__arena_destroy(&a);
}

Test(arena, alignment_padding_is_not_leaked) {
    adsm__arena a;
    const size_t size = 256 * GRANULE;
    cr_assert_eq(adsm__arena_init(&a, BASE, size, GRANULE), 0);
    uintptr_t small = adsm__arena_alloc(&a, GRANULE, GRANULE);
    uintptr_t aligned = adsm__arena_alloc(&a, GRANULE, 64 * GRANULE);
    cr_assert_eq(small, BASE);
    cr_assert_eq(aligned, BASE + 64 * GRANULE);
    cr_assert_eq(adsm__arena_free_bytes(&a), size - 2 * GRANULE, "padding must stay free");
    /* The 63-granule hole in front of the aligned block is usable as one piece. */
    cr_assert_eq(adsm__arena_alloc(&a, 63 * GRANULE, GRANULE), BASE + GRANULE);
    adsm__arena_free(&a, BASE + GRANULE, 63 * GRANULE);
    adsm__arena_free(&a, small, GRANULE);
    adsm__arena_free(&a, aligned, GRANULE);
    cr_assert_eq(adsm__arena_alloc(&a, size, GRANULE), BASE);
    adsm__arena_destroy(&a);
}

Test(arena, coalesces_with_both_neighbours) {
    adsm__arena a;
    const size_t size = 3 * GRANULE;
    cr_assert_eq(adsm__arena_init(&a, BASE, size, GRANULE), 0);
    uintptr_t x = adsm__arena_alloc(&a, GRANULE, GRANULE);
    uintptr_t y = adsm__arena_alloc(&a, GRANULE, GRANULE);
    uintptr_t z = adsm__arena_alloc(&a, GRANULE, GRANULE);
    adsm__arena_free(&a, x, GRANULE);
    adsm__arena_free(&a, z, GRANULE);
    cr_assert_eq(a.free_by_address.count, 2);
    adsm__arena_free(&a, y, GRANULE); /* bridges both free neighbours */
    cr_assert_eq(a.free_by_address.count, 1);
    cr_assert_eq(adsm__arena_alloc(&a, size, GRANULE), BASE);
    adsm__arena_destroy(&a);
}

Test(arena, double_free_and_foreign_ranges_are_ignored) {
    adsm__arena a;
    const size_t size = 8 * GRANULE;
    cr_assert_eq(adsm__arena_init(&a, BASE, size, GRANULE), 0);
    uintptr_t p = adsm__arena_alloc(&a, 2 * GRANULE, GRANULE);
    adsm__arena_free(&a, p, 2 * GRANULE);
    adsm__arena_free(&a, p, 2 * GRANULE);
    adsm__arena_free(&a, BASE + size, GRANULE);
    adsm__arena_free(&a, BASE - GRANULE, GRANULE);
    cr_assert_eq(adsm__arena_free_bytes(&a), size);
    cr_assert_eq(a.free_by_address.count, 1);
    adsm__arena_destroy(&a);
}

Test(arena, random_against_reference) {
    enum { MAX_LIVE = 4000, OPS = 60000 };
    const size_t size = (size_t)1 << 30; /* 256K granules */
    adsm__arena a;
    reference r;
    size_t failures = 0;
    cr_assert_eq(adsm__arena_init(&a, BASE, size, GRANULE), 0);
    ref_init(&r, size, MAX_LIVE);
    for (int round = 0; round < 3; round++) {
        for (size_t op = 0; op < OPS; op++) {
            if (r.live_count < MAX_LIVE && (r.live_count == 0 || rng_below(100) < 55)) {
                /* Mostly small sizes with a heavy tail; some odd byte counts; some big alignments. */
                size_t granules = rng_below(8) == 0 ? 1 + rng_below(512) : 1 + rng_below(16);
                size_t bytes = granules * GRANULE - (rng_below(4) == 0 ? rng_below(GRANULE) : 0);
                size_t align = rng_below(6) == 0 ? GRANULE << rng_below(8) : GRANULE;
                if (!checked_alloc(&a, &r, size, bytes, align)) failures++;
            } else {
                checked_free(&a, &r, size, rng_below(r.live_count));
            }
        }
        free_all(&a, &r, size);
        cr_assert_eq(adsm__arena_free_bytes(&a), size);
        cr_assert_eq(a.free_by_address.count, 1, "free ranges not fully coalesced");
        /* Whole-size allocation proves nothing leaked and everything merged; give it back. */
        uintptr_t whole = checked_alloc(&a, &r, size, size, GRANULE);
        cr_assert_eq(whole, BASE);
        free_all(&a, &r, size);
    }
    cr_assert_eq(failures, 0, "arena at most ~40%% full should never fail (%zu failures)", failures);
    ref_destroy(&r);
    adsm__arena_destroy(&a);
}

/* Small arena kept near full, so allocation failures and fragmentation are exercised too. */
Test(arena, random_near_full) {
    enum { MAX_LIVE = 2000, OPS = 50000 };
    const size_t size = 1024 * GRANULE;
    adsm__arena a;
    reference r;
    size_t failures = 0;
    cr_assert_eq(adsm__arena_init(&a, BASE, size, GRANULE), 0);
    ref_init(&r, size, MAX_LIVE);
    for (size_t op = 0; op < OPS; op++) {
        if (rng_below(100) < 60 && r.live_count < MAX_LIVE) {
            size_t align = rng_below(4) == 0 ? GRANULE << rng_below(4) : GRANULE;
            if (!checked_alloc(&a, &r, size, (1 + rng_below(8)) * GRANULE, align)) failures++;
        } else if (r.live_count) {
            checked_free(&a, &r, size, rng_below(r.live_count));
        }
    }
    cr_assert_gt(failures, 100, "the arena should run full in this test");
    free_all(&a, &r, size);
    cr_assert_eq(checked_alloc(&a, &r, size, size, GRANULE), BASE);
    ref_destroy(&r);
    adsm__arena_destroy(&a);
}

/* Tens of thousands of live objects and 200k alloc/free cycles must stay cheap. */
/* .timeout is a watchdog against a linear scan per allocation, not a speed target */
Test(arena, two_hundred_thousand_cycles, .timeout = 60) {
    enum { LIVE = 30000, CYCLES = 200000 };
    const size_t size = (size_t)1 << 40;
    adsm__arena a;
    uintptr_t *addr = malloc(LIVE * sizeof(uintptr_t));
    size_t *len = malloc(LIVE * sizeof(size_t));
    cr_assert_eq(adsm__arena_init(&a, BASE, size, GRANULE), 0);
    for (size_t i = 0; i < LIVE; i++) {
        len[i] = (1 + rng_below(64)) * GRANULE;
        addr[i] = adsm__arena_alloc(&a, len[i], GRANULE);
        cr_assert_neq(addr[i], 0);
    }
    for (size_t c = 0; c < CYCLES; c++) {
        size_t i = rng_below(LIVE);
        adsm__arena_free(&a, addr[i], len[i]);
        len[i] = (1 + rng_below(64)) * GRANULE;
        size_t align = rng_below(8) == 0 ? 16 * GRANULE : GRANULE;
        addr[i] = adsm__arena_alloc(&a, len[i], align);
        cr_assert_neq(addr[i], 0);
    }
    for (size_t i = 0; i < LIVE; i++) adsm__arena_free(&a, addr[i], len[i]);
    cr_assert_eq(adsm__arena_free_bytes(&a), size);
    cr_assert_eq(a.free_by_address.count, 1);
    free(addr);
    free(len);
    adsm__arena_destroy(&a);
}
