/* fuzz/fuzz_arena.c -- libFuzzer target for the address-range allocator (adsm_impl/arena.h).
 *
 * The input picks an arena (base, size, granule; base 0 and the top of the address space
 * included) and then a sequence of alloc / free / bogus-free operations. A reference keeps one
 * byte per granule (who owns it) and checks, after every operation:
 *   - alloc: the address is aligned to max(align, granule), inside the arena, and every granule it
 *     covers was free (no overlap); a refused alloc (0) really has no aligned fit anywhere in the
 *     free granules (no false "out of space");
 *   - accounting: adsm__arena_free_bytes equals the free granules of the reference;
 *   - free: a live allocation's range comes back; a free that overlaps free space or leaves the
 *     arena must be ignored (free bytes unchanged);
 *   - coalescing: the free tree holds exactly the maximal runs of free granules, in order, none
 *     adjacent; the size-class lists hold the same ranges, each in its class, and the non-empty
 *     bitmap matches them;
 *   - at the end everything is freed, the arena is one free range, and one alloc of the whole
 *     arena succeeds at its base.
 * Any disagreement aborts.
 *
 * Build: clang -fsanitize=fuzzer,address,undefined -g -O1 -I. fuzz/fuzz_arena.c */
#include "adsm_impl/common.h"
#include "adsm_impl/blocktree.h"
#include "adsm_impl/arena.h"

#include "fuzz/fuzz_common.h"
#include <stdio.h>
#include <stdlib.h>

#define MAX_GRANULES 512
#define MAX_LIVE 64



/* ---- reference -------------------------------------------------------------------------------- */
typedef struct live_alloc {
    uintptr_t addr;
    size_t size, rounded;
} live_alloc;

static uint8_t owned[MAX_GRANULES]; /* 0 free, 1 allocated */
static size_t granules, granule;
static uintptr_t abase; /* a.base after init */
static live_alloc live[MAX_LIVE];
static size_t nlive;

static size_t gran_of(uintptr_t addr) { return (size_t)((addr - abase) / granule); }

static size_t ref_free_bytes(void) {
    size_t f = 0;
    for (size_t g = 0; g < granules; g++) f += !owned[g];
    return f * granule;
}

/* Is there an address aligned to `align` with `need` free granules from it? */
static int ref_fit_exists(size_t need, size_t align) {
    size_t g = 0;
    while (g < granules) {
        if (owned[g]) {
            g++;
            continue;
        }
        size_t run_end = g;
        while (run_end < granules && !owned[run_end]) run_end++;
        uintptr_t s = abase + g * granule, e = abase + run_end * granule;
        uintptr_t at = ADSM__ALIGN_UP(s, align);
        if (at >= s && at <= e && e - at >= need * granule) return 1;
        g = run_end;
    }
    return 0;
}

/* The free ranges of the arena equal the maximal runs of free granules; the class lists agree. */
static void check_structure(const adsm__arena *a) {
    size_t g = 0, nranges = 0;
    adsm__tree_node *n = adsm__tree_first(&a->free_by_address);
    while (g < granules) {
        if (owned[g]) {
            g++;
            continue;
        }
        size_t run_end = g;
        while (run_end < granules && !owned[run_end]) run_end++;
        uintptr_t s = abase + g * granule, e = abase + run_end * granule;
        CHECK(n, "free run [%#lx,%#lx) missing from the free tree", (unsigned long)s, (unsigned long)e);
        CHECK(n->start == s && n->end == e, "free tree range %zu is [%#lx,%#lx), expected the run [%#lx,%#lx)",
              nranges, (unsigned long)n->start, (unsigned long)n->end, (unsigned long)s, (unsigned long)e);
        adsm__free_range *fr = adsm__range_of(n);
        CHECK(fr->size_class == adsm__floor_log2((uint64_t)(e - s)), "range [%#lx,%#lx) filed in class %d",
              (unsigned long)s, (unsigned long)e, fr->size_class);
        n = adsm__tree_next(n);
        nranges++;
        g = run_end;
    }
    CHECK(!n, "free tree has a range [%#lx,%#lx) beyond the reference's runs", (unsigned long)n->start,
          (unsigned long)n->end);
    CHECK(a->free_by_address.count == nranges, "tree count %zu, runs %zu", a->free_by_address.count, nranges);
    size_t listed = 0;
    for (int k = 0; k < ADSM__ARENA_CLASSES; k++) {
        int nonempty = (a->nonempty_classes >> k) & 1;
        CHECK(nonempty == (a->class_head[k] != NULL), "bitmap bit %d is %d but the list is %s", k, nonempty,
              a->class_head[k] ? "non-empty" : "empty");
        const adsm__free_range *prev = NULL;
        for (const adsm__free_range *r = a->class_head[k]; r; prev = r, r = r->next) {
            CHECK(r->prev == prev, "class %d list: broken prev link", k);
            CHECK(r->size_class == k, "class %d list holds a range of class %d", k, r->size_class);
            CHECK(adsm__tree_find(&a->free_by_address, r->by_address.start) == &r->by_address,
                  "class %d list holds a range that is not in the free tree", k);
            CHECK(++listed <= nranges, "class lists hold more ranges than the tree");
        }
    }
    CHECK(listed == nranges, "class lists hold %zu ranges, the tree %zu", listed, nranges);
    CHECK(adsm__arena_free_bytes(a) == ref_free_bytes(), "free bytes %zu, reference %zu", adsm__arena_free_bytes(a),
          ref_free_bytes());
}

