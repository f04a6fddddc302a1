/* adsm_impl/arena.h -- virtual-address range allocator over one reserved range [base, base+size).
 *
 * Shared objects get their addresses from here, so host and device can use the same pointer
 * value. The arena only does bookkeeping on numbers; reserving and mapping memory is the
 * caller's job. Free ranges live in two indexes at once: an adsm__tree ordered by address, so a
 * freed range finds and merges with its free neighbours in O(log n), and segregated free lists by
 * power-of-two size class plus a bitmap of non-empty classes, so allocation finds a fitting range
 * without scanning every free range. Context: normal thread context only, under the runtime lock;
 * it calls malloc/free for its bookkeeping nodes and must never run in the signal handler. */
#ifndef ADSM__ARENA_INCLUDED
#define ADSM__ARENA_INCLUDED

#include "common.h"
#include "blocktree.h"

/* Class k holds free ranges whose length is in [2^k, 2^(k+1)). */
#define ADSM__ARENA_CLASSES 64
/* How many too-small ranges we look at in the request's own class before preferring a bigger
 * class; bounds the allocation cost when that class is crowded with near misses. */
#define ADSM__ARENA_SCAN_LIMIT 16

typedef struct adsm__free_range {
    adsm__tree_node by_address;          /* start/end of the free range */
    struct adsm__free_range *next, *prev; /* links in the size-class list */
    int size_class;
} adsm__free_range;

typedef struct adsm__arena {
    uintptr_t base;
    size_t size;
    size_t granule;
    size_t guard; /* bytes left free after every allocation (0; emu's ADSM_EMU_CHECK_BOUNDS sets a
                     page before the first one: backend_emu.h); alloc and free add it alike */
    size_t free_bytes;
    adsm__tree free_by_address;
    adsm__free_range *class_head[ADSM__ARENA_CLASSES];
    uint64_t nonempty_classes;   /* bit k set iff class_head[k] != NULL */
    adsm__free_range *spare_nodes; /* recycled nodes (linked by next) to spare malloc churn */
} adsm__arena;

/* ---- small helpers --------------------------------------------------------------------------- */

ADSM__PRIVATE int adsm__floor_log2(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
    return 63 - __builtin_clzll((unsigned long long)x);
#else
    int r = 0;
    while (x >>= 1) r++;
    return r;
#endif
}

ADSM__PRIVATE int adsm__lowest_bit(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_ctzll((unsigned long long)x);
#else
    int r = 0;
    while (!(x & 1)) x >>= 1, r++;
    return r;
#endif
}

ADSM__PRIVATE int adsm__is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

ADSM__PRIVATE uintptr_t adsm__range_start(const adsm__free_range *r) { return r->by_address.start; }
ADSM__PRIVATE uintptr_t adsm__range_end(const adsm__free_range *r) { return r->by_address.end; }

ADSM__PRIVATE adsm__free_range *adsm__range_of(adsm__tree_node *n) {
    return n ? ADSM__CONTAINER_OF(n, adsm__free_range, by_address) : NULL;
}

/* Requests of 0 bytes are treated as one granule so alloc and free round the same way and every
 * allocation owns a distinct address. Returns 0 if rounding would overflow. */
ADSM__PRIVATE size_t adsm__arena_round(const adsm__arena *a, size_t size) {
    if (size == 0) return a->granule;
    if (size > SIZE_MAX - (a->granule - 1)) return 0;
    return (size_t)ADSM__ALIGN_UP(size, a->granule);
}

/* ---- node storage ---------------------------------------------------------------------------- */

ADSM__PRIVATE adsm__free_range *adsm__arena_new_node(adsm__arena *a) {
    adsm__free_range *r = a->spare_nodes;
    if (r) {
        a->spare_nodes = r->next;
        return r;
    }
    return (adsm__free_range *)malloc(sizeof(adsm__free_range));
}

ADSM__PRIVATE void adsm__arena_recycle_node(adsm__arena *a, adsm__free_range *r) {
    r->next = a->spare_nodes;
    a->spare_nodes = r;
}

/* ---- size-class lists ------------------------------------------------------------------------ */

ADSM__PRIVATE void adsm__class_push(adsm__arena *a, adsm__free_range *r) {
    int k = adsm__floor_log2((uint64_t)(adsm__range_end(r) - adsm__range_start(r)));
    r->size_class = k;
    r->prev = NULL;
    r->next = a->class_head[k];
    if (r->next) r->next->prev = r;
    a->class_head[k] = r;
    a->nonempty_classes |= (uint64_t)1 << k;
}

