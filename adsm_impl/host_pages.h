/* adsm_impl/host_pages.h -- an object's host pages made ready for DMA: allocated (in 2 MiB pages
 * where the host alias gets them), page-locked with the driver, and the program's view mapped
 * onto them. Where the backend page-locks (cuda), that is most of what making an object costs,
 * and it pins host memory as large as the object. So under shared addresses with the alias, and
 * a protocol whose every CPU access passes on_access (lazy, rolling), it is done the first time
 * the CPU or a copy through on_access needs the object's host pages, not at adsm_alloc
 * (ADSM_HOST_ON_FIRST_USE, default on): an object only kernels use (a scratch array, a
 * histogram's counters) costs no host memory, no page-locking and no zeroing, as a device buffer
 * of the hand-written program costs none. An object whose pages were never made still works:
 * its copies are staged (the engine copies through pinned staging into the always-writable
 * alias), and the collapse keeps whatever bytes already lie there.
 *
 * Contexts: adsm__object_lock_pages, normal context without the runtime lock (a new object, not
 * yet published). adsm__host_pages_ask, any context, the fault handler included, without the
 * runtime lock and with every unit of the object marked busy (protocol.h, adsm__first_use), so
 * that nothing changes its states or frees it meanwhile and other threads go on: the work
 * (system calls, helper threads, the driver) is handed to one of ADSM__PREPARERS preparer
 * threads, and the asker waits on a futex (several, so that a small object's first use does not
 * wait behind a large one's page-locking). A preparer touches only the object's alias range and
 * view mappings. What it says (the driver's refusals, at ADSM_LOG=info) goes out through
 * adsm__log's one write(2), never stdio: the thread it serves may have been stopped by the fault
 * inside the program's own fprintf(stderr, ...), holding stderr's lock. */
#ifndef ADSM__HOST_PAGES_INCLUDED
#define ADSM__HOST_PAGES_INCLUDED

#include "common.h"
#include "os.h"
#include "object.h"
#include "runtime.h"
#include "reservation.h"
#include "backend.h"
#include "trace.h"
#include "prepare.h"
#include "protocol_vtbl.h"

#include <pthread.h>
#include <signal.h>

/* The steps, whenever they run: the pages allocated (the alias collapsed into 2 MiB pages where
 * the kernel grants them, or, for an object's own pages, populated on several threads where
 * ADSM_PREPARE_THREADS gives more than one; prepare.h), then page-locked. Pinned pages cannot be
 * collapsed, so the collapse comes first. The program's view is left as it is. */
ADSM__PRIVATE void adsm__host_pages_make(adsm__runtime *rt, adsm__object *o) {
    uintptr_t dma = adsm__host_dma(rt, o->host);
    int aliased = dma != o->host;
    uint64_t t0 = adsm__now_ns();
    if (aliased) adsm__host_alias_huge_pages(rt, o->host, o->span);
    else adsm__host_pages_populate(rt, o->host, o->span);
    if (aliased || rt->cfg.prepare_threads > 1) adsm__trace(&rt->trace, ADSM__TR_HUGE_PAGES, t0, o->host, o->span);
    t0 = adsm__now_ns();
    o->locked = rt->be->host_lock(rt->be_ctx, dma, o->span);
    adsm__trace(&rt->trace, ADSM__TR_PAGE_LOCK, t0, o->host, o->span);
}

/* ---- the program's view, mapped ahead or block by block ------------------------------------
 * The view of an aliased object is mapped onto its pages (MADV_POPULATE_*) so that the CPU's first
 * touch of each 4 KiB page is not a page fault of its own (about 0.5 ms per MiB on a GPU server,
 * against 0.16 populated in bulk). Where the view maps 2 MiB pages (batch, lazy, rolling with 2 MiB
 * blocks) that is done ahead, for the whole object, when its pages are made: it costs little and
 * changes nothing later. Where it maps 4 KiB pages (rolling with smaller blocks, view_small_pages),
 * mapped pages are also what every later protection change of them walks, one entry per page (16
 * us per MiB), and the object's pages are mapped where the CPU will use them, as each block opens
 * (adsm__host_view_map_opened): a write, or a fetch, that the CPU made. A stencil's volume the
 * CPU writes one point of and dumps to a file through the alias costs no mapping of 28 MiB at its
 * first use (4 ms on the GPU server), and the kernel making it Invalid at each step changes
 * entries that are not there. Blocks whose view is still to map are o->block_bits's bits. */
ADSM__PRIVATE void adsm__view_close(adsm__object *o, size_t b) {
    adsm__block_bit_set(o, b);
    o->block_bits_set++;
}

