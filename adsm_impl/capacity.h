/* adsm_impl/capacity.h -- each device's memory as a cache of objects, when the runtime drives
 * several devices.
 *
 * With one device every object has its device copy from adsm_alloc to adsm_free (object_life.h
 * counts it in rt->device_used). With several, an object takes memory on a device only once
 * something of it is stored there: a launch there names it (directory.h, adsm__gather) or rolling
 * sends one of its blocks to its home device (protocol.h, adsm__flush). A fresh object is zeros on
 * every device and takes nothing. rt->dev_bytes[d] counts what device d holds (adsm__charge); a
 * launch that needs more than its device has left first evicts objects the kernel does not name,
 * the least recently used on that device first: their units held only there (Modified) are
 * written back to the host, the other units (clean replicas) are dropped, and the device memory
 * goes back (emu's dev_discard verb; cuda unmaps it with the lock let go, adsm__give_back).
 * Objects a copy is moving outside the lock (busy) are not evicted. Before evicting, the launch
 * waits for the kernels on that device that use what goes, and only for them, with the lock let
 * go (kernels using other objects keep running; other threads' faults are not held up). The
 * limit is the backend's capacity per device (emu: ADSM_EMU_MEMORY; cuda: the GPU's free memory
 * at start), counted in footprints (adsm__footprint: whole granules on cuda).
 *
 * Context: normal thread context, runtime lock held, in a launch (rt->launch_mutex held) or in
 * adsm_dev_alloc. Waiting for kernels lets the lock go, and so do cuda's unmaps and a write-back
 * (a CPU fetch, the protocol's on_access): then the caller looks everything up again
 * (ADSM__AGAIN). */
#ifndef ADSM__CAPACITY_INCLUDED
#define ADSM__CAPACITY_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "object.h"
#include "copy.h"
#include "runtime.h"
#include "protocol_vtbl.h"
#include "directory.h"
#include "protocol.h"

/* Bytes device d can still take (rt->dev_bytes[d] counts its shared objects and its device
 * buffers, which are never evicted). */
ADSM__PRIVATE size_t adsm__dev_free_bytes(const adsm__runtime *rt, unsigned d) {
    size_t capacity = rt->be->capacity(rt->dev_ctx[d]);
    return capacity > rt->dev_bytes[d] ? capacity - rt->dev_bytes[d] : 0;
}

ADSM__PRIVATE int adsm__names(adsm__object *const *used, size_t nused, const adsm__object *o) {
    for (size_t i = 0; i < nused; i++)
        if (used[i] == o) return 1;
    return 0;
}

ADSM__PRIVATE int adsm__evictable(const adsm__object *o, unsigned d, adsm__object *const *used, size_t nused) {
    return (o->dev_resident & adsm__dev_bit(d)) && o->busy_units == 0 && !adsm__names(used, nused, o);
}

/* Bytes device d holds past its capacity: rolling's evictions charge a block to its object's home
 * device whether it has room or not (directory.h, adsm__charge; on cuda as far as the driver maps
 * it), and the next launch there evicts back under it (adsm__make_room). */
ADSM__PRIVATE size_t adsm__dev_over_bytes(const adsm__runtime *rt, unsigned d) {
    size_t capacity = rt->be->capacity(rt->dev_ctx[d]);
    return rt->dev_bytes[d] > capacity ? rt->dev_bytes[d] - capacity : 0;
}

/* Bytes of the objects device d holds that only a copy running on them keeps from being evicted
 * (another thread's fetch): waited for, not a reason to refuse a launch. */
ADSM__PRIVATE size_t adsm__busy_on_device(const adsm__runtime *rt, unsigned d, adsm__object *const *used,
                                          size_t nused) {
    size_t bytes = 0;
    for (adsm__object *o = rt->first_object; o; o = o->next)
        if ((o->dev_resident & adsm__dev_bit(d)) && o->busy_units && !adsm__names(used, nused, o))
            bytes += adsm__footprint(rt, o);
    return bytes;
}

