/* adsm_impl/memops.h -- adsm_memset and adsm_memcpy: bulk memory on shared objects, on device
 * buffers from adsm_dev_alloc, and on plain memory.
 *
 * Ranges are walked piece by piece (adsm__piece, which I/O uses too): a piece never crosses a
 * tracking unit (block or object) of a shared object; memory outside shared objects is plain
 * memory. For each shared piece the protocol hears about the access first, then the bytes move
 * with the runtime lock held, so no eviction races the write and the runtime never faults on its
 * own accesses. Whole units are handled where their valid copy is (memset of an Invalid block on
 * the device only, memcpy into device-valid blocks device to device, a Dirty source sent first).
 * Overlapping ranges go through a bounce buffer (bounce.h) in the safe direction. Ranges in device buffers
 * run on their device. Normal thread context; the entry points take the runtime lock. */
#ifndef ADSM__MEMOPS_INCLUDED
#define ADSM__MEMOPS_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "object.h"
#include "runtime.h"
#include "reservation.h"
#include "backend.h"
#include "protocol_vtbl.h"
#include "directory.h"
#include "protocol.h"
#include "bounce.h"

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

/* Why an access to o's unit holding `block` failed (err: errno after it, 0 if none was set), said
 * as a CPU fault adsm cannot resolve says it: which object, and the lost device that held its only
 * current copy. Under the runtime lock (o may go once it is let go). */
ADSM__PRIVATE adsm_result adsm__access_failed(adsm__runtime *rt, const adsm__object *o, size_t block, int err) {
    if (o) {
        const adsm__block *h = &o->blocks[rt->proto->whole_object ? 0 : block];
        unsigned from = adsm__dev_source(rt, h); /* a live holder if there is one */
        if (h->state == ADSM__INVALID && adsm__dev_is_lost(rt, from)) /* what the host holds needs no device */
            return adsm__fail(ADSM_ERROR_DEVICE_LOST, "object %p (%zu bytes): its only current copy is on device %u, "
                              "which is lost", (void *)o->host, o->size, from);
        if (err == 0) /* a copy failed: the backends set no errno */
            return adsm__fail(ADSM_ERROR_SYSTEM, "object %p (%zu bytes): copying it from device %u failed",
                              (void *)o->host, o->size, from);
    }
    return adsm__fail(ADSM_ERROR_SYSTEM, "making shared memory accessible failed: %s", strerror(err ? err : EIO));
}

/* What a piece does after the protocol heard of it (access: 0, ADSM__AGAIN or < 0; done < 0: its
 * device-side path failed): 0 go on, lock held; 1 look everything up again (the lock was let go
 * meanwhile); -1 fail. The lock is let go for the last two. */
ADSM__PRIVATE int adsm__after_access(adsm__runtime *rt, int access, int done) {
    if (access == 0 && done >= 0) return 0;
    adsm__unlock(&rt->lock);
    return access == ADSM__AGAIN ? 1 : -1;
}

/* memset of one whole unit that is valid on the device (Invalid or ReadOnly) runs there only, and
 * the unit is Invalid afterwards: no byte moves, and the host pages are not touched (zeroing a
 * fresh output before kernels write it, a GPU program's habit, cost a host fill of every page,
 * first touches included). The CPU's next read fetches it. The waits and the memset run with the
 * unit busy and the runtime lock let go (protocol.h); o stays valid (its free waits). Returns 1
 * when done, 0 when the caller should take the CPU path, -1 on error; the lock is held again
 * either way. */
