/* adsm_impl/protocol_lazy.h -- lazy update: whole objects. The first CPU touch of an Invalid
 * object fetches all of it; a write makes the whole object Dirty; dirty objects are flushed at the
 * next kernel call; objects a kernel may write become Invalid at that call.
 *
 * Lazy is protocol.h's engine as it stands, with the whole object as its unit: it takes none of
 * the vtable's optional steps (protocol_vtbl.h), so nothing is lazy's alone but this table. A
 * write fault (fault.h -> adsm__tracked_access) fetches the object if it is Invalid, makes it
 * Dirty and queues it in the FIFO; the next kernel call writes it back (adsm__tracked_release).
 * The access path runs in the SIGSEGV handler under the runtime lock. */
#ifndef ADSM__PROTOCOL_LAZY_INCLUDED
#define ADSM__PROTOCOL_LAZY_INCLUDED

#include "protocol_vtbl.h"
#include "protocol.h"

static const adsm__protocol_vtbl adsm__protocol_lazy = {
    .name = "lazy",
    .kind = ADSM_PROTOCOL_LAZY,
    .whole_object = 1,
    .eager = 0,
    .host_on_first_use = 1,
    .on_access = adsm__tracked_access,
    .release = adsm__tracked_release,
    .acquire = adsm__tracked_acquire,
    .on_alloc = adsm__tracked_alloc,
    .on_free = adsm__tracked_free,
};

#endif /* ADSM__PROTOCOL_LAZY_INCLUDED */
