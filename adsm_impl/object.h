/* adsm_impl/object.h -- shared objects, their blocks and block states.
 *
 * An object is one adsm_alloc: a page-aligned host range (its node in the block tree), the
 * device address behind it, and an array of blocks of the configured block size (the last one
 * shorter). Each block carries its state (Invalid / ReadOnly / Dirty, mirrored in the host page
 * protection), its links in the rolling FIFO of dirty blocks and when it was last evicted (the
 * adaptive rolling size learns from blocks written again after their eviction). The helpers here
 * only compute; they are safe in any context, the signal handler included. Objects are created
 * and destroyed by api.h under the runtime lock. */
#ifndef ADSM__OBJECT_INCLUDED
#define ADSM__OBJECT_INCLUDED

#include "common.h"
#include "blocktree.h"
#include "config.h"

enum { ADSM__INVALID = 0, ADSM__READONLY = 1, ADSM__DIRTY = 2 };

/* Whether pages in `state` let the CPU make this access without a fault. Signal-safe. */
ADSM__PRIVATE int adsm__state_allows(int state, int is_write) {
    return state == ADSM__DIRTY || (state == ADSM__READONLY && !is_write);
}

struct adsm__object;

typedef struct adsm__block {
    struct adsm__block *fifo_prev, *fifo_next; /* FIFO of dirty tracking units (lazy, rolling) */
    struct adsm__object *obj;
    uint32_t index;
    uint8_t state;
    uint8_t in_fifo;
    uint8_t busy;     /* unit head: a copy of it runs outside the runtime lock; nobody else may
                         change the unit until it is done (protocol.h, adsm__busy_begin) */
    uint8_t dev_valid; /* unit head: the devices holding a current copy, one bit each (directory.h);
                          none while the unit is Dirty on the host */
    uint64_t flush_ticket; /* unit head: number of its last asynchronous flush (rt->flushes_queued
                              then); that copy may still be reading the host pages while the ticket
                              is above rt->flushes_settled (protocol.h, adsm__flushing) */
    uint64_t evicted_at; /* unit head, rolling: value of the runtime's eviction clock when this unit
                            was last evicted eagerly (0: never), to detect a regretted eviction */
} adsm__block;

typedef struct adsm__object {
    adsm__tree_node node;     /* host range [host, host + span) */
    adsm__tree_node dev_node; /* safe objects only: device range [dev, dev + span) */
    uintptr_t host, dev;      /* equal unless the object is "safe" */
    size_t size, span;        /* requested bytes; page-rounded bytes */
    size_t nblocks;
    adsm__block *blocks;
    int safe;                 /* host address differs from the device address */
    int device_only;          /* adsm_dev_alloc: no host side, no coherence */
    int locked;               /* host pages page-locked with the driver: copies are direct DMA */
    int host_pending;         /* its host pages are made ready (page-locked, ...) on first use:
                                 not yet (host_pages.h) */
    uint64_t *block_bits;     /* an aliased object's bit per block (allocated with it: a fault may
                                 not allocate): until its host pages are made, the blocks CPU stores
                                 opened without making them (protocol.h, adsm__sparse_use); after,
                                 the blocks the program's view is still to be mapped onto
                                 (host_pages.h, adsm__host_view_map_opened) */
    size_t block_bits_set;    /* after the pages are made: bits set (0: nothing to map) */
    size_t sparse_bytes;      /* before: bytes of the blocks marked */
    int managed;              /* in the backend's managed memory (protocol_um.h), not the arenas */
    const adsm_type_desc *type; /* its structs' declared pointer fields (translate.h), or NULL */
    uint64_t writer_seq;      /* the last launch that may write it: fetches wait for it */
    unsigned writer_dev;      /* the device that launch ran on */
    uint64_t um_waited;       /* um, hmm: the last launch adsm_memcpy/memset/I/O waited for */
    unsigned home_dev;        /* the device that last ran a kernel on it: rolling evicts there */
    int affinity;             /* several devices: the device it belongs to (adsm_set_affinity,
                                 ADSM_AFFINITY_BLOCK), -1: none (placement goes by its bytes) */
    uint8_t dev_resident;     /* several devices: those whose memory holds something of it, and
                                 counts it in rt->dev_bytes (capacity.h) */
    uint8_t dev_leaving;      /* devices an eviction is unmapping it from with the runtime lock let
                                 go: nothing maps it there again until that is done (capacity.h) */
    uint64_t dev_stamp[ADSM__MAX_DEVICES]; /* when each device last used it (rt->lru_clock) */
    uint64_t dev_launch[ADSM__MAX_DEVICES]; /* the last launch on each device that named it: a
                                               copy to that device waits for it (directory.h) */
    int device_newer;         /* batch: a launch may have written it since it last came home */
    int flush_by_xlate;       /* during a launch's release: its Dirty units are not flushed, a
                                 staged translation sends them translated (translate.h) */
    int flush_skipped;        /* a flush of it was skipped for that reason: the pass must send it */
    int host_kept;            /* lazy, rolling: an output whose host pages still hold its device
                                 bytes though Invalid (each block was current on the host when the
                                 launch's release made it Invalid; no kernel ran since): set at the
                                 release, cleared once that launch is done (translate.h reads them) */
    /* rolling write-ahead (protocol_rolling.h, adsm__write_run): the block right after the run the last
     * write fault made Dirty and how many blocks that run was meant to hold (0 where blocks are
     * taken one by one: only the position counts there), valid while ahead_epoch equals the
     * runtime's (no kernel call since); behind: where the current sequential pass began, or the
     * lowest block it left behind that may still be Dirty (its eviction victims, adsm__victim) */
    size_t ahead_next, ahead, behind;
    uint64_t ahead_epoch;
    uint64_t held_epoch;      /* rolling: 1 + the runtime's ahead_epoch when a block of it was
                                 written again after its eviction (a regret): until the next kernel
                                 call none of its blocks is evicted (0: never) */
    uint64_t fetch_epoch;     /* rolling: 1 + the runtime's ahead_epoch at this object's last fetch
                                 fault (0: none yet): a write fault that is the first fetch of an
                                 epoch takes its unit alone (protocol_rolling.h, adsm__fetch_granule) */
    size_t fetch_next, fetch_run; /* rolling: the block right after the last fetch fault's blocks, and
                                     how many it took (its read-ahead, adsm__fetch_ahead) */
    uint64_t reach_mark;      /* several devices: the walk (translate.h, adsm__reach) that listed it */
    uint8_t home_syncs;       /* lazy, rolling, a small object the CPU read after a kernel wrote it:
                                 how many more syncs bring it home after a kernel writes it, before
                                 the CPU faults on it (protocol.h, adsm__bring_small_outputs_home) */
    uint8_t home_written;     /* ... and the CPU wrote it since it came home: the next sync brings it
                                 home Dirty, beside a twin of its bytes (protocol.h) */
    uint8_t twin_live;        /* o->twin holds the device copy's bytes, the object standing Dirty
                                 outside the FIFO since a sync brought it home (rt->twins): a release
                                 compares instead of copying */
    unsigned char *twin;      /* o->size bytes, allocated at the first such sync, freed with o */
    uint8_t io_filling;       /* lazy: a read from a file claimed this Invalid unit whole and fills
                                 it piece by piece; Dirty outside the FIFO until it ends (protocol.h,
                                 adsm__fill_claimed) */
    uint8_t range_lost;       /* the program unmapped it and it could not be mapped again at its
                                 free: its range stays out of the arena (object_life.h) */
    uint32_t launch_held;     /* held by a launch letting the lock go before its kernel is issued
                                 (protocol.h): others' accesses and frees wait */
    uint32_t busy_units;      /* units with a copy running outside the runtime lock: a launch that
                                 writes the object, and its free, wait for them */
    struct adsm__object *prev, *next; /* every live object, in allocation order */
} adsm__object;