ADSM__PRIVATE int adsm__memset_unit_in_place(adsm__runtime *rt, adsm__object *o, uintptr_t a, int v, size_t len) {
    size_t block = adsm__tree_block_index(&o->node, a, rt->cfg.block_shift), first, count;
    int state = o->blocks[block].state;
    size_t data = ADSM__MIN(len, o->host + o->size - a);
    uintptr_t dev = o->dev + (a - o->host);
    if (state == ADSM__DIRTY) return 0;
    adsm__unit_of(rt, o, block, &first, &count);
    adsm__block *head = &o->blocks[first];
    int rc = 1, drain = adsm__flushing(rt, head);
    uint64_t queued = rt->flushes_queued;
    adsm__busy_begin(rt, o, head, 1);
    if (drain) adsm__drain_all(rt); /* see adsm__memcpy_on_device */
    if (rt->be->wait(rt->be_ctx, o->writer_seq) != 0) rc = 0; /* device lost: the CPU path still works */
    else if (rt->be->dev_memset(rt->be_ctx, dev, v, data) != 0) rc = -1;
    adsm__busy_end(rt, o, head, 1);
    if (drain) adsm__flushes_settled(rt, queued);
    if (rc == 1 && state == ADSM__READONLY && adsm__set_state(rt, o, first, count, ADSM__INVALID) != 0) rc = -1;
    return rc;
}

/* The protocol hears of the runtime's access to o's unit holding `block`, on the program's behalf:
 * not where a tracking protocol's unit already allows it, since its protection was set with that
 * state (hearing of it would only set it again, one system call per unit). 0, ADSM__AGAIN or < 0
 * as on_access. */
ADSM__PRIVATE int adsm__runtime_access(adsm__runtime *rt, adsm__object *o, size_t block, int is_write, int overwrite) {
    if (adsm__tracking(rt) && adsm__state_allows(o->blocks[block].state, is_write)) return 0;
    return rt->proto->on_access(rt, o, block, is_write, overwrite);
}

/* ---- a range, unit by unit ---------------------------------------------------------------------
 * The walk behind adsm_memset and adsm_touch: each piece of [a, a + n) in one tracking unit is
 * looked up under the lock; a unit being copied is waited for; a whole unit may be done where it
 * is (in_place: 1 done, 0 not, -1 failed); otherwise the protocol hears of the access (an
 * overwrite when `overwrites` and the piece covers the unit: nothing to fetch) and `cpu` does the
 * piece on host memory, with the lock held in a shared object and without it in plain memory.
 * in_place and cpu may be NULL. */
typedef struct adsm__unit_walk {
    int write, overwrites;
    int (*in_place)(adsm__runtime *rt, adsm__object *o, uintptr_t a, size_t len, void *arg);
    void (*cpu)(uintptr_t a, size_t len, void *arg);
    void *arg;
} adsm__unit_walk;

ADSM__PRIVATE adsm_result adsm__walk_units(adsm__runtime *rt, uintptr_t a, size_t n, const adsm__unit_walk *w) {
    int program_errno = errno; /* cleared below to see a failure's own; the program's comes back */
    while (n > 0) {
        size_t block;
        int whole, done = 0, access = 0;
        adsm__lock(&rt->lock);
        adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
        size_t len = adsm__piece(rt, o, a, n, &block, &whole);
        errno = 0;
        if (o && adsm__unit_busy(rt, o, block)) access = adsm__await_copies(rt); /* not while it is copied */
        else if (o && whole && w->in_place) done = w->in_place(rt, o, a, len, w->arg);
        if (o && done == 0 && access == 0) access = adsm__runtime_access(rt, o, block, w->write, whole && w->overwrites);
        adsm_result why = access < 0 || done < 0 ? adsm__access_failed(rt, o, block, errno) : ADSM_OK;
        int next = adsm__after_access(rt, access, done);
        if (next > 0) continue; /* the lock was let go: look the unit up again */
        if (next < 0) {
            errno = program_errno;
            return why;
        }
        if (o && done == 0 && w->cpu) w->cpu(a, len, w->arg);
        adsm__unlock(&rt->lock);
        if (!o && w->cpu) w->cpu(a, len, w->arg); /* program memory: outside the lock */
        a += len;
        n -= len;
    }
    errno = program_errno;
    return ADSM_OK;
}

/* memset's two ways for a piece: on the device (one device, a tracking protocol: several devices
 * go the directory's way, through the CPU), or with the CPU. */
