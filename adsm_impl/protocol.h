/* adsm_impl/protocol.h -- the engine lazy and rolling share (interface: protocol_vtbl.h), and the
 * helpers batch uses too: state changes (protection first), fetch, flush and write-back, the FIFO
 * of dirty units, the mapping limit, and the access, release, acquire, alloc and free that lazy
 * takes as they are and rolling extends. What only one protocol does lives in its own file
 * (protocol_rolling.h: the window, regrets, costs, write-ahead runs, the fetch granule and
 * eviction; protocol_batch.h): the engine reaches rolling's through the vtable's optional steps
 * (fetch_granule, write_run, on_dirty, access_cost), never by name.
 *
 * A protocol answers five events: a CPU access the page protection stopped (fault, or a runtime
 * access on the program's behalf), release (a kernel call), acquire (adsm_sync) and free.
 * Batch and lazy track whole objects, rolling tracks blocks; the "unit" helpers hide that.
 * Everything here is entered with the runtime lock held, and on_access also runs inside the
 * SIGSEGV handler: no allocation, no stdio, only backend verbs marked signal-safe.
 *
 * Copies run outside the runtime lock: a fetch (and the waits before it: the kernel that writes
 * the unit, an eviction still reading it) marks its unit busy, lets the lock go, copies, takes
 * the lock back and finishes the state change. Nobody else changes a busy unit: a fault on it
 * waits for the copy (a futex on rt->copy_gen), a launch that writes its object and a free of
 * its object wait too, everything else proceeds. on_access returns ADSM__AGAIN when it let the
 * lock go, so the caller looks its objects up again (they may have been freed meanwhile). */
#ifndef ADSM__PROTOCOL_INCLUDED
#define ADSM__PROTOCOL_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "stats.h"
#include "object.h"
#include "protection.h"
#include "backend.h"
#include "copy.h"
#include "trace.h"
#include "runtime.h"
#include "reservation.h"
#include "protocol_vtbl.h"
#include "directory.h"
#include "host_pages.h"

/* Small outputs home at adsm_sync (below, adsm__bring_small_outputs_home): the largest object that
 * learns the habit, and how many syncs one read fault buys. */
#define ADSM__SMALL_OUTPUT ((size_t)64 << 10)
#define ADSM__HOME_SYNCS 4
/* Bytes of small objects standing beside twins at once (below): each launch compares them all */
#define ADSM__TWIN_BYTES ((size_t)256 << 10)

/* Tracking is off when the backend shares host memory (host), the protocol is batch, or objects
 * are managed memory (um). */
ADSM__PRIVATE int adsm__tracking(const adsm__runtime *rt) {
    return rt->be->moves_data && rt->proto->kind != ADSM_PROTOCOL_BATCH && !rt->proto->managed;
}

ADSM__PRIVATE void adsm__unit_of(const adsm__runtime *rt, const adsm__object *o, size_t block, size_t *first,
                                 size_t *count) {
    if (rt->proto->whole_object) {
        *first = 0;
        *count = o->nblocks;
    } else {
        *first = block;
        *count = 1;
    }
}

/* ---- copies outside the runtime lock ------------------------------------------------------ */
/* The busy marks this thread holds, newest last (adsm__busy_begin to adsm__busy_end; a launch's
 * settling, adsm__settle_copies, by its objects): a signal handler that interrupts the thread in
 * such a copy and touches one of those units must not wait for it, as the copy cannot end before
 * the handler returns. Thread-local, so the fault handler reads them without a lock. Sections
 * nest only through signal handlers, which end first; past ADSM__TLS_BUSY_MAX they go unrecorded
 * (and such a wait would hang, as every one did before). */
#define ADSM__TLS_BUSY_MAX 8
static __thread const adsm__block *adsm__tls_busy_head[ADSM__TLS_BUSY_MAX];
static __thread size_t adsm__tls_busy_marks[ADSM__TLS_BUSY_MAX];
static __thread unsigned adsm__tls_busy_depth;
static __thread adsm__object *const *adsm__tls_settling;
static __thread size_t adsm__tls_settling_n;

ADSM__PRIVATE void adsm__busy_push(const adsm__block *head, size_t marks) {
    if (adsm__tls_busy_depth < ADSM__TLS_BUSY_MAX) {
        adsm__tls_busy_head[adsm__tls_busy_depth] = head;
        adsm__tls_busy_marks[adsm__tls_busy_depth] = marks;
    }
    adsm__tls_busy_depth++;
}

/* Whether this thread holds `unit` of o busy (unit NULL: any unit of o). Signal-safe. */
ADSM__PRIVATE int adsm__busy_mine(const adsm__object *o, const adsm__block *unit) {
    unsigned depth = ADSM__MIN(adsm__tls_busy_depth, ADSM__TLS_BUSY_MAX);
    for (unsigned i = 0; i < depth; i++) {
        const adsm__block *h = adsm__tls_busy_head[i];
        if (unit ? unit >= h && unit < h + adsm__tls_busy_marks[i] : h >= o->blocks && h < o->blocks + o->nblocks)
            return 1;
    }
    for (size_t i = 0; i < adsm__tls_settling_n; i++)
        if (adsm__tls_settling[i] == o) return 1;
    return 0;
}

/* Marks busy the units heading `marks` blocks from `head` (one for a whole-object unit, every
 * block of a fetch widened over several rolling blocks) and lets the runtime lock go. */
ADSM__PRIVATE void adsm__busy_begin(adsm__runtime *rt, adsm__object *o, adsm__block *head, size_t marks) {
    for (size_t k = 0; k < marks; k++) head[k].busy = 1;
    o->busy_units++;
    adsm__busy_push(head, marks);
    adsm__unlock(&rt->lock);
    adsm__tls_passthrough++; /* the copy's own memcpy must not come back to adsm (interposition) */
}

/* Wakes whoever waits for a busy unit (adsm__await_copies): some copy is done. Runtime lock held,
 * so the count of waiters is exact: usually nobody waits, and no system call is made. */
ADSM__PRIVATE void adsm__copies_done(adsm__runtime *rt) {
    ADSM__ADD(&rt->copy_gen, 1);
    if (rt->copy_waiters) adsm__futex_wake_all(&rt->copy_gen);
}

/* Takes the lock back, clears the marks and wakes whoever waits for a busy unit. */
ADSM__PRIVATE void adsm__busy_end(adsm__runtime *rt, adsm__object *o, adsm__block *head, size_t marks) {
    adsm__tls_passthrough--;
    adsm__lock(&rt->lock);
    for (size_t k = 0; k < marks; k++) head[k].busy = 0;
    o->busy_units--;
    adsm__tls_busy_depth--;
    adsm__copies_done(rt);
}

/* Lets the runtime lock go until some busy unit is done, then takes it back. Signal-safe. */
ADSM__PRIVATE int adsm__await_copies(adsm__runtime *rt) {
    int gen = ADSM__LOAD(&rt->copy_gen);
    rt->copy_waiters++; /* before the lock goes: a copy done after it sees this waiter */
    adsm__unlock(&rt->lock);
    adsm__futex_wait(&rt->copy_gen, gen);
    adsm__lock(&rt->lock);
    rt->copy_waiters--;
    return ADSM__AGAIN;
}

/* A unit found busy (unit NULL: some unit of o): waits for the copy that holds it, unless this
 * thread holds it itself, stopped in that copy by a signal whose handler now touches it: waiting
 * would never end, so ADSM__OWN_COPY, which the fault handler explains before the process dies. */
ADSM__PRIVATE int adsm__await_unit(adsm__runtime *rt, const adsm__object *o, const adsm__block *unit) {
    return adsm__busy_mine(o, unit) ? ADSM__OWN_COPY : adsm__await_copies(rt);
}