/* Bytes device d would have free after evicting everything it may. */
ADSM__PRIVATE size_t adsm__free_after_evictions(const adsm__runtime *rt, unsigned d, adsm__object *const *used,
                                                size_t nused) {
    size_t bytes = adsm__dev_free_bytes(rt, d);
    for (adsm__object *o = rt->first_object; o; o = o->next)
        if (adsm__evictable(o, d, used, nused)) bytes += adsm__footprint(rt, o);
    return bytes;
}

/* One object device d may evict and when d last used it. */
typedef struct adsm__eviction {
    uint64_t stamp;
    adsm__object *o;
} adsm__eviction;

ADSM__PRIVATE int adsm__older_eviction(const void *a, const void *b) {
    uint64_t x = ((const adsm__eviction *)a)->stamp, y = ((const adsm__eviction *)b)->stamp;
    return x < y ? -1 : x > y;
}

/* The objects device d evicts to have `need` bytes free, those it used least recently first,
 * from those it holds that the launch does not name (an stb_ds array the caller frees); *last
 * is the last launch on d that named any of them. The caller checked that they are enough. */
ADSM__PRIVATE adsm__eviction *adsm__eviction_plan(const adsm__runtime *rt, unsigned d, size_t need,
                                                  adsm__object *const *used, size_t nused, uint64_t *last) {
    adsm__eviction *plan = NULL;
    for (adsm__object *o = rt->first_object; o; o = o->next) {
        adsm__eviction e = {o->dev_stamp[d], o};
        if (adsm__evictable(o, d, used, nused)) stbds_arrput(plan, e);
    }
    size_t candidates = (size_t)stbds_arrlen(plan);
    if (candidates > 1) qsort(plan, candidates, sizeof *plan, adsm__older_eviction);
    size_t free_bytes = adsm__dev_free_bytes(rt, d), n = 0;
    *last = 0;
    while (free_bytes < need && n < candidates) {
        free_bytes += adsm__footprint(rt, plan[n].o);
        *last = ADSM__MAX(*last, plan[n].o->dev_launch[d]);
        n++;
    }
    stbds_arrsetlen(plan, n);
    return plan;
}

/* Waits, with the runtime lock let go, for launches on device d up to `last` (those that use
 * what d is about to evict, or what is being freed), unless they are known finished: other
 * threads' faults and copies go on meanwhile, and kernels on d that use other objects are not
 * waited for. 0 when nothing was waited for, ADSM__AGAIN when the lock was let go, -1 when d is
 * lost. */
ADSM__PRIVATE int adsm__await_users_on(adsm__runtime *rt, unsigned d, uint64_t last) {
    if (last <= rt->dev_done_seq[d]) return 0;
    adsm__unlock(&rt->lock);
    int rc = rt->be->wait(rt->dev_ctx[d], last);
    adsm__lock(&rt->lock);
    if (rc != 0) return -1;
    rt->dev_done_seq[d] = ADSM__MAX(rt->dev_done_seq[d], last);
    return ADSM__AGAIN;
}

/* Whether kernels touch only the objects and buffers they are given: with several devices, or
 * with several streams on one (ADSM_STREAMS > 1 orders kernels by the objects they name, so one
 * that followed a stored pointer would already race). Otherwise a kernel may follow pointers
 * stored in device memory to anything. */
ADSM__PRIVATE int adsm__kernels_name_what_they_use(const adsm__runtime *rt) {
    return rt->ndev > 1 || rt->cfg.streams > 1;
}

/* Waits, with the runtime lock let go, for the kernels that may use o before it is freed: on each
 * device the last launch that named it, and where kernels may follow stored pointers (one
 * device, one stream) every launch up to `before`, the last one issued when the free began (a bound fixed
 * then, so launches of other objects issued meanwhile are not chased). A launch another thread
 * made on o while the free waited is seen here, under the lock. 0 when nothing was left to wait
 * for, ADSM__AGAIN when the lock was let go (look o up again). */
ADSM__PRIVATE int adsm__await_users(adsm__runtime *rt, const adsm__object *o, uint64_t before) {
    int every_launch = !adsm__kernels_name_what_they_use(rt);
    for (unsigned d = 0; d < rt->ndev; d++) {
        uint64_t last = every_launch ? ADSM__MAX(o->dev_launch[d], before) : o->dev_launch[d];
        int rc = adsm__await_users_on(rt, d, last);
        if (rc < 0) /* lost: nothing of it runs any more */
            rt->dev_done_seq[d] = ADSM__MAX(rt->dev_done_seq[d], last);
        if (rc != 0) return ADSM__AGAIN;
    }
    return 0;
}

