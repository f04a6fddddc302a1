/* tests/test_memops.c -- adsm_memset and adsm_memcpy act where the valid copy is.
 *
 * memset of a whole unit (rolling: a block; lazy: the object) that is Invalid runs on the device
 * only (stays 'I', nothing copied); of a whole ReadOnly unit too (becomes 'I', nothing copied, the
 * host pages untouched); of a Dirty unit sets the host copy. Partial units behave like CPU writes: an Invalid
 * one is fetched first, and they become Dirty. memcpy between shared objects from a
 * device-valid source ('I' or 'R') into whole device-valid destination units copies device to
 * device (d2d_bytes), leaving the destination 'I'; a Dirty source is sent to the device first
 * (h2d_bytes: the next launch would send it anyway) and becomes 'R' (copies of any size here: in
 * use only from ADSM__SEND_SOURCE_MIN up, which its own test checks); copies between shared and
 * plain memory fetch only the blocks they touch. Batch tracks nothing ('D', nothing moves).
 *
 * Every case checks the exact states and bytes copied (emu backend, reset just before the
 * call), then the bytes the CPU sees, then the bytes a kernel sees (device copy), against a plain
 * mirror that had the same operations done with libc's memset/memcpy. A randomized test does
 * the same over random ranges and states. Each Criterion test runs in its own process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>

#include "tests/protocol_common.h"
#include "tests/io_common.h"

/* exact block states and bytes: rolling follows single blocks (adsm_config.block_exact) */
static void block_by_block(void) { test_block_exact = 1; }

TestSuite(memops, .timeout = 30, .init = block_by_block);

#define TAIL ((size_t)1000) /* objects end 1000 bytes into their last block */

/* dst[i] = src[i]: what the device holds, brought back through a kernel */
ADSM_KERNEL(k_copy_bytes, ADSM_OUT(uint8_t, dst), ADSM_IN(uint8_t, src), ADSM_VALUE(size_t, n));
void k_copy_bytes(adsm_grid g, uint8_t *dst, const uint8_t *src, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = src[i];
    }
}

static void setup(adsm_protocol_kind protocol, size_t bs) {
    init(ADSM_BACKEND_EMU, protocol, bs, 4096); /* fixed rolling size: no eviction in the counts */
    scratch = alloc(4096);
    adsm__rt.send_source_always = 1; /* the cases' exact states: copies of any size (but below) */
}

/* The bytes a kernel reads from obj equal the mirror (and so the device copy is right). */
static void expect_device_copy(const void *obj, size_t osize, const unsigned char *mirror) {
    uint8_t *out = alloc(osize);
    CALL_OK(k_copy_bytes, grid_for(osize), out, obj, osize);
    sync_ok();
    expect_same_bytes(mirror, out, osize, "device copy (through a kernel)");
    adsm_free(out);
}

/* States after adsm_memset of object bytes [a, b), the object having been `before` everywhere;
 * returns the d2h bytes it should have moved. */
static size_t expect_memset(const void *obj, size_t osize, size_t a, size_t b, char before) {
    const unsigned char *o = obj;
    size_t bs = adsm_block_size(), page = (size_t)sysconf(_SC_PAGESIZE), d2h = 0;
    size_t nblocks = ((osize + page - 1) / page * page + bs - 1) / bs;
    int lazy = proto_is("lazy"), batch = proto_is("batch");
    for (size_t k = 0; k < nblocks; k++) {
        size_t ks = lazy ? 0 : k * bs, ke = lazy ? osize : (ks + bs < osize ? ks + bs : osize);
        char want = before;
        if (batch) {
            want = 'D';
        } else if (a <= ks && b >= ke) { /* a whole unit: set on the device only */
            want = before == 'D' ? 'D' : 'I';
        } else if (a < ke && b > ks && !(a <= ks && b >= ke)) { /* part of the unit: a CPU write */
            want = 'D';
            if (before == 'I' && (!lazy || k == 0)) d2h += ke - ks;
        }
        char got = adsm_block_state(o + k * bs);
        cr_assert_eq(got, want, "%s: block %zu after memset of [%zu, %zu): state '%c', expected '%c'", io_ctx, k, a,
                     b, got ? got : '0', want);
    }
    return d2h;
}

/* One memset of object bytes [a, b) from state `before`: states and bytes moved, then what the
 * CPU reads, then what a kernel reads. */
static void memset_case(size_t osize, char before, size_t a, size_t b, int v) {
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    prep(obj, osize, before, 100, mirror);
    memset(mirror + a, v, b - a);
    reset();
    cr_assert_eq(adsm_memset(obj + a, v, b - a), ADSM_OK, "%s: %s", io_ctx, adsm_last_error());
    size_t d2h = expect_memset(obj, osize, a, b, before);
    EXPECT_MOVED(0, d2h, 0);
    cr_assert_eq(stats().read_faults + stats().write_faults, 0, "%s: memset faulted", io_ctx);
    expect_same_bytes(mirror, obj, osize, "CPU view");
    expect_device_copy(obj, osize, mirror);
    adsm_free(obj);
    free(mirror);
}

