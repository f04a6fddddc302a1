/* adsm_impl/reservation.h -- adsm's one address reservation: made at initialisation, moved onto a
 * device range when a backend asks (cuda, GMAC's order), released at shutdown.
 *
 * One PROT_NONE, MAP_NORESERVE range split in two halves (docs/design.md section 1): shared
 * objects and every device address in the first, the host side of "safe" objects in the second;
 * the arenas hand out addresses in each. Normal thread context only, during adsm_init and
 * adsm_shutdown (initialisation mutex held): it maps, unmaps and allocates; except
 * adsm__host_dma and adsm__in_host_alias, arithmetic any context may call (the fault handler's
 * fetches do), adsm__host_alias_map_ahead and adsm__alias_shared_regions (a new object's pages
 * made, on any thread), adsm__host_pages_release (a free) and adsm__alias_release_regions (a
 * free, runtime lock held).
 * Backends may call adsm__move_reservation and adsm__alias_shared_half from their init; nothing
 * here calls a backend. */
#ifndef ADSM__RESERVATION_INCLUDED
#define ADSM__RESERVATION_INCLUDED

#include "common.h"
#include "os.h"
#include "arena.h"
#include "trace.h"
#include "runtime.h"
#include "prepare.h"

/* Address space adsm maps besides its reservation's halves: fetch slots, its threads' stacks,
 * tables. One more half is mapped as a second view: of device memory (emu), or of the shared
 * half's host pages (cuda's host alias under shared addresses), never both. */
#define ADSM__AS_SLACK ((size_t)512 << 20)
#define ADSM__AS_VIEWS 3

/* The shared half holds every object and device address: twice the emulated device's capacity
 * leaves room for fragmentation. */
ADSM__PRIVATE size_t adsm__half_needed(const adsm__runtime *rt) {
    size_t gib = (size_t)1 << 30;
    return ADSM__ALIGN_UP(ADSM__MAX(gib, 2 * rt->cfg.emu_memory), gib);
}

/* Under an address-space limit (ulimit -v) the halves must fit in what is left, three times over
 * (reservation and emu's device view). A defaulted emulated device shrinks to fit; one the
 * program sized is refused with the numbers and the remedy. */
ADSM__PRIVATE adsm_result adsm__fit_address_limit(adsm__runtime *rt, size_t *half_max) {
    size_t gib = (size_t)1 << 30, limit, room = adsm__address_space_room(&limit);
    *half_max = SIZE_MAX;
    if (room == SIZE_MAX) return ADSM_OK;
    size_t usable = room > ADSM__AS_SLACK ? (room - ADSM__AS_SLACK) / ADSM__AS_VIEWS : 0;
    *half_max = usable >= gib ? ADSM__ALIGN_DOWN(usable, gib) : 0;
    if (adsm__half_needed(rt) <= *half_max) return ADSM_OK;
    if (!rt->cfg.emu_memory_given && *half_max >= gib) {
        rt->cfg.emu_memory = *half_max / 2;
        adsm__log(ADSM_LOG_INFO, "emulated device memory lowered to %zu MiB to fit the address-space limit "
                  "(ulimit -v)", rt->cfg.emu_memory >> 20);
        return ADSM_OK;
    }
    return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY,
                      "the address-space limit (ulimit -v, %zu MiB) leaves %zu MiB; adsm maps about %d x %zu MiB "
                      "for %zu MiB of emulated device memory: %s",
                      limit >> 20, room >> 20, ADSM__AS_VIEWS, adsm__half_needed(rt) >> 20, rt->cfg.emu_memory >> 20,
                      *half_max >= gib ? "lower ADSM_EMU_MEMORY (or adsm_config.emu_memory) or raise the limit"
                                       : "raise the limit (adsm needs at least 3.5 GiB of it)");
}

