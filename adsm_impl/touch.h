/* adsm_impl/touch.h -- adsm_is_shared and adsm_touch: for code that hands shared memory to
 * something adsm cannot see at work (another process reading the pages, a library that takes a
 * buffer apart itself; adsm_mpi.h is the first user).
 *
 * adsm_is_shared says whether a range reaches into a live shared object. adsm_touch makes a range
 * current on the host as CPU reads or writes of each of its bytes would, without touching a
 * byte: each tracking unit hears of the access through the protocol, as in adsm_memcpy, so a
 * kernel still writing it is waited for and, under batch, an object a kernel wrote comes home
 * first (a plain CPU access sees the stale host copy there until adsm_sync). Normal thread
 * context; the runtime lock is taken per unit and let go while copies run (protocol.h). */
#ifndef ADSM__TOUCH_INCLUDED
#define ADSM__TOUCH_INCLUDED

#include "common.h"
#include "blocktree.h"
#include "object.h"
#include "runtime.h"
#include "protocol.h"
#include "memops.h"
#include "io.h"

ADSM__PRIVATE int adsm__is_shared_unguarded(const void *ptr, size_t n) { return adsm__touches_shared(ptr, n); }

/* Each unit of [a, a + n) that lies in a shared object hears of a read or write access (never an
 * overwrite: its bytes stay); plain memory in between is left alone. */
ADSM__PRIVATE adsm_result adsm__touch_range(adsm__runtime *rt, uintptr_t a, size_t n, int write) {
    adsm__unit_walk w = {write, 0, NULL, NULL, NULL};
    return adsm__walk_units(rt, a, n, &w);
}

ADSM__PRIVATE adsm_result adsm__touch_unguarded(const void *ptr, size_t n, int write) {
    adsm_result r = adsm__check_range(ptr, n, "adsm_touch");
    if (r != ADSM_OK || n == 0 || !adsm__ready()) return r; /* before adsm_init nothing is shared */
    return adsm__touch_range(&adsm__rt, (uintptr_t)ptr, n, write != 0);
}

#endif /* ADSM__TOUCH_INCLUDED */