ADSM__PRIVATE int adsm__memset_walk_in_place(adsm__runtime *rt, adsm__object *o, uintptr_t a, size_t len, void *arg) {
    if (!adsm__tracking(rt) || rt->ndev != 1) return 0;
    return adsm__memset_unit_in_place(rt, o, a, *(const int *)arg, len);
}

ADSM__PRIVATE void adsm__memset_walk_cpu(uintptr_t a, size_t len, void *arg) { memset((void *)a, *(const int *)arg, len); }

ADSM__PRIVATE adsm_result adsm__memset_impl(adsm__runtime *rt, uintptr_t d, int v, size_t n) {
    adsm__unit_walk w = {1, 1, adsm__memset_walk_in_place, adsm__memset_walk_cpu, &v};
    return adsm__walk_units(rt, d, n, &w);
}

/* Whether every block of [s, s + len) in os is valid on the device (Invalid or ReadOnly). */
ADSM__PRIVATE int adsm__device_valid(adsm__runtime *rt, adsm__object *os, uintptr_t s, size_t len) {
    unsigned shift = rt->cfg.block_shift;
    size_t first = adsm__tree_block_index(&os->node, s, shift);
    size_t last = adsm__tree_block_index(&os->node, s + len - 1, shift);
    for (size_t b = first; b <= last; b++)
        if (os->blocks[b].state == ADSM__DIRTY) return 0;
    return 1;
}

/* The least copy whose Dirty source goes to the device first (below): under it the round trips
 * (the flush waited for, the device copy, and a fetch where the CPU reads the destination next)
 * cost more than copying on the host, as with small objects or rows copied one by one under
 * rolling's small blocks. */
#define ADSM__SEND_SOURCE_MIN ((size_t)64 << 10)

/* A source range [s, s + n) with Dirty units, read by a device-to-device copy: its Dirty units
 * go to the device first, queued as a launch's release queues them (ReadOnly first, stamped), for
 * the caller to drain before its copy. With one device the next launch sends every Dirty unit
 * anyway (kernels follow stored pointers), so this moves nothing that would not move, and the
 * destination stays off the host: a host copy would leave it Dirty too, for that launch to send
 * as well (stencil's second buffer, filled from the first: 6 MiB moved where the explicit program
 * moves 4). n may run past the current piece: the whole source of the call is sent at once, one
 * drain for all its pieces. Not for copies under ADSM__SEND_SOURCE_MIN, typed objects (a launch's
 * translation writes their device copies, translate.h) nor while a unit of the range is busy: the
 * host copy is taken then. 1 queued, 0 not applicable, -1 error. Runtime lock held. */
ADSM__PRIVATE int adsm__send_source(adsm__runtime *rt, adsm__object *os, uintptr_t s, size_t n) {
    unsigned shift = rt->cfg.block_shift;
    size_t from = adsm__tree_block_index(&os->node, s, shift);
    size_t end = adsm__tree_block_index(&os->node, ADSM__MIN(s + n, os->host + os->span) - 1, shift) + 1;
    size_t first, count;
    if (os->type || os->device_only || (n < ADSM__SEND_SOURCE_MIN && !rt->send_source_always)) return 0;
    for (size_t b = from; b < end; b = first + count) { /* before anything is sent */
        adsm__unit_of(rt, os, b, &first, &count);
        if (os->blocks[first].busy) return 0;
    }
    for (size_t b = from; b < end;) {
        adsm__unit_of(rt, os, b, &first, &count);
        size_t run = first + count;
        if (os->blocks[first].state != ADSM__DIRTY) {
            b = run;
            continue;
        }
        if (!rt->proto->whole_object) /* rolling: a run of Dirty blocks in one copy */
            while (run < end && os->blocks[run].state == ADSM__DIRTY) run++;
        if (adsm__writeback_blocks(rt, os, first, run - first, 1) != 0) return -1;
        b = run;
    }
    return 1;
}

