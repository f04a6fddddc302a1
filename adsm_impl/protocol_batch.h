/* adsm_impl/protocol_batch.h -- batch update: no tracking at all; every object goes to the device
 * at each kernel call and comes back at the next adsm_sync (the paper's baseline).
 *
 * Host memory stays writable, so no fault ever reaches this protocol; it hears of adsm_memcpy,
 * adsm_memset and the I/O calls. Each object remembers whether a kernel may have written it
 * since it last came home (device_newer); only those come back. Everything runs under the
 * runtime lock in normal thread context. Also defines the "untracked" protocol the
 * host backend uses, where device and host memory are one and nothing moves. */
#ifndef ADSM__PROTOCOL_BATCH_INCLUDED
#define ADSM__PROTOCOL_BATCH_INCLUDED

ADSM__PRIVATE int adsm__untracked_access(adsm__runtime *rt, adsm__object *o, size_t block, int is_write,
                                         int overwrite) {
    (void)rt; (void)o; (void)block; (void)is_write; (void)overwrite;
    return 0;
}

/* An object a kernel may have written (device_newer) comes home after that kernel, and only
 * then: waiting for its own last writer, not for "every launch so far", is what keeps another
 * thread's later launch from being copied back mid-kernel. */
ADSM__PRIVATE int adsm__batch_bring_home(adsm__runtime *rt, adsm__object *o) {
    if (!o->device_newer) return 0;
    if (rt->be->wait(rt->be_ctx, o->writer_seq) != 0) return -1;
    if (adsm__fetch_range(rt, o->host, o->dev, o->size, PROT_READ | PROT_WRITE) != 0) return -1;
    o->device_newer = 0;
    return 0;
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
    for (adsm__object *o = rt->first_object; o; o = o->next)
        if (adsm__batch_bring_home(rt, o) != 0)
            return adsm__fail(ADSM_ERROR_SYSTEM, "batch: copy from the device failed");
    return ADSM_OK;
}

/* Every object goes to the device at each call (the paper's batch update), except those whose
 * device copy is newer: an earlier kernel writes them and the host copy is stale until it comes
 * home. Kernels in flight never write any other object, so nothing waits for them here. */
ADSM__PRIVATE adsm_result adsm__batch_release(adsm__runtime *rt, adsm__object **writes, size_t nwrites,
                                              uint64_t seq) {
    rt->be->drain(rt->be_ctx);
    for (adsm__object *o = rt->first_object; o; o = o->next) {
        if (o->device_newer) continue;
        if (adsm__flush(rt, o, 0, o->nblocks, 0) != 0)
            return adsm__fail(ADSM_ERROR_SYSTEM, "batch: copy to the device failed");
    }
    for (size_t i = 0; i < nwrites; i++) {
        writes[i]->writer_seq = seq;
        writes[i]->device_newer = 1;
    }
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__untracked_release(adsm__runtime *rt, adsm__object **writes, size_t nwrites,
                                                  uint64_t seq) {
    (void)rt; (void)writes; (void)nwrites; (void)seq;
    return ADSM_OK;
}

ADSM__PRIVATE void adsm__untracked_free(adsm__runtime *rt, adsm__object *o) { (void)rt; (void)o; }

static const adsm__protocol_vtbl adsm__protocol_batch = {
    "batch", ADSM_PROTOCOL_BATCH, 1, 0, adsm__batch_access, adsm__batch_release, adsm__batch_acquire,
    adsm__untracked_alloc, adsm__untracked_free};

/* Host backend: one memory, nothing to keep coherent. */
static const adsm__protocol_vtbl adsm__protocol_untracked = {
    "untracked", ADSM_PROTOCOL_DEFAULT, 1, 0, adsm__untracked_access, adsm__untracked_release,
    adsm__tracked_acquire, adsm__untracked_alloc, adsm__untracked_free};

#endif /* ADSM__PROTOCOL_BATCH_INCLUDED */
