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

static const adsm__protocol_vtbl adsm__protocol_rolling = {
    .name = "rolling",
    .kind = ADSM_PROTOCOL_ROLLING,
    .whole_object = 0,
    .eager = 1,
    .on_access = adsm__tracked_access,
    .release = adsm__tracked_release,
    .acquire = adsm__tracked_acquire,
    .on_alloc = adsm__tracked_alloc,
    .on_free = adsm__tracked_free,
};

#endif /* ADSM__PROTOCOL_ROLLING_INCLUDED */
