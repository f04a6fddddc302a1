/* adsm_impl/xlate_stage.h -- the staging buffers of declared pointer fields' staged translation
 * (translate.h), kept by the runtime.
 *
 * A staged pass copies through a buffer of ADSM__XLATE_STAGE bytes, twice a launch. The runtime
 * keeps the buffers (one per pass in flight, normally one) instead of allocating one per pass,
 * and page-locks each once where the backend can (cuda): the backend then DMAs the translated
 * bytes straight from it and into it, as a hand-written deep copy does from its page-locked
 * buffer, instead of through its own pinned staging with a memcpy each way. They go at shutdown
 * (lifecycle.h), before the backend.
 *
 * Normal thread context, under the runtime lock. */
#ifndef ADSM__XLATE_STAGE_INCLUDED
#define ADSM__XLATE_STAGE_INCLUDED

#include "common.h"
#include "os.h"
#include "runtime.h"
#include "backend.h"

#define ADSM__XLATE_STAGE ((size_t)4 << 20) /* bytes per piece through the staging buffer */

typedef struct adsm__xlate_stage_buf {
    unsigned char *base;
    int locked; /* page-locked by the backend: unlocked before it goes */
    int busy;   /* a pass holds it */
} adsm__xlate_stage_buf;

/* A buffer no pass holds, made (and page-locked) when every kept one is busy; NULL when out of
 * memory. */
ADSM__PRIVATE unsigned char *adsm__xlate_stage_take(adsm__runtime *rt) {
    for (ptrdiff_t i = 0; i < stbds_arrlen(rt->xlate_stages); i++)
        if (!rt->xlate_stages[i].busy) {
            rt->xlate_stages[i].busy = 1;
            return rt->xlate_stages[i].base;
        }
    /* a page after it stays inaccessible: a pass that ran past the buffer (a field span larger
     * than it went whole once) faults at once instead of writing over what lies beyond */
    void *p = adsm__map_aligned(ADSM__XLATE_STAGE + rt->page, ADSM__HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_NORESERVE);
    if (p == MAP_FAILED) return NULL;
    if (mprotect((unsigned char *)p + ADSM__XLATE_STAGE, rt->page, PROT_NONE) != 0) {
        munmap(p, ADSM__XLATE_STAGE + rt->page);
        return NULL;
    }
    madvise(p, ADSM__XLATE_STAGE, MADV_HUGEPAGE);
    adsm__xlate_stage_buf s = {(unsigned char *)p, 0, 1};
    if (rt->be->host_lock && rt->be->moves_data) s.locked = rt->be->host_lock(rt->be_ctx, (uintptr_t)p, ADSM__XLATE_STAGE);
    stbds_arrput(rt->xlate_stages, s);
    return s.base;
}

/* The buffer back for the next pass (NULL: none taken). */
ADSM__PRIVATE void adsm__xlate_stage_give(adsm__runtime *rt, unsigned char *base) {
    for (ptrdiff_t i = 0; base && i < stbds_arrlen(rt->xlate_stages); i++)
        if (rt->xlate_stages[i].base == base) rt->xlate_stages[i].busy = 0;
}

/* At shutdown, before the backend stops: every buffer unlocked and unmapped. */
ADSM__PRIVATE void adsm__xlate_stages_release(adsm__runtime *rt) {
    for (ptrdiff_t i = 0; i < stbds_arrlen(rt->xlate_stages); i++) {
        adsm__xlate_stage_buf *s = &rt->xlate_stages[i];
        if (s->locked) rt->be->host_unlock(rt->be_ctx, (uintptr_t)s->base, ADSM__XLATE_STAGE);
        munmap(s->base, ADSM__XLATE_STAGE + rt->page);
    }
    stbds_arrfree(rt->xlate_stages);
}

#endif /* ADSM__XLATE_STAGE_INCLUDED */
