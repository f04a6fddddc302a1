/* adsm_impl/object_life.h -- creating and destroying shared objects and device buffers: address
 * ranges from the arenas, device memory from the backend, the block tree, the list of live
 * objects, the initial protection from the protocol.
 *
 * Normal thread context. adsm__object_create and adsm__object_retire take the runtime lock
 * themselves and let it go around the slow parts (the bookkeeping of a large object, page-locking
 * its host pages with the driver, giving its memory back), which touch nothing another thread can
 * reach: the address range stays taken in its arena until the end. The others run with the lock
 * held. */
#ifndef ADSM__OBJECT_LIFE_INCLUDED
#define ADSM__OBJECT_LIFE_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "arena.h"
#include "object.h"
#include "runtime.h"
#include "reservation.h"
#include "directory.h"
#include "trace.h"
#include "prepare.h"
#include "host_pages.h"

ADSM__PRIVATE void adsm__object_destroy(adsm__object *o) {
    free(o->blocks);
    free(o->block_bits);
    free(o->twin);
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

/* Stages of adsm__object_create: 1 address range, 2 device memory, 3 in the tree, 4 listed. */
/* Takes a created object out of everything another thread can find it through (stages 4, 3). */
ADSM__PRIVATE void adsm__object_unlist(adsm__runtime *rt, adsm__object *o, int stage) {
    if (stage >= 4) {
        adsm__list_remove(rt, o);
        rt->nobjects--;
        rt->object_bytes -= o->size;
        rt->tracked_blocks -= o->nblocks;
        if (o->type) { /* translate.h */
            rt->typed_objects--;
            rt->typed_bytes -= o->size;
        }
        o->type = NULL;
    }
    if (stage >= 3) {
        adsm__tree_remove(&rt->objects, &o->node);
        if (o->safe) adsm__tree_remove(&rt->safe_dev, &o->dev_node);
        if (o->safe) rt->safe_objects--;
    }
}

/* Releases a shared object's memory on devices [0, ndev): where adsm_alloc backed it, or, where
 * memory follows residence (cuda, several GPUs), on the devices holding it (its bytes there stop
 * counting in adsm__object_uncharge). */
ADSM__PRIVATE void adsm__object_dev_free(adsm__runtime *rt, adsm__object *o, unsigned ndev) {
    for (unsigned d = 0; d < ndev; d++)
        if (!adsm__mapped_on_charge(rt) || (o->dev_resident & adsm__dev_bit(d))) {
            uint64_t t0 = adsm__now_ns();
            rt->be->dev_free(rt->dev_ctx[d], o->dev, o->span);
            adsm__trace(&rt->trace, ADSM__TR_DEV_MEMORY, t0, o->dev, 0);
        }
}

/* Memory for o on every live device (each holds every object at the same address); on failure
 * none. With several devices a device found lost here is marked and skipped, and the new
 * object's units are current on the live devices only (fresh memory is zeroed, as the host's);
 * where memory follows residence, it is mapped (zeroed) only once a device holds the object. */
ADSM__PRIVATE adsm_result adsm__object_dev_alloc(adsm__runtime *rt, adsm__object *o) {
    for (unsigned d = 0; d < rt->ndev && !adsm__mapped_on_charge(rt); d++) {
        if (adsm__lost_devices(rt) & adsm__dev_bit(d)) continue;
        uint64_t t0 = adsm__now_ns();
        adsm_result r = rt->be->dev_alloc(rt->dev_ctx[d], o->dev, o->span);
        adsm__trace(&rt->trace, ADSM__TR_DEV_MEMORY, t0, o->dev, o->span);
        if (r == ADSM_ERROR_DEVICE_LOST && rt->ndev > 1 && adsm__live_devices(rt) != adsm__dev_bit(d)) {
            adsm__mark_lost(rt, d);
            continue;
        }
        if (r != ADSM_OK) {
            adsm__object_dev_free(rt, o, d);
            return r;
        }
    }
    for (size_t b = 0; b < o->nblocks; b++) o->blocks[b].dev_valid = adsm__live_devices(rt);
    return ADSM_OK;
}

/* An adsm_host_alloc buffer given back, its record unlinked already: unlocked with the driver
 * (before the pages go), unmapped, the record freed (adsm_host_free, and adsm_shutdown for those
 * still live). No lock needed. */
ADSM__PRIVATE void adsm__host_buffer_release(adsm__runtime *rt, adsm__host_buffer *b) {
    uintptr_t at = b->node.start;
    size_t span = b->node.end - b->node.start;
    if (b->locked) rt->be->host_unlock(rt->be_ctx, at, span);
    munmap((void *)at, span);
    free(b);
}

/* The protection change at an object's free failed: the program unmapped part of it (or mapped
 * over it), or the kernel refused to split a mapping at vm.max_map_count. The range, back in the
 * arena, failed every later allocation there. Maps the range
 * again as the reservation holds it: plain, or a second view of the alias's pages (mremap of a
 * shared mapping with old size 0 makes one). 1 when done. */
ADSM__PRIVATE int adsm__remap_range(const adsm__runtime *rt, uintptr_t host, size_t n) {
    uintptr_t alias = adsm__host_dma(rt, host);
    int hole = adsm__range_unmapped(host, n);
    void *p = alias == host
                  ? mmap((void *)host, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0)
                  : mremap((void *)alias, 0, n, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)host);
    if (p == MAP_FAILED || adsm__protect(host, n, PROT_NONE) != 0) {
        if (hole)
            adsm__log(ADSM_LOG_WARN, "adsm_free: the object at %p was unmapped by the program and cannot be mapped "
                      "again (%s): its %zu bytes of address range stay unused", (void *)host, strerror(errno), n);
        else /* all mapped, and the kernel refused the change: a split needing a mapping over the limit */
            adsm__log(ADSM_LOG_WARN, "adsm_free: the object at %p cannot be protected again (%s)%s: its %zu bytes of "
                      "address range stay unused", (void *)host, strerror(errno),
                      errno == ENOMEM ? ": " ADSM__MAP_LIMIT_HINT : "", n);
        return 0;
    }
    if (alias != host) madvise((void *)host, n, MADV_DONTFORK);
    return 1;
}