/* A whole destination unit (d, len) that is valid on the device, filled from a source range that
 * lies in one object, is copied device to device, the source's Dirty units sent first
 * (adsm__send_source; n: the rest of the call's copy); the destination becomes Invalid. 1 done, 0
 * not applicable, -1 error. */
ADSM__PRIVATE int adsm__memcpy_on_device(adsm__runtime *rt, adsm__object *od, uintptr_t d, uintptr_t s, size_t len,
                                         size_t n) {
    unsigned shift = rt->cfg.block_shift;
    adsm__object *os = adsm__object_of(adsm__tree_find(&rt->objects, s));
    size_t dblock = adsm__tree_block_index(&od->node, d, shift), first, count;
    if (!os || s + len > os->host + os->span || od->blocks[dblock].state == ADSM__DIRTY) return 0;
    int sent = 0;
    if (!adsm__device_valid(rt, os, s, len) && (sent = adsm__send_source(rt, os, s, n)) <= 0) return sent;
    size_t data = ADSM__MIN(len, od->host + od->size - d);
    adsm__unit_of(rt, od, dblock, &first, &count);
    /* the wait and the copy run with the destination unit busy and the lock let go; the source
     * object is pinned against a free meanwhile */
    /* the destination, Invalid afterwards, may be overwritten by the CPU with no wait but for the
     * kernel that writes it (protocol.h: adsm__prepare_unit), so a flush of it that may still be
     * reading its host pages (a ReadOnly unit released at a call) lands first too */
    int rc = 1, drain = sent || adsm__flushing(rt, &od->blocks[first]);
    uint64_t queued = rt->flushes_queued;
    os->busy_units++;
    adsm__busy_begin(rt, od, &od->blocks[first], 1);
    if (drain) adsm__drain_all(rt); /* the source's flushes land first */
    if (rt->be->wait(rt->be_ctx, ADSM__MAX(od->writer_seq, os->writer_seq)) != 0) rc = 0; /* device lost */
    else if (rt->be->dev_copy(rt->be_ctx, od->dev + (d - od->host), os->dev + (s - os->host), data) != 0) rc = -1;
    adsm__busy_end(rt, od, &od->blocks[first], 1);
    os->busy_units--;
    if (drain) adsm__flushes_settled(rt, queued);
    if (rc != 1) return rc;
    ADSM__ADD(&rt->stats.d2d_bytes, data);
    ADSM__ADD(&rt->stats.d2d_copies, 1);
    return adsm__set_state(rt, od, first, count, ADSM__INVALID) == 0 ? 1 : -1;
}

/* Copies n bytes from s to d, either of which may be shared. The destination will be written up
 * to cover_end (>= d + n; larger when an I/O transfer continues in a later call): an Invalid unit
 * that lies entirely below cover_end is not fetched. Under lazy (no eager eviction) such a unit
 * may be left half-written when this call ends; *unfinished_end then gives the end of its data,
 * so a transfer that stops early can fetch the rest (adsm__repair_tail). */
