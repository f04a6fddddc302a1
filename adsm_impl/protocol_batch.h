/* adsm_impl/protocol_batch.h -- batch update: no tracking at all; every object goes to the device
 * at each kernel call and comes back at the next adsm_sync (the paper's baseline).
 *
 * Host memory stays writable, so no fault ever reaches this protocol; it hears of adsm_memcpy,
 * adsm_memset and the I/O calls. Each object remembers whether a kernel may have written it
 * since it last came home (device_newer); only those come back. Normal thread context, entered
 * with the runtime lock held; the copies run with it let go and their objects marked busy (as
 * protocol.h does for faults), so other threads' calls are not held up by them. Also defines the
 * "untracked" protocol the host backend uses, where device and host memory are one and nothing
 * moves. */
#ifndef ADSM__PROTOCOL_BATCH_INCLUDED
#define ADSM__PROTOCOL_BATCH_INCLUDED

#include "common.h"
#include "os.h"
#include "object.h"
#include "runtime.h"
#include "protocol_vtbl.h"
#include "directory.h"
#include "protocol.h"

ADSM__PRIVATE int adsm__untracked_access(adsm__runtime *rt, adsm__object *o, size_t block, int is_write,
                                         int overwrite) {
    (void)rt; (void)o; (void)block; (void)is_write; (void)overwrite;
    return 0;
}

/* An object a kernel may have written (device_newer) comes home after that kernel, and only
 * then: waiting for its own last writer, not for "every launch so far", is what keeps another
 * thread's later launch from being copied back mid-kernel. */
ADSM__PRIVATE int adsm__batch_bring_home(adsm__runtime *rt, adsm__object *o) {
    if (o->blocks[0].busy) return adsm__await_unit(rt, o, &o->blocks[0]); /* another thread copies it now */
    if (!o->device_newer) return 0;
    /* a launch that writes it waits meanwhile, except one already past that check (its release
     * sending other objects with the lock let go): that one changes writer_seq, and o stays newer */
    uint64_t writer = o->writer_seq;
    adsm__busy_begin(rt, o, &o->blocks[0], 1);
    int rc = rt->be->wait(rt->be_ctx, writer) != 0 ||
             adsm__fetch_range(rt, 0, o->host, o->dev, o->size, PROT_READ | PROT_WRITE) != 0;
    adsm__busy_end(rt, o, &o->blocks[0], 1);
    if (rc) return -1;
    if (o->writer_seq == writer) o->device_newer = 0;
    return ADSM__AGAIN;
}

/* adsm_memcpy/adsm_memset/adsm_read... on an object a kernel writes see the kernel's result, as
 * after adsm_sync; other objects are the program's host copy. */
ADSM__PRIVATE int adsm__batch_access(adsm__runtime *rt, adsm__object *o, size_t block, int is_write, int overwrite) {
    (void)block; (void)is_write; (void)overwrite;
    return adsm__batch_bring_home(rt, o);
}

/* Only objects kernels may have written come back: CPU writes to any other object since the
 * last call are the program's and stay. */
ADSM__PRIVATE adsm_result adsm__batch_acquire(adsm__runtime *rt) {
    for (adsm__object *o = rt->first_object; o;) {
        int busy = o->blocks[0].busy, rc = adsm__batch_bring_home(rt, o);
        if (rc < 0) return adsm__fail(ADSM_ERROR_SYSTEM, "batch: copy from the device failed");
        /* after its own copy o is still there (a free waits for busy objects); after waiting for
         * another thread's copy it may not be: start over (objects home are skipped at once) */
        o = busy ? rt->first_object : o->next;
    }
    return ADSM_OK;
}

/* Every object goes to the device at each call (the paper's batch update), except those whose
 * device copy is newer: an earlier kernel writes them and the host copy is stale until it comes
 * home. Kernels in flight never write any other object, so nothing waits for them here. */
ADSM__PRIVATE adsm_result adsm__batch_release(adsm__runtime *rt, adsm__object **writes, size_t nwrites,
                                              adsm__object *const *used, size_t nused, uint64_t seq) {
    (void)used; /* batch sends everything: kernels may follow pointers */
    (void)nused;
    /* the objects to send, marked busy: their frees, and adsm_memcpy/memset/I/O into them, wait
     * for the copies; adsm_launch holds rt->launch_mutex, so no other launch interleaves */
    stbds_arrsetlen(rt->batch_sends, 0);
    for (adsm__object *o = rt->first_object; o; o = o->next) {
        if (o->device_newer || o->blocks[0].busy) continue; /* busy: being brought home, so newer */
        stbds_arrput(rt->batch_sends, o);
        o->blocks[0].busy = 1;
        o->busy_units++;
    }
    adsm__unlock(&rt->lock);
    adsm__tls_passthrough++; /* the copies' own memcpy must not come back to adsm (interposition) */
    adsm__drain_all(rt);
    int failed = 0;
    for (ptrdiff_t i = 0; i < stbds_arrlen(rt->batch_sends) && !failed; i++)
        failed = adsm__flush(rt, rt->batch_sends[i], 0, rt->batch_sends[i]->nblocks, 0) != 0;
    adsm__tls_passthrough--;
    adsm__lock(&rt->lock);
    for (ptrdiff_t i = 0; i < stbds_arrlen(rt->batch_sends); i++) {
        rt->batch_sends[i]->blocks[0].busy = 0;
        rt->batch_sends[i]->busy_units--;
    }
    adsm__copies_done(rt);
    if (failed) return adsm__fail(ADSM_ERROR_SYSTEM, "batch: copy to the device failed");
    for (size_t i = 0; i < nwrites; i++) {
        writes[i]->writer_seq = seq;
        writes[i]->device_newer = 1;
    }
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__untracked_release(adsm__runtime *rt, adsm__object **writes, size_t nwrites,
                                                  adsm__object *const *used, size_t nused, uint64_t seq) {
    (void)rt; (void)writes; (void)nwrites; (void)used; (void)nused; (void)seq;
    return ADSM_OK;
}

/* Untracked objects (batch protocol, host backend) stay writable: the host copy is the one the
 * program uses between calls. */
ADSM__PRIVATE int adsm__untracked_alloc(adsm__runtime *rt, adsm__object *o) {
    return adsm__set_state(rt, o, 0, o->nblocks, ADSM__DIRTY);
}

ADSM__PRIVATE void adsm__untracked_free(adsm__runtime *rt, adsm__object *o) { (void)rt; (void)o; }

static const adsm__protocol_vtbl adsm__protocol_batch = {
    .name = "batch",
    .kind = ADSM_PROTOCOL_BATCH,
    .whole_object = 1,
    .eager = 0,
    .on_access = adsm__batch_access,
    .release = adsm__batch_release,
    .acquire = adsm__batch_acquire,
    .on_alloc = adsm__untracked_alloc,
    .on_free = adsm__untracked_free,
};

/* Host backend: one memory, nothing to keep coherent. */
static const adsm__protocol_vtbl adsm__protocol_untracked = {
    .name = "untracked",
    .kind = ADSM_PROTOCOL_DEFAULT,
    .whole_object = 1,
    .eager = 0,
    .on_access = adsm__untracked_access,
    .release = adsm__untracked_release,
    .acquire = adsm__tracked_acquire,
    .on_alloc = adsm__untracked_alloc,
    .on_free = adsm__untracked_free,
};

#endif /* ADSM__PROTOCOL_BATCH_INCLUDED */