/* Every block, none noted yet (the object is new, or its sparse stores' bits were just cleared). */
ADSM__PRIVATE void adsm__view_close_all(adsm__object *o) {
    for (size_t b = 0; b < o->nblocks; b++) adsm__view_close(o, b);
}

/* Where the backend can (cuda), the object's host pages are page-locked with the driver, so its
 * copies are DMA straight between them and device memory: at their addresses, or through the
 * host alias where the shared half has one (reservation.h). The driver pins pages for writing,
 * so the range is made writable first (the protocol protects it right after, in on_alloc);
 * pinned pages stay pinned whatever their protection later, and DMA ignores the protection.
 * Through the alias, the program's view is then mapped onto the pages the locking allocated. */
ADSM__PRIVATE void adsm__object_lock_pages(adsm__runtime *rt, adsm__object *o) {
    if (!rt->be->host_lock || !rt->be->moves_data) return;
    if (adsm__protect(o->host, o->span, PROT_READ | PROT_WRITE) != 0) return;
    adsm__host_pages_make(rt, o);
    uint64_t t0 = adsm__now_ns();
    if (o->locked && adsm__host_dma(rt, o->host) != o->host) {
        if (rt->view_small_pages && o->block_bits) adsm__view_close_all(o); /* mapped as blocks open */
        else adsm__host_alias_map_ahead(rt, o->host, o->span);
        adsm__trace(&rt->trace, ADSM__TR_VIEW_MAP, t0, o->host, o->span);
    }
}

/* Whether a new object's host pages wait for their first use: an object in the alias (its
 * page-locking and DMA never need the program's view, whose protection stays the protocol's),
 * under a protocol that hears of every CPU access, with the preparer running. */
ADSM__PRIVATE int adsm__host_on_first_use(const adsm__runtime *rt, const adsm__object *o) {
    return rt->preparers_running && rt->proto->host_on_first_use && adsm__host_dma(rt, o->host) != o->host;
}

/* At an object's first use: the view mapped ahead where the blocks allow the CPU in (with 2 MiB
 * pages; MADV_POPULATE_READ stops at the first inaccessible page), each Invalid block left for its
 * fetch to open; with 4 KiB pages every block left for the CPU's use to open. */
ADSM__PRIVATE void adsm__host_view_map_ahead(const adsm__runtime *rt, adsm__object *o) {
    unsigned shift = rt->cfg.block_shift;
    if (rt->view_small_pages) {
        adsm__view_close_all(o);
        return;
    }
    for (size_t b = 0; b < o->nblocks;) {
        if (o->blocks[b].state == ADSM__INVALID) {
            adsm__view_close(o, b);
            b++;
            continue;
        }
        size_t e = b + 1;
        while (e < o->nblocks && o->blocks[e].state != ADSM__INVALID) e++;
        adsm__host_alias_map_ahead(rt, o->host + (b << shift), adsm__blocks_len(b, e - b, shift, o->span));
        b = e;
    }
}

/* Set while a file's bytes go straight between the file and the alias (io.h): the blocks that
 * transfer opens are not the CPU's to touch, so the view is not mapped onto them for it. */
static __thread int adsm__tls_io_by_alias;

/* Any context, runtime lock held: the CPU may now read blocks [from, from + n) of o, which were
 * Invalid (write: write them, whatever they were): those of them the view waits for are mapped
 * now, a run per call. Else the CPU's first touch of each page would be a fault of its own where
 * the view maps the alias 4 KiB at a time: one per 64 KiB read (the kernel's fault-around), one
 * per page written. Once only: a mapping stays whatever its protection, and populating mapped
 * pages again walks every one of them (0.9 ms for 28 MiB of 4 KiB pages on the build machine) for
 * nothing. */
