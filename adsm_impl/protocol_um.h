/* adsm_impl/protocol_um.h -- unified memory beside adsm's own protocols, so that the same programs
 * measure both in one run: "um" puts every object in the backend's managed memory (cuda:
 * cuMemAllocManaged) and leaves coherence to the driver, which migrates pages on faults from
 * either side; "um-prefetch" adds the hints adsm's kernel annotations give: before a launch every
 * object the kernel names is prefetched to the device (cuMemPrefetchAsync on the launch stream;
 * objects it only writes too, so the device does not fault their pages in one by one), and at
 * adsm_sync the objects a kernel may have written are prefetched back to the host; "hmm" puts
 * every object in plain host memory (anonymous pages) that the device reaches through its
 * pageable memory access (HMM), the driver and the kernel keeping it coherent. Nothing is
 * protected, so no fault reaches adsm; adsm_memcpy, adsm_memset and the I/O calls work on the
 * memory in place, after the kernels they must follow. A prefetch counts as a copy in adsm_stats
 * and device 0's stats (h2d, d2h); what the driver moves on faults is not seen.
 *
 * Only where the backend has managed memory (cuda), hmm only where the device reports pageable
 * memory access: lifecycle.h refuses them elsewhere, saying so. Normal thread context, runtime lock held. */
#ifndef ADSM__PROTOCOL_UM_INCLUDED
#define ADSM__PROTOCOL_UM_INCLUDED

#include "common.h"
#include "object.h"
#include "runtime.h"
#include "backend.h"
#include "protocol_vtbl.h"
#include "protocol.h"
#include "protocol_batch.h"
#include "directory.h"

/* adsm_memcpy, adsm_memset and the I/O calls wait first, with the object busy and the runtime
 * lock let go, as batch brings an object home first: reading an object, for the last kernel that
 * may write it; writing one, for every kernel sent so far, since one queued may still read it
 * (the one device's kernels may follow pointers stored in any object, so any of them may).
 * Under batch, lazy and rolling the kernels read their own copy, so the same program sees the
 * same bytes under every protocol (these calls read and wrote managed memory while the kernels
 * ran). The CPU's own loads and stores are the program's to order (adsm_sync), as with managed
 * memory anywhere. */
ADSM__PRIVATE int adsm__um_access(adsm__runtime *rt, adsm__object *o, size_t block, int is_write, int overwrite) {
    (void)block, (void)overwrite;
    if (o->blocks[0].busy) return adsm__await_unit(rt, o, &o->blocks[0]); /* another thread waits for it */
    uint64_t last = is_write ? ADSM__MAX(o->writer_seq, ADSM__LOAD(&rt->launch_seq)) : o->writer_seq;
    if (last <= o->um_waited) return 0;
    adsm__busy_begin(rt, o, &o->blocks[0], 1);
    /* a lost device: the memory as it stands (adsm_sync says so); managed memory is one GPU's */
    (void)rt->be->wait(rt->dev_ctx[0], last);
    adsm__busy_end(rt, o, &o->blocks[0], 1);
    if (o->um_waited < last) o->um_waited = last;
    return ADSM__AGAIN;
}

/* um's and hmm's release: the objects a kernel may write remember it, for the calls above. */
ADSM__PRIVATE void adsm__um_note_writers(adsm__runtime *rt, adsm__object **writes, size_t nwrites, uint64_t seq) {
    for (size_t i = 0; i < nwrites; i++) {
        writes[i]->writer_seq = seq;
        writes[i]->writer_dev = rt->release_dev < 0 ? 0 : (unsigned)rt->release_dev;
    }
}

ADSM__PRIVATE adsm_result adsm__um_release(adsm__runtime *rt, adsm__object **writes, size_t nwrites,
                                           adsm__object *const *used, size_t nused, uint64_t seq) {
    (void)used, (void)nused;
    adsm__um_note_writers(rt, writes, nwrites, seq);
    return ADSM_OK;
}

/* The program's accesses go to the memory itself: every block is the program's to write (the
 * state the memops and I/O paths read to take the CPU path); no protection changes. */
ADSM__PRIVATE int adsm__um_alloc(adsm__runtime *rt, adsm__object *o) {
    (void)rt;
    for (size_t b = 0; b < o->nblocks; b++) o->blocks[b].state = ADSM__DIRTY;
    return 0;
}

/* um's (and hmm's) acquire and free do nothing, as the tracked protocols' acquire and batch's free
 * do: the vtables below point at those. */

/* um-prefetch: every object the kernel names goes to the device ahead of it; those it may write
 * are remembered for adsm_sync. A refused prefetch is only a hint lost (the driver still
 * migrates on faults). */
ADSM__PRIVATE adsm_result adsm__um_prefetch_release(adsm__runtime *rt, adsm__object **writes, size_t nwrites,
                                                    adsm__object *const *used, size_t nused, uint64_t seq) {
    adsm__um_note_writers(rt, writes, nwrites, seq);
    for (size_t i = 0; i < nused; i++)
        if (rt->be->managed_prefetch(rt->be_ctx, used[i]->host, used[i]->size, 1) == 0)
            adsm__count_to_device(rt, 0, 0, used[i]->size);
    for (size_t i = 0; i < nwrites; i++) writes[i]->device_newer = 1;
    return ADSM_OK;
}

/* um-prefetch, after every launch finished: what kernels may have written comes home in one
 * batch of prefetches, waited for together. */
ADSM__PRIVATE adsm_result adsm__um_prefetch_acquire(adsm__runtime *rt) {
    int asked = 0;
    for (adsm__object *o = rt->first_object; o; o = o->next) {
        if (!o->device_newer) continue;
        o->device_newer = 0;
        if (rt->be->managed_prefetch(rt->be_ctx, o->host, o->size, 0) != 0) continue;
        adsm__count_from_device(rt, 0, o->size);
        asked = 1;
    }
    if (asked && rt->be->managed_settle(rt->be_ctx) != 0)
        return adsm__fail(ADSM_ERROR_SYSTEM, "um-prefetch: waiting for the prefetches to the host failed");
    return ADSM_OK;
}

/* The vtables differ in name, in what release and acquire do, and in where objects live. */
#define ADSM__UM_VTBL(label, which, release_fn, acquire_fn, system)                                             \
    {                                                                                                            \
        .name = label, .kind = which, .whole_object = 1, .eager = 0, .managed = 1, .system_memory = system,      \
        .on_access = adsm__um_access, .release = release_fn, .acquire = acquire_fn, .on_alloc = adsm__um_alloc,  \
        .on_free = adsm__untracked_free                                                                          \
    }

static const adsm__protocol_vtbl adsm__protocol_um =
    ADSM__UM_VTBL("um", ADSM_PROTOCOL_UM, adsm__um_release, adsm__tracked_acquire, 0);
static const adsm__protocol_vtbl adsm__protocol_um_prefetch =
    ADSM__UM_VTBL("um-prefetch", ADSM_PROTOCOL_UM_PREFETCH, adsm__um_prefetch_release, adsm__um_prefetch_acquire, 0);
/* hmm: as um, on plain host memory that the device's pageable memory access reaches (the program
 * a CUDA programmer writes with malloc on such a system) */
static const adsm__protocol_vtbl adsm__protocol_hmm =
    ADSM__UM_VTBL("hmm", ADSM_PROTOCOL_HMM, adsm__um_release, adsm__tracked_acquire, 1);

#endif /* ADSM__PROTOCOL_UM_INCLUDED */