ADSM__PRIVATE adsm_result adsm__reserve(adsm__runtime *rt) {
    size_t gib = (size_t)1 << 30, half_max;
    size_t align = ADSM__MAX(rt->cfg.block_size, (size_t)2 << 20);
    adsm_result r = adsm__fit_address_limit(rt, &half_max);
    if (r != ADSM_OK) return r;
    /* 64 GiB per half unless the device is larger or the limit smaller; where less address space
     * turns out to be allowed (valgrind's ~64 GiB), halve down to what the device capacity needs. */
    size_t need = adsm__half_needed(rt);
    rt->half = ADSM__MIN(ADSM__MAX((size_t)64 * gib, need), half_max);
    void *p = adsm__map_aligned(2 * rt->half, align, PROT_NONE, MAP_NORESERVE);
    while (p == MAP_FAILED && rt->half / 2 >= need) {
        rt->half /= 2;
        p = adsm__map_aligned(2 * rt->half, align, PROT_NONE, MAP_NORESERVE);
    }
    if (p == MAP_FAILED && errno == EAGAIN) /* only the locked-memory limit refuses a mapping so */
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cannot reserve %zu GiB of address space: the program locks "
                          "its future mappings (mlockall with MCL_FUTURE), and the kernel counts a reservation, "
                          "which holds no memory, against the locked-memory limit (ulimit -l): raise that limit "
                          "(ulimit -l unlimited) or call mlockall without MCL_FUTURE", (2 * rt->half + align) / gib);
    if (p == MAP_FAILED)
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cannot reserve %zu GiB of address space: %s (for %zu MiB "
                          "of emulated device memory: a smaller ADSM_EMU_MEMORY needs less)",
                          (2 * rt->half + align) / gib, strerror(errno), rt->cfg.emu_memory >> 20);
    uintptr_t base = (uintptr_t)p;
    rt->base = base;
    /* Host copies live on transparent huge pages where the block size allows it: protecting a
     * 2 MiB block is then one page-table entry instead of 512 (docs/design.md). */
    madvise((void *)base, 2 * rt->half, MADV_HUGEPAGE);
    if (adsm__arena_init(&rt->va_shared, base, rt->half, rt->page) != 0 ||
        adsm__arena_init(&rt->va_safe, base + rt->half, rt->half, rt->page) != 0)
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "out of memory while initialising");
    return ADSM_OK;
}

/* The arenas hand out addresses in the reservation now at `base`. */
ADSM__PRIVATE adsm_result adsm__rebase_arenas(adsm__runtime *rt, uintptr_t base) {
    adsm__arena_destroy(&rt->va_shared);
    adsm__arena_destroy(&rt->va_safe);
    rt->base = base;
    if (adsm__arena_init(&rt->va_shared, base, rt->half, rt->page) != 0 ||
        adsm__arena_init(&rt->va_safe, base + rt->half, rt->half, rt->page) != 0)
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "out of memory while initialising");
    return ADSM_OK;
}

/* Moves the (still empty) reservation to [to, to + 2 * half), over whatever is mapped there: the
 * cuda backend's device range, whose host placeholder the driver made (GMAC's order). The old
 * range is unmapped and never mapped again by adsm (someone else may map there at once). */