static void memset_ranges(char before) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    const struct {
        const char *name;
        size_t a, b;
    } r[] = {
        {"whole blocks 1-2", bs, 3 * bs},
        {"the short last block", 5 * bs, osize},
        {"the whole object", 0, osize},
        {"inside blocks 0-2", bs / 2, 2 * bs + 100},
        {"inside one block", 10, 20},
        {"end of the object", osize - 5, osize},
        {"whole block 0 and part of 1", 0, bs + 1},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        CTX("%s/%zu memset of %s from '%c'", adsm_protocol_name(), bs, r[i].name, before);
        memset_case(osize, before, r[i].a, r[i].b, 0xa5);
    }
}

#define PER_PROTOCOL(name)                                                                        \
    static void name(void);                                                                       \
    Test(memops, name##_batch_4k) { setup(ADSM_PROTOCOL_BATCH, 4096); name(); adsm_shutdown(); }   \
    Test(memops, name##_lazy_4k) { setup(ADSM_PROTOCOL_LAZY, 4096); name(); adsm_shutdown(); }     \
    Test(memops, name##_lazy_512k) { setup(ADSM_PROTOCOL_LAZY, 512 * KIB); name(); adsm_shutdown(); } \
    Test(memops, name##_rolling_4k) { setup(ADSM_PROTOCOL_ROLLING, 4096); name(); adsm_shutdown(); } \
    Test(memops, name##_rolling_512k) { setup(ADSM_PROTOCOL_ROLLING, 512 * KIB); name(); adsm_shutdown(); } \
    static void name(void)

/* ---- memset ------------------------------------------------------------------------------------ */

PER_PROTOCOL(memset_from_invalid) { memset_ranges('I'); }
PER_PROTOCOL(memset_from_readonly) { memset_ranges('R'); }
PER_PROTOCOL(memset_from_dirty) { memset_ranges('D'); }

/* memset of a whole Invalid unit: device only, state 'I', nothing copied; the next CPU read
 * fetches the unit and sees the value. */
PER_PROTOCOL(memset_invalid_unit_then_cpu_read) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    int lazy = proto_is("lazy"), batch = proto_is("batch");
    CTX("%s/%zu memset of an Invalid unit, then a CPU read", adsm_protocol_name(), bs);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    prep(obj, osize, 'I', 7, mirror);
    size_t a = lazy ? 0 : bs, n = lazy ? osize : bs; /* one whole unit */
    reset();
    cr_assert_eq(adsm_memset(obj + a, 0x3c, n), ADSM_OK);
    EXPECT_MOVED(0, 0, 0);
    EXPECT_FAULTS(0, 0);
    EXPECT_STATE(obj + a, batch ? 'D' : 'I');
    cr_assert_eq(((volatile unsigned char *)obj)[a + 17], 0x3c);
    EXPECT_MOVED(0, batch ? 0 : lazy ? osize : bs, 0);
    EXPECT_STATE(obj + a, batch ? 'D' : 'R');
    cr_assert_eq(((volatile unsigned char *)obj)[a + n - 1], 0x3c);
    if (!lazy && !batch) cr_assert_eq(rd((int32_t *)obj), 7, "the block before keeps the kernel's value");
    adsm_free(obj);
    free(mirror);
}

/* memset of a whole ReadOnly unit runs on the device only and leaves the unit Invalid: nothing
 * copied by the memset, the CPU's read then fetches the unit, and a kernel sees the value with
 * nothing copied at the call. */
PER_PROTOCOL(memset_readonly_unit_runs_on_the_device) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    int lazy = proto_is("lazy"), batch = proto_is("batch");
    CTX("%s/%zu memset of a ReadOnly unit", adsm_protocol_name(), bs);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize), *out = alloc(osize);
    prep(obj, osize, 'R', 7, mirror);
    size_t a = lazy ? 0 : 2 * bs, n = lazy ? osize : 2 * bs;
    memset(mirror + a, 0xee, n);
    reset();
    cr_assert_eq(adsm_memset(obj + a, 0xee, n), ADSM_OK);
    EXPECT_MOVED(0, 0, 0);
    EXPECT_STATE(obj + a, batch ? 'D' : 'I');
    CALL_OK(k_copy_bytes, grid_for(osize), out, obj, osize);
    EXPECT_MOVED(batch ? 2 * osize + 4096 : 0, 0, 0); /* batch sends every object at every call */
    reset();
    cr_assert_eq(((volatile unsigned char *)obj)[a + n - 1], 0xee);
    EXPECT_FAULTS(batch ? 0 : 1, 0);
    EXPECT_MOVED(0, batch ? 0 : lazy ? osize : bs, 0); /* the unit read: the object, or one block */
    sync_ok();
    expect_same_bytes(mirror, out, osize, "device copy (through a kernel)");
    adsm_free(obj);
    adsm_free(out);
    free(mirror);
}

/* A memset after a kernel launch and before adsm_sync lands after the kernel's writes. (Not
 * batch: it copies every object home at the sync, over anything the CPU did since the call.) */
PER_PROTOCOL(memset_orders_after_inflight_kernel) {
    if (proto_is("batch")) return;
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, n = osize / 4;
    CTX("%s/%zu memset before adsm_sync", adsm_protocol_name(), bs);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    pattern_bytes(mirror, osize, 9);
    memset(mirror + bs, 0x11, 2 * bs);         /* whole blocks */
    memset(mirror + 3 * bs + 5, 0x22, bs / 2); /* inside a block */
    CALL_OK(k_fill, grid_for(n), (int32_t *)obj, n, 9);
    cr_assert_eq(adsm_memset(obj + bs, 0x11, 2 * bs), ADSM_OK);
    cr_assert_eq(adsm_memset(obj + 3 * bs + 5, 0x22, bs / 2), ADSM_OK);
    sync_ok();
    expect_same_bytes(mirror, obj, osize, "CPU view");
    expect_device_copy(obj, osize, mirror);
    adsm_free(obj);
    free(mirror);
}

/* memset from inside an object into plain memory right after it, and of plain memory alone. */
PER_PROTOCOL(memset_into_plain_memory) {
    size_t bs = adsm_block_size(), osize = 3 * bs, plain = 2 * 4096;
    CTX("%s/%zu memset into plain memory", adsm_protocol_name(), bs);
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize + plain);
    prep(obj, osize, 'I', 1, mirror);
    unsigned char *after = plain_memory_at(obj + osize, plain);
    memset(after, 0x77, plain);
    memset(mirror + osize, 0x77, plain);
    size_t a = bs + bs / 2;
    memset(mirror + a, 0x5a, osize + 100 - a);
    reset();
    cr_assert_eq(adsm_memset(obj + a, 0x5a, osize + 100 - a), ADSM_OK);
    size_t d2h = expect_memset(obj, osize, a, osize, 'I');
    EXPECT_MOVED(0, d2h, 0);
    expect_same_bytes(mirror, obj, osize + plain, "memory");
    reset();
    cr_assert_eq(adsm_memset(after + 10, 0x01, 300), ADSM_OK); /* plain memory alone */
    memset(mirror + osize + 10, 0x01, 300);
    expect_same_bytes(mirror + osize, after, plain, "plain memory");
    EXPECT_QUIET();
    adsm_free(obj);
    free(mirror);
}

/* memset over the end of one object into the next (adjacent) one. */
PER_PROTOCOL(memset_across_two_objects) {
    size_t bs = adsm_block_size(), size = 2 * bs;
    CTX("%s/%zu memset across two objects", adsm_protocol_name(), bs);
    unsigned char *a = alloc(size), *b = alloc(size), *mirror = xmalloc(2 * size);
    cr_assert(b == a + size, "objects made one after another lie side by side (%p, %p): the test needs that",
              (void *)a, (void *)b);
    prep(a, size, 'I', 1, mirror);
    prep(b, size, 'R', 50000, mirror + size);
    size_t from = bs / 2, to = size + bs + 7;
    memset(mirror + from, 0x42, to - from);
    reset();
    cr_assert_eq(adsm_memset(a + from, 0x42, to - from), ADSM_OK);
    size_t d2h = expect_memset(a, size, from, size, 'I') + expect_memset(b, size, 0, to - size, 'R');
    EXPECT_MOVED(0, d2h, 0);
    expect_same_bytes(mirror, a, 2 * size, "memory");
    expect_device_copy(a, size, mirror);
    expect_device_copy(b, size, mirror + size);
    adsm_free(a);
    adsm_free(b);
    free(mirror);
}

/* ---- memcpy between shared objects ------------------------------------------------------------ */

/* One adsm_memcpy from src (state sst) to dst (state dstate), both 5 blocks + TAIL, then the
 * expected states (strings, one letter per block, for rolling; lazy and batch are uniform) and
 * bytes moved, then the CPU and device views. */
typedef struct copy_case {
    const char *name;
    char sst, dst;
    size_t soff, doff, n;
    /* rolling expectations */
    const char *r_src, *r_dst;
    size_t r_d2h, r_d2d;
    /* lazy expectations */
    char l_src, l_dst;
    size_t l_d2h, l_d2d;
    /* bytes sent to the device (a Dirty source of a device-to-device copy), rolling and lazy */
    size_t r_h2d, l_h2d;
} copy_case;

static void expect_blocks_str(const unsigned char *p, const char *states, const char *which) {
    size_t bs = adsm_block_size();
    for (size_t k = 0; states[k]; k++) {
        char got = adsm_block_state(p + k * bs);
        cr_assert_eq(got, states[k], "%s: %s block %zu: state '%c', expected '%c' (%s)", io_ctx, which, k,
                     got ? got : '0', states[k], states);
    }
}

static void copy_case_run(const copy_case *c) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    CTX("%s/%zu memcpy %s", adsm_protocol_name(), bs, c->name);
    unsigned char *src = alloc(osize), *dst = alloc(osize), *ms = xmalloc(osize), *md = xmalloc(osize);
    /* any call flushes Dirty blocks: prepare the Dirty side last */
    if (c->sst == 'D') {
        prep(dst, osize, c->dst, -7777, md);
        prep(src, osize, c->sst, 1000, ms);
    } else {
        prep(src, osize, c->sst, 1000, ms);
        prep(dst, osize, c->dst, -7777, md);
    }
    memcpy(md + c->doff, ms + c->soff, c->n);
    reset();
    cr_assert_eq(adsm_memcpy(dst + c->doff, src + c->soff, c->n), ADSM_OK, "%s: %s", io_ctx, adsm_last_error());
    if (proto_is("rolling")) {
        expect_blocks_str(src, c->r_src, "source");
        expect_blocks_str(dst, c->r_dst, "destination");
        EXPECT_MOVED(c->r_h2d, c->r_d2h, c->r_d2d);
    } else if (proto_is("lazy")) {
        expect_states(src, osize, c->l_src);
        expect_states(dst, osize, c->l_dst);
        EXPECT_MOVED(c->l_h2d, c->l_d2h, c->l_d2d);
    } else {
        expect_states(src, osize, 'D');
        expect_states(dst, osize, 'D');
        EXPECT_MOVED(0, 0, 0);
    }
    expect_same_bytes(ms, src, osize, "source, CPU view");
    expect_same_bytes(md, dst, osize, "destination, CPU view");
    expect_device_copy(dst, osize, md);
    expect_device_copy(src, osize, ms);
    adsm_free(src);
    adsm_free(dst);
    free(ms);
    free(md);
}