ADSM__PRIVATE void adsm__class_unlink(adsm__arena *a, adsm__free_range *r) {
    int k = r->size_class;
    if (r->prev)
        r->prev->next = r->next;
    else
        a->class_head[k] = r->next;
    if (r->next) r->next->prev = r->prev;
    if (!a->class_head[k]) a->nonempty_classes &= ~((uint64_t)1 << k);
}

/* Call after a range's bounds changed: its length may now belong to another class. */
ADSM__PRIVATE void adsm__class_refile(adsm__arena *a, adsm__free_range *r) {
    int k = adsm__floor_log2((uint64_t)(adsm__range_end(r) - adsm__range_start(r)));
    if (k == r->size_class) return;
    adsm__class_unlink(a, r);
    adsm__class_push(a, r);
}

/* ---- free-range set: both indexes together --------------------------------------------------- */

ADSM__PRIVATE void adsm__arena_add_range(adsm__arena *a, adsm__free_range *r, uintptr_t start, uintptr_t end) {
    r->by_address.start = start;
    r->by_address.end = end;
    adsm__tree_insert(&a->free_by_address, &r->by_address); /* cannot overlap: caller owns [start,end) */
    adsm__class_push(a, r);
}

ADSM__PRIVATE void adsm__arena_drop_range(adsm__arena *a, adsm__free_range *r) {
    adsm__tree_remove(&a->free_by_address, &r->by_address);
    adsm__class_unlink(a, r);
    adsm__arena_recycle_node(a, r);
}

/* ---- public-to-the-runtime interface --------------------------------------------------------- */

ADSM__PRIVATE int adsm__arena_init(adsm__arena *a, uintptr_t base, size_t size, size_t granule) {
    adsm__free_range *whole;
    uintptr_t start, end;
    memset(a, 0, sizeof(*a));
    adsm__tree_init(&a->free_by_address);
    if (!adsm__is_pow2(granule) || size > UINTPTR_MAX - base) {
        errno = EINVAL;
        return -1;
    }
    /* Address 0 is the "no fit" answer of alloc, so it may never be handed out. */
    start = ADSM__ALIGN_UP(base == 0 ? (uintptr_t)granule : base, granule);
    end = ADSM__ALIGN_DOWN(base + size, granule);
    a->granule = granule;
    a->base = start;
    a->size = (start >= base && end > start) ? (size_t)(end - start) : 0; /* start < base: wrapped */
    if (a->size == 0) return 0;
    whole = adsm__arena_new_node(a);
    if (!whole) {
        errno = ENOMEM;
        return -1;
    }
    adsm__arena_add_range(a, whole, start, end);
    a->free_bytes = a->size;
    return 0;
}

/* Where an allocation of size/align would start inside r, or 0 if it does not fit. */
ADSM__PRIVATE uintptr_t adsm__range_fit(const adsm__free_range *r, size_t size, size_t align) {
    uintptr_t aligned = ADSM__ALIGN_UP(adsm__range_start(r), align);
    if (aligned < adsm__range_start(r)) return 0; /* wrapped past the top of the address space */
    if (aligned > adsm__range_end(r) || adsm__range_end(r) - aligned < size) return 0;
    return aligned;
}

/* First fitting range of class k, looking at no more than limit entries (limit 0: no bound). */
ADSM__PRIVATE adsm__free_range *adsm__class_search(adsm__arena *a, int k, size_t size, size_t align, size_t limit,
                                                   uintptr_t *where) {
    adsm__free_range *r;
    size_t seen = 0;
    for (r = a->class_head[k]; r && (limit == 0 || seen < limit); r = r->next, seen++) {
        *where = adsm__range_fit(r, size, align);
        if (*where) return r;
    }
    return NULL;
}

ADSM__PRIVATE adsm__free_range *adsm__arena_find_fit(adsm__arena *a, size_t size, size_t align, uintptr_t *where) {
    int own_class = adsm__floor_log2((uint64_t)size);
    uint64_t bigger;
    adsm__free_range *r = adsm__class_search(a, own_class, size, align, ADSM__ARENA_SCAN_LIMIT, where);
    if (r) return r;
    /* Every range in a bigger class is long enough; only alignment padding can make it miss, so
     * with page alignment the first range looked at fits. */
    bigger = own_class + 1 < ADSM__ARENA_CLASSES ? a->nonempty_classes & (~(uint64_t)0 << (own_class + 1)) : 0;
    while (bigger) {
        int k = adsm__lowest_bit(bigger);
        r = adsm__class_search(a, k, size, align, 0, where);
        if (r) return r;
        bigger &= bigger - 1;
    }
    /* Last resort: the own class beyond the scan limit (slow, only when nothing else fits). */
    return adsm__class_search(a, own_class, size, align, 0, where);
}