/* Bytes of o's host-Invalid units among blocks [first, first + count). */
ADSM__PRIVATE size_t adsm__invalid_bytes(const adsm__runtime *rt, const adsm__object *o, size_t first, size_t count) {
    if (rt->proto->whole_object) return o->blocks[0].state == ADSM__INVALID ? o->size : 0;
    size_t n = 0;
    for (size_t b = first; b < first + count; b++)
        if (o->blocks[b].state == ADSM__INVALID) n += adsm__blocks_len(b, 1, rt->cfg.block_shift, o->size);
    return n;
}

/* Brings home the units of o whose only copy is on device d (the host's Invalid, no other live
 * device holds them; a lost one's copy may be unreadable: a crashed CUDA context): a CPU read's
 * fetch, which leaves them ReadOnly (and may take its neighbours in the same huge page along: the
 * bytes that came home around the unit are counted). 0, ADSM__AGAIN (the lock was let go), or -1. */
ADSM__PRIVATE int adsm__write_back(adsm__runtime *rt, adsm__object *o, unsigned d) {
    size_t unit = rt->proto->whole_object ? o->nblocks : 1;
    size_t reach = ADSM__MAX((size_t)1, ADSM__HUGE_PAGE >> rt->cfg.block_shift); /* a fetch's run */
    for (size_t b = 0; b < o->nblocks; b += unit) {
        adsm__block *head = &o->blocks[b];
        if (head->state != ADSM__INVALID || (head->dev_valid & adsm__live_devices(rt)) != adsm__dev_bit(d)) continue;
        uintptr_t host = o->host;
        size_t first = b > reach ? b - reach : 0, count = ADSM__MIN(o->nblocks - first, 2 * reach);
        size_t invalid = adsm__invalid_bytes(rt, o, first, count);
        int rc = rt->proto->on_access(rt, o, b, 0, 0);
        if (rc < 0) return -1;
        if (rc == 0 || adsm__object_of(adsm__tree_find(&rt->objects, host)) == o) { /* not freed meanwhile */
            size_t left = adsm__invalid_bytes(rt, o, first, count);
            ADSM__ADD(&rt->dev_stats[d].written_back_bytes, invalid - ADSM__MIN(invalid, left));
        }
        if (rc == ADSM__AGAIN) return ADSM__AGAIN;
    }
    return 0;
}

/* Evicts o from device d once nothing of it is held only there: d's bits go from its units, its
 * memory there goes back, at once or (cuda: an unmap) once the lock is let go, o then added to
 * *leaving (adsm__give_back). 0, ADSM__AGAIN (the lock was let go: start over), or -1. */
ADSM__PRIVATE int adsm__evict(adsm__runtime *rt, adsm__object *o, unsigned d, adsm__object ***leaving) {
    int rc = adsm__write_back(rt, o, d);
    if (rc != 0) return rc;
    rt->be->drain(rt->dev_ctx[d]); /* a flush queued to d meanwhile may still be landing */
    size_t unit = rt->proto->whole_object ? o->nblocks : 1;
    for (size_t b = 0; b < o->nblocks; b += unit) o->blocks[b].dev_valid &= (uint8_t)~adsm__dev_bit(d);
    if (rt->be->dev_discard) rt->be->dev_discard(rt->dev_ctx[d], o->dev, o->span);
    ADSM__ADD(&rt->dev_stats[d].evictions, 1);
    ADSM__ADD(&rt->dev_stats[d].evicted_bytes, adsm__footprint(rt, o));
    if (adsm__uncount(rt, o, d)) { /* nothing maps it on d again, nor frees it, until it is unmapped */
        o->dev_leaving |= adsm__dev_bit(d);
        o->busy_units++;
        stbds_arrput(*leaving, o);
    }
    return 0;
}

/* Gives back device d's memory behind the evicted objects in `leaving` with the runtime lock let
 * go: unmapping waits for the GPU's running kernels (cuMemUnmap is synchronous), and other
 * threads' faults need not wait with it. Frees the array. */
