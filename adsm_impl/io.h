/* adsm_impl/io.h -- bulk memory on shared objects: adsm_memset and adsm_memcpy.
 *
 * Ranges are walked piece by piece: a piece never crosses a tracking unit (block or object) of a
 * shared object, and memory outside shared objects is handled as plain memory. For each shared
 * piece the protocol is told about the access first (a piece that overwrites a whole unit skips
 * the fetch of Invalid data), then the bytes are written with the runtime lock held, so no
 * eviction can race the write and the runtime never faults on its own accesses. Normal thread
 * context only. */
#ifndef ADSM__IO_INCLUDED
#define ADSM__IO_INCLUDED

/* The part of [a, a + n) that lies in one tracking unit of o (o may be NULL: plain memory up to
 * the next object). Sets *block and *whole (the piece covers every byte of the unit). */
ADSM__PRIVATE size_t adsm__piece(adsm__runtime *rt, adsm__object *o, uintptr_t a, size_t n, size_t *block,
                                 int *whole) {
    *block = 0;
    *whole = 0;
    if (!o) {
        adsm__tree_node *next = adsm__tree_ceil(&rt->objects, a);
        return next && next->start - a < n ? next->start - a : n;
    }
    size_t first, count;
    *block = adsm__tree_block_index(&o->node, a, rt->cfg.block_shift);
    adsm__unit_of(rt, o, *block, &first, &count);
    uintptr_t ustart = o->host + (first << rt->cfg.block_shift);
    uintptr_t uend = ustart + adsm__blocks_len(first, count, rt->cfg.block_shift, o->span);
    size_t len = ADSM__MIN(n, uend - a);
    uintptr_t data_end = ADSM__MIN(uend, o->host + o->size);
    *whole = a == ustart && a + len >= data_end;
    return len;
}

ADSM__PRIVATE adsm_result adsm__access_failed(void) {
    return adsm__fail(ADSM_ERROR_SYSTEM, "making shared memory accessible failed: %s", strerror(errno));
}

ADSM__PRIVATE adsm_result adsm__memset_impl(adsm__runtime *rt, uintptr_t d, int v, size_t n) {
    while (n > 0) {
        size_t block;
        int whole;
        adsm__lock(&rt->lock);
        adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, d));
        size_t len = adsm__piece(rt, o, d, n, &block, &whole);
        if (o && rt->proto->on_access(rt, o, block, 1, whole) != 0) {
            adsm__unlock(&rt->lock);
            return adsm__access_failed();
        }
        if (o) memset((void *)d, v, len);
        adsm__unlock(&rt->lock);
        if (!o) memset((void *)d, v, len); /* program memory: outside the lock, as plain memset */
        d += len;
        n -= len;
    }
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__memcpy_impl(adsm__runtime *rt, uintptr_t d, uintptr_t s, size_t n) {
    while (n > 0) {
        size_t dblock, sblock;
        int dwhole, swhole;
        adsm__lock(&rt->lock);
        adsm__object *od = adsm__object_of(adsm__tree_find(&rt->objects, d));
        adsm__object *os = adsm__object_of(adsm__tree_find(&rt->objects, s));
        size_t dlen = adsm__piece(rt, od, d, n, &dblock, &dwhole);
        size_t len = adsm__piece(rt, os, s, dlen, &sblock, &swhole);
        if (len < dlen) dwhole = 0; /* the source ends the piece early: a partial overwrite */
        int shared = od || os;
        if ((os && rt->proto->on_access(rt, os, sblock, 0, 0) != 0) ||
            (od && rt->proto->on_access(rt, od, dblock, 1, dwhole) != 0)) {
            adsm__unlock(&rt->lock);
            return adsm__access_failed();
        }
        if (shared) memmove((void *)d, (const void *)s, len);
        adsm__unlock(&rt->lock);
        if (!shared) memmove((void *)d, (const void *)s, len);
        d += len;
        s += len;
        n -= len;
    }
    return ADSM_OK;
}

#endif /* ADSM__IO_INCLUDED */