/* Device-valid source into whole device-valid destination units: device to device. */
PER_PROTOCOL(memcpy_device_to_device) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    const copy_case cases[] = {
        /* name, src, dst, soff, doff, n, rolling: src, dst, d2h, d2d; lazy: src, dst, d2h, d2d */
        {"I -> R, whole blocks", 'I', 'R', bs, 2 * bs, 2 * bs, "IIIIII", "RRIIRR", 0, 2 * bs, 'R', 'D', osize, 0, 0, 0},
        {"R -> I, whole blocks", 'R', 'I', 0, bs, 3 * bs, "RRRRRR", "IIIIII", 0, 3 * bs, 'R', 'D', osize, 0, 0, 0},
        {"R -> R, whole blocks", 'R', 'R', 2 * bs, 0, bs, "RRRRRR", "IRRRRR", 0, bs, 'R', 'D', 0, 0, 0, 0},
        {"I -> I, whole objects", 'I', 'I', 0, 0, osize, "IIIIII", "IIIIII", 0, osize, 'I', 'I', 0, osize, 0, 0},
        {"I -> R, whole objects", 'I', 'R', 0, 0, osize, "IIIIII", "IIIIII", 0, osize, 'I', 'I', 0, osize, 0, 0},
        {"R -> R, whole objects", 'R', 'R', 0, 0, osize, "RRRRRR", "IIIIII", 0, osize, 'R', 'I', 0, osize, 0, 0},
        {"I -> R, the short last block", 'I', 'R', 5 * bs, 5 * bs, TAIL, "IIIIII", "RRRRRI", 0, TAIL, 'R', 'D',
         osize, 0, 0, 0},
    };
    /* lazy: a destination range short of the whole object is a CPU write of the object
     * (fetched if Invalid, then Dirty), and its source is a CPU read (fetched if Invalid, 'R') */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) copy_case_run(&cases[i]);
}

