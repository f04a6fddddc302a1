/* adsm_impl/peer.h -- before a launch on device d, the units of the objects its kernel names that
 * only other devices hold move to d device to device, with the runtime lock let go.
 *
 * A peer copy waits for the kernel that wrote its source, which may run for seconds; under the
 * runtime lock every other thread's faults, frees and I/O would wait with it. So the units to
 * copy are marked busy (a fault on one of them waits for the copy, protocol.h), the lock goes,
 * the copies run (directory.h, adsm__copy_peer: a run of neighbouring units with one source at a
 * time), and the lock comes back. One object per call; the launch then looks everything up again
 * (its objects may have changed meanwhile) and calls once more until nothing is left to copy.
 *
 * Context: normal thread context, in a launch (rt->launch_mutex held, so no other launch, eviction
 * or device buffer allocation runs meanwhile), runtime lock held on entry and on return. */
#ifndef ADSM__PEER_INCLUDED
#define ADSM__PEER_INCLUDED

#include "common.h"
#include "os.h"
#include "object.h"
#include "runtime.h"
#include "directory.h"
#include "protocol.h"

/* A unit device d must take from another device: Invalid on the host, not current on d. */
ADSM__PRIVATE int adsm__needs_peer(const adsm__block *head, unsigned d) {
    return head->state == ADSM__INVALID && !(head->dev_valid & adsm__dev_bit(d));
}

/* Copies the units listed (heads, in order; busy, so nobody else changes them) from the devices
 * holding them to d, a run of neighbours with one source at a time. The runtime lock is not held. */
ADSM__PRIVATE int adsm__copy_units_peer(adsm__runtime *rt, adsm__object *o, const size_t *heads, size_t n, size_t unit,
                                        unsigned d) {
    for (size_t i = 0; i < n;) {
        unsigned s = adsm__dev_source(rt, &o->blocks[heads[i]]);
        size_t j = i + 1;
        while (j < n && heads[j] == heads[j - 1] + unit && adsm__dev_source(rt, &o->blocks[heads[j]]) == s) j++;
        if (adsm__copy_peer(rt, o, heads[i], heads[j - 1] + unit - heads[i], s, d) != 0) return -1;
        i = j;
    }
    return 0;
}

/* Before a launch on d, once d has room (capacity.h): the units of the objects it names that only
 * other devices hold are copied to d device to device, one object per call, with the units busy
 * and the runtime lock let go: the copy waits for the kernel that wrote them, and other threads'
 * faults, frees and I/O meanwhile wait only if they touch those units. Sets *again when it let
 * the lock go (the caller looks everything up again and calls once more). Lock and launch_mutex
 * held. */
ADSM__PRIVATE adsm_result adsm__peer_copies(adsm__runtime *rt, adsm__object *const *used, size_t nused, unsigned d,
                                            int *again) {
    *again = 0;
    if (rt->ndev == 1) return ADSM_OK;
    for (size_t i = 0; i < nused; i++) {
        adsm__object *o = used[i];
        size_t unit = rt->proto->whole_object ? o->nblocks : 1, *heads = NULL;
        if (o->device_only) continue;
        for (size_t b = 0; b < o->nblocks; b += unit)
            if (adsm__needs_peer(&o->blocks[b], d)) stbds_arrput(heads, b);
        if (!heads) continue;
        if (adsm__charge(rt, o, d) != 0) { /* its room was made: the driver refused */
            stbds_arrfree(heads);
            return adsm__fail(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "device %u has no memory left for a %zu-byte object "
                              "at %p (its driver refused it)", d, o->size, (void *)o->host);
        }
        size_t n = (size_t)stbds_arrlen(heads);
        for (size_t k = 0; k < n; k++) o->blocks[heads[k]].busy = 1;
        o->busy_units++;
        adsm__unlock(&rt->lock);
        adsm__tls_passthrough++;
        int rc = adsm__copy_units_peer(rt, o, heads, n, unit, d);
        adsm__tls_passthrough--;
        adsm__lock(&rt->lock);
        unsigned from = adsm__dev_source(rt, &o->blocks[heads[0]]);
        for (size_t k = 0; k < n; k++) {
            o->blocks[heads[k]].busy = 0;
            if (rc == 0) o->blocks[heads[k]].dev_valid |= adsm__dev_bit(d);
        }
        o->busy_units--;
        adsm__copies_done(rt);
        stbds_arrfree(heads);
        *again = 1;
        if (rc != 0 && adsm__dev_is_lost(rt, from))
            return adsm__fail(ADSM_ERROR_DEVICE_LOST, "copying a %zu-byte object at %p to device %u failed: its only "
                              "current copy is on device %u, which is lost", o->size, (void *)o->host, d, from);
        if (rc != 0)
            return adsm__fail(ADSM_ERROR_SYSTEM, "copying a %zu-byte object at %p to device %u failed (its only "
                              "current copy is on a device that cannot be read)", o->size, (void *)o->host, d);
        return ADSM_OK;
    }
    return ADSM_OK;
}

#endif /* ADSM__PEER_INCLUDED */
