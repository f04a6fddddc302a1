/* adsm_impl/object_life.h -- creating and destroying shared objects and device buffers: address
 * ranges from the arenas, device memory from the backend, the block tree, the list of live
 * objects, the initial protection from the protocol.
 *
 * Normal thread context, runtime lock held (the callers in api.h take it): these allocate,
 * map and call backend verbs that may block. */
#ifndef ADSM__OBJECT_LIFE_INCLUDED
#define ADSM__OBJECT_LIFE_INCLUDED

ADSM__PRIVATE void adsm__object_destroy(adsm__object *o) {
    free(o->blocks);
    free(o);
}

ADSM__PRIVATE void adsm__list_append(adsm__runtime *rt, adsm__object *o) {
    o->prev = rt->last_object;
    o->next = NULL;
    if (rt->last_object) rt->last_object->next = o;
    else rt->first_object = o;
    rt->last_object = o;
}

ADSM__PRIVATE void adsm__list_remove(adsm__runtime *rt, adsm__object *o) {
    if (o->prev) o->prev->next = o->next;
    else rt->first_object = o->next;
    if (o->next) o->next->prev = o->prev;
    else rt->last_object = o->prev;
}

/* Undoes what adsm__object_create did so far (stage: 1 address, 2 device, 3 tree, 4 listed). */
ADSM__PRIVATE void adsm__object_unwind(adsm__runtime *rt, adsm__object *o, int stage) {
    if (stage >= 4) {
        adsm__list_remove(rt, o);
        rt->nobjects--;
        rt->object_bytes -= o->size;
        rt->tracked_blocks -= o->nblocks;
        rt->device_used -= o->span;
    }
    if (stage >= 3) {
        adsm__tree_remove(&rt->objects, &o->node);
        if (o->safe) adsm__tree_remove(&rt->safe_dev, &o->dev_node);
    }
    if (stage >= 2) rt->be->dev_free(rt->be_ctx, o->dev, o->span);
    if (stage >= 1 && o->device_only) {
        adsm__arena_free(&rt->va_shared, o->dev, o->span);
    } else if (stage >= 1) {
        if (o->locked) rt->be->host_unlock(rt->be_ctx, o->host, o->span); /* before the pages go */
        madvise((void *)o->host, o->span, MADV_DONTNEED); /* the next object here starts zeroed */
        adsm__protect(o->host, o->span, PROT_NONE);
        adsm__arena_free(o->safe ? &rt->va_safe : &rt->va_shared, o->host, o->span);
        if (o->safe) adsm__arena_free(&rt->va_shared, o->dev, o->span);
    }
    adsm__object_destroy(o);
}

/* Objects of at least one block start on a block boundary (blocks then match huge pages); smaller
 * ones on a page. */
ADSM__PRIVATE size_t adsm__object_align(const adsm__runtime *rt, size_t span) {
    return span >= rt->cfg.block_size ? rt->cfg.block_size : rt->page;
}

/* Whether the device has room for span more bytes (shared objects and device buffers share it);
 * the error names the call. Lock held. */
ADSM__PRIVATE adsm_result adsm__device_room(adsm__runtime *rt, size_t size, size_t span, const char *fn) {
    size_t capacity = rt->be->capacity(rt->be_ctx);
    if (span <= capacity && rt->device_used <= capacity - span) return ADSM_OK;
    return adsm__fail(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "%s(%zu): the %s device has %zu of its %zu bytes free", fn,
                      size, rt->be->name, capacity - ADSM__MIN(capacity, rt->device_used), capacity);
}

/* Touches every page of a fresh bookkeeping array now, so that the fault handler, which reads
 * one block record per fault, never takes a page fault (and a zeroing) on it: a large object's
 * array is tens of MiB, and first touches would make faults on large objects slower than on
 * small ones. */
ADSM__PRIVATE void adsm__prefault(void *p, size_t n, size_t page) {
    volatile unsigned char *b = (volatile unsigned char *)p;
    for (size_t off = 0; off < n; off += page) b[off] = 0;
}

/* Where the backend can (cuda), the object's host pages are page-locked with the driver, so its
 * copies are DMA straight between them and device memory. The driver pins pages for writing,
 * so the range is made writable first (the protocol protects it right after, in on_alloc);
 * pinned pages stay pinned whatever their protection later, and DMA ignores the protection. */
ADSM__PRIVATE void adsm__object_lock_pages(adsm__runtime *rt, adsm__object *o) {
    if (!rt->be->host_lock || !rt->be->moves_data) return;
    if (adsm__protect(o->host, o->span, PROT_READ | PROT_WRITE) != 0) return;
    o->locked = rt->be->host_lock(rt->be_ctx, o->host, o->span);
}

ADSM__PRIVATE adsm_result adsm__object_create(adsm__runtime *rt, size_t size, int safe, const char *fn,
                                              adsm__object **out) {
    size_t span = ADSM__ALIGN_UP(size, rt->page), align = adsm__object_align(rt, span);
    adsm_result room = adsm__device_room(rt, size, span, fn);
    if (room != ADSM_OK) return room;
    adsm__object *o = (adsm__object *)calloc(1, sizeof *o);
    size_t nblocks = (span + rt->cfg.block_size - 1) >> rt->cfg.block_shift;
    if (o) o->blocks = (adsm__block *)calloc(nblocks, sizeof *o->blocks);
    if (!o || !o->blocks) {
        if (o) adsm__object_destroy(o);
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "out of host memory for the bookkeeping of %zu bytes", size);
    }
    adsm__prefault(o->blocks, nblocks * sizeof *o->blocks, rt->page);
    o->size = size;
    o->span = span;
    o->nblocks = nblocks;
    o->safe = safe;
    for (size_t b = 0; b < nblocks; b++) {
        o->blocks[b].obj = o;
        o->blocks[b].index = (uint32_t)b;
    }
    o->host = adsm__arena_alloc(safe ? &rt->va_safe : &rt->va_shared, span, align);
    o->dev = safe && o->host ? adsm__arena_alloc(&rt->va_shared, span, align) : o->host;
    if (!o->host || !o->dev) {
        if (o->host && safe) adsm__arena_free(&rt->va_safe, o->host, span);
        adsm__object_destroy(o);
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "out of shared address space for %zu bytes", size);
    }
    adsm_result r = rt->be->dev_alloc(rt->be_ctx, o->dev, span);
    if (r != ADSM_OK) {
        adsm__object_unwind(rt, o, 1);
        return r;
    }
    adsm__object_lock_pages(rt, o);
    o->node.start = o->host;
    o->node.end = o->host + span;
    o->dev_node.start = o->dev;
    o->dev_node.end = o->dev + span;
    adsm__tree_insert(&rt->objects, &o->node);
    if (safe) adsm__tree_insert(&rt->safe_dev, &o->dev_node);
    adsm__list_append(rt, o);
    rt->nobjects++;
    rt->object_bytes += size;
    rt->tracked_blocks += nblocks;
    rt->device_used += span;
    if (rt->proto->on_alloc(rt, o) != 0) {
        int e = errno;
        adsm__object_unwind(rt, o, 4);
        return adsm__fail(ADSM_ERROR_SYSTEM, "mprotect of a new object failed: %s", strerror(e));
    }
    *out = o;
    return ADSM_OK;
}

#endif /* ADSM__OBJECT_LIFE_INCLUDED */
