/* adsm_impl/bounce.h -- bounce buffers: the memory bytes pass through where a system call must
 * not see shared memory (io.h) or a copy cannot go straight (overlapping ranges, device buffers:
 * memops.h).
 *
 * Buffers of one piece are kept in a pool for the next call instead of mapped each time. Any
 * context, signal handlers included: read, write and memcpy are async-signal-safe, and a handler
 * calling them on shared memory comes here. So nothing allocates: buffers are mapped (a system
 * call), the pool's array has its room from adsm_init (adsm__bounce_pool_ready), and a buffer
 * given back to a full pool is unmapped instead of growing it. */
#ifndef ADSM__BOUNCE_INCLUDED
#define ADSM__BOUNCE_INCLUDED

#include "common.h"
#include "os.h"
#include "runtime.h"

#include <sys/mman.h>

/* Buffers the pool keeps: one per I/O call or copy in flight at once, which is about one per
 * thread doing I/O on shared memory; more are mapped for the call and unmapped after it. */
#define ADSM__BOUNCE_POOL 64

/* Bytes per system call or copy: at least a block, so eviction of the blocks just filled overlaps
 * the next call and a whole block is filled by one piece; never tiny (4 KiB blocks) nor huge. */
ADSM__PRIVATE size_t adsm__bounce_piece(const adsm__runtime *rt) {
    return ADSM__MIN(ADSM__MAX(rt->cfg.block_size, (size_t)1 << 20), (size_t)32 << 20);
}

/* A page longer than a piece: a system call sees the buffer at the same offset within a page as
 * the program's own buffer, so O_DIRECT's alignment rules give what libc would on it. */
typedef struct adsm__bounce {
    unsigned char *base;
    size_t size;
    int pooled;
} adsm__bounce;

ADSM__PRIVATE size_t adsm__bounce_pooled_size(const adsm__runtime *rt) { return adsm__bounce_piece(rt) + rt->page; }

/* At adsm_init (normal context): the pool's room, so that giving a buffer back never allocates. */
ADSM__PRIVATE int adsm__bounce_pool_ready(adsm__runtime *rt) {
    stbds_arrsetcap(rt->io_bounce, ADSM__BOUNCE_POOL);
    return stbds_arrcap(rt->io_bounce) >= ADSM__BOUNCE_POOL ? 0 : -1;
}

/* A buffer for `need` bytes (at most a piece: from the pool). 0, or -1 where mmap failed. */
ADSM__PRIVATE int adsm__bounce_take(adsm__runtime *rt, size_t need, adsm__bounce *b) {
    b->pooled = need <= adsm__bounce_piece(rt);
    b->size = b->pooled ? adsm__bounce_pooled_size(rt) : ADSM__ALIGN_UP(need, rt->page) + rt->page;
    b->base = NULL;
    if (b->pooled) {
        adsm__lock(&rt->lock);
        if (stbds_arrlen(rt->io_bounce) > 0) b->base = (unsigned char *)stbds_arrpop(rt->io_bounce);
        adsm__unlock(&rt->lock);
        if (b->base) return 0;
    }
    void *p = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -1;
    b->base = (unsigned char *)p;
    return 0;
}

ADSM__PRIVATE void adsm__bounce_give(adsm__runtime *rt, adsm__bounce *b) {
    if (b->pooled) {
        adsm__lock(&rt->lock);
        int kept = adsm__ready() && (size_t)stbds_arrlen(rt->io_bounce) < stbds_arrcap(rt->io_bounce) &&
                   (stbds_arrput(rt->io_bounce, b->base), 1); /* within its room: no allocation */
        adsm__unlock(&rt->lock);
        if (kept) return;
    }
    munmap(b->base, b->size);
}

/* At shutdown: every idle bounce buffer goes. */
ADSM__PRIVATE void adsm__bounce_release_all(adsm__runtime *rt) {
    for (ptrdiff_t i = 0; i < stbds_arrlen(rt->io_bounce); i++) munmap(rt->io_bounce[i], adsm__bounce_pooled_size(rt));
    stbds_arrfree(rt->io_bounce);
}

#endif /* ADSM__BOUNCE_INCLUDED */