/* The source range need not line up with the source's blocks: whole destination blocks are
 * still copied on the device when every source block involved is device-valid. */
PER_PROTOCOL(memcpy_device_to_device_unaligned_source) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    const copy_case c = {"I -> R, source not block aligned", 'I', 'R', bs / 2 + 4, bs, 2 * bs, "IIIIII", "RIIRRR", 0,
                         2 * bs, 'R', 'D', osize, 0, 0, 0};
    (void)osize;
    copy_case_run(&c);
}

/* Partial destination blocks are CPU writes; a Dirty destination means a host copy; a Dirty
 * source of whole device-valid destination units is sent first, then copied on the device. */
PER_PROTOCOL(memcpy_partial_and_dirty) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    const copy_case cases[] = {
        /* dst blocks 0 and 3 in part: CPU writes (dst R -> D, no fetch); their source blocks
         * are read by the CPU (fetched, R); blocks 1-2 whole: device to device */
        {"I -> R, inside blocks", 'I', 'R', bs / 2, bs / 2, 3 * bs, "RIIRII", "DIIDRR", 2 * bs, 2 * bs, 'R', 'D',
         osize, 0, 0, 0},
        /* Invalid destination in part: fetched first */
        {"R -> I, inside one block", 'R', 'I', 100, 4 * bs + 10, 50, "RRRRRR", "IIIIDI", bs, 0, 'R', 'D', osize, 0, 0, 0},
        /* Dirty source, whole destination blocks: the source blocks read are sent (R), then
         * device to device; lazy: a part of the destination object is a CPU write (host copy) */
        {"D -> R, whole blocks", 'D', 'R', bs, bs, 2 * bs, "DRRDDD", "RIIRRR", 0, 2 * bs, 'D', 'D', 0, 0, 2 * bs, 0},
        /* the same from an unaligned source: the three source blocks it reads are sent */
        {"D -> R, source not block aligned", 'D', 'R', bs / 2, bs, 2 * bs, "RRRDDD", "RIIRRR", 0, 2 * bs, 'D', 'D',
         0, 0, 3 * bs, 0},
        /* whole objects (stencil's two buffers): one upload, one device copy, for lazy too */
        {"D -> R, whole objects", 'D', 'R', 0, 0, osize, "RRRRRR", "IIIIII", 0, osize, 'R', 'I', 0, osize, osize,
         osize},
        {"D -> I, whole objects", 'D', 'I', 0, 0, osize, "RRRRRR", "IIIIII", 0, osize, 'R', 'I', 0, osize, osize,
         osize},
        /* Dirty destination: host copy; the Invalid source blocks read are fetched */
        {"I -> D, whole blocks", 'I', 'D', 0, bs, 2 * bs, "RRIIII", "DDDDDD", 2 * bs, 0, 'R', 'D', osize, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) copy_case_run(&cases[i]);
}