ADSM__PRIVATE adsm_result adsm__copy_range(adsm__runtime *rt, uintptr_t d, uintptr_t s, size_t n, uintptr_t cover_end,
                                           uintptr_t *unfinished_end) {
    int program_errno = errno; /* as in adsm__walk_units */
    while (n > 0) {
        size_t dblock, sblock;
        int dwhole, swhole, done = 0;
        adsm__lock(&rt->lock);
        adsm__object *od = adsm__object_of(adsm__tree_find(&rt->objects, d));
        adsm__object *os = adsm__object_of(adsm__tree_find(&rt->objects, s));
        size_t dunit = adsm__piece(rt, od, d, cover_end - d, &dblock, &dwhole);
        size_t dlen = ADSM__MIN(dunit, n);
        /* a copy of the destination runs, or a launch holds either side (its device copy is not
         * what the copy must see before that kernel is issued): wait */
        if ((od && adsm__unit_busy(rt, od, dblock)) || (os && adsm__held_elsewhere(os))) {
            adsm__await_copies(rt);
            adsm__unlock(&rt->lock);
            continue;
        }
        if (od && dwhole && dlen < dunit && rt->proto->eager) dwhole = 0; /* rolling: never leave a unit half-filled */
        if (od && os && dwhole && dlen == dunit && adsm__tracking(rt) && rt->ndev == 1)
            done = adsm__memcpy_on_device(rt, od, d, s, dlen, n);
        size_t len = done ? dlen : adsm__piece(rt, os, s, dlen, &sblock, &swhole);
        if (od && done == 0 && dwhole && dlen < dunit && od->blocks[dblock].state == ADSM__INVALID && unfinished_end)
            *unfinished_end = ADSM__MIN(d + dunit, od->host + od->size);
        int access = 0, source_failed = 0;
        errno = 0;
        if (done == 0 && os) source_failed = (access = adsm__runtime_access(rt, os, sblock, 0, 0)) < 0;
        if (done == 0 && od && access == 0) access = adsm__runtime_access(rt, od, dblock, 1, dwhole);
        adsm_result why = access < 0 || done < 0 ? adsm__access_failed(rt, source_failed ? os : od,
                                                                       source_failed ? sblock : dblock, errno)
                                                 : ADSM_OK;
        int next = adsm__after_access(rt, access, done);
        if (next > 0) continue;
        if (next < 0) {
            errno = program_errno;
            return why;
        }
        int shared = od || os;
        int claimed = od && done == 0 && unfinished_end && *unfinished_end > d;
        if (claimed) adsm__fill_claimed(rt, od, dblock); /* no flush until it is filled */
        if (shared && done == 0) memmove((void *)d, (const void *)s, len);
        if (claimed && d + len >= *unfinished_end) { /* the claimed unit is complete */
            *unfinished_end = 0;
            adsm__fill_end(rt, od);
        }
        adsm__unlock(&rt->lock);
        if (!shared) memmove((void *)d, (const void *)s, len);
        d += len;
        s += len;
        n -= len;
    }
    errno = program_errno;
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__memcpy_impl(adsm__runtime *rt, uintptr_t d, uintptr_t s, size_t n) {
    return adsm__copy_range(rt, d, s, n, d + n, NULL);
}

/* ---- device buffers (adsm_dev_alloc) in adsm_memset / adsm_memcpy ---------------------------- */
/* The CPU cannot touch a device buffer, so bulk memory on one is done by the device, ordered
 * after every launch issued so far like the explicit copies; shared or plain memory on the other
 * side of a copy goes through a bounce buffer. */
enum { ADSM__NOT_DEVICE_BUFFER = 0, ADSM__IN_DEVICE_BUFFER = 1, ADSM__ACROSS_DEVICE_BUFFER = 2 };

/* Whether [a, a + n) lies in one device buffer, touches one partly, or none; *dev: the device
 * the buffer lives on. */
ADSM__PRIVATE int adsm__device_buffer_kind(adsm__runtime *rt, uintptr_t a, size_t n, unsigned *dev) {
    uintptr_t d = adsm__dev_in(rt, a);
    adsm__lock(&rt->lock);
    adsm__tree_node *hit = adsm__tree_find(&rt->safe_dev, d);
    if (!hit) hit = adsm__tree_ceil(&rt->safe_dev, d);
    adsm__object *o = hit ? ADSM__CONTAINER_OF(hit, adsm__object, dev_node) : NULL;
    int kind = ADSM__NOT_DEVICE_BUFFER;
    if (o && o->device_only && o->dev < d + n)
        kind = d >= o->dev && d - o->dev <= o->size && n <= o->size - (d - o->dev) ? ADSM__IN_DEVICE_BUFFER
                                                                                    : ADSM__ACROSS_DEVICE_BUFFER;
    *dev = o ? o->home_dev : 0;
    adsm__unlock(&rt->lock);
    return kind;
}

ADSM__PRIVATE adsm_result adsm__device_wait_all(adsm__runtime *rt, const char *fn) {
    if (adsm__wait_all(rt) != 0) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "%s: the device is gone", fn);
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__memset_device_buffer(adsm__runtime *rt, uintptr_t d, int v, size_t n, unsigned dev) {
    adsm_result r = adsm__device_wait_all(rt, "adsm_memset");
    if (r == ADSM_OK && rt->be->dev_memset(rt->dev_ctx[dev], adsm__dev_in(rt, d), v, n) != 0)
        r = adsm__fail(ADSM_ERROR_SYSTEM, "adsm_memset: the device-side memset failed");
    return r;
}

/* A copy involving device buffers, piece by piece through a bounce buffer: the side that is a
 * device buffer (ddev / sdev: its device, -1 when that side is host memory, shared or plain,
 * which adsm__memcpy_impl handles in any state) moves with the backend's copies. Between buffers
 * of two devices this is the device-to-device copy of the explicit path. */
ADSM__PRIVATE adsm_result adsm__memcpy_via_bounce(adsm__runtime *rt, uintptr_t d, uintptr_t s, size_t n, int ddev,
                                                  int sdev) {
    size_t piece = ADSM__MIN(n, adsm__bounce_piece(rt));
    adsm__bounce b;
    if (adsm__bounce_take(rt, piece, &b) != 0) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "adsm_memcpy: out of memory");
    unsigned char *bounce = b.base;
    adsm_result r = adsm__device_wait_all(rt, "adsm_memcpy");
    for (size_t done = 0; r == ADSM_OK && done < n; done += piece) {
        size_t len = ADSM__MIN(piece, n - done);
        if (sdev < 0) r = adsm__memcpy_impl(rt, (uintptr_t)bounce, s + done, len);
        else if (rt->be->from_device(rt->dev_ctx[sdev], (uintptr_t)bounce, adsm__dev_in(rt, s + done), len) != 0)
            r = adsm__fail(ADSM_ERROR_SYSTEM, "adsm_memcpy: the copy from device %d failed", sdev);
        if (r != ADSM_OK) break;
        if (ddev < 0) r = adsm__memcpy_impl(rt, d + done, (uintptr_t)bounce, len);
        else if (rt->be->to_device(rt->dev_ctx[ddev], adsm__dev_in(rt, d + done), (uintptr_t)bounce, len, 0,
                                   ADSM__EVERY_LAUNCH) != 0)
            r = adsm__fail(ADSM_ERROR_SYSTEM, "adsm_memcpy: the copy to device %d failed", ddev);
    }
    if (r == ADSM_OK && sdev >= 0 && ddev >= 0) adsm__count_to_device(rt, (unsigned)ddev, 1, n);
    adsm__bounce_give(rt, &b);
    return r;
}

