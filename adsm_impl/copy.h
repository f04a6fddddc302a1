/* adsm_impl/copy.h -- the copy machinery the device backends share: bringing device data into
 * protected host pages with one CPU copy and no half-filled block ever visible, and the wait on
 * launch completion. The queue that orders a backend's copies and launches is copy_queue.h.
 *
 * Bringing data home (adsm__copy_home): a backend only ever copies into plain writable memory.
 * Pages the program may not see yet (an Invalid block is PROT_NONE) are filled in a private
 * staging slot and then moved over the block with mremap, which swaps the page-table entries in
 * one step: a thread that touches the block faults until the move is done, then sees all of the
 * new bytes (docs/design.md section 1 has the measurements). The block's stale pages are moved
 * into the second slot, which becomes the next staging slot, so filling never zero-fills fresh
 * pages either. Only whole 2 MiB huge pages are moved this way: mremap leaves one VMA per moved
 * piece (they never merge with their neighbours), so smaller pieces at the ends of a range go
 * through /proc/self/mem (the kernel writes through a bounce page whatever the protection), and
 * only when that cannot be used are they moved page by page. Where mremap has no
 * MREMAP_DONTUNMAP (gVisor, valgrind) the move goes without it and the slot is mapped again.
 *
 * Context: signal-safe. adsm__copy_home runs inside the SIGSEGV handler (a fetch), with the
 * runtime lock let go (protocol.h), so several fills may run at once: each piece holds one pair
 * of slots under the pair's futex lock. It uses only memcpy, mprotect, mremap, mmap, munmap,
 * madvise, fstat, pwrite and futexes. adsm__filler_init/_release run in normal thread
 * context at initialisation and shutdown. */
#ifndef ADSM__COPY_INCLUDED
#define ADSM__COPY_INCLUDED

#include "common.h"
#include "os.h"

#include <fcntl.h>
#include <sys/mman.h>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define ADSM__FILL_SLOT ((size_t)4 << 20) /* bytes moved per mremap: fewer calls, fewer VMAs */
#define ADSM__FILL_PAIRS 4                /* fills that may run at once (faults copy outside the
                                             runtime lock), each holding a pair for one piece */

/* Two slots: slot[0] is the staging slot (writable), slot[1] the spare that receives a block's
 * stale pages; they trade places after every move. */
typedef struct adsm__fill_pair {
    adsm__lock_t lock;
    unsigned char *slot[2];
    int stage_protected; /* slot[0] kept a moved block's protection (the kernel refused to make it
                            writable again, at vm.max_map_count): retried before the next fetch */
} adsm__fill_pair;

typedef struct adsm__filler {
    adsm__fill_pair pair[ADSM__FILL_PAIRS];
    unsigned char *slots; /* one mapping holding every slot; NULL before initialisation */
    size_t page;
    adsm__own_fd procmem; /* /proc/self/mem, or -1 (never written once the program closed it) */
    int plain_moves;      /* mremap has no MREMAP_DONTUNMAP here (gVisor; Linux before 5.7 for
                             these mappings): moves go without it (adsm__filler_move_plain) */
} adsm__filler;

/* Where the bytes of a fill went; the caller adds them to adsm_stats. */
typedef struct adsm__fill_count {
    size_t moved, forced; /* moved by mremap (one copy), written through /proc/self/mem (bounced) */
} adsm__fill_count;

/* The device side of a fill: copy n bytes from device address `dev` into writable host memory
 * `dst` (a backend's from_device verb). 0 or -1. */
typedef int (*adsm__fetch_fn)(void *ctx, uintptr_t dst, uintptr_t dev, size_t n);

/* The device side as copy.h needs it: the backend's verbs for one fill. */
typedef struct adsm__fetch_ops {
    adsm__fetch_fn fetch;
    /* whether fetch reaches [host, host + n) whatever its page protection (DMA into page-locked
     * pages); NULL: never */
    int (*direct)(void *ctx, uintptr_t host, size_t n);
    /* device memory the CPU can read in place (emu's window), or NULL: a piece that goes through
     * /proc/self/mem is written from there, without a copy into a slot first */
    const void *(*view)(void *ctx, uintptr_t dev, size_t n);
    void *ctx;
} adsm__fetch_ops;