ADSM__PRIVATE void adsm__host_view_map_opened(adsm__runtime *rt, adsm__object *o, size_t from, size_t n, int write) {
    unsigned shift = rt->cfg.block_shift;
    if (adsm__tls_io_by_alias) return;
    for (size_t b = from; b < from + n && o->block_bits_set;) {
        if (!adsm__block_bit(o, b)) {
            b++;
            continue;
        }
        size_t e = b;
        for (; e < from + n && adsm__block_bit(o, e); e++) adsm__block_bit_clear(o, e);
        o->block_bits_set -= e - b;
        rt->view_populates++;
        madvise((void *)(o->host + (b << shift)), adsm__blocks_len(b, e - b, shift, o->span),
                write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
        b = e;
    }
}

/* The preparer's work for one object, its units busy. */
ADSM__PRIVATE void adsm__host_pages_first_use(adsm__runtime *rt, adsm__object *o) {
    adsm__host_pages_make(rt, o);
    uint64_t t0 = adsm__now_ns();
    if (o->locked) {
        adsm__host_view_map_ahead(rt, o);
        adsm__trace(&rt->trace, ADSM__TR_VIEW_MAP, t0, o->host, o->span);
    }
}

/* A preparer: one request at a time, an object to make ready, or NULL to end. */
ADSM__PRIVATE void *adsm__preparer_main(void *arg) {
    adsm__preparer *p = (adsm__preparer *)arg;
    adsm__trace_name_track(&p->rt->trace, "host-page preparer");
    for (int done = 0;;) {
        int asked = ADSM__LOAD(&p->asked);
        if (asked == done) {
            adsm__futex_wait(&p->asked, asked);
            continue;
        }
        if (!p->object) return NULL;
        adsm__host_pages_first_use(p->rt, p->object);
        done = asked;
        ADSM__STORE(&p->answered, done);
        adsm__futex_wake_all(&p->answered);
    }
}

/* Initialisation, the protocol chosen: the preparers start where objects may wait for their first
 * use (cuda's alias, a protocol that hears of every access, ADSM_HOST_ON_FIRST_USE=1), with every
 * signal blocked (they touch no protected page, and the program's signals are not for them).
 * Where none can start, objects are made ready at allocation, as with ADSM_HOST_ON_FIRST_USE=0. */
ADSM__PRIVATE void adsm__preparer_start(adsm__runtime *rt) {
    rt->preparers_running = 0;
    rt->preparer_freed = 0;
    rt->sparse_first_use = 1;
    if (!rt->cfg.host_on_first_use || !rt->host_alias || !rt->be->host_lock || !rt->be->moves_data ||
        !rt->proto->host_on_first_use)
        return;
    for (unsigned i = 0; i < ADSM__PREPARERS; i++) {
        adsm__preparer *p = &rt->preparers[rt->preparers_running];
        *p = (adsm__preparer){.rt = rt};
        if (adsm__thread_start(&p->thread, adsm__preparer_main, p) == 0) rt->preparers_running++;
    }
    adsm__log(ADSM_LOG_INFO, "host pages: %s", rt->preparers_running
                                                   ? "objects' host pages are made and page-locked when the CPU or a "
                                                     "copy first needs them (ADSM_HOST_ON_FIRST_USE=0: at adsm_alloc)"
                                                   : "no thread to make them on first use: made at adsm_alloc");
}

/* Shutdown, no call or fault in flight: the preparers end (a request without an object, so that
 * none can miss it between looking and sleeping). */
ADSM__PRIVATE void adsm__preparer_stop(adsm__runtime *rt) {
    for (unsigned i = 0; i < rt->preparers_running; i++) {
        adsm__preparer *p = &rt->preparers[i];
        p->object = NULL;
        ADSM__STORE(&p->asked, p->asked + 1);
        adsm__futex_wake_all(&p->asked);
        pthread_join(p->thread, NULL);
    }
    rt->preparers_running = 0;
}

/* An idle preparer, claimed; waits while all are busy. Signal-safe. */
ADSM__PRIVATE adsm__preparer *adsm__preparer_claim(adsm__runtime *rt) {
    for (;;) {
        int freed = ADSM__LOAD(&rt->preparer_freed);
        for (unsigned i = 0; i < rt->preparers_running; i++) {
            int idle = 0;
            if (__atomic_compare_exchange_n(&rt->preparers[i].state, &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                return &rt->preparers[i];
        }
        adsm__futex_wait(&rt->preparer_freed, freed);
    }
}

/* Any context, runtime lock not held, o's units busy: o's host pages, which waited for their first
 * use, are made now (the caller is about to let the CPU at them, or to copy into them), by an
 * idle preparer; returns when they are. */
ADSM__PRIVATE void adsm__host_pages_ask(adsm__runtime *rt, adsm__object *o) {
    adsm__preparer *p = adsm__preparer_claim(rt);
    int ask = p->asked + 1;
    p->object = o;
    ADSM__STORE(&p->asked, ask);
    adsm__futex_wake_all(&p->asked);
    for (int seen; (seen = ADSM__LOAD(&p->answered)) != ask;) adsm__futex_wait(&p->answered, seen);
    ADSM__ADD(&rt->first_uses, 1);
    ADSM__STORE(&p->state, 0);
    ADSM__ADD(&rt->preparer_freed, 1);
    adsm__futex_wake_all(&rt->preparer_freed);
}

#endif /* ADSM__HOST_PAGES_INCLUDED */