/* The destination's dsize bytes as the CPU and a kernel see them equal its mirror md; then both
 * objects and both mirrors go. */
static void expect_destination_then_free(unsigned char *src, unsigned char *dst, size_t dsize, unsigned char *ms,
                                         unsigned char *md) {
    expect_same_bytes(md, dst, dsize, "destination, CPU view");
    expect_device_copy(dst, dsize, md);
    adsm_free(src);
    adsm_free(dst);
    free(ms);
    free(md);
}

/* Without the tests' setting, a copy under ADSM__SEND_SOURCE_MIN from a Dirty source stays on the
 * host (the round trips would cost more), and one of at least that goes to the device. */
PER_PROTOCOL(memcpy_from_dirty_source_by_size) {
    if (proto_is("batch")) return;
    adsm__rt.send_source_always = 0;
    size_t big = ADSM__SEND_SOURCE_MIN, osize = 2 * big;
    for (int large = 0; large <= 1; large++) {
        size_t n = large ? big : big / 2;
        CTX("%s/%zu memcpy of %zu bytes from a Dirty source", adsm_protocol_name(), adsm_block_size(), n);
        unsigned char *src = alloc(osize), *dst = alloc(n), *ms = xmalloc(osize), *md = xmalloc(n);
        prep(dst, n, 'R', -5, md);
        prep(src, osize, 'D', 5, ms);
        memcpy(md, ms, n);
        reset();
        cr_assert_eq(adsm_memcpy(dst, src, n), ADSM_OK, "%s: %s", io_ctx, adsm_last_error());
        size_t bs = adsm_block_size(), blocks = (n + bs - 1) / bs * bs; /* the source's blocks it reads */
        size_t sent = proto_is("lazy") ? osize : blocks < osize ? blocks : osize;
        EXPECT_MOVED(large ? sent : 0, 0, large ? n : 0);
        expect_states(dst, n, large ? 'I' : 'D');
        expect_destination_then_free(src, dst, n, ms, md);
    }
}

/* A device-to-device copy whose source a kernel is still writing, and whose destination another
 * kernel is still writing, lands after both. (Not batch, as above.) */
PER_PROTOCOL(memcpy_orders_after_inflight_kernels) {
    if (proto_is("batch")) return;
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, n = osize / 4;
    CTX("%s/%zu memcpy before adsm_sync", adsm_protocol_name(), bs);
    unsigned char *src = alloc(osize), *dst = alloc(osize), *ms = xmalloc(osize), *md = xmalloc(osize);
    pattern_bytes(ms, osize, 31);
    pattern_bytes(md, osize, -31);
    memcpy(md + bs, ms + 2 * bs, 2 * bs);
    CALL_OK(k_fill, grid_for(n), (int32_t *)src, n, 31);
    CALL_OK(k_fill, grid_for(n), (int32_t *)dst, n, -31);
    cr_assert_eq(adsm_memcpy(dst + bs, src + 2 * bs, 2 * bs), ADSM_OK);
    sync_ok();
    expect_destination_then_free(src, dst, osize, ms, md);
}