/* o->block_bits's bit for block b (the field says what it means when). Signal-safe. */
ADSM__PRIVATE int adsm__block_bit(const adsm__object *o, size_t b) {
    return (int)((o->block_bits[b / 64] >> (b % 64)) & 1);
}

ADSM__PRIVATE void adsm__block_bit_set(adsm__object *o, size_t b) { o->block_bits[b / 64] |= (uint64_t)1 << (b % 64); }

ADSM__PRIVATE void adsm__block_bit_clear(adsm__object *o, size_t b) {
    o->block_bits[b / 64] &= ~((uint64_t)1 << (b % 64));
}

ADSM__PRIVATE adsm__object *adsm__object_of(adsm__tree_node *n) {
    return n ? ADSM__CONTAINER_OF(n, adsm__object, node) : NULL;
}

/* Lists of objects kept in stb_ds arrays (directory.h's outputs to bring home, protocol.h's small
 * outputs): o appended unless it is there already, and o taken out. Under the runtime lock. */
ADSM__PRIVATE void adsm__list_once(adsm__object ***list, adsm__object *o) {
    for (ptrdiff_t k = 0; k < stbds_arrlen(*list); k++)
        if ((*list)[k] == o) return;
    stbds_arrput(*list, o);
}

ADSM__PRIVATE void adsm__unlist(adsm__object ***list, const adsm__object *o) {
    for (ptrdiff_t k = 0; k < stbds_arrlen(*list); k++)
        if ((*list)[k] == o) stbds_arrdelswap(*list, k--);
}

/* Byte offset and length of blocks [first, first + count) within the object, clamped to limit
 * (the object's size for copies, its span for page protection). */
ADSM__PRIVATE size_t adsm__blocks_len(size_t first, size_t count, unsigned shift,
                                      size_t limit) {
    size_t begin = first << shift, end = (first + count) << shift;
    if (end > limit) end = limit;
    return end > begin ? end - begin : 0;
}

/* Host memory from adsm_host_alloc: plain memory for explicit copies, not an object. */
typedef struct adsm__host_buffer {
    adsm__tree_node node; /* [host, host + span) */
    int locked;           /* page-locked with the driver */
} adsm__host_buffer;

static const char adsm__state_letters[3] = {'I', 'R', 'D'};

#endif /* ADSM__OBJECT_INCLUDED */