#define ADSM__FILL_BYTES ((size_t)ADSM__FILL_PAIRS * 2 * ADSM__FILL_SLOT)

/* Fresh slot memory: huge-page aligned, asking for huge pages, or MAP_FAILED. Signal-safe. */
ADSM__PRIVATE void *adsm__map_slots(size_t bytes) {
    void *s = adsm__map_aligned(bytes, ADSM__HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_NORESERVE);
    if (s != MAP_FAILED) madvise(s, bytes, MADV_HUGEPAGE);
    return s;
}

/* Normal context. 0, or -1 when the slots cannot be mapped (errno says why). Without
 * /proc/self/mem the filler still works (pieces smaller than a huge page are moved by pages). */
ADSM__PRIVATE int adsm__filler_init(adsm__filler *f, size_t page) {
    memset(f, 0, sizeof *f);
    f->page = page;
    adsm__own_fd_set(&f->procmem, open("/proc/self/mem", O_RDWR | O_CLOEXEC));
    void *s = adsm__map_slots(ADSM__FILL_BYTES);
    if (s == MAP_FAILED) return -1;
    f->slots = (unsigned char *)s;
    for (int i = 0; i < ADSM__FILL_PAIRS; i++) {
        f->pair[i].slot[0] = f->slots + (size_t)(2 * i) * ADSM__FILL_SLOT;
        f->pair[i].slot[1] = f->slots + (size_t)(2 * i + 1) * ADSM__FILL_SLOT;
    }
    return 0;
}

ADSM__PRIVATE void adsm__filler_release(adsm__filler *f) {
    for (int i = 0; f->slots && i < ADSM__FILL_PAIRS; i++) /* each slot where it is now (below) */
        for (int k = 0; k < 2; k++)
            if (f->pair[i].slot[k]) munmap(f->pair[i].slot[k], ADSM__FILL_SLOT);
    adsm__own_fd_close(&f->procmem);
    memset(f, 0, sizeof *f);
    f->procmem.fd = -1;
}

/* The first n bytes of the pair's staging slot moved away without MREMAP_DONTUNMAP: they are
 * mapped again in place, with MAP_FIXED_NOREPLACE, so never over a mapping another thread made in
 * the hole meanwhile; failing that (or on a kernel that takes the flag as a hint) the slot's
 * remainder goes and a new slot is mapped elsewhere (release unmaps slots where they are). A
 * pair left without a slot fails its next fills. */
ADSM__PRIVATE void adsm__slot_refill(adsm__fill_pair *p, size_t n) {
    unsigned char *s = p->slot[0];
    void *at = mmap(s, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (at == (void *)s) {
        madvise(s, n, MADV_HUGEPAGE);
        return;
    }
    if (at != MAP_FAILED) munmap(at, n);
    if (n < ADSM__FILL_SLOT) munmap(s + n, ADSM__FILL_SLOT - n);
    void *fresh = adsm__map_slots(ADSM__FILL_SLOT);
    p->slot[0] = fresh == MAP_FAILED ? NULL : (unsigned char *)fresh;
}

/* Where mremap has no MREMAP_DONTUNMAP: the staged pages move over the block in one step, which
 * frees the block's stale pages (the block is never a hole: MREMAP_FIXED replaces it); the slot
 * they left is mapped again. The protection is set on the slot first, as below. 0 or -1. */
ADSM__PRIVATE int adsm__filler_move_plain(adsm__fill_pair *p, uintptr_t dst, size_t n, int prot) {
    unsigned char *stage = p->slot[0];
    if (mprotect(stage, n, prot) != 0) return -1;
    if (mremap(stage, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)dst) == MAP_FAILED) {
        mprotect(stage, n, PROT_READ | PROT_WRITE);
        return -1;
    }
    adsm__slot_refill(p, n);
    return 0;
}

/* Moves the n staged bytes in the pair's slot[0] over [dst, dst + n) (page-aligned, n a multiple
 * of the page) and leaves the range with protection `prot`. The range's stale pages go to
 * slot[1], and the two slots trade places. 0 or -1 (the range is then unchanged). */