/* Overlapping ranges in one object act as memmove, either way and across units: a walk from the
 * start unit by unit would read bytes it had already overwritten where the destination lies above
 * the source. */
PER_PROTOCOL(memcpy_overlapping_ranges_act_as_memmove) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL;
    const struct {
        size_t soff, doff, n;
    } moves[] = {
        {0, bs / 2 + 4, 3 * bs},  /* destination above, less than a unit apart */
        {bs, 3 * bs, 2 * bs + 8}, /* destination above, whole units apart */
        {2 * bs + 12, 8, 3 * bs},  /* destination below */
    };
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize);
    for (size_t i = 0; i < sizeof moves / sizeof moves[0]; i++)
        for (const char *st = "IRD"; *st; st++) {
            CTX("%s/%zu memcpy within one object from '%c', %zu bytes from %zu to %zu", adsm_protocol_name(), bs, *st,
                moves[i].n, moves[i].soff, moves[i].doff);
            prep(obj, osize, *st, 3, mirror);
            memmove(mirror + moves[i].doff, mirror + moves[i].soff, moves[i].n);
            cr_assert_eq(adsm_memcpy(obj + moves[i].doff, obj + moves[i].soff, moves[i].n), ADSM_OK, "%s: %s", io_ctx,
                         adsm_last_error());
            expect_same_bytes(mirror, obj, osize, "CPU view");
            expect_device_copy(obj, osize, mirror);
        }
    adsm_free(obj);
    free(mirror);
}

/* A kernel still reading an object must see the values it was launched with: a device-side
 * memset or device-to-device copy into that object waits for it (as a GPU stream would order
 * them). The kernel is slow on purpose. */
ADSM_KERNEL(k_slow_copy, ADSM_OUT(int32_t, c), ADSM_IN(int32_t, a), ADSM_VALUE(size_t, n));
void k_slow_copy(adsm_grid g, int32_t *c, const int32_t *a, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            for (volatile int k = 0; k < 100; k++) {
            }
            c[i] = a[i];
        }
    }
}

static void inflight_reader_case(char st, int use_memcpy) {
    size_t bs = adsm_block_size(), n = 2 * MIB / sizeof(int32_t), size = n * sizeof(int32_t);
    CTX("%s/%zu %s of an object a running kernel reads, from '%c'", adsm_protocol_name(), bs,
        use_memcpy ? "memcpy" : "memset", st);
    int32_t *a = alloc(size), *b = alloc(size), *c = alloc(size);
    unsigned char *mirror = xmalloc(size);
    prep(a, size, st, 40, mirror);
    CALL_OK(k_fill, grid_for(n), b, n, -40);
    sync_ok();
    CALL_OK(k_slow_copy, grid_for(n), c, a, n);
    if (use_memcpy) cr_assert_eq(adsm_memcpy(a, b, size), ADSM_OK);
    else cr_assert_eq(adsm_memset(a, 0x6b, size), ADSM_OK);
    sync_ok();
    expect_same_bytes(mirror, c, size, "what the kernel read");
    adsm_free(a);
    adsm_free(b);
    adsm_free(c);
    free(mirror);
}

PER_PROTOCOL(device_side_writes_wait_for_running_readers) {
    if (proto_is("batch")) return; /* batch moves nothing at memset/memcpy time */
    inflight_reader_case('I', 0);
    inflight_reader_case('R', 0);
    inflight_reader_case('I', 1);
    inflight_reader_case('R', 1);
}

/* ---- memcpy between shared and plain memory ---------------------------------------------------- */

/* Plain -> shared stores into the object (like a read from a file); shared -> plain reads it
 * (like a write to a file): only the blocks touched move. */