/* Gives back what only this object uses (stage 2: device memory; 1: host pages; managed or hmm
 * memory at any stage): no lock needed. */
ADSM__PRIVATE void adsm__object_give_back(adsm__runtime *rt, adsm__object *o, int stage) {
    if (o->managed) adsm__note_freed_outside(rt, o->host, o->span);
    if (o->managed && rt->proto->system_memory) {
        munmap((void *)o->host, o->span);
        return;
    }
    if (o->managed) {
        rt->be->managed_free(rt->be_ctx, o->host);
        return;
    }
    if (stage >= 2) adsm__object_dev_free(rt, o, rt->ndev);
    if (stage >= 1 && !o->device_only) {
        uint64_t t0 = adsm__now_ns();
        if (o->locked) rt->be->host_unlock(rt->be_ctx, adsm__host_dma(rt, o->host), o->span); /* before the pages go */
        adsm__host_pages_release(rt, o->host, o->span); /* the next object here starts zeroed */
        adsm__trace(&rt->trace, ADSM__TR_PAGE_UNLOCK, t0, o->host, o->span);
        if (adsm__protect(o->host, o->span, PROT_NONE) != 0) o->range_lost = !adsm__remap_range(rt, o->host, o->span);
    }
}

/* Gives back the device room o took (its memory went in adsm__object_dev_free): with one device
 * from its allocation, with several on the devices holding it (capacity.h). */
ADSM__PRIVATE void adsm__object_uncharge(adsm__runtime *rt, adsm__object *o) {
    if (rt->ndev == 1) {
        rt->device_used -= o->span;
        return;
    }
    for (unsigned d = 0; d < rt->ndev; d++) (void)adsm__uncount(rt, o, d);
}

/* Returns the address range to its arena (and the device room), then frees the bookkeeping. */
ADSM__PRIVATE void adsm__object_unreserve(adsm__runtime *rt, adsm__object *o, int stage) {
    if (o->managed) stage = 0; /* no range, no device room taken */
    if (stage >= 2) adsm__object_uncharge(rt, o);
    if (stage >= 1 && o->device_only) {
        adsm__arena_free(&rt->va_shared, o->dev, o->span);
    } else if (stage >= 1) {
        if (!o->safe) adsm__alias_release_regions(rt, o->host, o->span); /* before others may take them */
        if (!o->range_lost) adsm__arena_free(o->safe ? &rt->va_safe : &rt->va_shared, o->host, o->span);
        if (o->safe) adsm__arena_free(&rt->va_shared, o->dev, o->span);
    }
    adsm__object_destroy(o);
}

/* Undoes what adsm__object_create did so far, all under the runtime lock. */
ADSM__PRIVATE void adsm__object_unwind(adsm__runtime *rt, adsm__object *o, int stage) {
    adsm__object_unlist(rt, o, stage);
    adsm__object_give_back(rt, o, stage);
    adsm__object_unreserve(rt, o, stage);
}