/* ---- a launch's objects, held while it lets the lock go -------------------------------------
 * Between binding its objects and issuing its kernel a launch lets the runtime lock go at times
 * (flushes settling, peer copies, faults copying typed objects finishing). Meanwhile its objects
 * (those it names, and with several devices those it reaches through pointer fields) are held:
 * another thread's access to one (a fault, adsm_memcpy, adsm_memset, I/O) waits until the kernel
 * is issued and then finds the states the launch left (an output Invalid, this launch its writer,
 * so a fetch waits for the kernel), and a free of one waits, then sees the kernel as a user. A
 * read of an output fetched the bytes from before the kernel and left them ReadOnly over what it
 * wrote; a write to what a kernel reaches left a block its translation skipped (the kernel
 * followed a host address); a free of an input let the kernel run on freed memory. The holding
 * thread's own accesses go on (thread-local, read by the fault handler without a lock). */
static __thread adsm__object *const *adsm__tls_launch_objs;
static __thread size_t adsm__tls_launch_n;

ADSM__PRIVATE void adsm__launch_hold(adsm__object *const *objs, size_t n) {
    for (size_t i = 0; i < n; i++) objs[i]->launch_held++;
    adsm__tls_launch_objs = objs, adsm__tls_launch_n = n; /* launches do not nest on a thread */
}

ADSM__PRIVATE void adsm__launch_let_go(adsm__runtime *rt, adsm__object *const *objs, size_t n) {
    adsm__tls_launch_n = 0;
    for (size_t i = 0; i < n; i++) objs[i]->launch_held--;
    adsm__copies_done(rt); /* wakes those waiting (adsm__await_copies) */
}

/* Whether another thread's launch holds o (wait: adsm__await_copies). Runtime lock held;
 * signal-safe. */
ADSM__PRIVATE int adsm__held_elsewhere(const adsm__object *o) {
    if (!o->launch_held) return 0;
    for (size_t i = 0; i < adsm__tls_launch_n; i++)
        if (adsm__tls_launch_objs[i] == o) return 0;
    return 1;
}

/* Whether a unit is being copied, or its object held by another thread's launch: wait. */
ADSM__PRIVATE int adsm__unit_busy(const adsm__runtime *rt, const adsm__object *o, size_t block) {
    size_t first, count;
    adsm__unit_of(rt, o, block, &first, &count);
    return o->blocks[first].busy || adsm__held_elsewhere(o);
}

/* ---- the FIFO of dirty units (oldest first) --------------------------------------------- */
ADSM__PRIVATE void adsm__fifo_push(adsm__runtime *rt, adsm__block *b) {
    if (b->in_fifo) return;
    b->in_fifo = 1;
    b->fifo_next = NULL;
    b->fifo_prev = rt->fifo_tail;
    if (rt->fifo_tail) rt->fifo_tail->fifo_next = b;
    else rt->fifo_head = b;
    rt->fifo_tail = b;
    rt->fifo_len++;
}

ADSM__PRIVATE void adsm__fifo_remove(adsm__runtime *rt, adsm__block *b) {
    if (!b->in_fifo) return;
    if (b->fifo_prev) b->fifo_prev->fifo_next = b->fifo_next;
    else rt->fifo_head = b->fifo_next;
    if (b->fifo_next) b->fifo_next->fifo_prev = b->fifo_prev;
    else rt->fifo_tail = b->fifo_prev;
    b->fifo_prev = b->fifo_next = NULL;
    b->in_fifo = 0;
    rt->fifo_len--;
}

/* The protection of `state` over [addr, addr + len), whose blocks are in the states of mask
 * `from` (protection.h), counted in the stats and traced. */
ADSM__PRIVATE int adsm__protect_blocks(adsm__runtime *rt, uintptr_t addr, size_t len, unsigned from, int state) {
    ADSM__ADD(&rt->stats.protection_changes, 1);
    uint64_t t0 = rt->trace.events ? adsm__now_ns() : 0;
    int rc = adsm__protect_state(&rt->protection, addr, len, from, state);
    adsm__trace(&rt->trace, ADSM__TR_PROTECT, t0, addr, len);
    return rc;
}

/* The states blocks [first, first+count) of o are in, as a mask (ADSM__HAS). */
ADSM__PRIVATE unsigned adsm__states_in(const adsm__object *o, size_t first, size_t count) {
    unsigned from = 0;
    for (size_t b = first; b < first + count && from != ADSM__ALL_STATES; b++) from |= ADSM__HAS(o->blocks[b].state);
    return from;
}

/* Sets blocks [first, first+count) to `state`, changing the host protection first (the engine,
 * protection.h, needs the states the blocks leave). */
ADSM__PRIVATE int adsm__apply_state(adsm__runtime *rt, adsm__object *o, size_t first, size_t count, int state) {
    size_t off = first << rt->cfg.block_shift;
    size_t len = adsm__blocks_len(first, count, rt->cfg.block_shift, o->span);
    if (adsm__protect_blocks(rt, o->host + off, len, adsm__states_in(o, first, count), state) != 0) return -1;
    for (size_t b = first; b < first + count; b++) o->blocks[b].state = (uint8_t)state;
    if (state == ADSM__DIRTY) /* the CPU writes it: every device copy is stale (directory.h) */
        for (size_t b = first; b < first + count; b++) o->blocks[b].dev_valid = 0;
    return 0;
}

/* The program closed the userfaultfd engine's descriptor (protection.h, adsm__protection_lost):
 * since then writes to ReadOnly pages went through untracked. adsm goes on with mprotect and
 * takes every idle ReadOnly unit as written (Dirty, queued in the FIFO, sent at the next kernel
 * call), so no write is lost; a busy unit is left to the copy that holds it. Said once, at
 * warning level. Runtime lock held; signal-safe (the fault handler may be the first to see it). */
ADSM__PRIVATE int adsm__fault_engine_lost(adsm__runtime *rt) {
    char msg[400] = "";
    adsm__append(msg, sizeof msg, "adsm warn: the program closed adsm's userfaultfd (descriptor ");
    adsm__append_dec(msg, sizeof msg, (uint64_t)rt->protection.uffd);
    adsm__append(msg, sizeof msg, "), which dropped its write-protection; adsm goes on with mprotect and sends "
                                  "the ReadOnly data again at the next kernel call (close no descriptor of "
                                  "adsm's, or use ADSM_FAULT_ENGINE=mprotect)\n");
    adsm__protection_fall_back(&rt->protection);
    if (adsm__logs(ADSM_LOG_WARN)) adsm__write_stderr(msg);
    for (adsm__object *o = rt->first_object; o; o = o->next) {
        size_t unit = rt->proto->whole_object ? o->nblocks : 1;
        for (size_t b = 0; b < o->nblocks && !o->device_only;) {
            size_t run = 0; /* idle ReadOnly units from b, one protection change for them */
            while (b + run < o->nblocks && o->blocks[b + run].state == ADSM__READONLY && !o->blocks[b + run].busy)
                run += unit;
            if (run == 0) {
                b += unit;
                continue;
            }
            if (adsm__apply_state(rt, o, b, run, ADSM__DIRTY) != 0) return -1;
            for (size_t k = b; k < b + run; k += unit) adsm__fifo_push(rt, &o->blocks[k]);
            b += run;
        }
    }
    return 0;
}

/* What adsm__apply_state does, going on with mprotect where the program closed the userfaultfd. */
ADSM__PRIVATE int adsm__set_state(adsm__runtime *rt, adsm__object *o, size_t first, size_t count, int state) {
    if (adsm__apply_state(rt, o, first, count, state) == 0) return 0;
    if (!adsm__protection_lost(&rt->protection) || adsm__fault_engine_lost(rt) != 0) return -1;
    return adsm__apply_state(rt, o, first, count, state);
}

/* At each kernel call, before the flush: ReadOnly data the CPU wrote since the program closed
 * the userfaultfd must reach the device with the Dirty data. 0 or -1. */
ADSM__PRIVATE int adsm__check_fault_engine(adsm__runtime *rt) {
    return adsm__protection_lost(&rt->protection) ? adsm__fault_engine_lost(rt) : 0;
}

/* n bytes from `src` (as ops reach it) into host memory [host, host + n) of protection `prot`
 * (kept). Where the shared half has a host alias (reservation.h) the bytes go in through it, which
 * is always writable: the program's view stays as it is until the protocol opens it. 0 or -1. */
