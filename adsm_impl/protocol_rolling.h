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
 * Everything only rolling does is here, over the engine it shares with lazy (protocol.h): the
 * window (its size, regrets and adaptation), the costs its rules read, the write-ahead runs and
 * the fetch granule (what one fault takes beyond its block), and eviction. The engine calls them
 * through the vtable's optional steps (protocol_vtbl.h). A write fault runs the shared
 * adsm__tracked_access, which asks fetch_granule (adsm__fetch_granule) how much to fetch and
 * write_run (adsm__write_run) which blocks become Dirty, queues them in the FIFO and calls
 * on_dirty (adsm__rolling_on_dirty): a regret grows the window (adsm__rolling_note_writes), and
 * past the window adsm__evict_past_window picks victims (adsm__victim) and sends them
 * (adsm__evict_blocks -> protocol.h's write-back: protection first, then one queued copy);
 * access_cost takes the fault's own time. A kernel call ends the epoch here
 * (adsm__rolling_release) before the shared release writes back what is Dirty.
 *
 * fetch_granule, write_run, on_dirty and access_cost run in the SIGSEGV handler under the runtime
 * lock (integer bookkeeping on the runtime and the block records, no allocation, no stdio), and
 * eviction only enqueues the copy for the backend's DMA thread; release and free run in normal
 * thread context with the lock held. */
#ifndef ADSM__PROTOCOL_ROLLING_INCLUDED
#define ADSM__PROTOCOL_ROLLING_INCLUDED

#include "protocol_vtbl.h"
#include "protocol.h"

/* ---- the window: its size, regrets and adaptation ----------------------------------------- */
/* Floor of the adaptive size: ADSM_ROLLING_STEP per live object (the paper's rule). At least 2:
 * one unaligned store may span two blocks, and both must be Dirty at once or they would evict
 * each other forever. */
ADSM__PRIVATE size_t adsm__rolling_floor(const adsm__runtime *rt) {
    size_t floor = rt->cfg.rolling_step * rt->nobjects;
    return floor < 2 ? 2 : floor;
}

/* Ceiling: every block of every live object. A window that holds all of them never evicts,
 * which is lazy at block granularity; no pattern can do worse than that, while any smaller
 * ceiling brings the thrashing back for random writes over objects larger than it. */
ADSM__PRIVATE size_t adsm__rolling_ceiling(const adsm__runtime *rt) {
    size_t floor = adsm__rolling_floor(rt);
    return rt->tracked_blocks > floor ? rt->tracked_blocks : floor;
}

ADSM__PRIVATE size_t adsm__rolling_limit(const adsm__runtime *rt) {
    if (rt->cfg.rolling_size) return rt->cfg.rolling_size; /* at least 2: config.h refuses 1 */
    size_t floor = adsm__rolling_floor(rt), ceiling = adsm__rolling_ceiling(rt);
    if (rt->rolling_limit < floor) return floor;
    return rt->rolling_limit > ceiling ? ceiling : rt->rolling_limit;
}

/* Rolling: whether o had a regret since the last kernel call (adsm__rolling_note_writes). */
ADSM__PRIVATE int adsm__held(const adsm__runtime *rt, const adsm__object *o) {
    return o->held_epoch == rt->ahead_epoch + 1;
}

/* Blocks [from, from + n) of o became Dirty. Each one evicted eagerly since the last kernel call
 * is a regret: that eviction copied bytes the next call copies again, so the window was too
 * small by at least the evictions made since the block left it. Once per fault the window grows
 * to cover the farthest such distance, and at least doubles, so a random pattern needs a handful
 * of regrets, not one per block, to reach its working set; but never past twice the blocks this
 * epoch has dirtied (a window larger than that cannot save an eviction now, and would only delay
 * the evictions of a later sequential phase) nor past every live block. And the object is held
 * until the next call: none of its blocks is evicted again (adsm__victim), so no block crosses
 * more than twice in an epoch, and the rest of a pass that came back is sent once, at the call
 * (a fixed ADSM_ROLLING_SIZE is the paper's rule: it evicts on, oldest first). */
ADSM__PRIVATE void adsm__rolling_note_writes(adsm__runtime *rt, adsm__object *o, size_t from, size_t n) {
    size_t distance = 0, regrets = 0;
    for (size_t k = from; k < from + n; k++) {
        adsm__block *b = &o->blocks[k];
        if (b->evicted_at <= rt->epoch_clock) { /* never evicted, or before the last call */
            rt->epoch_touched++;
            continue;
        }
        size_t d = (size_t)(rt->evict_clock - b->evicted_at) + 1;
        if (d > distance) distance = d;
        b->evicted_at = 0;
        regrets++;
    }
    if (regrets == 0) return;
    rt->epoch_regrets += regrets;
    ADSM__ADD(&rt->stats.rolling_regrets, regrets);
    if (rt->cfg.rolling_size) return;
    o->held_epoch = rt->ahead_epoch + 1;
    size_t limit = adsm__rolling_limit(rt), ceiling = adsm__rolling_ceiling(rt);
    size_t grown = limit + (distance > limit ? distance : limit);
    if (grown > 2 * rt->epoch_touched) grown = 2 * rt->epoch_touched;
    if (grown > ceiling) grown = ceiling;
    if (grown > limit) rt->rolling_limit = grown;
}

/* At a kernel call (before the flush): halve the window when the epoch that ends showed it
 * larger than needed: no regret, and either evictions (each one was harmless, and a smaller
 * window sends more of the data while the CPU works) or at most half of it in use (the working
 * set is small). A window in full use without evictions is kept: that is a pattern it fits. */
ADSM__PRIVATE void adsm__rolling_end_epoch(adsm__runtime *rt) {
    size_t limit = adsm__rolling_limit(rt);
    int evicted = rt->evict_clock != rt->epoch_clock;
    if (!rt->cfg.rolling_size && rt->epoch_regrets == 0 && (evicted || rt->fifo_len <= limit / 2))
        rt->rolling_limit = limit / 2; /* adsm__rolling_limit keeps it at the floor or above */
    rt->epoch_clock = rt->evict_clock;
    rt->epoch_regrets = rt->epoch_touched = 0;
}

/* Grown: regrets grew the adaptive window past the paper's rule. Dense: to at least half of the
 * live blocks as well (the CPU writes all over its objects between calls). Evictions are then
 * rare, and per-block faults buy little: faults take whole runs of blocks (adsm__write_run). */
ADSM__PRIVATE int adsm__rolling_grown(const adsm__runtime *rt) {
    return !rt->cfg.rolling_size && adsm__rolling_limit(rt) > adsm__rolling_floor(rt);
}

ADSM__PRIVATE int adsm__rolling_dense(const adsm__runtime *rt) {
    return adsm__rolling_grown(rt) && 2 * adsm__rolling_limit(rt) >= adsm__rolling_ceiling(rt);
}

/* The window eviction keeps: the rolling size, but room for every object's current write-ahead
 * run twice at least, so a run just made Dirty is not evicted before the CPU writes it, nor the
 * run of an array filled side by side with it (a fixed ADSM_ROLLING_SIZE is kept as it is:
 * write-ahead runs are at most half of it). */
ADSM__PRIVATE size_t adsm__rolling_window(const adsm__runtime *rt) {
    size_t limit = adsm__rolling_limit(rt), runs = 2 * rt->ahead_sum;
    return limit > runs || rt->cfg.rolling_size ? limit : runs;
}

/* ---- what faults, evictions and copies cost (rolling) ---------------------------------------
 * How much a fault takes and how many blocks an eviction sends are decided from what they cost
 * on this machine, measured while the program runs, not from constants: a fault's own time on
 * the thread that took it (protection changes and bookkeeping; not its copies, its waits or the
 * evictions it starts), an eviction's own time there (its protection change, queueing the copy
 * and waking the copy engine, which on a machine short of cores runs first, on this very core),
 * and a copy to the device per byte (the backends time each copy on the engine that makes it:
 * stats.h2d_ns over stats.h2d_bytes). Faults and evictions have running averages over their last
 * eight or so; until a copy has been timed nothing is known and every rule does what it did
 * before costs decided (runs up to a huge page, one block per scattered write, no batches). On
 * the 2-vCPU build machine shared with other work, faults took 3-13 us in the handler, evictions
 * 50-900 us, a 64 KiB copy 7-14 us; a bare write fault took 4-7 us quiet, 27-45 us under load. A
 * test fixes the three (adsm__rolling_costs_pin). Runtime lock held. */
#define ADSM__COST_SHIFT 3 /* a running average moves by an eighth of the distance to each sample */

/* A sample of a fixed cost: what one fault or eviction of `blocks` blocks took. For faults only
 * those of a single block say what the fixed part is: a protection change over many blocks costs
 * more, and runs cut to eight times the fault cost would feed on it (longer runs, dearer faults,
 * longer runs); one of several blocks that took less than the average still shows the fixed
 * part is no more than that. Evictions count whatever they sent (blocks 1): their batch is cut
 * to the cost itself, and sequential passes evict nothing but runs. */
ADSM__PRIVATE void adsm__cost_note(const adsm__runtime *rt, uint64_t *avg, uint64_t sample, size_t blocks) {
    if (rt->cost_pinned || (blocks > 1 && (*avg == 0 || sample >= *avg))) return;
    if (sample == 0) sample = 1; /* 0 stands for "not measured yet" */
    *avg = *avg == 0 ? sample : *avg - (*avg >> ADSM__COST_SHIFT) + (sample >> ADSM__COST_SHIFT);
}

/* Picoseconds per byte a copy to the device takes; 0 while none has been timed. Copies are
 * counted when queued and timed when done, so copies in flight make it a little low. */
ADSM__PRIVATE uint64_t adsm__cost_copy_ps(const adsm__runtime *rt) {
    if (rt->cost_pinned) return rt->cost_copy_ps;
    uint64_t ns = ADSM__LOAD(&rt->stats.h2d_ns), bytes = ADSM__LOAD(&rt->stats.h2d_bytes);
    if (ns == 0 || bytes == 0) return 0;
    return ns < UINT64_MAX / 1000 ? ns * 1000 / bytes : ns / (bytes / 1000 + 1);
}

/* The fewest blocks, a power of two up to `most`, whose copy to the device takes at least
 * `fixed_ns`: a fault or an eviction of that many costs at most twice their copy, where one
 * block at a time could cost its fixed part many times over. 1 while copies are not timed. */
ADSM__PRIVATE size_t adsm__cost_blocks(const adsm__runtime *rt, uint64_t fixed_ns, size_t most) {
    uint64_t block_ps = adsm__cost_copy_ps(rt) << rt->cfg.block_shift, fixed_ps = fixed_ns * 1000;
    size_t n = 1;
    if (block_ps == 0) return 1;
    while (n < most && (uint64_t)n * block_ps < fixed_ps) n <<= 1;
    return n;
}

/* Blocks per 2 MiB huge page (1 for blocks of a huge page or more). */
ADSM__PRIVATE size_t adsm__hp_blocks(const adsm__runtime *rt) {
    size_t n = ADSM__HUGE_PAGE >> rt->cfg.block_shift;
    return n ? n : 1;
}

/* A fixed ADSM_ROLLING_SIZE stays the window: what one fault takes is at most half of it. */
ADSM__PRIVATE size_t adsm__fixed_most(const adsm__runtime *rt) {
    return rt->cfg.rolling_size ? rt->cfg.rolling_size / 2 : SIZE_MAX;
}

/* Whether write faults take runs of blocks (adsm__write_run): blocks smaller than a huge page,
 * unless ADSM_BLOCK_EXACT or a fixed window too small for two. Fixed for a runtime. */
ADSM__PRIVATE int adsm__runs_on(const adsm__runtime *rt) {
    return !rt->cfg.block_exact && adsm__hp_blocks(rt) > 1 && adsm__fixed_most(rt) > 1;
}

/* The blocks a sequential write fault takes at least: enough that the fault costs no more than
 * their copy. 1 where faults are cheap next to a block's copy (2 MiB blocks, or a machine that
 * copies slowly), at most a huge page. */
ADSM__PRIVATE size_t adsm__fault_granule(const adsm__runtime *rt) {
    return ADSM__MIN(adsm__cost_blocks(rt, rt->cost_fault_ns, adsm__hp_blocks(rt)), adsm__fixed_most(rt));
}

/* The longest a sequential run of o grows: a huge page's worth, and past it while a fault still
 * costs over an eighth of the copy of the run it takes (longer runs save little more, and cost
 * overlap: the last run is sent at the call, not while the CPU writes). Not shorter where
 * faults look cheap: the fault's own time leaves out the kernel's trap and signal delivery,
 * which adsm cannot time, and copies timed under load include the copy engine's wait for a
 * core; runs cut to what those said took 2442 faults where huge-page runs take 111 (sequential
 * initialisation, 64 KiB blocks, the build machine loaded), at 1.9x the time. */
ADSM__PRIVATE size_t adsm__run_most(const adsm__runtime *rt, const adsm__object *o) {
    size_t dear = adsm__cost_blocks(rt, 8 * rt->cost_fault_ns, o->nblocks);
    return ADSM__MIN(ADSM__MAX(adsm__hp_blocks(rt), dear), adsm__fixed_most(rt));
}

/* The blocks an eviction sends at least: past the window, eviction waits until that many are
 * Dirty beyond it and sends them together, so its fixed cost weighs no more than their copy. 1
 * with a fixed ADSM_ROLLING_SIZE (the paper's rule), ADSM_BLOCK_EXACT or blocks of a huge page. */
ADSM__PRIVATE size_t adsm__evict_batch(const adsm__runtime *rt) {
    if (rt->cfg.rolling_size || rt->cfg.block_exact) return 1;
    return adsm__cost_blocks(rt, rt->cost_evict_ns, adsm__hp_blocks(rt));
}

/* Test hook: the costs the rules above use, fixed (copy_ps 0: as if nothing were measured yet).
 * Tests never assert how long faults take; they fix what they cost and count what follows. */
ADSM__PRIVATE void adsm__rolling_costs_pin(adsm__runtime *rt, uint64_t fault_ns, uint64_t evict_ns, uint64_t copy_ps) {
    adsm__lock(&rt->lock);
    rt->cost_pinned = 1;
    rt->cost_fault_ns = fault_ns;
    rt->cost_evict_ns = evict_ns;
    rt->cost_copy_ps = copy_ps;
    adsm__unlock(&rt->lock);
}

/* At shutdown: the next runtime measures afresh (another backend, another block size). */
ADSM__PRIVATE void adsm__rolling_costs_reset(adsm__runtime *rt) {
    rt->cost_pinned = 0;
    rt->cost_fault_ns = rt->cost_evict_ns = rt->cost_copy_ps = 0;
}

/* ---- write-ahead runs and the fetch granule ------------------------------------------------
 * What one fault takes beyond its block: a write fault, the run of blocks it makes Dirty
 * (adsm__write_run, rolling's write_run); a fetch, the blocks it brings home with its own
 * (adsm__fetch_granule). Both run in the SIGSEGV handler under the runtime lock. */
ADSM__PRIVATE int adsm__idle_in(const adsm__runtime *rt, const adsm__block *b, int state) {
    /* an Invalid block's last flush was queued before the kernel that made it Invalid, which its
     * fetch waits for (an output whose copies read the host alias is not waited for at its call) */
    return b->state == state && !b->busy && !b->in_fifo && (state == ADSM__INVALID || !adsm__flushing(rt, b));
}

/* Idle, and not evicted since the last kernel call: what a fault that is no sequential pass may
 * take beside its block (a fetch, a grown window's huge page). Taking an evicted block back would
 * send it twice, a regret no CPU write asked for, which would also grow the window; a sequential
 * pass takes them, as it is about to write them anyway. */
ADSM__PRIVATE int adsm__idle_fresh(const adsm__runtime *rt, const adsm__block *b, int state) {
    return adsm__idle_in(rt, b, state) && b->evicted_at <= rt->epoch_clock;
}

/* Widens [*from, *from + *n) over the idle blocks in `state` next to it: within the huge page of
 * block *from, or within the whole object once the window is dense (see adsm__write_run). */
ADSM__PRIVATE void adsm__idle_run(const adsm__runtime *rt, const adsm__object *o, int state, size_t *from,
                                  size_t *n) {
    unsigned shift = rt->cfg.block_shift;
    uintptr_t page = ADSM__ALIGN_DOWN(o->host + (*from << shift), ADSM__HUGE_PAGE);
    size_t lo = page <= o->host ? 0 : (page - o->host) >> shift;
    size_t hi = ADSM__MIN(o->nblocks, (page + ADSM__HUGE_PAGE - o->host) >> shift);
    if (adsm__rolling_dense(rt)) lo = 0, hi = o->nblocks;
    size_t b = *from, e = *from + *n;
    while (b > lo && adsm__idle_fresh(rt, &o->blocks[b - 1], state)) b--;
    while (e < hi && adsm__idle_fresh(rt, &o->blocks[e], state)) e++;
    *from = b;
    *n = e - b;
}

/* Read-ahead: a fetch fault on the block right after the last fetch fault's blocks in the same
 * object, since the last kernel call, is a sequential read pass (a CPU reading a kernel's output,
 * fwrite of it), so it takes the idle Invalid blocks after its own too: twice as many as the last
 * fetch took. Never more bytes than lazy, which fetches the whole object, and at most twice what
 * the pass reads. With 2 MiB blocks each fetch otherwise cost a fault and a copy of 2 MiB: the
 * fourth GPU run (H200) read vecadd's 32 MiB result at 16 GB/s under rolling against 44 under
 * lazy. Widens [*first, *first + *count). Under the runtime lock. */
ADSM__PRIVATE void adsm__fetch_ahead(const adsm__runtime *rt, adsm__object *o, size_t *first, size_t *count) {
    size_t want = 2 * ADSM__MAX(o->fetch_run, (size_t)1), e = *first + *count;
    while (e - *first < want && e < o->nblocks && adsm__idle_fresh(rt, &o->blocks[e], ADSM__INVALID)) e++;
    *count = e - *first;
}

/* What a fetch fault takes beyond its unit. With blocks smaller than a huge page, every idle
 * Invalid block next to the unit within its 2 MiB huge page (within its object once the window is
 * dense), not the block alone. Bringing a whole huge page home is
 * one copy (copy.h moves it over the block with mremap), a smaller piece bounces through
 * /proc/self/mem, and each block fetched alone costs a fault: with 64 KiB blocks a dense pass
 * over fetched data took 1024 faults per 64 MiB where lazy takes one. Never more bytes than lazy,
 * which fetches the whole object. Except a write fault that is the object's first fetch since
 * the last kernel call: it takes its unit alone. A store into a kernel's output with no read of
 * it before is a spot update (stencil3d's emitter writes one point per step: at 64^3 and 4 KiB
 * blocks, 20 MiB came home for 20 points written); a read-modify-write pass faults on its read
 * first and keeps the huge page, and a pass of plain stores pays one fault more. At any block
 * size a sequential read pass reads ahead (adsm__fetch_ahead). ADSM_BLOCK_EXACT: the unit alone.
 * Widens [*first, *first + *count). Under the runtime lock. */
ADSM__PRIVATE void adsm__fetch_granule(const adsm__runtime *rt, adsm__object *o, int is_write, size_t *first,
                                       size_t *count) {
    if (rt->cfg.block_exact) return;
    uint64_t epoch = rt->ahead_epoch + 1, before = o->fetch_epoch;
    int sequential = before == epoch && *first == o->fetch_next;
    o->fetch_epoch = epoch;
    int spot = is_write && before != epoch;
    if (!spot && ((size_t)1 << rt->cfg.block_shift) < ADSM__HUGE_PAGE) adsm__idle_run(rt, o, ADSM__INVALID, first, count);
    if (sequential) adsm__fetch_ahead(rt, o, first, count);
    o->fetch_next = *first + *count;
    o->fetch_run = *count;
}

/* Whether o's write position (ahead_next, ahead) was set since the last kernel call. */
ADSM__PRIVATE int adsm__ahead_live(const adsm__runtime *rt, const adsm__object *o) {
    return o->ahead != 0 && o->ahead_epoch == rt->ahead_epoch;
}

/* Where a run of o from `block` meant to end at `end` does end: a run of a huge page or more ends
 * on a huge page's boundary (the last one at or before `end`, past `block`), so that its
 * protection changes, and the evictions that later send it, cover whole huge pages. A change
 * over part of one splits its 2 MiB mapping into 4 KiB pages (a costlier change, and more TLB
 * misses for the CPU's accesses after it): runs doubling from 1 block end at 31, 63, ..., so each
 * run of 32 blocks of 64 KiB split two huge pages. */
ADSM__PRIVATE size_t adsm__hp_boundary(const adsm__runtime *rt, const adsm__object *o, size_t block, size_t end) {
    unsigned shift = rt->cfg.block_shift;
    if (end - block < adsm__hp_blocks(rt)) return end;
    uintptr_t at = ADSM__ALIGN_DOWN(o->host + (end << shift), ADSM__HUGE_PAGE);
    size_t aligned = at <= o->host ? 0 : (at - o->host) >> shift;
    return aligned > block ? aligned : end;
}

/* Rolling, blocks smaller than a huge page: which blocks a write fault on the ReadOnly `block`
 * makes Dirty, [*from, *from + *n). Only idle ReadOnly blocks are taken: their host copy is
 * current, so one never written after all costs a flush, no data. Returns whether the fault goes
 * on with a sequential pass (it hit the block right after the last run), which eviction uses at
 * every block size (adsm__victim).
 * - Write-ahead: a write fault on the block right after the run the last write fault on the same
 *   object made Dirty (a sequential phase) takes the blocks after it too: twice as many as last
 *   time, at least as many as make the fault cost no more than their copy (adsm__fault_granule),
 *   up to a huge page's worth, or more where faults are dear (adsm__run_most). With 64 KiB
 *   blocks a sequential initialisation otherwise paid one fault and two
 *   protection changes per block where lazy pays one per object (2.4x lazy's time). Each object
 *   keeps its own run, so a loop that fills several arrays side by side (a[i] = ..., b[i] = ...:
 *   vecadd) is sequential on each of them. A fault that is no sequential pass takes its block
 *   alone: scattered writes that took more went from 0.53x to 0.82x lazy's bytes (each block
 *   taken is one more to send, and one more an eviction may send twice), for few faults saved.
 * - Grown: once regrets grew the window past the paper's rule (the CPU comes back to blocks it
 *   wrote), a write fault takes the idle ReadOnly blocks of its huge page, or of its object next
 *   to it when the window is dense (adsm__rolling_dense), as lazy would, if they fit in the
 *   window without evicting any of them. Random writes at 64 KiB went from 1.6x to 1.15x lazy's
 *   time; rare scattered writes keep single blocks, as a huge page does not fit their window. */
ADSM__PRIVATE int adsm__write_run(adsm__runtime *rt, adsm__object *o, size_t block, size_t *from, size_t *n) {
    *from = block;
    *n = 1;
    int live = adsm__ahead_live(rt, o), sequential = live && block == o->ahead_next, runs = adsm__runs_on(rt);
    size_t want = 1;
    if (runs) {
        if (sequential) want = ADSM__MIN(ADSM__MAX(2 * o->ahead, adsm__fault_granule(rt)), adsm__run_most(rt, o));
        size_t end = adsm__hp_boundary(rt, o, block, block + want);
        while (block + *n < end && block + *n < o->nblocks && adsm__idle_in(rt, &o->blocks[block + *n], ADSM__READONLY))
            (*n)++;
        if (live) rt->ahead_sum -= o->ahead;
        rt->ahead_sum += want;
    }
    if (!sequential) o->behind = *from; /* a new pass begins */
    o->ahead_epoch = rt->ahead_epoch;
    o->ahead_next = *from + *n;
    o->ahead = want;
    if (sequential || !runs || !adsm__rolling_grown(rt)) return sequential;
    size_t run_from = *from, run_n = *n;
    adsm__idle_run(rt, o, ADSM__READONLY, &run_from, &run_n);
    if (rt->fifo_len + run_n <= adsm__rolling_limit(rt)) *from = run_from, *n = run_n; /* evicts none of it */
    return 0;
}

/* ---- eviction ------------------------------------------------------------------------------ */
/* How many Dirty blocks from v, at most `max` and below block `end`, eviction sends as one copy:
 * those that follow v in its object and, when v is the oldest (`oldest`), in the FIFO too (a
 * write-ahead run), so that only the oldest go. */
ADSM__PRIVATE size_t adsm__evict_span(const adsm__block *v, size_t max, size_t end, int oldest) {
    const adsm__object *o = v->obj;
    if (v->state != ADSM__DIRTY) return 1;
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
    if ((n == 1 ? adsm__writeback_unit(rt, v, 1) : adsm__writeback_blocks(rt, o, v->index, n, 1)) != 0) return -1;
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
        size_t n = adsm__evict_span(v, rt->fifo_len - window, behind ? from : v->obj->nblocks, !behind);
        /* at the mapping limit the victim's protection change is refused, and it stays Dirty and
         * queued: the window grows instead of the fault failing (the release sends it) */
        if (adsm__evict_blocks(rt, v, n, spent) != 0) return errno == ENOMEM ? 0 : -1;
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
    .host_on_first_use = 1,
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
