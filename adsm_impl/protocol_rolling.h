/* adsm_impl/protocol_rolling.h -- rolling update: lazy at block granularity, plus a FIFO of at
 * most "rolling size" Dirty blocks. Blocks that become Dirty past that bound send older Dirty
 * blocks to the device asynchronously (they become ReadOnly), so transfers overlap CPU work:
 * what a sequential pass left behind, else the oldest, in batches as large as an eviction's cost
 * makes worth it. The rolling size is fixed (ADSM_ROLLING_SIZE: the paper's rule) or adaptive: at
 * least ADSM_ROLLING_STEP per live object, grown when an evicted block is written again before
 * the next kernel call (a regret, which also holds that object's blocks until the call), halved
 * at a call after an epoch that did not need it, never past the blocks of the live objects
 * (docs/design.md, section 5).
 *
 * The engine lives in protocol.h; its access path runs in the SIGSEGV handler under the runtime
 * lock (the adaptive size is integer bookkeeping on the runtime and the block records, no
 * allocation), and eviction only enqueues the copy for the backend's DMA thread. */
#ifndef ADSM__PROTOCOL_ROLLING_INCLUDED
#define ADSM__PROTOCOL_ROLLING_INCLUDED

#include "protocol_vtbl.h"
#include "protocol.h"

/* ---- eviction ------------------------------------------------------------------------------ */
/* How many Dirty blocks from v, at most `max` and below block `end`, eviction sends as one copy:
 * those that follow v in its object and, when v is the oldest (`oldest`), in the FIFO too (a
 * write-ahead run), so that only the oldest go. */
ADSM__PRIVATE size_t adsm__evict_span(const adsm__runtime *rt, const adsm__block *v, size_t max, size_t end,
                                      int oldest) {
    const adsm__object *o = v->obj;
    if (rt->proto->whole_object || v->state != ADSM__DIRTY) return 1;
    size_t n = 1;
    while (n < max && v->index + n < end) {
        const adsm__block *next = &o->blocks[v->index + n];
        if (!next->in_fifo || next->state != ADSM__DIRTY || (oldest && next[-1].fifo_next != next)) break;
        n++;
    }
    return n;
}

/* Which block eviction takes next, or NULL for none now. A write that goes on with a sequential
 * pass over o evicts what that pass left behind, lowest first: the pass is done with it, while
 * blocks of objects the CPU has left may be written again before the call (Needleman-Wunsch
 * zeroes its score matrix, fills the reference matrix, then writes the first column of every
 * row: oldest first, the score matrix went to the device twice, 1.5x lazy's bytes). Any other
 * write evicts the oldest Dirty block. Never one of an object held by a regret, and nothing
 * while a sequential pass has left nothing behind. A fixed ADSM_ROLLING_SIZE: the oldest. */
ADSM__PRIVATE adsm__block *adsm__victim(adsm__runtime *rt, adsm__object *o, size_t from, int sequential) {
    if (rt->cfg.rolling_size) return rt->fifo_head;
    if (sequential) {
        if (adsm__held(rt, o)) return NULL;
        while (o->behind < from && !(o->blocks[o->behind].in_fifo && o->blocks[o->behind].state == ADSM__DIRTY))
            o->behind++;
        return o->behind < from ? &o->blocks[o->behind] : NULL;
    }
    adsm__block *b = rt->fifo_head;
    return b && !adsm__held(rt, b->obj) ? b : NULL;
}

/* Eager eviction of n Dirty blocks from v (adsm__evict_span), each stamped with the eviction
 * clock as if evicted alone: protection first, then one queued copy. Its time on this thread is
 * added to *spent and to the eviction cost. */