ADSM__PRIVATE int adsm__land_home(adsm__runtime *rt, const adsm__fetch_ops *ops, uintptr_t host, uintptr_t src,
                                  size_t n, int prot, adsm__fill_count *count) {
    uintptr_t to = adsm__host_dma(rt, host);
    return adsm__copy_home(&rt->fill, ops, to, src, n, to != host ? PROT_READ | PROT_WRITE : prot, count);
}

/* Device `from` -> host copy into host memory of protection `prot` (kept), counted in the stats. */

ADSM__PRIVATE int adsm__fetch_range(adsm__runtime *rt, unsigned from, uintptr_t host, uintptr_t dev, size_t n,
                                    int prot) {
    adsm__fill_count count = {0, 0};
    adsm__fetch_ops ops = {rt->be->from_device, rt->be->host_direct, rt->be->device_view, rt->dev_ctx[from]};
    uint64_t t0 = adsm__now_ns();
    if (adsm__land_home(rt, &ops, host, dev, n, prot, &count) != 0) return -1;
    adsm__trace(&rt->trace, ADSM__TR_FETCH, t0, host, n);
    adsm__count_from_device(rt, from, n);
    ADSM__ADD(&rt->stats.d2h_moved_bytes, count.moved);
    ADSM__ADD(&rt->stats.d2h_forced_bytes, count.forced);
    return 0;
}

/* The "device" side of a fill from host memory (adsm__fill_range): the address is the source. */
ADSM__PRIVATE int adsm__copy_from_memory(void *ctx, uintptr_t dst, uintptr_t src, size_t n) {
    (void)ctx;
    memcpy((void *)dst, (const void *)src, n);
    return 0;
}

ADSM__PRIVATE const void *adsm__memory_view(void *ctx, uintptr_t src, size_t n) {
    (void)ctx;
    (void)n;
    return (const void *)src;
}

/* Bytes the runtime already holds in plain memory (src) into host memory [host, host + n) of
 * protection `prot` (kept), landing as a fetch's do (adsm__land_home). Used where a device copy's
 * bytes came home for another reason (translate.h, the pass back of a staged translation), so the
 * CPU need not fetch them again. 0 or -1. */
ADSM__PRIVATE int adsm__fill_range(adsm__runtime *rt, uintptr_t host, const void *src, size_t n, int prot) {
    adsm__fill_count count = {0, 0};
    adsm__fetch_ops ops = {adsm__copy_from_memory, NULL, adsm__memory_view, NULL};
    return adsm__land_home(rt, &ops, host, (uintptr_t)src, n, prot, &count);
}

/* Waits for the last kernel that may write o. A lost device never finishes it; the device memory
 * is then taken as it stands (adsm_sync reports ADSM_ERROR_DEVICE_LOST), so the program can
 * still read its data instead of crashing. */
ADSM__PRIVATE void adsm__wait_writer(adsm__runtime *rt, const adsm__object *o) {
    (void)adsm__dev_wait_writer(rt, o);
}

/* Copies the Invalid blocks of [first, first+count) from the device into the (protected) host
 * pages, after the last kernel that may write the object finished. States are left to the
 * caller. Consecutive Invalid blocks go in one copy. */
ADSM__PRIVATE int adsm__fetch(adsm__runtime *rt, adsm__object *o, size_t first, size_t count) {
    /* runs with the unit busy and the runtime lock let go: the unit's states and o->writer_seq
     * cannot change meanwhile (see the top of this file) */
    unsigned shift = rt->cfg.block_shift;
    adsm__wait_writer(rt, o);
    size_t b = first, end = first + count;
    while (b < end) {
        if (o->blocks[b].state != ADSM__INVALID) { b++; continue; }
        size_t run = b, unit = rt->proto->whole_object ? o->nblocks : 1;
        unsigned from = adsm__dev_source(rt, &o->blocks[b]); /* one source per copy (directory.h) */
        while (run < end && o->blocks[run].state == ADSM__INVALID &&
               (unit > 1 || adsm__dev_source(rt, &o->blocks[run]) == from))
            run++;
        size_t off = b << shift, len = adsm__blocks_len(b, run - b, shift, o->size);
        if (len > 0 && adsm__fetch_range(rt, from, o->host + off, o->dev + off, len, PROT_NONE) != 0) return -1;
        b = run;
    }
    return 0;
}

/* Whether an asynchronous flush of the unit headed by b may still be reading its host pages: a
 * CPU write to it, or a protection that hides it from the copy engine, waits for that copy. */
ADSM__PRIVATE int adsm__flushing(const adsm__runtime *rt, const adsm__block *b) {
    return b->flush_ticket > rt->flushes_settled;
}

/* Waits, with the runtime lock let go by the caller, for every copy queued so far; `queued` is
 * rt->flushes_queued read before the lock was let go. Called again with the lock held, after the
 * drain returned, it records that those flushes are done. */
ADSM__PRIVATE void adsm__flushes_settled(adsm__runtime *rt, uint64_t queued) {
    if (queued > rt->flushes_settled) rt->flushes_settled = queued;
}

/* o's Dirty blocks back into the FIFO, after o stood Dirty outside it (beside a twin, or being
 * filled by a read: below). */
ADSM__PRIVATE void adsm__queue_dirty_blocks(adsm__runtime *rt, adsm__object *o) {
    for (size_t b = 0; b < o->nblocks; b++)
        if (o->blocks[b].state == ADSM__DIRTY) adsm__fifo_push(rt, &o->blocks[b]);
}

/* A small object standing beside its twin (below) flushed by another way than a release
 * (adsm_memcpy sending its source, maybe only some of its blocks): the device copy may differ
 * from the twin after it, so the twin speaks for it no more, and its blocks still Dirty, outside
 * the FIFO until now, go into it, to be flushed as any Dirty block is. */
ADSM__PRIVATE void adsm__twin_end(adsm__runtime *rt, adsm__object *o) {
    if (!o->twin_live) return;
    o->twin_live = 0;
    adsm__queue_dirty_blocks(rt, o);
}

/* A read from a file into an Invalid unit it will overwrite whole (lazy: the whole object) claims
 * it without a fetch, and fills it piece by piece, letting the runtime lock go between pieces
 * (io.h). Until it ends, only the pieces written so far are the program's bytes; the rest of the
 * unit is stale host memory, which a flush by another thread's launch would have sent over the
 * device's current bytes, for the transfer's tail repair to fetch back. So the claimed unit stands
 * Dirty outside the FIFO while it is filled (adsm__fill_claimed), and goes in when the transfer
 * completes it or stops, its tail fetched first (adsm__fill_end). */
ADSM__PRIVATE void adsm__fill_claimed(adsm__runtime *rt, adsm__object *o, size_t block) {
    size_t first, count;
    adsm__unit_of(rt, o, block, &first, &count);
    if (!adsm__tracking(rt) || o->blocks[first].state != ADSM__DIRTY) return; /* the FIFO's protocols only */
    o->io_filling = 1;
    for (size_t b = first; b < first + count; b++) adsm__fifo_remove(rt, &o->blocks[b]);
}

ADSM__PRIVATE void adsm__fill_end(adsm__runtime *rt, adsm__object *o) {
    if (!o->io_filling) return;
    o->io_filling = 0;
    adsm__queue_dirty_blocks(rt, o);
}

/* Host -> device copy of blocks [first, first+count), which the caller made ReadOnly. An
 * asynchronous one stamps its unit heads (every block for rolling) with its ticket. */