/* Frees a live object: out of the tree and the list under the lock, its memory given back with
 * the lock let go (page-unlocking and unmapping are driver calls on cuda), its address range
 * returned under the lock again. Entered and left with the lock held. */
ADSM__PRIVATE void adsm__object_retire(adsm__runtime *rt, adsm__object *o) {
    adsm__object_unlist(rt, o, 4);
    adsm__unlock(&rt->lock);
    adsm__object_give_back(rt, o, 4);
    adsm__lock(&rt->lock);
    adsm__object_unreserve(rt, o, 4);
}

/* Objects of at least one block start on a block boundary (blocks then match huge pages); smaller
 * ones on a page. */
ADSM__PRIVATE size_t adsm__object_align(const adsm__runtime *rt, size_t span) {
    return span >= rt->cfg.block_size ? rt->cfg.block_size : rt->page;
}

/* Whether the device has room for span more bytes (shared objects and device buffers share it);
 * the error names the call. With several devices a shared object takes room only where it is
 * used (capacity.h) and must fit one device. Lock held. */
ADSM__PRIVATE adsm_result adsm__device_room(adsm__runtime *rt, size_t size, size_t span, const char *fn) {
    size_t capacity = rt->be->capacity(rt->be_ctx);
    if (rt->ndev > 1 && span <= capacity) return ADSM_OK;
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

/* The bookkeeping of a new object (tens of MiB for a large one with small blocks), touched
 * through, before anything is reserved. NULL when out of memory. */
ADSM__PRIVATE adsm__object *adsm__object_new(const adsm__runtime *rt, size_t size, int safe) {
    size_t span = ADSM__ALIGN_UP(size, rt->page);
    size_t nblocks = (span + rt->cfg.block_size - 1) >> rt->cfg.block_shift;
    adsm__object *o = (adsm__object *)calloc(1, sizeof *o);
    if (o) o->blocks = (adsm__block *)calloc(nblocks, sizeof *o->blocks);
    if (!o || !o->blocks) {
        if (o) adsm__object_destroy(o);
        return NULL;
    }
    adsm__prefault(o->blocks, nblocks * sizeof *o->blocks, rt->page);
    o->size = size;
    o->span = span;
    o->nblocks = nblocks;
    o->safe = safe;
    o->affinity = -1;
    for (size_t b = 0; b < nblocks; b++) {
        o->blocks[b].obj = o;
        o->blocks[b].index = (uint32_t)b;
    }
    return o;
}

/* Address range and device memory for o, counted in the device room at once so that other
 * threads' allocations see it. Lock held; o is freed on failure. */
ADSM__PRIVATE adsm_result adsm__object_reserve(adsm__runtime *rt, adsm__object *o, const char *fn) {
    size_t align = adsm__object_align(rt, o->span), size = o->size;
    adsm_result r = adsm__device_room(rt, o->size, o->span, fn);
    if (r != ADSM_OK) {
        adsm__object_destroy(o);
        return r;
    }
    o->host = adsm__arena_alloc(o->safe ? &rt->va_safe : &rt->va_shared, o->span, align);
    o->dev = o->safe && o->host ? adsm__arena_alloc(&rt->va_shared, o->span, align) : o->host;
    if (!o->host || !o->dev) {
        if (o->host && o->safe) adsm__arena_free(&rt->va_safe, o->host, o->span);
        adsm__object_destroy(o);
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "out of shared address space for %zu bytes", size);
    }
    if ((r = adsm__object_dev_alloc(rt, o)) != ADSM_OK) {
        adsm__object_unwind(rt, o, 1);
        return r;
    }
    if (rt->ndev == 1) rt->device_used += o->span; /* several: charged where it is used */
    return ADSM_OK;
}

/* Makes o findable (tree, list, counts) with the protocol's initial state. Lock held. */
ADSM__PRIVATE adsm_result adsm__object_publish(adsm__runtime *rt, adsm__object *o) {
    o->node.start = o->host;
    o->node.end = o->host + o->span;
    o->dev_node.start = o->dev;
    o->dev_node.end = o->dev + o->span;
    adsm__tree_insert(&rt->objects, &o->node);
    if (o->safe) adsm__tree_insert(&rt->safe_dev, &o->dev_node);
    if (o->safe) rt->safe_objects++;
    adsm__list_append(rt, o);
    rt->nobjects++;
    rt->object_bytes += o->size;
    rt->tracked_blocks += o->nblocks;
    adsm__deal_affinity(rt, o);
    if (rt->proto->on_alloc(rt, o) != 0) {
        int e = errno;
        adsm__object_unwind(rt, o, 4);
        if (e == ENOMEM) /* the usual cause: each protected run is a mapping */
            return adsm__fail(ADSM_ERROR_SYSTEM, "protecting a new object failed (ENOMEM): " ADSM__MAP_LIMIT_HINT);
        return adsm__fail(ADSM_ERROR_SYSTEM, "mprotect of a new object failed: %s", strerror(e));
    }
    return ADSM_OK;
}

