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