ADSM__PRIVATE int adsm__flush(adsm__runtime *rt, adsm__object *o, size_t first, size_t count, int async) {
    size_t off = first << rt->cfg.block_shift;
    size_t len = adsm__blocks_len(first, count, rt->cfg.block_shift, o->size);
    if (len == 0) return 0;
    size_t heads = rt->proto->whole_object ? 1 : count;
    /* at a call, to the launch's device; an eviction, to the object's home device (directory.h) */
    unsigned d = rt->release_dev >= 0 ? (unsigned)rt->release_dev : o->home_dev;
    int eviction = rt->release_dev < 0;
    /* a call's device has room (capacity.h); an eviction to a device with none, or to a lost one,
     * leaves the unit ReadOnly, current on the host only, for the next launch to send (several
     * devices) */
    if (eviction && (adsm__lost_devices(rt) & adsm__dev_bit(d))) return 0;
    if (adsm__charge(rt, o, d) != 0) return eviction ? 0 : -1;
    adsm__twin_end(rt, o);
    if (o->flush_by_xlate && rt->release_dev >= 0) { /* the launch's translation sends these bytes */
        o->flush_skipped = 1;
        for (size_t k = 0; k < heads; k++) o->blocks[first + k].dev_valid |= adsm__dev_bit(d);
        return 0;
    }
    if (async) adsm__stamp_copy(rt, o, first, count);
    if (rt->be->to_device(rt->dev_ctx[d], o->dev + off, adsm__host_dma(rt, o->host + off), len, async,
                          adsm__copy_after(rt, o, d)) != 0) {
        if (!eviction || rt->ndev == 1 || !adsm__dev_is_lost(rt, d)) return -1;
        adsm__mark_lost(rt, d); /* found lost here: the next sync reports it; the host keeps the unit */
        return 0;
    }
    for (size_t k = 0; k < heads; k++) o->blocks[first + k].dev_valid |= adsm__dev_bit(d);
    adsm__stats_h2d(&rt->stats, len);
    ADSM__ADD(&rt->dev_stats[d].h2d_bytes, len);
    return 0;
}

/* Writes a dirty unit (headed by b) back to the device and makes it ReadOnly: protection
 * first, so no CPU write can slip in while the copy reads the pages. */
ADSM__PRIVATE int adsm__writeback_unit(adsm__runtime *rt, adsm__block *b, int async) {
    adsm__object *o = b->obj;
    size_t first, count;
    adsm__unit_of(rt, o, b->index, &first, &count);
    if (o->blocks[first].state != ADSM__DIRTY) {
        adsm__fifo_remove(rt, b);
        return 0;
    }
    if (adsm__set_state(rt, o, first, count, ADSM__READONLY) != 0)
        return -1; /* refused (the mapping limit): still Dirty and queued, for a later writeback */
    adsm__fifo_remove(rt, b);
    return adsm__flush(rt, o, first, count, async);
}

/* Rolling: writes back the n Dirty blocks from `first`, all in the FIFO, as one protection
 * change and one copy (protection first, as above). */
ADSM__PRIVATE int adsm__writeback_blocks(adsm__runtime *rt, adsm__object *o, size_t first, size_t n, int async) {
    if (adsm__set_state(rt, o, first, n, ADSM__READONLY) != 0) return -1; /* refused: still queued */
    for (size_t k = first; k < first + n; k++) adsm__fifo_remove(rt, &o->blocks[k]);
    return adsm__flush(rt, o, first, n, async);
}

/* Writes back, at a kernel call, the dirty unit b and the Dirty blocks next to it in its object
 * (rolling tracks blocks: a sequential or dense phase leaves long runs of them): one protection
 * change and one queued copy for the run instead of one per block. Protection first, as above;
 * every block of the run is marked, as its copy may still read it. */
ADSM__PRIVATE int adsm__writeback_run(adsm__runtime *rt, adsm__block *b, int async) {
    adsm__object *o = b->obj;
    if (rt->proto->whole_object || b->state != ADSM__DIRTY) return adsm__writeback_unit(rt, b, async);
    size_t first = b->index, end = b->index + 1;
    while (first > 0 && o->blocks[first - 1].in_fifo && o->blocks[first - 1].state == ADSM__DIRTY) first--;
    while (end < o->nblocks && o->blocks[end].in_fifo && o->blocks[end].state == ADSM__DIRTY) end++;
    return adsm__writeback_blocks(rt, o, first, end - first, async);
}

/* ---- the mapping limit (vm.max_map_count) ----------------------------------------------------
 * Every run of pages with one protection is one kernel mapping; a change that splits a run needs
 * a new one, and fails with ENOMEM at the limit. A change that only moves the border between two
 * runs needs none. So at the limit adsm moves borders: a read joins the nearest ReadOnly run by
 * fetching the Invalid blocks in between (reads never leave islands), an invalidation takes its
 * clean ReadOnly neighbours along (their device copies are current). Blocks are walked in address
 * order across objects that touch. Runtime lock held. */
typedef struct adsm__pos {
    adsm__object *o; /* NULL: past the edge of the objects that touch */
    ptrdiff_t b;
} adsm__pos;

ADSM__PRIVATE adsm__pos adsm__pos_step(adsm__runtime *rt, adsm__pos p, int step) {
    p.b += step;
    if (p.b >= 0 && (size_t)p.b < p.o->nblocks) return p;
    uintptr_t edge = step < 0 ? p.o->host - 1 : p.o->host + p.o->span;
    adsm__object *n = adsm__object_of(adsm__tree_find(&rt->objects, edge));
    int touches = n && (step < 0 ? n->host + n->span == p.o->host : n->host == edge);
    p.o = touches ? n : NULL;
    p.b = touches && step < 0 ? (ptrdiff_t)n->nblocks - 1 : 0;
    return p;
}

ADSM__PRIVATE int adsm__pos_is(const adsm__pos *p, int state) {
    return p->o && p->o->blocks[p->b].state == state && !p->o->blocks[p->b].busy;
}

/* Makes the Invalid blocks strictly between `from` and the ReadOnly block `to` ReadOnly, one
 * object's stretch at a time starting next to `to`, so each change moves the border. */
ADSM__PRIVATE int adsm__readonly_towards(adsm__runtime *rt, adsm__pos from, adsm__pos to, int step) {
    adsm__pos p = adsm__pos_step(rt, to, -step);
    while (p.o && !(p.o == from.o && p.b == from.b)) {
        ptrdiff_t stop = p.b; /* the stretch in p.o: [lo, hi] */
        while (stop - step >= 0 && (size_t)(stop - step) < p.o->nblocks && !(p.o == from.o && stop - step == from.b))
            stop -= step;
        size_t lo = (size_t)(step < 0 ? p.b : stop), hi = (size_t)(step < 0 ? stop : p.b);
        if (adsm__fetch(rt, p.o, lo, hi - lo + 1) != 0 || adsm__set_state(rt, p.o, lo, hi - lo + 1, ADSM__READONLY) != 0)
            return -1;
        adsm__pos last = {p.o, stop};
        p = adsm__pos_step(rt, last, -step);
    }
    return 0;
}

/* A read at the limit: the unit [first, first + count) of o, already fetched, joins the nearest
 * ReadOnly run on either side. 0, or -1 (errno ENOMEM) when no such run can be reached. */
ADSM__PRIVATE int adsm__join_readonly_run(adsm__runtime *rt, adsm__object *o, size_t first, size_t count) {
    for (int step = -1; step <= 1; step += 2) {
        adsm__pos unit_edge = {o, step < 0 ? (ptrdiff_t)first : (ptrdiff_t)(first + count - 1)};
        adsm__pos p = adsm__pos_step(rt, unit_edge, step);
        while (adsm__pos_is(&p, ADSM__INVALID)) p = adsm__pos_step(rt, p, step);
        if (!adsm__pos_is(&p, ADSM__READONLY)) continue;
        if (adsm__readonly_towards(rt, unit_edge, p, step) != 0) return -1;
        ADSM__ADD(&rt->stats.map_limit_merges, 1);
        return adsm__set_state(rt, o, first, count, ADSM__READONLY);
    }
    errno = ENOMEM;
    return -1;
}

/* Whether every block of n is ReadOnly and idle: its device copy is current, so it may become
 * Invalid at no cost but a later fetch. */
ADSM__PRIVATE int adsm__clean_readonly(const adsm__runtime *rt, const adsm__object *n) {
    for (size_t b = 0; b < n->nblocks; b++)
        if (n->blocks[b].state != ADSM__READONLY || n->blocks[b].busy || adsm__flushing(rt, &n->blocks[b])) return 0;
    return 1;
}