ADSM__PRIVATE void adsm__give_back(adsm__runtime *rt, unsigned d, adsm__object **leaving) {
    size_t n = (size_t)stbds_arrlen(leaving);
    adsm__unlock(&rt->lock); /* they are busy: not freed meanwhile */
    for (size_t i = 0; i < n; i++) rt->be->dev_free(rt->dev_ctx[d], leaving[i]->dev, leaving[i]->span);
    adsm__lock(&rt->lock);
    for (size_t i = 0; i < n; i++) {
        leaving[i]->dev_leaving &= (uint8_t)~adsm__dev_bit(d);
        leaving[i]->busy_units--;
    }
    adsm__copies_done(rt); /* a free may be waiting for one of them */
    stbds_arrfree(leaving);
}

/* Makes `need` bytes free on device d, evicting what the launch does not name (used, nused), and
 * brings it back under its capacity where it can. ADSM_OK, or an error saying what did not fit;
 * *again is set when the lock was let go (an eviction, or the copies on objects it would evict). */
ADSM__PRIVATE adsm_result adsm__make_room(adsm__runtime *rt, unsigned d, size_t need, adsm__object *const *used,
                                          size_t nused, const char *what, int *again) {
    *again = 0;
    size_t want = need + adsm__dev_over_bytes(rt, d); /* and back under its capacity */
    if (adsm__dev_free_bytes(rt, d) >= want) return ADSM_OK;
    size_t could = adsm__free_after_evictions(rt, d, used, nused);
    if (could < need && could + adsm__busy_on_device(rt, d, used, nused) >= need) {
        *again = adsm__await_copies(rt) == ADSM__AGAIN; /* the copies end, then it may go */
        return ADSM_OK;
    }
    if (could < need) /* evict nothing in vain */
        return adsm__fail(ADSM_ERROR_DEVICE_OUT_OF_MEMORY,
                          "%s needs %zu bytes on device %u, which has %zu of its %zu bytes free, %zu once it evicted "
                          "every object it may", what, need, d, adsm__dev_free_bytes(rt, d),
                          rt->be->capacity(rt->dev_ctx[d]), could);
    uint64_t last;
    adsm__eviction *plan = adsm__eviction_plan(rt, d, want, used, nused, &last);
    adsm_result r = ADSM_OK;
    int rc = adsm__await_users_on(rt, d, last); /* kernels using what goes */
    if (rc < 0) r = adsm__fail(ADSM_ERROR_DEVICE_LOST, "%s: device %u is lost", what, d);
    adsm__object **leaving = NULL;
    for (size_t i = 0; rc == 0 && i < (size_t)stbds_arrlen(plan); i++) {
        adsm__object *victim = plan[i].o;
        rc = adsm__evict(rt, victim, d, &leaving);
        if (rc < 0)
            r = adsm__fail(ADSM_ERROR_SYSTEM, "%s: writing a %zu-byte object at %p back from device %u to evict it "
                           "failed", what, victim->size, (void *)victim->host, d);
    }
    stbds_arrfree(plan);
    if (leaving) {
        adsm__give_back(rt, d, leaving);
        if (rc == 0) rc = ADSM__AGAIN;
    }
    *again = rc == ADSM__AGAIN; /* objects may have come or gone meanwhile: the caller looks again */
    return r;
}

/* Room on device d for every object a launch there names that d does not hold yet. */
ADSM__PRIVATE adsm_result adsm__room_for_launch(adsm__runtime *rt, adsm__object *const *used, size_t nused,
                                                unsigned d, const char *kernel, int *again) {
    *again = 0;
    if (rt->ndev == 1) return ADSM_OK;
    size_t need = 0;
    for (size_t i = 0; i < nused; i++)
        if (!used[i]->device_only && !(used[i]->dev_resident & adsm__dev_bit(d))) need += adsm__footprint(rt, used[i]);
    char what[160];
    snprintf(what, sizeof what, "kernel '%.100s'", kernel);
    return adsm__make_room(rt, d, need, used, nused, what, again);
}

#endif /* ADSM__CAPACITY_INCLUDED */