/* adsm_memcpy where either side or both lie in a device buffer (dk, sk: their kinds, neither
 * across an edge; ddev, sdev: their devices). */
ADSM__PRIVATE adsm_result adsm__memcpy_device_buffers(adsm__runtime *rt, uintptr_t d, uintptr_t s, size_t n, int dk,
                                                      unsigned ddev, int sk, unsigned sdev) {
    if (dk != sk || ddev != sdev) /* host memory on one side, or buffers of two devices */
        return adsm__memcpy_via_bounce(rt, d, s, n, dk == ADSM__IN_DEVICE_BUFFER ? (int)ddev : -1,
                                       sk == ADSM__IN_DEVICE_BUFFER ? (int)sdev : -1);
    adsm_result r = adsm__device_wait_all(rt, "adsm_memcpy");
    if (r == ADSM_OK && rt->be->dev_copy(rt->dev_ctx[ddev], adsm__dev_in(rt, d), adsm__dev_in(rt, s), n) != 0)
        r = adsm__fail(ADSM_ERROR_SYSTEM, "adsm_memcpy: the device-to-device copy failed");
    return r;
}

/* ---- the entry points ------------------------------------------------------------------------ */
ADSM__PRIVATE adsm_result adsm__check_range(const void *p, size_t n, const char *fn) {
    if (n > 0 && !p) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: NULL pointer", fn);
    if ((uintptr_t)p > UINTPTR_MAX - n) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: range wraps around", fn);
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__memset_unguarded(void *dst, int value, size_t n) {
    adsm_result r;
    if ((r = adsm__check_range(dst, n, "adsm_memset")) != ADSM_OK) return r;
    if (n == 0) return ADSM_OK;
    if (!adsm__ready()) { /* nothing is shared before initialisation: plain memory */
        memset(dst, value, n);
        return ADSM_OK;
    }
    unsigned dev;
    switch (adsm__device_buffer_kind(&adsm__rt, (uintptr_t)dst, n, &dev)) {
    case ADSM__IN_DEVICE_BUFFER: return adsm__memset_device_buffer(&adsm__rt, (uintptr_t)dst, value, n, dev);
    case ADSM__ACROSS_DEVICE_BUFFER:
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_memset(%p, %zu): the range runs across the edge of a "
                          "device buffer", dst, n);
    default: return adsm__memset_impl(&adsm__rt, (uintptr_t)dst, value, n);
    }
}