/* An invalidation at the limit: the object touching o on one side, if clean ReadOnly, becomes
 * Invalid too (a border move when its other side is Invalid already), so o's change becomes a
 * border move as well; the left side first, then the right. */
ADSM__PRIVATE int adsm__invalidate_compacting(adsm__runtime *rt, adsm__object *o) {
    if (adsm__set_state(rt, o, 0, o->nblocks, ADSM__INVALID) == 0) return 0;
    for (int step = -1; step <= 1 && errno == ENOMEM; step += 2) {
        adsm__pos edge = {o, step < 0 ? 0 : (ptrdiff_t)o->nblocks - 1};
        adsm__pos n = adsm__pos_step(rt, edge, step);
        if (!n.o || !adsm__clean_readonly(rt, n.o) || adsm__set_state(rt, n.o, 0, n.o->nblocks, ADSM__INVALID) != 0) {
            errno = ENOMEM;
            continue;
        }
        ADSM__ADD(&rt->stats.map_limit_merges, 1);
        if (adsm__set_state(rt, o, 0, o->nblocks, ADSM__INVALID) == 0) return 0;
    }
    return -1;
}

/* The output among writes[0..n) that begins where o's span ends (step 1) or ends where o begins
 * (step -1); NULL when none. */
ADSM__PRIVATE adsm__object *adsm__output_beside(adsm__object *const *writes, size_t n, const adsm__object *o,
                                                int step) {
    for (size_t i = 0; i < n; i++)
        if (step > 0 ? writes[i]->host == o->host + o->span : writes[i]->host + writes[i]->span == o->host)
            return writes[i];
    return NULL;
}

/* The states of the outputs lying side by side from o to last, as a mask (ADSM__HAS). */
ADSM__PRIVATE unsigned adsm__run_states(adsm__object *const *writes, size_t n, const adsm__object *o,
                                        const adsm__object *last) {
    unsigned from = 0;
    for (const adsm__object *p = o;; p = adsm__output_beside(writes, n, p, 1)) {
        from |= adsm__states_in(p, 0, p->nblocks);
        if (p == last) return from;
    }
}

/* Outputs [o, last], side by side, in the states of mask `from`, Invalid in one protection change.
 * 0 or -1 (nothing is marked: each goes its own way then, and a change made in part is made
 * again). */
ADSM__PRIVATE int adsm__invalidate_run(adsm__runtime *rt, adsm__object *o, const adsm__object *last,
                                       adsm__object *const *writes, size_t n, unsigned from) {
    if (adsm__protect_blocks(rt, o->host, last->host + last->span - o->host, from, ADSM__INVALID) != 0) return -1;
    for (adsm__object *p = o;; p = adsm__output_beside(writes, n, p, 1)) {
        for (size_t b = 0; b < p->nblocks; b++) p->blocks[b].state = ADSM__INVALID;
        if (p == last) return 0;
    }
}

/* A kernel's outputs become Invalid. Outputs that lie side by side (objects made one after
 * another) change in one protection change, not one each: a kernel with several small outputs
 * paid a system call per output. Should that change fail (the mapping limit, a closed
 * userfaultfd), each output goes its own way, with their recoveries. */
ADSM__PRIVATE int adsm__invalidate_outputs(adsm__runtime *rt, adsm__object *const *writes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        adsm__object *o = writes[i], *last = o, *next;
        if (adsm__output_beside(writes, n, o, -1)) continue; /* inside a run that starts before it */
        while ((next = adsm__output_beside(writes, n, last, 1)) != NULL) last = next;
        unsigned from = adsm__run_states(writes, n, o, last);
        /* Invalid already (written only by kernels, as a stencil's two grids): no system call */
        if (from == ADSM__HAS(ADSM__INVALID)) continue;
        if (last != o && adsm__invalidate_run(rt, o, last, writes, n, from) == 0) continue;
        for (adsm__object *p = o;; p = adsm__output_beside(writes, n, p, 1)) {
            if (adsm__invalidate_compacting(rt, p) != 0) return -1;
            if (p == last) break;
        }
    }
    return 0;
}

/* What to tell the program when a protection change still fails. */
ADSM__PRIVATE adsm_result adsm__protection_failed(const char *what) {
    if (errno == ENOMEM)
        return adsm__fail(ADSM_ERROR_SYSTEM, "%s: mprotect failed with ENOMEM: the process has reached vm.max_map_count "
                          "mappings (each run of pages with its own protection is one); raise the limit (sysctl "
                          "vm.max_map_count), or use fewer, larger objects or larger blocks (ADSM_BLOCK_SIZE)", what);
    return adsm__fail(ADSM_ERROR_SYSTEM, "%s: mprotect failed: %s", what, strerror(errno));
}

/* mprotect fails with ENOMEM when the process would exceed vm.max_map_count mappings: every run
 * of pages with its own protection is one mapping. Scattered Dirty units make many runs: writing
 * every dirty unit back turns them ReadOnly, which merges them with their neighbours. Scattered
 * reads would make ReadOnly islands: a read joins the nearest ReadOnly run instead (above). Then
 * the change is tried once more. Correct, only slower. */
ADSM__PRIVATE int adsm__set_state_compacting(adsm__runtime *rt, adsm__object *o, size_t first, size_t count,
                                             int state) {
    if (adsm__set_state(rt, o, first, count, state) == 0) return 0;
    if (errno != ENOMEM) return -1;
    if (state == ADSM__READONLY && o->blocks[first].state == ADSM__INVALID &&
        adsm__join_readonly_run(rt, o, first, count) == 0)
        return 0;
    if (!rt->fifo_head) return -1;
    while (rt->fifo_head) {
        if (adsm__writeback_unit(rt, rt->fifo_head, 1) != 0) return -1;
    }
    return adsm__set_state(rt, o, first, count, state);
}

/* An object whose host pages wait for their first use (host_pages.h) gets them before the access
 * that needs them, with every unit busy and the runtime lock let go, as a fetch runs: other
 * threads' faults and calls go on meanwhile (the driver takes seconds to page-lock a large
 * object), and an access to this object waits. A copy already running on one of its units (a
 * device memset, an eviction to another device) is waited for first, so that no mark but these is
 * cleared after. The access is then tried again: ADSM__AGAIN. */
ADSM__PRIVATE int adsm__first_use(adsm__runtime *rt, adsm__object *o) {
    if (o->busy_units) return adsm__await_unit(rt, o, NULL);
    size_t marks = rt->proto->whole_object ? 1 : o->nblocks;
    o->host_pending = 0;
    memset(o->block_bits, 0, (o->nblocks + 63) / 64 * sizeof *o->block_bits); /* sparse stores' bits: done */
    adsm__busy_begin(rt, o, o->blocks, marks);
    adsm__host_pages_ask(rt, o);
    adsm__busy_end(rt, o, o->blocks, marks);
    return ADSM__AGAIN;
}

/* A CPU store into a kernel's output does not make a large object's host pages: the CPU writing a
 * source point into a 28 MiB volume between kernels would have collapsed, zeroed and page-locked
 * all of it (about 0.2 ms per MiB on a GPU server), where a hand-written program copies 4 bytes.
 * Such a store (into an Invalid unit of an object of 16 MiB or more whose pages wait for their
 * first use, or into a unit an earlier one opened) goes on while the pages wait: its fetch and
 * the unit's later flush are staged (cuda's pinned staging, into the always-writable alias, which
 * allocates only the pages they touch). The distinct blocks so opened are o->block_bits's bits
 * until the first use (the view is mapped by then only by the CPU's own touches), their bytes
 * o->sparse_bytes; once they would pass an eighth of the object or 4 MiB, the pages are made,
 * keeping what is there. Reads, and first writes to fresh data (a program filling its input),
 * make them at once, as before: those are passes, which staging and 4 KiB alias pages would slow.
 * rt->sparse_first_use 0 (a test's) turns this off. */
#define ADSM__SPARSE_MIN ((size_t)16 << 20)
#define ADSM__SPARSE_MAX ((size_t)4 << 20)