ADSM__PRIVATE int adsm__filler_move(adsm__filler *f, adsm__fill_pair *p, uintptr_t dst, size_t n, int prot) {
    unsigned char *stage = p->slot[0], *spare = p->slot[1];
    if (ADSM__LOAD(&f->plain_moves)) return adsm__filler_move_plain(p, dst, n, prot);
    /* the pages arrive with the staging slot's protection: set it first, so no thread can write
     * the block before the caller records its state */
    if (mprotect(stage, n, prot) != 0) return -1;
    /* DONTUNMAP keeps both ranges mapped (empty), so no other mmap can land in a hole */
    if (mremap((void *)dst, n, n, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, spare) == MAP_FAILED) {
        int unknown_flag = errno == EINVAL;
        mprotect(stage, n, PROT_READ | PROT_WRITE);
        if (!unknown_flag) return -1;
        ADSM__STORE(&f->plain_moves, 1);
        return adsm__filler_move_plain(p, dst, n, prot);
    }
    if (mremap(stage, n, n, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, (void *)dst) == MAP_FAILED) {
        mprotect(stage, n, PROT_READ | PROT_WRITE);
        return -1;
    }
    p->slot[0] = spare;
    p->slot[1] = stage;
    /* the block's old pages came with their protection: writable again before the next fetch
     * lands there (adsm__filler_stage_ready), or a copy into it would fault inside adsm */
    p->stage_protected = mprotect(spare, ADSM__FILL_SLOT, PROT_READ | PROT_WRITE) != 0;
    return 0;
}

/* Whether the staging slot can take a fetch: mapped, and writable (a refused mprotect after the
 * last move is tried again). */
ADSM__PRIVATE int adsm__filler_stage_ready(adsm__fill_pair *p) {
    if (!p->slot[0]) return 0; /* it could not be mapped again (adsm__slot_refill) */
    if (p->stage_protected) p->stage_protected = mprotect(p->slot[0], ADSM__FILL_SLOT, PROT_READ | PROT_WRITE) != 0;
    return !p->stage_protected;
}

/* Fills a protected piece through /proc/self/mem from plain memory. 0 or -1. */
ADSM__PRIVATE int adsm__filler_force(adsm__filler *f, uintptr_t dst, const void *src, size_t n) {
    int fd = adsm__own_fd_get(&f->procmem);
    return fd >= 0 ? adsm__pwrite_full(fd, src, n, dst) : -1;
}

/* Reads a protected piece through /proc/self/mem into plain memory. 0 or -1. */
ADSM__PRIVATE int adsm__filler_peek(adsm__filler *f, void *dst, uintptr_t src, size_t n) {
    int fd = adsm__own_fd_get(&f->procmem);
    return fd >= 0 ? adsm__pread_full(fd, dst, n, src) : -1;
}

/* One piece of at most one slot, with the pair held: fetch into the staging slot, then move it
 * (whole huge pages, or whole pages when /proc/self/mem is missing) or force it in. */
ADSM__PRIVATE int adsm__filler_piece(adsm__filler *f, adsm__fill_pair *p, const adsm__fetch_ops *ops,
                                     uintptr_t dst, uintptr_t dev, size_t n, int prot, adsm__fill_count *count) {
    int huge = dst % ADSM__HUGE_PAGE == 0 && n % ADSM__HUGE_PAGE == 0;
    const void *in_place = !huge && ops->view ? ops->view(ops->ctx, dev, n) : NULL;
    if (in_place && adsm__filler_force(f, dst, in_place, n) == 0) {
        count->forced += n;
        return 0;
    }
    if (!adsm__filler_stage_ready(p) || ops->fetch(ops->ctx, (uintptr_t)p->slot[0], dev, n) != 0) return -1;
    if (huge && adsm__filler_move(f, p, dst, n, prot) == 0) {
        count->moved += n;
        return 0;
    }
    if (adsm__filler_force(f, dst, p->slot[0], n) == 0) {
        count->forced += n;
        return 0;
    }
    /* no /proc/self/mem: move whole pages; the bytes past n in the last page are zero */
    size_t whole = ADSM__ALIGN_UP(n, f->page);
    if (dst % f->page != 0) return -1;
    memset(p->slot[0] + n, 0, whole - n);
    if (adsm__filler_move(f, p, dst, whole, prot) != 0) return -1;
    count->moved += n;
    return 0;
}

