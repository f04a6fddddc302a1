/* adsm_impl/protocol_batch.h -- batch update: no tracking at all; every object goes to the device
 * at each kernel call and comes back at the next adsm_sync (the paper's baseline).
 *
 * Host memory stays writable, so no fault ever reaches this protocol. Release and acquire run
 * under the runtime lock in normal thread context. Also defines the "untracked" protocol the
 * host backend uses, where device and host memory are one and nothing moves. */
#ifndef ADSM__PROTOCOL_BATCH_INCLUDED
#define ADSM__PROTOCOL_BATCH_INCLUDED

ADSM__PRIVATE int adsm__untracked_access(adsm__runtime *rt, adsm__object *o, size_t block, int is_write,
                                         int overwrite) {
    (void)rt; (void)o; (void)block; (void)is_write; (void)overwrite;
    return 0;
}

ADSM__PRIVATE adsm_result adsm__batch_acquire(adsm__runtime *rt) {
    if (rt->synced_seq == rt->launch_seq) return ADSM_OK; /* no kernel ran since the last sync */
    for (adsm__object *o = rt->first_object; o; o = o->next) {
        if (o->size == 0) continue;
        if (adsm__fetch_range(rt, o->host, o->dev, o->size, PROT_READ | PROT_WRITE) != 0)
            return adsm__fail(ADSM_ERROR_SYSTEM, "batch: copy from the device failed");
    }
    rt->synced_seq = rt->launch_seq;
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__batch_release(adsm__runtime *rt, adsm__object **writes, size_t nwrites,
                                              uint64_t seq) {
    (void)writes; (void)nwrites; (void)seq;
    /* A previous kernel may still be writing: bring its results home first, or the copies below
     * would overwrite them on the device with older host data. */
    if (rt->synced_seq != rt->launch_seq) {
        if (rt->be->wait(rt->be_ctx, rt->launch_seq) != 0)
            return adsm__fail(ADSM_ERROR_DEVICE_LOST, "batch: the device is gone");
        adsm_result r = adsm__batch_acquire(rt);
        if (r != ADSM_OK) return r;
    }
    rt->be->drain(rt->be_ctx);
    for (adsm__object *o = rt->first_object; o; o = o->next) {
        if (adsm__flush(rt, o, 0, o->nblocks, 0) != 0)
            return adsm__fail(ADSM_ERROR_SYSTEM, "batch: copy to the device failed");
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
    "batch", ADSM_PROTOCOL_BATCH, 1, 0, adsm__untracked_access, adsm__batch_release, adsm__batch_acquire,
    adsm__untracked_alloc, adsm__untracked_free};

/* Host backend: one memory, nothing to keep coherent. */
static const adsm__protocol_vtbl adsm__protocol_untracked = {
    "untracked", ADSM_PROTOCOL_DEFAULT, 1, 0, adsm__untracked_access, adsm__untracked_release,
    adsm__tracked_acquire, adsm__untracked_alloc, adsm__untracked_free};

#endif /* ADSM__PROTOCOL_BATCH_INCLUDED */