static void ref_mark(uintptr_t addr, size_t rounded, uint8_t v) {
    for (size_t g = gran_of(addr); g < gran_of(addr) + rounded / granule; g++) owned[g] = v;
}

static void do_alloc(adsm__arena *a, size_t size, size_t align) {
    size_t before = adsm__arena_free_bytes(a);
    uintptr_t got = adsm__arena_alloc(a, size, align);
    size_t rounded = size == 0 ? granule : (size > SIZE_MAX - (granule - 1) ? 0 : ADSM__ALIGN_UP(size, granule));
    size_t eff_align = align < granule ? granule : align;
    if (!got) {
        CHECK(adsm__arena_free_bytes(a) == before, "refused alloc changed free bytes");
        if (rounded == 0 || !adsm__is_pow2(eff_align) || rounded > granules * granule) return;
        CHECK(!ref_fit_exists(rounded / granule, eff_align),
              "alloc(%zu, align %zu) refused although an aligned fit exists", size, align);
        return;
    }
    CHECK(adsm__is_pow2(eff_align), "alloc with non-power-of-two alignment %zu succeeded", align);
    CHECK(rounded != 0, "alloc(%zu) succeeded although its rounding overflows", size);
    CHECK(got % eff_align == 0, "alloc(%zu, align %zu) = %#lx is misaligned", size, align, (unsigned long)got);
    CHECK(got >= abase && got - abase <= granules * granule && granules * granule - (got - abase) >= rounded,
          "alloc(%zu) = %#lx outside the arena [%#lx, +%zu)", size, (unsigned long)got, (unsigned long)abase,
          granules * granule);
    for (size_t g = gran_of(got); g < gran_of(got) + rounded / granule; g++)
        CHECK(!owned[g], "alloc(%zu) = %#lx overlaps a live allocation at granule %zu", size, (unsigned long)got, g);
    CHECK(before - adsm__arena_free_bytes(a) == rounded, "alloc(%zu) took %zu bytes, expected %zu", size,
          before - adsm__arena_free_bytes(a), rounded);
    ref_mark(got, rounded, 1);
    if (nlive < MAX_LIVE) {
        live[nlive].addr = got;
        live[nlive].size = size;
        live[nlive].rounded = rounded;
        nlive++;
    } else { /* no room to remember it: give it back at once */
        adsm__arena_free(a, got, size);
        ref_mark(got, rounded, 0);
    }
}

static void do_free(adsm__arena *a, size_t i, size_t size_delta) {
    live_alloc l = live[i];
    size_t before = adsm__arena_free_bytes(a);
    /* any size that rounds the same way frees the same range */
    size_t size = l.size;
    if (size_delta && l.rounded - l.size >= size_delta) size = l.size + size_delta;
    adsm__arena_free(a, l.addr, size);
    CHECK(adsm__arena_free_bytes(a) - before == l.rounded, "free of %zu bytes at %#lx gave back %zu", l.rounded,
          (unsigned long)l.addr, adsm__arena_free_bytes(a) - before);
    ref_mark(l.addr, l.rounded, 0);
    live[i] = live[--nlive];
}

/* A free the arena must ignore: out of bounds, or overlapping free space. Ranges lying entirely
 * in allocated space cannot be told from real frees, so they are not tried. */