/* Bytes of blocks [from, from + n) not opened sparsely yet; with `note`, they are noted now. */
ADSM__PRIVATE size_t adsm__sparse_new_bytes(const adsm__runtime *rt, adsm__object *o, size_t from, size_t n, int note) {
    size_t bytes = 0;
    for (size_t b = from; b < from + n && b < o->nblocks; b++) {
        if (adsm__block_bit(o, b)) continue;
        bytes += adsm__blocks_len(b, 1, rt->cfg.block_shift, o->span);
        if (note) adsm__block_bit_set(o, b);
    }
    return bytes;
}

ADSM__PRIVATE int adsm__sparse_use(adsm__runtime *rt, adsm__object *o, size_t first, size_t count, int state,
                                   int is_write) {
    if (!rt->sparse_first_use || !is_write || o->span < ADSM__SPARSE_MIN) return 0;
    if (state != ADSM__INVALID && !adsm__block_bit(o, first)) return 0; /* fresh data: a pass filling it */
    size_t budget = ADSM__MIN(o->span / 8, ADSM__SPARSE_MAX);
    if (o->sparse_bytes + adsm__sparse_new_bytes(rt, o, first, count, 0) > budget) return 0;
    rt->sparse_stores++;
    return 1;
}

/* ---- lazy and rolling share this engine ------------------------------------------------- */
/* The copies an access needs before the unit may change state: the end of an eviction still
 * reading it (before a write), and the kernel that may write it plus the fetch (Invalid data).
 * They run with the unit busy and the runtime lock let go. 0 or -1; *let_go says whether the
 * lock was let go. */
ADSM__PRIVATE int adsm__prepare_unit(adsm__runtime *rt, adsm__object *o, size_t first, size_t count, int state,
                                     int is_write, int overwrite, int *let_go) {
    adsm__block *head = &o->blocks[first];
    /* an Invalid unit's flush, if any, ran before the kernel that made it Invalid, which both the
     * fetch and an overwrite wait for, or landed before a memset or memcpy on the device made it
     * Invalid (memops.h): no drain (its flush may be unsettled: adsm__tracked_release) */
    /* an output whose flush a launch's translation took over (translate.h) has its current bytes
     * in its host pages, not on the device, until that launch's pass sent them: a thread touching
     * it meanwhile (racing the launch) takes them as they are */
    int need_fetch = state == ADSM__INVALID && !o->flush_skipped;
    int need_drain = is_write && !need_fetch && adsm__flushing(rt, head);
    if (!need_drain && !need_fetch) return 0;
    int rc = 0;
    size_t marks = rt->proto->whole_object ? 1 : count;
    uint64_t queued = rt->flushes_queued;
    *let_go = 1;
    adsm__busy_begin(rt, o, head, marks);
    /* usually the eviction is long done and the drain returns at once */
    if (need_drain) adsm__drain_all(rt);
    if (need_fetch) {
        /* even a full overwrite waits for the kernel that may write the object: the CPU's bytes
         * must land after the kernel's, in program order */
        if (is_write && overwrite) adsm__wait_writer(rt, o);
        else rc = adsm__fetch(rt, o, first, count);
    }
    adsm__busy_end(rt, o, head, marks);
    if (need_drain) adsm__flushes_settled(rt, queued);
    return rc;
}

/* A write made [from, from + n) of o Dirty: into the FIFO, then the protocol's on_dirty (rolling
 * notes regrets and evicts past its window; its time on this thread added to *spent). */
ADSM__PRIVATE int adsm__dirtied(adsm__runtime *rt, adsm__object *o, size_t from, size_t n, int sequential,
                                uint64_t *spent) {
    for (size_t k = from; k < from + n; k++) adsm__fifo_push(rt, &o->blocks[k]);
    return rt->proto->on_dirty ? rt->proto->on_dirty(rt, o, from, n, sequential, spent) : 0;
}

/* A CPU access the protection stopped: the unit (or the wider fetch fetch_granule asks for) is
 * fetched if Invalid and becomes ReadOnly; a write makes the unit (or the run write_run asks for)
 * Dirty and hands it to adsm__dirtied. What it cost this thread, less its copies, its waits and
 * what on_dirty spent, goes to the protocol's access_cost. The optional steps are the protocol's
 * (protocol_vtbl.h); lazy has none. */
ADSM__PRIVATE int adsm__tracked_access(adsm__runtime *rt, adsm__object *o, size_t block, int is_write,
                                       int overwrite) {
    size_t first, count;
    adsm__unit_of(rt, o, block, &first, &count);
    if (o->blocks[first].busy) return adsm__await_unit(rt, o, &o->blocks[first]); /* another thread's copy */
    if (adsm__held_elsewhere(o)) return adsm__await_copies(rt); /* until that launch is issued */
    int state = o->blocks[block].state, let_go = 0;
    if (o->host_pending && !adsm__sparse_use(rt, o, first, count, state, is_write))
        return adsm__first_use(rt, o); /* the CPU or a fetch is about to use them */
    if (adsm__state_allows(state, is_write)) /* another thread got here first; applied again, so a */
        return adsm__set_state(rt, o, first, count, state); /* page out of step with its state heals */
    uint64_t t0 = adsm__now_ns(), elsewhere = 0; /* copies, waits, evictions */
    size_t from = first, n = count; /* the blocks to prepare: the unit, or a wider fetch */
    if (state == ADSM__INVALID && !(is_write && overwrite) && rt->proto->fetch_granule)
        rt->proto->fetch_granule(rt, o, is_write, &from, &n);
    if (state == ADSM__INVALID && !is_write && o->size <= ADSM__SMALL_OUTPUT && !rt->bringing_home && rt->cfg.sync_home)
        o->home_syncs = ADSM__HOME_SYNCS; /* it reads a kernel's output: the next syncs bring it */
    else if (is_write && o->home_syncs) /* it writes what syncs brought: the CPU uses it still */
        o->home_syncs = ADSM__HOME_SYNCS, o->home_written = 1;
    if (adsm__prepare_unit(rt, o, from, n, state, is_write, overwrite, &let_go) != 0) return -1;
    int done = let_go ? ADSM__AGAIN : 0;
    if (let_go) elsewhere = adsm__now_ns() - t0;
    if ((!is_write || n > count) && adsm__set_state_compacting(rt, o, from, n, ADSM__READONLY) != 0) return -1;
    int sequential = 0;
    size_t dfrom = first, dn = count;
    if (is_write) {
        if (rt->proto->write_run) sequential = rt->proto->write_run(rt, o, first, &dfrom, &dn);
        if (adsm__set_state_compacting(rt, o, dfrom, dn, ADSM__DIRTY) != 0 ||
            adsm__dirtied(rt, o, dfrom, dn, sequential, &elsewhere) != 0)
            return -1;
    }
    /* the view mapped where the CPU goes (host_pages.h): what it writes, what a fetch opened */
    if (is_write) adsm__host_view_map_opened(rt, o, dfrom, dn, 1);
    if (state == ADSM__INVALID && (!is_write || n > count)) adsm__host_view_map_opened(rt, o, from, n, 0);
    if (o->host_pending) { /* a sparse use: what it opened */
        o->sparse_bytes += adsm__sparse_new_bytes(rt, o, from, n, 1);
        o->sparse_bytes += adsm__sparse_new_bytes(rt, o, dfrom, dn, 1);
    }
    size_t took = ADSM__MAX(n, is_write ? dn : 0) / count; /* units whose protection changed */
    if (rt->proto->access_cost) rt->proto->access_cost(rt, adsm__now_ns() - t0 - elsewhere, took);
    return done;
}

/* The pages of these objects are about to be protected (PROT_NONE: a kernel writes them) or
 * released (a free), so a queued copy still reading them (a flush just queued, an eviction) must
 * be done first: the copy engine reads host pages through the CPU's protection. The wait runs
 * with every unit of them busy and the lock let go (adsm_launch holds rt->launch_mutex, so no
 * other launch interleaves; the objects cannot be freed meanwhile), after any other thread's copy
 * of them ended, so that the marks it clears after are its own. */