ADSM__PRIVATE adsm_result adsm__memcpy_unguarded(void *dst, const void *src, size_t n);

/* Overlapping ranges (memmove's case, in a shared object or a device buffer, where the driver's
 * copies take no overlap): the walk goes from the start, unit by unit, and would read bytes it
 * had already overwritten where the destination lies above the source. So such a copy goes
 * through a bounce buffer, piece by piece, from the end when the destination lies above: each
 * piece is read before any write reaches it. */
ADSM__PRIVATE adsm_result adsm__memmove_overlapping(uintptr_t d, uintptr_t s, size_t n) {
    size_t piece = ADSM__MIN(n, adsm__bounce_piece(&adsm__rt)), len;
    adsm__bounce b;
    if (adsm__bounce_take(&adsm__rt, piece, &b) != 0)
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "adsm_memcpy: out of memory");
    unsigned char *bounce = b.base;
    adsm_result r = ADSM_OK;
    for (size_t done = 0; r == ADSM_OK && done < n; done += len) {
        len = ADSM__MIN(piece, n - done);
        size_t off = d > s ? n - done - len : done;
        r = adsm__memcpy_unguarded(bounce, (const void *)(s + off), len);
        if (r == ADSM_OK) r = adsm__memcpy_unguarded((void *)(d + off), bounce, len);
    }
    adsm__bounce_give(&adsm__rt, &b);
    return r;
}

ADSM__PRIVATE adsm_result adsm__memcpy_unguarded(void *dst, const void *src, size_t n) {
    adsm_result r;
    if ((r = adsm__check_range(dst, n, "adsm_memcpy")) != ADSM_OK ||
        (r = adsm__check_range(src, n, "adsm_memcpy")) != ADSM_OK)
        return r;
    if (n == 0) return ADSM_OK;
    if (!adsm__ready()) { /* nothing is shared before initialisation: plain memory */
        memmove(dst, src, n);
        return ADSM_OK;
    }
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    unsigned ddev, sdev;
    int dk = adsm__device_buffer_kind(&adsm__rt, d, n, &ddev), sk = adsm__device_buffer_kind(&adsm__rt, s, n, &sdev);
    /* checked whole before anything moves, overlapping copies (which go in pieces) included */
    if (dk == ADSM__ACROSS_DEVICE_BUFFER || sk == ADSM__ACROSS_DEVICE_BUFFER)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_memcpy(%p, %p, %zu): a range runs across the edge of a "
                          "device buffer", dst, src, n);
    if (s < d + n && d < s + n) return d == s ? ADSM_OK : adsm__memmove_overlapping(d, s, n);
    if (dk == ADSM__NOT_DEVICE_BUFFER && sk == ADSM__NOT_DEVICE_BUFFER) return adsm__memcpy_impl(&adsm__rt, d, s, n);
    return adsm__memcpy_device_buffers(&adsm__rt, d, s, n, dk, ddev, sk, sdev);
}

#endif /* ADSM__MEMOPS_INCLUDED */