static void do_bogus_free(adsm__arena *a, uintptr_t addr, size_t size) {
    size_t rounded = size == 0 ? granule : (size > SIZE_MAX - (granule - 1) ? 0 : ADSM__ALIGN_UP(size, granule));
    uintptr_t end = addr + rounded;
    int outside = rounded == 0 || addr < abase || end < addr || end > abase + granules * granule;
    if (!outside) {
        int touches_free = 0;
        for (uintptr_t x = ADSM__ALIGN_DOWN(addr - abase, granule) + abase; x < end; x += granule)
            touches_free |= !owned[gran_of(x)];
        if (!touches_free) return;
    }
    size_t before = adsm__arena_free_bytes(a);
    adsm__arena_free(a, addr, size);
    CHECK(adsm__arena_free_bytes(a) == before, "bogus free [%#lx, +%zu) was not ignored", (unsigned long)addr, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    adsm__arena a;

    /* ---- the arena ---- */
    uint8_t shape = rd8(&r);
    unsigned gshift = rd8(&r) % 17; /* granule 1 .. 64K */
    granule = (size_t)1 << gshift;
    size_t ngran = 1 + rd16(&r) % MAX_GRANULES;
    size_t slack = rd16(&r) % granule; /* an arena size that is not a granule multiple */
    size_t base_off = (shape & 0x40) ? rd16(&r) % granule : 0; /* a misaligned base */
    uintptr_t base;
    switch (shape % 4) {
    case 0: base = 0; break;
    case 1: base = (uintptr_t)1 << 44; break;
    case 2: /* at the very top: the arena ends at UINTPTR_MAX, or would end at 2^64 (refused) */
        base = UINTPTR_MAX - (ngran * granule + slack) - base_off + ((shape >> 4) & 1);
        break;
    default: base = ((uintptr_t)rd16(&r) << 20); break;
    }
    base += base_off;
    size_t asize = ngran * granule + slack;

    if (shape & 0x80) { /* a non-power-of-two granule is refused */
        CHECK(adsm__arena_init(&a, base, asize, granule * 3) != 0 && errno == EINVAL, "granule %zu accepted",
              granule * 3);
        adsm__arena_destroy(&a);
    }
    if (adsm__arena_init(&a, base, asize, granule) != 0) {
        CHECK(asize > UINTPTR_MAX - base, "arena_init(%#lx, %zu, %zu) failed", (unsigned long)base, asize, granule);
        adsm__arena_destroy(&a);
        return 0;
    }
    CHECK(a.base != 0, "arena base 0 (0 is the no-fit answer)");
    CHECK(a.base % granule == 0 && a.size % granule == 0, "arena not granule-aligned");
    CHECK(a.base >= base && a.base - base + a.size <= asize, "arena [%#lx, +%zu) outside [%#lx, +%zu)",
          (unsigned long)a.base, a.size, (unsigned long)base, asize);
    abase = a.base;
    granules = a.size / granule;
    CHECK(granules <= MAX_GRANULES, "arena bigger than asked");
    memset(owned, 0, sizeof owned);
    nlive = 0;
    if (granules == 0) {
        CHECK(adsm__arena_alloc(&a, 1, 0) == 0, "alloc from an empty arena");
        adsm__arena_destroy(&a);
        return 0;
    }
    check_structure(&a);

    /* ---- operations ---- */
    size_t ops = 0;
    while (r.n && ops++ < 2048) {
        uint8_t op = rd8(&r);
        switch ((op & 0x3f) % 6) { /* bits 6-7 are flags */
        case 0:
        case 1: { /* alloc, mostly granule-sized */
            uint8_t k = rd8(&r);
            size_t sz;
            if (k < 200) sz = (size_t)(k % 32) * granule + (op & 0x80 ? rd8(&r) % granule : 0);
            else if (k < 240) sz = rd16(&r);
            else if (k < 250) sz = SIZE_MAX - rd8(&r); /* overflow while rounding */
            else sz = granules * granule - (op & 0x80 ? granule : 0); /* the whole arena */
            uint8_t al = rd8(&r);
            size_t align = al < 200 ? (al & 7 ? (size_t)1 << (al % 24) : 0) : (size_t)al; /* some not powers of 2 */
            do_alloc(&a, sz, align);
            break;
        }
        case 2:
        case 3: /* free a live allocation */
            if (nlive) do_free(&a, rd8(&r) % nlive, op & 0x80 ? rd8(&r) : 0);
            break;
        case 4: { /* bogus free */
            uintptr_t addr = abase + (uintptr_t)((int32_t)(int16_t)rd16(&r)) * (op & 0x80 ? 1 : (intptr_t)granule);
            size_t sz = (size_t)rd8(&r) * (op & 0x40 ? 1 : granule);
            do_bogus_free(&a, addr, sz);
            break;
        }
        default: /* free a live allocation twice: the second must be ignored */
            if (nlive) {
                size_t i = rd8(&r) % nlive;
                live_alloc l = live[i];
                do_free(&a, i, 0);
                do_bogus_free(&a, l.addr, l.size);
            }
            break;
        }
        check_structure(&a);
    }

    /* ---- coalescing: everything back makes one range, and the whole arena is allocatable ---- */
    while (nlive) do_free(&a, nlive - 1, 0);
    check_structure(&a);
    CHECK(a.free_by_address.count == 1, "%zu free ranges after freeing everything", a.free_by_address.count);
    uintptr_t whole = adsm__arena_alloc(&a, granules * granule, granule);
    CHECK(whole == abase, "allocating the whole arena gave %#lx, expected %#lx", (unsigned long)whole,
          (unsigned long)abase);
    adsm__arena_free(&a, whole, granules * granule);
    CHECK(adsm__arena_free_bytes(&a) == granules * granule, "free bytes after the whole-arena round trip");
    adsm__arena_destroy(&a);
    return 0;
}
