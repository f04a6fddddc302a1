/* adsm_impl/reservation.h -- adsm's one address reservation: made at initialisation, moved onto a
 * device range when a backend asks (cuda, GMAC's order), released at shutdown.
 *
 * One PROT_NONE, MAP_NORESERVE range split in two halves (docs/design.md section 1): shared
 * objects and every device address in the first, the host side of "safe" objects in the second;
 * the arenas hand out addresses in each. Normal thread context only, during adsm_init and
 * adsm_shutdown (initialisation mutex held): it maps, unmaps and allocates. Backends may call
 * adsm__move_reservation from their init; nothing here calls a backend. */
#ifndef ADSM__RESERVATION_INCLUDED
#define ADSM__RESERVATION_INCLUDED

/* Address space adsm maps besides its reservation's halves: fetch slots, its threads' stacks,
 * tables. The emu backend also maps a second view of device memory, one half long. */
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

/* Shutdown: the range was handed on (the cuda backend gave it back to the driver, which may
 * have freed it already): adsm forgets it and must not unmap it. */
ADSM__PRIVATE void adsm__disown_reservation(adsm__runtime *rt) { rt->base = 0; }

ADSM__PRIVATE void adsm__release_reservation(adsm__runtime *rt) {
    adsm__arena_destroy(&rt->va_shared);
    adsm__arena_destroy(&rt->va_safe);
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