ADSM__PRIVATE adsm_result adsm__move_reservation(adsm__runtime *rt, uintptr_t to) {
    size_t total = 2 * rt->half;
    if (rt->nobjects || (to < rt->base + total && rt->base < to + total))
        return adsm__fail(ADSM_ERROR_UNSUPPORTED, "cannot move the address reservation");
    void *p = mmap((void *)to, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cannot map at %p: %s", (void *)to, strerror(errno));
    munmap((void *)rt->base, total);
    madvise((void *)to, total, MADV_HUGEPAGE);
    return adsm__rebase_arenas(rt, to);
}

/* Hands the (still empty) reservation over to the caller, still mapped, and takes a fresh one
 * wherever the kernel puts it (no MAP_FIXED: adsm only ever maps over ranges it holds). The
 * cuda backend turns the old range back into the driver's placeholder in place, so there is no
 * moment where the range is unmapped and another thread's mapping could land there. */
ADSM__PRIVATE adsm_result adsm__replace_reservation(adsm__runtime *rt) {
    size_t total = 2 * rt->half, align = ADSM__MAX(rt->cfg.block_size, (size_t)2 << 20);
    if (rt->nobjects) return adsm__fail(ADSM_ERROR_UNSUPPORTED, "cannot replace the address reservation");
    void *p = adsm__map_aligned(total, align, PROT_NONE, MAP_NORESERVE);
    if (p == MAP_FAILED)
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cannot reserve %zu GiB of address space: %s", total >> 30,
                          strerror(errno));
    madvise(p, total, MADV_HUGEPAGE);
    return adsm__rebase_arenas(rt, (uintptr_t)p);
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; older kernels refuse it (EINVAL) */
#endif

enum { ADSM__ALIAS_SMALL, ADSM__ALIAS_HUGE_BY_SETTING, ADSM__ALIAS_HUGE_BY_COLLAPSE };

/* Normal context, a new object's alias range [at, at + n) before it is page-locked and published:
 * gives every 2 MiB of it that lies whole inside the range one 2 MiB page, whatever shmem_enabled
 * says (MADV_COLLAPSE is independent of it since Linux 6.1; only "deny" refuses). The kernel
 * collapses only ranges with a resident page, so one byte per 2 MiB is written first (the object
 * is new: its bytes are zero, and stay so). Before cuMemHostRegister, since pinned pages cannot be
 * collapsed. EAGAIN (a page briefly busy) is worth another try; anything else leaves 4 KiB pages,
 * which work the same, only slower. 0, or the errno of the refusal. */
ADSM__PRIVATE int adsm__alias_collapse(uintptr_t at, size_t n) {
    uintptr_t lo = ADSM__ALIGN_UP(at, ADSM__HUGE_PAGE), hi = ADSM__ALIGN_DOWN(at + n, ADSM__HUGE_PAGE);
    if (hi <= lo) return 0;
    /* a write per 2 MiB gives each a resident page; an atomic or of 0, since an object made on first
     * use (host_pages.h) may hold bytes there already, and another thread may be writing them */
    for (uintptr_t a = lo; a < hi; a += ADSM__HUGE_PAGE)
        __atomic_fetch_or((volatile unsigned char *)a, (unsigned char)0, __ATOMIC_RELAXED);
    for (int tries = 0; tries < 3; tries++) {
        if (madvise((void *)lo, hi - lo, MADV_COLLAPSE) == 0) return 0;
        if (errno != EAGAIN) break;
    }
    return errno;
}

ADSM__PRIVATE int adsm__shmem_gets_huge_pages(void);

/* Initialisation, the alias just made: which pages it will have. Where shmem_enabled gives huge
 * pages to memory adsm advises, the alias has them already; else one collapse of the alias's first
 * 2 MiB tells whether this kernel grants them on request (its page is then given back), and each
 * new object's range is collapsed in turn (adsm__alias_collapse). With blocks under 2 MiB under
 * rolling, whose units are blocks, the program's view is advised away from huge pages
 * (view_small_pages): it then maps the alias's 2 MiB pages 4 KiB at a time, since a protection
 * change inside a 2 MiB page that a view maps whole drops that mapping, and every 4 KiB page of
 * it faults in again (bench/fault_cost, kind D:
 * 12-175 us per adsm fault at 64 KiB to 1 MiB blocks, against 6-17 on 4 KiB pages). The alias,
 * never protected, keeps its 2 MiB pages for page-locking and DMA (the third GPU run: vecadd at
 * blocks under 2 MiB took 1.5x the explicit program with 4 KiB pages in both views, 1.0x at
 * 2 MiB blocks with huge ones). Batch and lazy change the protection of whole objects, so their
 * view keeps 2 MiB pages at any block size: protecting a 128 MiB object then changes 64 entries,
 * not 32768 (likely what the probe after that run saw: lazy's uploads at 64 KiB blocks 0.79-0.89x
 * the explicit copy with the view on 4 KiB pages, 0.98-1.07x at 2 MiB blocks; not measured on a
 * GPU since). ADSM_CUDA_ALIAS_COLLAPSE=0 keeps 4 KiB pages (to measure them, or where
 * collapsing misbehaves). */
ADSM__PRIVATE void adsm__alias_choose_pages(adsm__runtime *rt) {
    rt->alias_pages = ADSM__ALIAS_SMALL;
    rt->alias_refusal = 0;
    /* rolling is the one protocol whose units are blocks (batch and lazy change whole objects) */
    rt->view_small_pages = rt->cfg.block_size < ADSM__HUGE_PAGE && rt->cfg.protocol == ADSM_PROTOCOL_ROLLING;
    if (rt->view_small_pages) madvise((void *)rt->base, rt->half, MADV_NOHUGEPAGE);
    if (adsm__shmem_gets_huge_pages() == 1) {
        rt->alias_pages = ADSM__ALIAS_HUGE_BY_SETTING;
        return;
    }
    if (!rt->cfg.cuda_alias_collapse) return;
    rt->alias_refusal = adsm__alias_collapse(rt->host_alias, ADSM__HUGE_PAGE);
    if (madvise((void *)rt->host_alias, ADSM__HUGE_PAGE, MADV_REMOVE) != 0)
        memset((void *)rt->host_alias, 0, ADSM__HUGE_PAGE);
    if (!rt->alias_refusal) rt->alias_pages = ADSM__ALIAS_HUGE_BY_COLLAPSE;
}

/* ---- the host alias -------------------------------------------------------------------------
 * Under shared addresses (cuda, placements 1 and 2) the objects' host pages are device address
 * space in the driver's unified map, so the driver must never be handed them as host pointers,
 * and their copies would all go through pinned staging (one CPU copy per byte each way). The
 * shared half's host memory is then one sparse memfd mapped twice: at the objects' addresses, the
 * program's view, whose protection tracks the CPU's accesses; and once more elsewhere, always
 * writable: the alias. The driver page-locks the alias, DMA reads and writes the object's pages
 * through it whatever the program's view allows, and a fetch fills it while the block stays
 * protected in the program's view, so no thread sees a half-filled block and no staging slot is
 * moved. The price: shmem gets transparent huge pages only where the system enables them
 * (/sys/kernel/mm/transparent_hugepage/shmem_enabled), else protecting a 2 MiB block changes 512
 * page-table entries instead of one. The descriptor is closed at once: the mappings hold the
 * file, and a program that closes descriptors cannot take it away. Both views are MADV_DONTFORK:
 * a forked child must not write into the parent's objects through a shared mapping. 0, or -1
 * with errno (the reservation is as it was). */
ADSM__PRIVATE int adsm__alias_shared_half(adsm__runtime *rt) {
    if (rt->nobjects || rt->host_alias || !rt->base) {
        errno = EBUSY;
        return -1;
    }
    int fd = adsm__memfd("adsm-host-objects", rt->half);
    if (fd < 0) return -1;
    void *alias = adsm__map_shared_unlocked(rt->half, PROT_READ | PROT_WRITE, fd);
    void *view = MAP_FAILED;
    if (alias != MAP_FAILED) /* over adsm's own (empty, PROT_NONE) half: nothing else is there */
        view = mmap((void *)rt->base, rt->half, PROT_NONE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED, fd, 0);
    int saved_errno = errno;
    close(fd);
    if (view == MAP_FAILED) {
        if (alias != MAP_FAILED) munmap(alias, rt->half);
        /* a failed MAP_FIXED may have unmapped the range: put adsm's plain reservation back */
        mmap((void *)rt->base, rt->half, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        madvise((void *)rt->base, rt->half, MADV_HUGEPAGE);
        errno = saved_errno;
        return -1;
    }
    madvise(alias, rt->half, MADV_HUGEPAGE); /* taken where shmem_enabled is advise or always */
    madvise(view, rt->half, MADV_HUGEPAGE);
    madvise(alias, rt->half, MADV_DONTFORK);
    madvise(view, rt->half, MADV_DONTFORK);
    rt->host_alias = (uintptr_t)alias;
    /* one bit per 2 MiB region (adsm__alias_shared_regions); without it shared regions keep 4 KiB pages */
    rt->alias_regions = (uint64_t *)calloc(rt->half / ADSM__HUGE_PAGE / 64 + 1, sizeof *rt->alias_regions);
    adsm__alias_choose_pages(rt);
    return 0;
}

/* Whether a transparent-huge-page setting as sysfs shows it ("always within_size advise [never]
 * deny force": the choice in brackets) gives huge pages to memory adsm advises (MADV_HUGEPAGE):
 * 1 for always, within_size, advise (madvise in the anonymous memory's file) and force, 0 for
 * never and deny, -1 when unreadable. */
ADSM__PRIVATE int adsm__thp_setting_gives_huge_pages(const char *setting) {
    static const struct {
        const char *word;
        int huge;
    } choices[] = {{"always", 1}, {"within_size", 1}, {"advise", 1}, {"madvise", 1}, {"force", 1},
                   {"never", 0},  {"deny", 0}};
    const char *open = setting ? strchr(setting, '[') : NULL, *close = open ? strchr(open, ']') : NULL;
    if (!close) return -1;
    size_t len = (size_t)(close - open - 1);
    for (size_t i = 0; i < sizeof choices / sizeof *choices; i++)
        if (strlen(choices[i].word) == len && !strncmp(open + 1, choices[i].word, len)) return choices[i].huge;
    return -1;
}

/* Normal context: whether shared memory (the host alias's) gets huge pages on this system; as
 * above. */
ADSM__PRIVATE int adsm__shmem_gets_huge_pages(void) {
    char text[128] = {0};
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "re");
    if (!f) return -1;
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = 0;
    return adsm__thp_setting_gives_huge_pages(text);
}

/* Any context: where the backends' copies reach the host bytes at `host`: through the alias for
 * the shared half where there is one, else at `host` itself. */
ADSM__PRIVATE uintptr_t adsm__host_dma(const adsm__runtime *rt, uintptr_t host) {
    if (!rt->host_alias || host < rt->base || host >= rt->base + rt->half) return host;
    return rt->host_alias + (host - rt->base);
}

/* Any context: whether [a, a + n) lies in the alias. */
ADSM__PRIVATE int adsm__in_host_alias(const adsm__runtime *rt, uintptr_t a, size_t n) {
    return rt->host_alias && a >= rt->host_alias && a + n <= rt->host_alias + rt->half;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels refuse it (EINVAL) and lose nothing */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* the same */
#endif

/* ---- 2 MiB pages that objects share ------------------------------------------------------------
 * Objects under a block are packed at page granularity, and a large one's head or tail may lie in
 * a 2 MiB page with other objects: a 2 MiB region of the alias it covers only in part. Such a
 * region is collapsed too (the first time an object covering at least ADSM__SHARED_REGION_MIN of
 * it is made), so a 1 MiB object gets a 2 MiB page's cost (the kernel zeroing 2 MiB, shared with
 * its neighbours) instead of 256 shmem page allocations: on the build machine 0.16 ms against
 * 0.6-0.75 per 1 MiB object, and on the GPU machine 4 KiB shmem page-locked at 0.5 ms per MiB
 * against 0.2 for huge pages, DMA at 29-32 GB/s against 46-48 (docs/design.md section 1). Below
 * half a region an object alone would pay more for the 2 MiB than for its own pages, so smaller
 * ones keep 4 KiB pages unless a larger neighbour collapsed the region first. The program's view
 * keeps mapping such a region 4 KiB at a time, as each object in it changes its own protection (a
 * change inside a 2 MiB page the view mapped whole would drop that mapping for every neighbour):
 * its first mapping there comes while the neighbours' protections differ, so the kernel never
 * maps it whole (cuda_double/objects_sharing_a_2_mib_page_have_it_collapsed_once checks it). One
 * bit per region says it was claimed (collapsed, or tried), so that its neighbours do not try
 * again (a failed collapse of a region whose neighbours are pinned costs an allocation and copy of
 * 2 MiB each time); a free gives the bit back, since the kernel may then split the page.
 * ADSM_CUDA_COLLAPSE_SHARED=0 leaves shared regions 4 KiB pages (to measure them). Normal context,
 * any thread that makes objects (the preparers too): atomic. */
#define ADSM__SHARED_REGION_MIN (ADSM__HUGE_PAGE / 2)

/* The first 2 MiB region of the alias range [at, at + n) and the last, where either is covered
 * only in part (and lies whole in the alias, which starts on a 2 MiB boundary); returns how many
 * (0-2). */
ADSM__PRIVATE int adsm__alias_partial_regions(const adsm__runtime *rt, uintptr_t at, size_t n, uintptr_t regions[2]) {
    uintptr_t head = ADSM__ALIGN_DOWN(at, ADSM__HUGE_PAGE), tail = ADSM__ALIGN_DOWN(at + n - 1, ADSM__HUGE_PAGE);
    int k = 0;
    if (at != head || at + n < head + ADSM__HUGE_PAGE) regions[k++] = head;
    if (tail != head && at + n != tail + ADSM__HUGE_PAGE) regions[k++] = tail;
    if (k && regions[k - 1] + ADSM__HUGE_PAGE > rt->host_alias + rt->half) k--;
    return k;
}

ADSM__PRIVATE uint64_t *adsm__alias_region_word(const adsm__runtime *rt, uintptr_t region, uint64_t *bit) {
    size_t i = (region - rt->host_alias) / ADSM__HUGE_PAGE;
    *bit = (uint64_t)1 << (i % 64);
    return &rt->alias_regions[i / 64];
}

/* Claims the region for its one collapse: 1 for the caller who got it. */
ADSM__PRIVATE int adsm__alias_region_claim(const adsm__runtime *rt, uintptr_t region) {
    uint64_t bit, *word = adsm__alias_region_word(rt, region, &bit);
    return !(__atomic_fetch_or(word, bit, __ATOMIC_ACQ_REL) & bit);
}

/* The partial regions of an aliased object [host, host + n) (alias at `at`), as it is made. */
ADSM__PRIVATE void adsm__alias_shared_regions(adsm__runtime *rt, uintptr_t at, size_t n) {
    if (!rt->alias_regions || rt->alias_pages != ADSM__ALIAS_HUGE_BY_COLLAPSE || !rt->cfg.cuda_collapse_shared) return;
    uintptr_t regions[2];
    int k = adsm__alias_partial_regions(rt, at, n, regions);
    for (int i = 0; i < k; i++) {
        uintptr_t r = regions[i], part = ADSM__MIN(r + ADSM__HUGE_PAGE, at + n) - ADSM__MAX(r, at);
        if (part >= ADSM__SHARED_REGION_MIN && adsm__alias_region_claim(rt, r) && adsm__alias_collapse(r, ADSM__HUGE_PAGE) == 0)
            ADSM__ADD(&rt->shared_regions_collapsed, 1);
    }
}

/* A free, runtime lock held, the object's range not yet back in the arena: the regions it shared
 * in part may be claimed again (the kernel may split their pages now), and one that no other
 * object holds any more is punched out whole. Punching only the object's part
 * would leave the rest of the 2 MiB page resident (the zeros the collapse made for free space, or
 * a neighbour's part, zeroed but kept while the neighbour's pinned pages held the page whole): up
 * to 2 MiB of host memory per freed page, split into 4 KiB pages once nothing pins it, for the
 * next collapse there to copy. Under the lock, so that no object can be made there meanwhile. */
ADSM__PRIVATE void adsm__alias_release_regions(const adsm__runtime *rt, uintptr_t host, size_t n) {
    uintptr_t at = adsm__host_dma(rt, host);
    if (at == host || !rt->alias_regions) return;
    uintptr_t regions[2];
    int k = adsm__alias_partial_regions(rt, at, n, regions);
    for (int i = 0; i < k; i++) {
        uint64_t bit, *word = adsm__alias_region_word(rt, regions[i], &bit);
        __atomic_fetch_and(word, ~bit, __ATOMIC_ACQ_REL);
        uintptr_t view = host - at + regions[i];
        if (adsm__arena_is_free(&rt->va_shared, view, host) &&
            adsm__arena_is_free(&rt->va_shared, host + n, view + ADSM__HUGE_PAGE))
            madvise((void *)regions[i], ADSM__HUGE_PAGE, MADV_REMOVE);
    }
}

/* Normal context, a new object before it is page-locked: its alias range in 2 MiB pages where
 * adsm collapses them, split over ADSM_PREPARE_THREADS threads in runs of whole 2 MiB pages
 * (prepare.h; the kernel zeroes each on the thread that collapses it), and the 2 MiB regions it
 * shares with other objects as above. A refusal after the probe succeeded (out of huge pages:
 * ENOMEM, EBUSY) leaves this object 4 KiB pages; it is said once, at info. */
ADSM__PRIVATE void adsm__host_alias_huge_pages(adsm__runtime *rt, uintptr_t host, size_t n) {
    uintptr_t at = adsm__host_dma(rt, host);
    if (at == host) return;
    adsm__alias_shared_regions(rt, at, n);
    if (rt->alias_pages != ADSM__ALIAS_HUGE_BY_COLLAPSE) return;
    uintptr_t lo = ADSM__ALIGN_UP(at, ADSM__HUGE_PAGE), hi = ADSM__ALIGN_DOWN(at + n, ADSM__HUGE_PAGE);
    if (hi <= lo) return;
    int refusal = 0, none = 0;
    unsigned helpers = adsm__prepare_split(rt->cfg.prepare_threads, lo, hi - lo, adsm__alias_collapse, &refusal);
    ADSM__ADD(&rt->prepare_helpers, helpers);
    /* objects are made by several threads at once: the first refusal is the one said */
    if (!refusal || !__atomic_compare_exchange_n(&rt->alias_refusal, &none, refusal, 0, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED))
        return;
    adsm__log(ADSM_LOG_INFO, "host alias: the kernel would not collapse a new object's %zu bytes into 2 MiB pages "
              "(MADV_COLLAPSE: %s): it has 4 KiB pages, as may later ones (said once)", n, strerror(refusal));
}

/* Normal context, a new host range adsm will have the driver page-lock (an object's own pages, an
 * adsm_host_alloc buffer): where ADSM_PREPARE_THREADS gives more than one thread, its pages are
 * allocated and zeroed now on them (prepare.h), not by the driver's page-locking on one. A
 * refusal leaves them to the page-locking. */
ADSM__PRIVATE void adsm__host_pages_populate(adsm__runtime *rt, uintptr_t at, size_t n) {
    if (rt->cfg.prepare_threads <= 1 || n < 2 * ADSM__PREPARE_MIN_RUN) return;
    int refusal = 0;
    ADSM__ADD(&rt->prepare_helpers, adsm__prepare_split(rt->cfg.prepare_threads, at, n, adsm__populate_anonymous,
                                                        &refusal));
}

/* Normal context, a new object before it is published: maps the program's view of an aliased
 * range onto the pages the alias already holds (page-locking allocated them), in one call.
 * Without it the program's first write to each 4 KiB page of shmem is a page fault of its own:
 * about 0.5 ms per MiB on the first GPU machine measured, against 0.16 ms per MiB populated in
 * bulk, and the view's protection changes keep the mappings, so later writes do not fault
 * again (docs/design.md section 1, "Where objects' host pages live on cuda"). Anonymous pages
 * (no alias) get huge pages instead and need nothing. A refusal only leaves the faults. */
ADSM__PRIVATE void adsm__host_alias_map_ahead(const adsm__runtime *rt, uintptr_t host, size_t n) {
    if (adsm__host_dma(rt, host) != host) madvise((void *)host, n, MADV_POPULATE_READ);
}

/* Normal context (a free): gives back the host pages of [host, host + n), so the next object
 * there starts zero-filled. Anonymous memory: MADV_DONTNEED. The alias's file keeps its pages
 * through that, so a hole is punched there instead (MADV_REMOVE, through the writable alias; it
 * takes the pages out of the program's view too), else they are zeroed by hand. */
ADSM__PRIVATE void adsm__host_pages_release(const adsm__runtime *rt, uintptr_t host, size_t n) {
    uintptr_t at = adsm__host_dma(rt, host);
    if (at == host) {
        madvise((void *)host, n, MADV_DONTNEED);
        return;
    }
    if (madvise((void *)at, n, MADV_REMOVE) != 0) memset((void *)at, 0, n);
}

/* Shutdown: the range was handed on (the cuda backend gave it back to the driver, which may
 * have freed it already): adsm forgets it and must not unmap it. */
ADSM__PRIVATE void adsm__disown_reservation(adsm__runtime *rt) { rt->base = 0; }

ADSM__PRIVATE void adsm__release_reservation(adsm__runtime *rt) {
    adsm__arena_destroy(&rt->va_shared);
    adsm__arena_destroy(&rt->va_safe);
    if (rt->host_alias) munmap((void *)rt->host_alias, rt->half); /* also where the range was handed on */
    rt->host_alias = 0;
    free(rt->alias_regions);
    rt->alias_regions = NULL;
    if (rt->base) munmap((void *)rt->base, 2 * rt->half);
    rt->base = 0;
}

/* Device addresses as the program sees them (adsm_safe, adsm_dev_alloc, kernel arguments) and as
 * adsm keeps them; they differ only on cuda when translating. */
ADSM__PRIVATE uintptr_t adsm__dev_out(const adsm__runtime *rt, uintptr_t dev) {
    return dev + (uintptr_t)rt->dev_delta;
}
ADSM__PRIVATE uintptr_t adsm__dev_in(const adsm__runtime *rt, uintptr_t dev) {
    return dev - (uintptr_t)rt->dev_delta;
}

#endif /* ADSM__RESERVATION_INCLUDED */