PER_PROTOCOL(memcpy_plain_and_shared) {
    size_t bs = adsm_block_size(), osize = 5 * bs + TAIL, a = bs / 2, b = 3 * bs + 10;
    unsigned char *obj = alloc(osize), *mirror = xmalloc(osize), *plain = random_bytes(osize), *back = xmalloc(osize);
    for (int written = 1; written >= 0; written--) {
        for (const char *st = "IRD"; *st; st++) {
            CTX("%s/%zu memcpy %s, from '%c'", adsm_protocol_name(), bs,
                written ? "plain -> shared" : "shared -> plain", *st);
            prep(obj, osize, *st, 5, mirror);
            reset();
            if (written) {
                memcpy(mirror + a, plain + a, b - a);
                cr_assert_eq(adsm_memcpy(obj + a, plain + a, b - a), ADSM_OK);
            } else {
                memset(back, 0, osize);
                cr_assert_eq(adsm_memcpy(back + a, obj + a, b - a), ADSM_OK);
                expect_same_bytes(mirror + a, back + a, b - a, "copied bytes");
            }
            size_t d2h = expect_transfer(obj, osize, a, b, written, *st);
            EXPECT_MOVED(0, d2h, 0);
            expect_same_bytes(mirror, obj, osize, "CPU view");
            expect_device_copy(obj, osize, mirror);
        }
    }
    /* from inside the object into plain memory mapped right after it, and back */
    CTX("%s/%zu memcpy across the end of an object", adsm_protocol_name(), bs);
    size_t o2 = 3 * bs, plainlen = 2 * 4096;
    unsigned char *obj2 = alloc(o2), *m2 = xmalloc(o2 + plainlen);
    prep(obj2, o2, 'I', 77, m2);
    unsigned char *after = plain_memory_at(obj2 + o2, plainlen);
    memset(after, 0x10, plainlen);
    memset(m2 + o2, 0x10, plainlen);
    size_t from = o2 - bs / 2;
    memcpy(m2 + from, plain, bs / 2 + 3000);
    reset();
    cr_assert_eq(adsm_memcpy(obj2 + from, plain, bs / 2 + 3000), ADSM_OK);
    EXPECT_MOVED(0, expect_transfer(obj2, o2, from, o2, 1, 'I'), 0);
    expect_same_bytes(m2, obj2, o2 + plainlen, "memory");
    memset(back, 0, osize);
    cr_assert_eq(adsm_memcpy(back, obj2 + from - 100, bs / 2 + 3100), ADSM_OK);
    expect_same_bytes(m2 + from - 100, back, bs / 2 + 3100, "copied bytes");
    adsm_free(obj);
    adsm_free(obj2);
    free(mirror);
    free(plain);
    free(back);
    free(m2);
}

/* ---- random ranges against libc ---------------------------------------------------------------- */

/* Two objects and a plain buffer, with mirrors. Random memsets and memcpys (aligned to blocks
 * half of the time, so whole units come up), CPU stores, kernels and syncs, in random states;
 * after each operation the affected mirror and, every few operations, all memory compare equal
 * (which itself changes states). At the end a kernel reads both objects back. */
static void random_ops(unsigned seed) {
    size_t bs = adsm_block_size(), osize = 4 * bs + TAIL, plen = osize;
    rng_seed(seed);
    unsigned char *o[2] = {alloc(osize), alloc(osize)}, *m[2] = {xmalloc(osize), xmalloc(osize)};
    unsigned char *plain = random_bytes(plen), *mp = xmalloc(plen);
    memcpy(mp, plain, plen);
    memset(m[0], 0, osize);
    memset(m[1], 0, osize);
    for (int step = 0; step < 60; step++) {
        int which = (int)rng_below(2);
        size_t a = rng_below(osize), len = 1 + rng_below(osize - a);
        if (rng_below(2)) { /* block aligned, whole blocks where it fits */
            a = a / bs * bs;
            len = (len + bs - 1) / bs * bs;
            if (a + len > osize) len = osize - a;
        }
        unsigned op = (unsigned)rng_below(8);
        CTX("%s/%zu random seed %u step %d op %u obj %d [%zu, +%zu)", adsm_protocol_name(), bs, seed, step, op,
            which, a, len);
        switch (op) {
        case 0: { /* memset */
            int v = (int)rng_below(256);
            cr_assert_eq(adsm_memset(o[which] + a, v, len), ADSM_OK);
            memset(m[which] + a, v, len);
            break;
        }
        case 1: { /* memcpy between the objects */
            size_t s = rng_below(osize - len + 1);
            if (rng_below(2)) s = s / bs * bs;
            if (s + len > osize) s = osize - len;
            cr_assert_eq(adsm_memcpy(o[which] + a, o[1 - which] + s, len), ADSM_OK);
            memcpy(m[which] + a, m[1 - which] + s, len);
            break;
        }
        case 2: /* plain -> shared */
            cr_assert_eq(adsm_memcpy(o[which] + a, plain + a, len), ADSM_OK);
            memcpy(m[which] + a, mp + a, len);
            break;
        case 3: /* shared -> plain */
            cr_assert_eq(adsm_memcpy(plain + a, o[which] + a, len), ADSM_OK);
            memcpy(mp + a, m[which] + a, len);
            break;
        case 4: { /* a kernel copies one object into the other: both end up valid on the device */
            CALL_OK(k_copy_bytes, grid_for(osize), o[which], o[1 - which], osize);
            memcpy(m[which], m[1 - which], osize);
            /* or leave it in flight (not with batch: it brings every object home at the sync,
             * over whatever the CPU did meanwhile; programs sync before touching data there) */
            if (rng_below(2) || proto_is("batch")) sync_ok();
            break;
        }
        case 5: /* CPU stores */
            for (size_t i = a; i < a + len; i += 97) {
                ((volatile unsigned char *)o[which])[i] = (unsigned char)step;
                m[which][i] = (unsigned char)step;
            }
            break;
        case 6: /* a kernel that writes nothing of ours flushes Dirty blocks: 'R' */
            CALL_OK(k_fill, grid_for(1), scratch, 1, 0);
            sync_ok();
            break;
        default: /* CPU loads compare */
            expect_same_bytes(m[which] + a, o[which] + a, len, "object range");
            break;
        }
        if (step % 10 == 9) {
            sync_ok();
            expect_same_bytes(mp, plain, plen, "plain buffer");
            expect_same_bytes(m[0], o[0], osize, "object 0");
            expect_same_bytes(m[1], o[1], osize, "object 1");
        }
    }
    sync_ok();
    expect_device_copy(o[0], osize, m[0]);
    expect_device_copy(o[1], osize, m[1]);
    expect_same_bytes(m[0], o[0], osize, "object 0 at the end");
    expect_same_bytes(m[1], o[1], osize, "object 1 at the end");
    adsm_free(o[0]);
    adsm_free(o[1]);
    free(m[0]);
    free(m[1]);
    free(plain);
    free(mp);
}

