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

ADSM__PRIVATE adsm_result adsm__reserve(adsm__runtime *rt) {
    size_t gib = (size_t)1 << 30;
    size_t align = ADSM__MAX(rt->cfg.block_size, (size_t)2 << 20);
    /* 64 GiB per half unless the device is larger; where less address space is allowed (ulimit -v,
     * valgrind's ~64 GiB), halve down to what the device capacity needs. */
    size_t need = ADSM__ALIGN_UP(ADSM__MAX(gib, 2 * rt->cfg.emu_memory), gib);
    rt->half = ADSM__MAX((size_t)64 * gib, need);
    void *p = adsm__map_aligned(2 * rt->half, align, PROT_NONE, MAP_NORESERVE);
    while (p == MAP_FAILED && rt->half / 2 >= need) {
        rt->half /= 2;
        p = adsm__map_aligned(2 * rt->half, align, PROT_NONE, MAP_NORESERVE);
    }
    if (p == MAP_FAILED)
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cannot reserve %zu GiB of address space: %s",
                          (2 * rt->half + align) / gib, strerror(errno));
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