ADSM__PRIVATE int adsm__evict_blocks(adsm__runtime *rt, adsm__block *v, size_t n, uint64_t *spent) {
    adsm__object *o = v->obj;
    uint64_t t0 = adsm__now_ns();
    for (size_t k = 0; k < n; k++) /* one event per block, as adsm_stats.evictions counts */
        adsm__trace(&rt->trace, ADSM__TR_EVICT, t0, o->host + ((size_t)(v->index + k) << rt->cfg.block_shift), 0);
    if ((n == 1 ? adsm__writeback_unit(rt, v, 1) : adsm__writeback_blocks(rt, o, v->index, n)) != 0) return -1;
    for (size_t k = 0; k < n; k++) v[k].evicted_at = ++rt->evict_clock;
    ADSM__ADD(&rt->stats.evictions, n);
    uint64_t took = adsm__now_ns() - t0;
    *spent += took;
    adsm__cost_note(rt, &rt->cost_evict_ns, took, 1);
    return 0;
}

/* Evicts past the window after a write to o made blocks from `from` Dirty: once the Dirty blocks
 * exceed the window by an eviction batch, down to the window, victims by adsm__victim. */
ADSM__PRIVATE int adsm__evict_past_window(adsm__runtime *rt, adsm__object *o, size_t from, int sequential,
                                          uint64_t *spent) {
    size_t window = adsm__rolling_window(rt);
    if (rt->fifo_len < window + adsm__evict_batch(rt)) return 0;
    int behind = sequential && !rt->cfg.rolling_size; /* victims behind o's pass, else the oldest */
    while (rt->fifo_len > window) {
        adsm__block *v = adsm__victim(rt, o, from, sequential);
        if (!v) return 0;
        size_t n = adsm__evict_span(rt, v, rt->fifo_len - window, behind ? from : v->obj->nblocks, !behind);
        if (adsm__evict_blocks(rt, v, n, spent) != 0) return -1;
    }
    return 0;
}

/* ---- rolling's steps of the shared engine ------------------------------------------------ */
/* on_dirty: blocks [from, from + n) of o just became Dirty (in the FIFO already): a regret grows
 * the window (adsm__rolling_note_writes), then eviction brings the Dirty blocks back to it. */
ADSM__PRIVATE int adsm__rolling_on_dirty(adsm__runtime *rt, adsm__object *o, size_t from, size_t n, int sequential,
                                         uint64_t *spent) {
    adsm__rolling_note_writes(rt, o, from, n);
    return adsm__evict_past_window(rt, o, from, sequential, spent);
}

/* access_cost: a fault's own time on its thread, a sample of the fault cost. */
ADSM__PRIVATE void adsm__rolling_access_cost(adsm__runtime *rt, uint64_t ns, size_t units) {
    adsm__cost_note(rt, &rt->cost_fault_ns, ns, units);
}

/* release: a kernel call ends the epoch (the window adapts) and every object's write-ahead run,
 * then the shared release flushes and invalidates. */
ADSM__PRIVATE adsm_result adsm__rolling_release(adsm__runtime *rt, adsm__object **writes, size_t nwrites,
                                                adsm__object *const *used, size_t nused, uint64_t seq) {
    adsm__rolling_end_epoch(rt);
    rt->ahead_epoch++; /* a sequential phase ends at a kernel call: every object's run with it */
    rt->ahead_sum = 0;
    return adsm__tracked_release(rt, writes, nwrites, used, nused, seq);
}

/* on_free: the shared free, and o's live write-ahead run leaves the window's room for runs. */
ADSM__PRIVATE void adsm__rolling_free(adsm__runtime *rt, adsm__object *o) {
    adsm__tracked_free(rt, o);
    if (adsm__runs_on(rt) && adsm__ahead_live(rt, o)) rt->ahead_sum -= o->ahead;
}

static const adsm__protocol_vtbl adsm__protocol_rolling = {
    .name = "rolling",
    .kind = ADSM_PROTOCOL_ROLLING,
    .whole_object = 0,
    .eager = 1,
    .on_access = adsm__tracked_access,
    .release = adsm__rolling_release,
    .acquire = adsm__tracked_acquire,
    .on_alloc = adsm__tracked_alloc,
    .on_free = adsm__rolling_free,
    .fetch_granule = adsm__fetch_granule,
    .write_run = adsm__write_run,
    .on_dirty = adsm__rolling_on_dirty,
    .access_cost = adsm__rolling_access_cost,
};

#endif /* ADSM__PROTOCOL_ROLLING_INCLUDED */