/* Plain host memory for an hmm object (protocol_um.h): anonymous pages, zeroed, as malloc gives a
 * large array; the device reaches them itself. */
ADSM__PRIVATE adsm_result adsm__system_alloc(size_t span, const char *fn, uintptr_t *addr) {
    void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "%s(%zu): no host memory (mmap: %s)", fn, span, strerror(errno));
    *addr = (uintptr_t)p;
    return ADSM_OK;
}

/* Creates an object in the backend's managed memory, or in plain host memory under hmm, for the
 * protocols that want it (protocol_um.h): no range of adsm's, no device memory or page-locking of
 * its own, nothing charged to the device's room (managed memory may exceed it); one address on
 * both sides, so a "safe" object is an ordinary one. Called without the runtime lock. */
ADSM__PRIVATE adsm_result adsm__object_create_managed(adsm__runtime *rt, size_t size, const char *fn,
                                                      adsm__object **out) {
    adsm__object *o = adsm__object_new(rt, size, 0);
    if (!o) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "out of host memory for the bookkeeping of %zu bytes", size);
    uintptr_t addr = 0;
    /* the backend's message names the driver call */
    adsm_result r = rt->proto->system_memory ? adsm__system_alloc(o->span, fn, &addr)
                                             : rt->be->managed_alloc(rt->be_ctx, o->span, &addr);
    if (r != ADSM_OK) {
        adsm__object_destroy(o);
        return r;
    }
    o->host = o->dev = addr;
    o->managed = 1;
    adsm__forget_freed_outside(rt, addr, o->span);
    adsm__lock(&rt->lock);
    r = adsm__object_publish(rt, o);
    adsm__unlock(&rt->lock);
    if (r == ADSM_OK) *out = o;
    return r;
}

/* Creates a shared object. Called without the runtime lock; takes it for the reservation and the
 * publication, and lets it go while the host pages are page-locked (cuda: 1-2 GB/s in the
 * driver), when nothing else can reach the object yet. */
ADSM__PRIVATE adsm_result adsm__object_create(adsm__runtime *rt, size_t size, int safe, const char *fn,
                                              adsm__object **out) {
    if (rt->proto->managed) return adsm__object_create_managed(rt, size, fn, out);
    /* the host backend's kernels run on the host pages themselves, and nothing is ever copied: a
     * device address apart from them would be memory nobody fills (its kernels read zeros, and
     * their writes never reached the CPU), so a safe object is an ordinary one there */
    if (!rt->be->moves_data) safe = 0;
    size_t span = ADSM__ALIGN_UP(size, rt->page);
    if (span > rt->be->capacity(rt->be_ctx)) { /* refused before its bookkeeping is made (tens of MiB) */
        adsm__lock(&rt->lock);
        adsm_result r = adsm__device_room(rt, size, span, fn);
        adsm__unlock(&rt->lock);
        return r;
    }
    adsm__object *o = adsm__object_new(rt, size, safe);
    if (!o) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "out of host memory for the bookkeeping of %zu bytes", size);
    adsm__lock(&rt->lock);
    adsm_result r = adsm__object_reserve(rt, o, fn);
    adsm__unlock(&rt->lock);
    if (r != ADSM_OK) return r;
    /* made when first needed (the bits of the blocks whose view is mapped later come now: a fault
     * may not allocate; without memory for them the pages are made now, the view mapped whole) */
    int first_use = adsm__host_on_first_use(rt, o); /* an aliased object's, then */
    if (first_use || (rt->view_small_pages && adsm__host_dma(rt, o->host) != o->host))
        o->block_bits = (uint64_t *)calloc((o->nblocks + 63) / 64, sizeof *o->block_bits);
    if (first_use && o->block_bits) o->host_pending = 1;
    else adsm__object_lock_pages(rt, o);
    adsm__lock(&rt->lock);
    r = adsm__object_publish(rt, o);
    adsm__unlock(&rt->lock);
    if (r == ADSM_OK) *out = o;
    return r;
}

#endif /* ADSM__OBJECT_LIFE_INCLUDED */