ADSM__PRIVATE void adsm__settle_copies(adsm__runtime *rt, adsm__object **objs, size_t n) {
    for (;;) { /* nothing pending, or nobody else copying any of them (the marks below are all ours) */
        size_t pending = 0, busy = 0;
        for (size_t i = 0; i < n; i++) {
            busy += objs[i]->busy_units;
            for (size_t b = 0; b < objs[i]->nblocks; b++) pending += adsm__flushing(rt, &objs[i]->blocks[b]);
        }
        if (pending == 0) return;
        if (busy == 0) break;
        adsm__await_copies(rt);
    }
    /* every unit busy while the lock is let go, not only those being flushed: a read that fetched
     * meanwhile brought home the bytes from before this kernel, and left them ReadOnly over what it
     * writes, even after adsm_sync */
    for (size_t i = 0; i < n; i++) {
        objs[i]->busy_units++;
        for (size_t b = 0; b < objs[i]->nblocks; b++) objs[i]->blocks[b].busy = 1;
    }
    uint64_t queued = rt->flushes_queued;
    adsm__tls_settling = objs, adsm__tls_settling_n = n; /* launches do not nest on a thread */
    adsm__unlock(&rt->lock);
    adsm__drain_all(rt);
    adsm__lock(&rt->lock);
    adsm__tls_settling_n = 0;
    adsm__flushes_settled(rt, queued);
    for (size_t i = 0; i < n; i++) {
        objs[i]->busy_units--;
        for (size_t b = 0; b < objs[i]->nblocks; b++) objs[i]->blocks[b].busy = 0;
    }
    adsm__copies_done(rt);
}

/* A flush at a call of an object the kernel writes, no larger than this, runs on the calling
 * thread when the device is idle (the backend's `idle`: nothing queued, no kernel running), instead
 * of on the copy engine: the launch waits for it anyway (adsm__settle_copies), and waking the
 * engine and waiting for it (two thread wake-ups, dear on a VM) costs more than copying a few
 * pages. Larger ones, and any behind other work, stay queued, so no long copy or wait holds the
 * runtime lock. */
#define ADSM__INLINE_FLUSH_MAX ((size_t)256 << 10)

ADSM__PRIVATE int adsm__flush_async(const adsm__runtime *rt, const adsm__object *o, adsm__object *const *writes,
                                    size_t nwrites) {
    if (rt->release_dev < 0 || o->size > ADSM__INLINE_FLUSH_MAX || !rt->be->idle ||
        !rt->be->idle(rt->dev_ctx[rt->release_dev]))
        return 1;
    for (size_t i = 0; i < nwrites; i++)
        if (writes[i] == o) return 0;
    return 1;
}

/* Writes back the Dirty units a launch's release sends: with one device every one (kernels follow
 * pointers stored in shared memory), with several those of the objects the kernel names (the
 * others would only be current on this one device; they stay Dirty until a kernel names them or
 * rolling evicts them, so each goes straight to the device that uses it). */
ADSM__PRIVATE int adsm__release_dirty(adsm__runtime *rt, adsm__object *const *used, size_t nused,
                                      adsm__object *const *writes, size_t nwrites) {
    if (rt->ndev == 1) {
        while (rt->fifo_head) {
            adsm__block *b = rt->fifo_head;
            if (adsm__writeback_run(rt, b, adsm__flush_async(rt, b->obj, writes, nwrites)) != 0) return -1;
        }
        return 0;
    }
    for (size_t i = 0; i < nused; i++) {
        adsm__object *o = used[i];
        int async = adsm__flush_async(rt, o, writes, nwrites);
        for (size_t b = 0; b < o->nblocks && !o->device_only; b++)
            if (o->blocks[b].in_fifo && adsm__writeback_run(rt, &o->blocks[b], async) != 0) return -1;
    }
    return 0;
}

/* Whether copies of o's bytes to a device read them through the host alias (cuda under shared
 * addresses), which the program's protection does not hide: its view may be protected while such
 * a copy still runs. */
ADSM__PRIVATE int adsm__copies_read_alias(const adsm__runtime *rt, const adsm__object *o) {
    return adsm__host_dma(rt, o->host) != o->host;
}

/* The Dirty runs of an output whose copies read the alias, queued as they are: the caller makes
 * the object Invalid next, with the lock held throughout (no CPU write can slip in between), so a
 * Dirty output changes protection once (Dirty to Invalid) instead of twice (ReadOnly for its
 * flush, then Invalid), and the launch waits for none of its copies. 0, or -1 when a copy failed. */
ADSM__PRIVATE int adsm__send_output_by_alias(adsm__runtime *rt, adsm__object *o) {
    size_t unit = rt->proto->whole_object ? o->nblocks : 1; /* lazy: the whole object, whichever blocks are queued */
    for (size_t b = 0; b < o->nblocks;) {
        size_t end = b;
        while (end < o->nblocks && o->blocks[end].state == ADSM__DIRTY) end += unit;
        if (end == b) {
            b += unit;
            continue;
        }
        for (size_t k = b; k < end; k++) adsm__fifo_remove(rt, &o->blocks[k]);
        if (adsm__flush(rt, o, b, end - b, 1) != 0) return -1;
        b = end;
    }
    return 0;
}

/* ---- small objects standing Dirty beside a twin ----------------------------------------------
 * (the habit of coming home at adsm_sync, below, learnt by an object the CPU also writes) */
/* One the CPU also writes (histo's ranges: set before each kernel, read after each sync) comes
 * home Dirty instead, beside a twin of its bytes, and stands so outside the FIFO: the CPU reads
 * and writes it without a fault, and each release compares it with the twin instead of copying
 * it (adsm__twins_at_release). With one device only, where every launch's release sees it before
 * a kernel may write the device copy; not a typed or safe object, whose flushes are translated or
 * go elsewhere; at most ADSM__TWIN_BYTES of them at once. A twin that cannot be allocated leaves it
 * ReadOnly. 0, or -1 when the protection change failed. */
ADSM__PRIVATE int adsm__home_dirty(adsm__runtime *rt, adsm__object *o) {
    if (!o->home_written || rt->ndev != 1 || o->type || o->safe || o->busy_units ||
        adsm__states_in(o, 0, o->nblocks) != ADSM__HAS(ADSM__READONLY))
        return 0;
    size_t held = o->size; /* those a flush ended wait in the list for the next release */
    for (ptrdiff_t i = 0; i < stbds_arrlen(rt->twins); i++)
        if (rt->twins[i]->twin_live && rt->twins[i] != o) held += rt->twins[i]->size;
    if (held > ADSM__TWIN_BYTES) return 0; /* ReadOnly, as before: every launch would compare too much */
    o->home_written = 0;
    if (!o->twin && !(o->twin = (unsigned char *)malloc(o->size))) return 0;
    memcpy(o->twin, (const void *)adsm__host_dma(rt, o->host), o->size);
    if (adsm__set_state(rt, o, 0, o->nblocks, ADSM__DIRTY) != 0) return -1;
    for (size_t b = 0; b < o->nblocks; b++) o->blocks[b].dev_valid = adsm__dev_bit(0); /* it equals the twin */
    o->twin_live = 1;
    adsm__list_once(&rt->twins, o);
    return 0;
}

/* At a launch's release, before the FIFO's flushes, each object standing beside its twin: changed
 * since, it goes as any Dirty object does (into the FIFO, which the release flushes) and renews
 * the habit; unchanged, it stays, its device copy current, unless this kernel writes it: then it
 * turns ReadOnly, without a copy, for the invalidation that follows. 0, or -1 when a protection
 * change failed. */