/* Takes [at, at+size) out of free range r, keeping the pieces before and after it free. */
ADSM__PRIVATE int adsm__arena_carve(adsm__arena *a, adsm__free_range *r, uintptr_t at, size_t size) {
    uintptr_t start = adsm__range_start(r), end = adsm__range_end(r), after = at + size;
    int has_front = at > start, has_back = after < end;
    if (has_front && has_back) {
        /* Two leftovers need two nodes; get the second before touching anything. */
        adsm__free_range *back = adsm__arena_new_node(a);
        if (!back) return -1;
        r->by_address.end = at; /* start unchanged, so tree order is unchanged */
        adsm__class_refile(a, r);
        adsm__arena_add_range(a, back, after, end);
    } else if (has_front) {
        r->by_address.end = at;
        adsm__class_refile(a, r);
    } else if (has_back) {
        /* Moving start forward inside its own range keeps it between its neighbours. */
        r->by_address.start = after;
        adsm__class_refile(a, r);
    } else {
        adsm__arena_drop_range(a, r);
    }
    a->free_bytes -= size;
    return 0;
}

ADSM__PRIVATE uintptr_t adsm__arena_alloc(adsm__arena *a, size_t size, size_t align) {
    adsm__free_range *r;
    uintptr_t where = 0;
    size = adsm__arena_round(a, size);
    if (size == 0 || size > SIZE_MAX - a->guard) return 0;
    size += a->guard;
    if (size > a->free_bytes) return 0;
    if (align < a->granule) align = a->granule;
    if (!adsm__is_pow2(align)) return 0;
    r = adsm__arena_find_fit(a, size, align, &where);
    if (!r || adsm__arena_carve(a, r, where, size) != 0) return 0;
    return where;
}

ADSM__PRIVATE void adsm__arena_free(adsm__arena *a, uintptr_t addr, size_t size) {
    adsm__free_range *before, *after, *r;
    uintptr_t end;
    size = adsm__arena_round(a, size);
    if (size > SIZE_MAX - a->guard) return;
    size += a->guard;
    end = addr + size;
    /* Ranges outside the arena or already free are caller bugs; ignoring them keeps the free
     * set consistent instead of corrupting it. */
    if (size == 0 || addr < a->base || end < addr || end > a->base + a->size) return;
    before = adsm__range_of(adsm__tree_floor(&a->free_by_address, addr));
    after = adsm__range_of(adsm__tree_ceil(&a->free_by_address, addr));
    if ((before && adsm__range_end(before) > addr) || (after && adsm__range_start(after) < end)) return;

    if (before && adsm__range_end(before) == addr && after && adsm__range_start(after) == end) {
        uintptr_t merged_end = adsm__range_end(after);
        adsm__arena_drop_range(a, after);
        before->by_address.end = merged_end;
        adsm__class_refile(a, before);
    } else if (before && adsm__range_end(before) == addr) {
        before->by_address.end = end;
        adsm__class_refile(a, before);
    } else if (after && adsm__range_start(after) == end) {
        after->by_address.start = addr; /* nothing free lies between, so order is kept */
        adsm__class_refile(a, after);
    } else {
        r = adsm__arena_new_node(a);
        if (!r) return; /* out of memory: the range is lost to the arena, but nothing breaks */
        adsm__arena_add_range(a, r, addr, end);
    }
    a->free_bytes += size;
}

ADSM__PRIVATE size_t adsm__arena_free_bytes(const adsm__arena *a) { return a->free_bytes; }

/* Whether all of [lo, hi) is free (an empty range is): free ranges are kept merged, so it lies in
 * one. */
ADSM__PRIVATE int adsm__arena_is_free(const adsm__arena *a, uintptr_t lo, uintptr_t hi) {
    if (lo >= hi) return 1;
    adsm__free_range *r = adsm__range_of(adsm__tree_floor(&a->free_by_address, lo));
    return r && adsm__range_end(r) >= hi;
}

ADSM__PRIVATE void adsm__arena_destroy(adsm__arena *a) {
    /* Post-order walk: free leaves and cut them off, so no freed node is ever read again. */
    adsm__tree_node *n = a->free_by_address.root;
    while (n) {
        if (n->left) {
            n = n->left;
        } else if (n->right) {
            n = n->right;
        } else {
            adsm__tree_node *parent = n->parent;
            if (parent && parent->left == n)
                parent->left = NULL;
            else if (parent)
                parent->right = NULL;
            free(adsm__range_of(n));
            n = parent;
        }
    }
    while (a->spare_nodes) {
        adsm__free_range *next = a->spare_nodes->next;
        free(a->spare_nodes);
        a->spare_nodes = next;
    }
    memset(a, 0, sizeof(*a));
}

#endif /* ADSM__ARENA_INCLUDED */