PER_PROTOCOL(random_ranges_match_libc) {
    for (unsigned seed = 1; seed <= 6; seed++) random_ops(seed * 7919u + (unsigned)adsm_block_size());
}

/* Host backend: one memory, nothing tracked: everything 'D', nothing copied, bytes right. */
Test(memops, host_backend_moves_nothing) {
    init(ADSM_BACKEND_HOST, ADSM_PROTOCOL_ROLLING, 4096, 0);
    size_t osize = 5 * 4096 + TAIL;
    unsigned char *a = alloc(osize), *b = alloc(osize), *ma = xmalloc(osize), *mb = xmalloc(osize);
    CTX("host backend");
    pattern_bytes(ma, osize, 3);
    CALL_OK(k_fill, grid_for(osize / 4), (int32_t *)a, osize / 4, 3);
    sync_ok();
    reset();
    cr_assert_eq(adsm_memset(a + 4096, 0x12, 2 * 4096), ADSM_OK);
    memset(ma + 4096, 0x12, 2 * 4096);
    cr_assert_eq(adsm_memcpy(b, a, osize), ADSM_OK);
    memcpy(mb, ma, osize);
    cr_assert_eq(adsm_memset(b + 100, 0x34, 50), ADSM_OK);
    memset(mb + 100, 0x34, 50);
    EXPECT_MOVED(0, 0, 0);
    expect_states(a, osize, 'D');
    expect_states(b, osize, 'D');
    expect_same_bytes(ma, a, osize, "a");
    expect_same_bytes(mb, b, osize, "b");
    EXPECT_QUIET();
    adsm_free(a);
    adsm_free(b);
    free(ma);
    free(mb);
    adsm_shutdown();
}

/* adsm_memcpy, adsm_memset and adsm_touch that succeed leave errno as the program had it (C: no
 * library call sets it to 0), also when they fetch, flush or wait for a unit: the walks clear it
 * to see a failure's own cause, and under ADSM_INTERPOSE_MEM every memcpy into shared memory
 * went through them, so a perror after a failed write printed "Success". */
Test(memops, calls_that_succeed_leave_errno_alone) {
    setup(ADSM_PROTOCOL_ROLLING, 4096);
    size_t osize = 3 * 4096;
    unsigned char *a = alloc(osize), *b = alloc(osize), *mine = xmalloc(osize);
    CALL_OK(k_fill, grid_for(osize / 4), (int32_t *)a, osize / 4, 3); /* a: Invalid, fetched below */
    sync_ok();
    errno = EEXIST;
    cr_assert_eq(adsm_memcpy(mine, a, osize), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(errno, EEXIST, "adsm_memcpy from an object set errno to %d", errno);
    cr_assert_eq(adsm_memcpy(b, mine, osize), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(errno, EEXIST, "adsm_memcpy into an object set errno to %d", errno);
    cr_assert_eq(adsm_memset(b + 10, 1, 100), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(errno, EEXIST, "adsm_memset set errno to %d", errno);
    CALL_OK(k_fill, grid_for(osize / 4), (int32_t *)a, osize / 4, 4);
    cr_assert_eq(adsm_touch(a, osize, 1), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(errno, EEXIST, "adsm_touch set errno to %d", errno);
    free(mine);
    adsm_free(a);
    adsm_free(b);
    adsm_shutdown();
}