/* Length of the next piece of [dst, end): up to the next huge-page boundary when dst is not on
 * one, else as many whole huge pages as fit in a slot, else the tail. */
ADSM__PRIVATE size_t adsm__filler_next(uintptr_t dst, uintptr_t end) {
    size_t left = end - dst;
    uintptr_t boundary = ADSM__ALIGN_UP(dst + 1, ADSM__HUGE_PAGE);
    if (dst % ADSM__HUGE_PAGE != 0) return ADSM__MIN(left, boundary - dst);
    size_t whole = ADSM__ALIGN_DOWN(left, ADSM__HUGE_PAGE);
    if (whole == 0) return left;
    return ADSM__MIN(whole, ADSM__FILL_SLOT);
}

/* A free pair, else (all in use by other fills) wait for the one `hint` picks. */
ADSM__PRIVATE adsm__fill_pair *adsm__filler_take(adsm__filler *f, unsigned hint) {
    for (int i = 0; i < ADSM__FILL_PAIRS; i++)
        if (adsm__trylock(&f->pair[i].lock)) return &f->pair[i];
    adsm__fill_pair *p = &f->pair[hint % ADSM__FILL_PAIRS];
    adsm__lock(&p->lock);
    return p;
}

/* Straight into the destination, in pieces, so that other threads' fetches (queued behind on
 * one engine, cuda) wait for one piece, not for a whole large object. */
#define ADSM__DIRECT_PIECE ((size_t)16 << 20)

ADSM__PRIVATE int adsm__copy_direct(const adsm__fetch_ops *ops, uintptr_t host, uintptr_t dev, size_t n) {
    for (size_t off = 0; off < n; off += ADSM__DIRECT_PIECE)
        if (ops->fetch(ops->ctx, host + off, dev + off, ADSM__MIN(ADSM__DIRECT_PIECE, n - off)) != 0) return -1;
    return 0;
}

/* Brings n bytes from device address dev into host memory [host, host + n) whose protection is
 * `prot` (and stays so). Writable memory, and memory the backend's DMA writes whatever its
 * protection (`direct`), gets the device bytes directly: the block stays protected until the
 * copy is complete. Other protected memory gets them all at once, as described at the top. Pairs
 * are held one piece at a time, so fills of different units interleave. 0 or -1. */
ADSM__PRIVATE int adsm__copy_home(adsm__filler *f, const adsm__fetch_ops *ops, uintptr_t host, uintptr_t dev,
                                  size_t n, int prot, adsm__fill_count *count) {
    if ((prot & PROT_WRITE) || (ops->direct && ops->direct(ops->ctx, host, n)))
        return adsm__copy_direct(ops, host, dev, n);
    if (!f->slots) return -1;
    uintptr_t end = host + n;
    int rc = 0;
    while (rc == 0 && host < end) {
        size_t len = adsm__filler_next(host, end);
        adsm__fill_pair *p = adsm__filler_take(f, (unsigned)(host / ADSM__HUGE_PAGE));
        rc = adsm__filler_piece(f, p, ops, host, dev, len, prot, count);
        adsm__unlock(&p->lock);
        host += len;
        dev += len;
    }
    return rc;
}

/* ---- the wait shared by the backends' completion threads ------------------------------------ */
/* A completion thread publishes *completed (then bumps and wakes *gen); *lost means it never
 * will again. 0 once launch `seq` finished, -1 when the device is lost. Signal-safe. */
ADSM__PRIVATE int adsm__wait_launch(const uint64_t *completed, int *gen, const int *lost, uint64_t seq) {
    for (;;) {
        int g = ADSM__LOAD(gen);
        if (ADSM__LOAD(completed) >= seq) return ADSM__LOAD(lost) ? -1 : 0;
        if (ADSM__LOAD(lost)) return -1;
        adsm__futex_wait(gen, g);
    }
}

#endif /* ADSM__COPY_INCLUDED */
