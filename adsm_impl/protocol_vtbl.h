/* adsm_impl/protocol_vtbl.h -- the coherence protocol interface: the events a protocol answers
 * (protocol.h has the helpers the protocols share, and what runs in which context). This file
 * only declares; it runs nowhere by itself. */
#ifndef ADSM__PROTOCOL_VTBL_INCLUDED
#define ADSM__PROTOCOL_VTBL_INCLUDED

#include "object.h"
#include "runtime.h"

/* on_access let the runtime lock go (and holds it again): what the caller looked up may be stale,
 * look it up again and retry (the access itself may already be resolved). */
enum { ADSM__AGAIN = 1 };

typedef struct adsm__protocol_vtbl {
    const char *name;
    adsm_protocol_kind kind;
    int whole_object; /* unit of tracking: the object (batch, lazy) or one block (rolling) */
    int eager;        /* evict the oldest dirty unit past the rolling size (rolling) */
    /* objects live in the backend's managed memory, kept coherent by the driver: nothing is
     * protected or copied by adsm (um, um-prefetch: protocol_um.h) */
    int managed;
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
} adsm__protocol_vtbl;

#endif /* ADSM__PROTOCOL_VTBL_INCLUDED */
