/* adsm_impl/protocol_vtbl.h -- the coherence protocol interface: the events a protocol answers
 * (protocol.h has the helpers the protocols share, and what runs in which context). This file
 * only declares; it runs nowhere by itself. */
#ifndef ADSM__PROTOCOL_VTBL_INCLUDED
#define ADSM__PROTOCOL_VTBL_INCLUDED

#include "object.h"
#include "runtime.h"

/* on_access let the runtime lock go (and holds it again): what the caller looked up may be stale,
 * look it up again and retry (the access itself may already be resolved). ADSM__OWN_COPY: the
 * access needs a unit this very thread holds busy for a copy it was making when a signal handler
 * interrupted it (protocol.h, adsm__await_unit); nothing can resolve it. */
enum { ADSM__AGAIN = 1, ADSM__OWN_COPY = -5 };

typedef struct adsm__protocol_vtbl {
    const char *name;
    adsm_protocol_kind kind;
    int whole_object; /* unit of tracking: the object (batch, lazy) or one block (rolling) */
    int eager;        /* rolling: evicts Dirty blocks past its window (api.h, memops.h ask) */
    /* objects live in the backend's managed memory, kept coherent by the driver: nothing is
     * protected or copied by adsm (um, um-prefetch, hmm: protocol_um.h) */
    int managed;
    /* ... and that memory is plain host memory the device reaches itself (hmm), not the
     * backend's managed allocations */
    int system_memory;
    /* every CPU access and every copy into an object's host pages passes on_access first
     * (lazy, rolling: adsm__tracked_access), so those pages may be made on first use there
     * (host_pages.h) */
    int host_on_first_use;
    /* a CPU read or write of block `block` needs the protocol; overwrite: the caller will
     * replace the whole unit, so Invalid data need not be fetched. 0, ADSM__AGAIN (see above),
     * or -1 on a system error */
    int (*on_access)(adsm__runtime *rt, adsm__object *o, size_t block, int is_write, int overwrite);
    /* before launch `seq`: make device copies current (used: every object the kernel names);
     * objects the kernel may write become Invalid on the CPU */
    adsm_result (*release)(adsm__runtime *rt, adsm__object **writes, size_t nwrites, adsm__object *const *used,
                           size_t nused, uint64_t seq);
    /* after every launch finished */
    adsm_result (*acquire)(adsm__runtime *rt);
    int (*on_alloc)(adsm__runtime *rt, adsm__object *o); /* initial state and protection */
    void (*on_free)(adsm__runtime *rt, adsm__object *o);
    /* Optional steps of the shared access path (protocol.h, adsm__tracked_access), for a protocol
     * that tracks blocks and adapts to what it sees (rolling: protocol_rolling.h); NULL in the
     * others, which then take the unit alone and do nothing more. They run where on_access runs,
     * in the SIGSEGV handler too, under the runtime lock: no allocation, no stdio. */
    /* an access fetches Invalid data: widens the unit [*first, *first + *count) to the blocks
     * fetched with it */
    void (*fetch_granule)(const adsm__runtime *rt, adsm__object *o, int is_write, size_t *first, size_t *count);
    /* a write fault on the ReadOnly block `block`: which blocks it makes Dirty, [*from, *from + *n);
     * returns whether it goes on with a sequential pass over o (passed on to on_dirty) */
    int (*write_run)(adsm__runtime *rt, adsm__object *o, size_t block, size_t *from, size_t *n);
    /* blocks [from, from + n) of o just became Dirty and joined the FIFO (eviction, for one); the
     * time it spends on copies is added to *spent. 0 or -1 */
    int (*on_dirty)(adsm__runtime *rt, adsm__object *o, size_t from, size_t n, int sequential, uint64_t *spent);
    /* what the access cost this thread, less its copies, waits and what on_dirty spent (ns), and
     * how many units' protection it changed */
    void (*access_cost)(adsm__runtime *rt, uint64_t ns, size_t units);
} adsm__protocol_vtbl;

#endif /* ADSM__PROTOCOL_VTBL_INCLUDED */