ADSM__PRIVATE int adsm__twins_at_release(adsm__runtime *rt, adsm__object *const *writes, size_t nwrites) {
    for (ptrdiff_t i = stbds_arrlen(rt->twins) - 1; i >= 0; i--) {
        adsm__object *o = rt->twins[i];
        int output = 0;
        for (size_t k = 0; k < nwrites; k++) output |= writes[k] == o;
        int changed = o->twin_live && memcmp((const void *)adsm__host_dma(rt, o->host), o->twin, o->size) != 0;
        if (o->twin_live && !changed && !output) continue;
        stbds_arrdelswap(rt->twins, i);
        if (!o->twin_live) continue; /* a flush ended it meanwhile (adsm__flush) */
        o->twin_live = 0;
        if (changed) {
            o->home_syncs = ADSM__HOME_SYNCS, o->home_written = 1;
            adsm__queue_dirty_blocks(rt, o); /* every block: it stood Dirty whole */
        } else if (adsm__set_state(rt, o, 0, o->nblocks, ADSM__READONLY) != 0) {
            return -1;
        } else {
            for (size_t b = 0; b < o->nblocks; b++) o->blocks[b].dev_valid = adsm__dev_bit(0);
        }
    }
    return 0;
}

ADSM__PRIVATE adsm_result adsm__tracked_release(adsm__runtime *rt, adsm__object **writes, size_t nwrites,
                                                adsm__object *const *used, size_t nused, uint64_t seq) {
    /* Flushes are queued, not waited for: the backend runs the launch after the copies queued
     * before it (stream order), so no copy runs under the runtime lock. A CPU write to a unit
     * whose flush may still be reading it waits for that copy (adsm__flushing). */
    adsm__object *by_alias[ADSM__MAX_PARAMS], *rest[ADSM__MAX_PARAMS]; /* outputs by where copies read */
    size_t nalias = 0, nrest = 0;
    if (adsm__check_fault_engine(rt) != 0)
        return adsm__protection_failed("taking over from the closed userfaultfd");
    if (adsm__twins_at_release(rt, writes, nwrites) != 0)
        return adsm__protection_failed("comparing small objects brought home with their twins");
    for (size_t i = 0; i < nwrites; i++) {
        writes[i]->host_kept = !(adsm__states_in(writes[i], 0, writes[i]->nblocks) & ADSM__HAS(ADSM__INVALID));
        if (adsm__copies_read_alias(rt, writes[i])) by_alias[nalias++] = writes[i];
        else rest[nrest++] = writes[i];
    }
    for (size_t i = 0; i < nalias; i++)
        if (adsm__send_output_by_alias(rt, by_alias[i]) != 0)
            return adsm__fail(ADSM_ERROR_SYSTEM, "flushing a kernel's output failed: %s", strerror(errno));
    if (adsm__invalidate_outputs(rt, by_alias, nalias) != 0)
        return adsm__protection_failed("invalidating a kernel's output");
    if (adsm__release_dirty(rt, used, nused, writes, nwrites) != 0)
        return adsm__fail(ADSM_ERROR_SYSTEM, "flushing dirty blocks before a launch failed: %s", strerror(errno));
    adsm__settle_copies(rt, rest, nrest);
    if (adsm__invalidate_outputs(rt, rest, nrest) != 0) return adsm__protection_failed("invalidating a kernel's output");
    for (size_t i = 0; i < nwrites; i++) {
        adsm__object *o = writes[i];
        o->writer_seq = seq;
        o->writer_dev = (unsigned)rt->release_dev;
        adsm__units_set_valid(rt, o, 0, o->nblocks, adsm__dev_bit((unsigned)rt->release_dev)); /* its only holder */
    }
    return ADSM_OK;
}

/* Invalidation happened at release (a CPU touch before adsm_sync waits for the kernel), so
 * acquire has nothing left to do for lazy and rolling. */
ADSM__PRIVATE adsm_result adsm__tracked_acquire(adsm__runtime *rt) {
    (void)rt;
    return ADSM_OK;
}

/* Fresh objects are zero on both sides, hence ReadOnly: nothing to copy until someone writes. */
ADSM__PRIVATE int adsm__tracked_alloc(adsm__runtime *rt, adsm__object *o) {
    return adsm__set_state(rt, o, 0, o->nblocks, ADSM__READONLY);
}

ADSM__PRIVATE void adsm__tracked_free(adsm__runtime *rt, adsm__object *o) {
    for (size_t b = 0; b < o->nblocks; b++) adsm__fifo_remove(rt, &o->blocks[b]);
    adsm__forget_output(rt, o);
    adsm__unlist(&rt->home_at_sync, o);
    adsm__unlist(&rt->twins, o);
}

/* o's Invalid units home, as a CPU read would bring them (their holder keeps its copy). The lock
 * is let go around each copy; an object freed meanwhile is no longer at its address and is
 * skipped. 0, or -1 when a copy failed. */
ADSM__PRIVATE int adsm__bring_home(adsm__runtime *rt, adsm__object *o) {
    uintptr_t host = o->host;
    for (size_t b = 0; b < o->nblocks;) {
        int r = 0;
        if (o->blocks[b].state != ADSM__INVALID) {
            b++;
            continue;
        }
        adsm__block *unit = &o->blocks[rt->proto->whole_object ? 0 : b];
        if (unit->busy) r = adsm__await_unit(rt, o, unit);
        else r = rt->proto->on_access(rt, o, b, 0, 0);
        if (r < 0) return -1;
        if (r == ADSM__AGAIN && adsm__object_of(adsm__tree_find(&rt->objects, host)) != o) break; /* freed */
    }
    return 0;
}

/* Write-through (directory.h): brings every output listed since the last call or sync home. 0, or
 * -1 when a copy failed. */
ADSM__PRIVATE int adsm__bring_outputs_home(adsm__runtime *rt) {
    while (stbds_arrlen(rt->through) > 0)
        if (adsm__bring_home(rt, stbds_arrpop(rt->through)) != 0) return -1;
    return 0;
}

/* ---- small outputs home at adsm_sync ------------------------------------------------------------
 * A kernel's small result the CPU reads after each sync (a reduction, histo's ranges, a count)
 * costs a read fault, a fetch and two protection changes every time; the fetch is the copy the
 * hand-written program makes too, the fault is not. So an object of at most ADSM__SMALL_OUTPUT
 * bytes whose Invalid data the CPU read (a fault, or adsm's own I/O on its behalf) learns the
 * habit: the next ADSM__HOME_SYNCS syncs after a kernel wrote it bring it home, in the sync, and
 * the CPU reads it without a fault. Brought home, its reads are no longer seen, so the habit runs
 * out and a read fault renews it: a result read at every sync faults once in ADSM__HOME_SYNCS + 1
 * times, one never read again costs at most ADSM__HOME_SYNCS small copies. A write fault renews it
 * too, and then the syncs bring the object home Dirty beside a twin (adsm__home_dirty, above): a
 * small object the CPU sets before each kernel and reads after each sync (histo's ranges) faults
 * neither way again. */
/* After a launch: its outputs with the habit are listed for the next sync. */
ADSM__PRIVATE void adsm__note_small_outputs(adsm__runtime *rt, adsm__object *const *writes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (writes[i]->home_syncs) adsm__list_once(&rt->home_at_sync, writes[i]);
}

/* adsm_sync, its kernels done: the listed outputs still wholly Invalid come home. A copy that
 * fails leaves the object as it was, for the CPU's fault to report. */
ADSM__PRIVATE void adsm__bring_small_outputs_home(adsm__runtime *rt) {
    rt->bringing_home = 1;
    /* those listed now: launches from other threads while a copy lets the lock go wait for the next sync */
    for (ptrdiff_t left = stbds_arrlen(rt->home_at_sync); left > 0 && stbds_arrlen(rt->home_at_sync) > 0; left--) {
        adsm__object *o = stbds_arrpop(rt->home_at_sync);
        if (!o->home_syncs || adsm__states_in(o, 0, o->nblocks) != ADSM__HAS(ADSM__INVALID)) continue;
        o->home_syncs--;
        ADSM__ADD(&rt->stats.sync_fetches, 1);
        uintptr_t host = o->host;
        if (adsm__bring_home(rt, o) != 0) break;
        if (adsm__object_of(adsm__tree_find(&rt->objects, host)) != o) continue; /* freed meanwhile */
        if (adsm__home_dirty(rt, o) != 0) break;
    }
    rt->bringing_home = 0;
}

#endif /* ADSM__PROTOCOL_INCLUDED */
