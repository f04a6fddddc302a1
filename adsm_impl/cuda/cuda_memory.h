/* adsm_impl/cuda/cuda_memory.h -- where a GPU's memory sits and how it is backed: the device address
 * range (at the host's addresses where the driver allows, else at a constant distance), device
 * memory mapped in runs of granules as objects need it, and the table of host ranges page-locked
 * with the driver, which decides whether a copy is direct DMA or staged.
 *
 * Contexts: choosing the address range runs in normal context at initialisation; mapping and
 * unmapping granules only on the engine thread (cuda_engine.h); the page-locked table is looked up
 * in any context, the fault handler's included, under its own lock. */
#ifndef ADSM__CUDA_MEMORY_INCLUDED
#define ADSM__CUDA_MEMORY_INCLUDED

#include "../common.h"
#include "../os.h"
#include "../blocktree.h"
#include "../config.h"
#include "../runtime.h"
#include "../reservation.h"
#include "cuda_driver.h"
#include "cuda_device.h"

/* ---- address space ------------------------------------------------------------------------- */
/* adsm keeps device addresses in its shared half; the driver's are offset by delta (0 when the
 * device range sits at the host addresses). */
ADSM__PRIVATE adsm__cu_deviceptr adsm__cuda_dptr(const adsm__cuda *c, uintptr_t dev) {
    return (adsm__cu_deviceptr)dev + (adsm__cu_deviceptr)c->delta;
}

ADSM__PRIVATE adsm__cu_mem_alloc_prop adsm__cuda_prop(const adsm__cuda *c) {
    adsm__cu_mem_alloc_prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = ADSM__CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requested_handle_types = ADSM__CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type = ADSM__CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = c->device;
    return prop;
}

ADSM__PRIVATE adsm__cu_result adsm__cuda_map_run(adsm__cuda *c, size_t g, size_t count, adsm__cu_mem_handle *handle);
ADSM__PRIVATE void adsm__cuda_unmap_run(adsm__cuda *c, size_t g, size_t count, adsm__cu_mem_handle handle);

/* Checks that device memory really works at the start of the range just placed: map a granule,
 * fill it on the device, read it back. Guards the moved-reservation case, where adsm replaced
 * the driver's host placeholder. */
ADSM__PRIVATE int adsm__cuda_probe(adsm__cuda *c) {
    unsigned char back[256];
    adsm__cu_mem_handle h = 0;
    int ok = 0;
    if (adsm__cuda_map_run(c, 0, 1, &h) == 0) {
        adsm__cu_deviceptr at = adsm__cuda_dptr(c, c->base);
        memset(back, 0, sizeof back);
        ok = c->cu.cuMemsetD8Async(at, 0x5a, sizeof back, NULL) == 0 &&
             c->cu.cuMemcpyDtoHAsync(back, at, sizeof back, NULL) == 0 && c->cu.cuCtxSynchronize() == 0 &&
             back[0] == 0x5a && back[sizeof back - 1] == 0x5a;
        adsm__cuda_unmap_run(c, 0, 1, h);
    }
    return ok;
}

/* Gives the driver back a device range adsm's host reservation was moved onto: a plain
 * placeholder mapped over adsm's own mapping (MAP_FIXED over what adsm holds, never after a
 * munmap), then cuMemAddressFree. After that the range is not adsm's: never unmap it. */
ADSM__PRIVATE void adsm__cuda_give_back(adsm__cuda *c, adsm__cu_deviceptr va, size_t size) {
    mmap((void *)(uintptr_t)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    c->cu.cuMemAddressFree(va, size);
}

/* Puts the device range for adsm's shared half [base, base + half): at the same address if the
 * driver takes the hint; else the host reservation moves onto a device range the driver chose
 * (GMAC's order); else any device range, with translation. */
ADSM__PRIVATE adsm_result adsm__cuda_address_space(adsm__cuda *c, adsm__runtime *rt) {
    adsm__cu_result r;
    adsm__cu_deviceptr got = 0;
    size_t align = ADSM__MAX(c->granule, rt->cfg.block_size);
    /* one virtual address names one mapping in the whole process: only the first device can have
     * the host's addresses, every other one takes a range of its own */
    if (rt->cfg.cuda_same_address && c->index == 0) {
        r = c->cu.cuMemAddressReserve(&got, c->half, align, (adsm__cu_deviceptr)c->base, 0);
        if (r == 0 && got == c->base && adsm__cuda_probe(c)) {
            c->va = got;
            c->va_size = c->half;
            return ADSM_OK;
        }
        if (r == 0) c->cu.cuMemAddressFree(got, c->half);
        /* A range for the whole reservation (both halves), then the host side moves onto it. */
        r = c->cu.cuMemAddressReserve(&got, 2 * c->half, align, 0, 0);
        if (r == 0 && adsm__move_reservation(rt, (uintptr_t)got) == ADSM_OK) {
            c->base = rt->base;
            c->va = got;
            c->va_size = 2 * c->half;
            c->va_moved_host = 1;
            if (adsm__cuda_probe(c)) {
                adsm__log(ADSM_LOG_INFO, "cuda: host reservation moved onto the device range at %p", (void *)c->base);
                return ADSM_OK;
            }
            adsm__log(ADSM_LOG_WARN, "cuda: device memory does not work under a moved host reservation");
            adsm_result moved = adsm__replace_reservation(rt);
            if (moved != ADSM_OK) return moved; /* still on got: shutdown gives it back */
            c->base = rt->base;
            c->va = 0;
            c->va_moved_host = 0;
            adsm__cuda_give_back(c, got, 2 * c->half);
        } else if (r == 0) {
            c->cu.cuMemAddressFree(got, 2 * c->half);
        }
    }
    if ((r = c->cu.cuMemAddressReserve(&got, c->half, align, 0, 0)) != 0) {
        size_t limit, room = adsm__address_space_room(&limit);
        if (r != ADSM__CUDA_ERROR_OUT_OF_MEMORY || room == SIZE_MAX) return adsm__cu_fail(c, r, "cuMemAddressReserve");
        /* device ranges are reserved in the process's address space too (unified addressing) */
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: reserving %zu MiB of device addresses failed "
                          "(error %d) under the address-space limit (ulimit -v, %zu MiB, %zu MiB left): the driver "
                          "reserves device ranges in the process's address space; raise the limit (ulimit -v "
                          "unlimited)", c->half >> 20, (int)r, limit >> 20, room >> 20);
    }
    c->va = got;
    c->va_size = c->half;
    c->delta = (intptr_t)(got - (adsm__cu_deviceptr)c->base);
    adsm__log(rt->cfg.cuda_same_address && c->index == 0 ? ADSM_LOG_WARN : ADSM_LOG_INFO,
              "cuda: device %u's addresses differ from host addresses by %+lld bytes; pointer arguments are "
              "translated at each launch, and its kernels cannot follow pointers stored in shared memory",
              c->index, (long long)c->delta);
    return ADSM_OK;
}

/* ---- device memory in runs of granules ------------------------------------------------------- */
/* Who may use this device's memory: the device itself, and the other devices adsm drives that
 * have peer access to it (they read it directly in device-to-device copies). */
ADSM__PRIVATE size_t adsm__cuda_access(const adsm__cuda *c, adsm__cu_mem_access_desc *access) {
    size_t n = 0;
    memset(access, 0, (1 + c->npeers) * sizeof *access);
    access[n].location.type = ADSM__CU_MEM_LOCATION_TYPE_DEVICE;
    access[n].location.id = c->device;
    access[n++].flags = ADSM__CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (unsigned p = 0; p < c->npeers; p++) {
        access[n].location.type = ADSM__CU_MEM_LOCATION_TYPE_DEVICE;
        access[n].location.id = c->peers[p];
        access[n++].flags = ADSM__CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    return n;
}

/* Backs `count` granules from granule g with one allocation: one cuMemCreate, cuMemMap and
 * cuMemSetAccess however large the run. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_map_run(adsm__cuda *c, size_t g, size_t count, adsm__cu_mem_handle *handle) {
    adsm__cu_mem_alloc_prop prop = adsm__cuda_prop(c);
    adsm__cu_deviceptr at = adsm__cuda_dptr(c, c->base + g * c->granule);
    size_t size = count * c->granule;
    adsm__cu_mem_handle h = 0;
    adsm__cu_result r = c->cu.cuMemCreate(&h, size, &prop, 0);
    if (r != 0) return r;
    if ((r = c->cu.cuMemMap(at, size, 0, h, 0)) != 0) {
        c->cu.cuMemRelease(h);
        return r;
    }
    adsm__cu_mem_access_desc access[1 + ADSM__MAX_DEVICES];
    size_t naccess = adsm__cuda_access(c, access);
    if ((r = c->cu.cuMemSetAccess(at, size, access, naccess)) != 0) {
        c->cu.cuMemUnmap(at, size);
        c->cu.cuMemRelease(h);
        return r;
    }
    *handle = h;
    return 0;
}

/* The driver unmaps only whole mappings: a run goes as it came. */
ADSM__PRIVATE void adsm__cuda_unmap_run(adsm__cuda *c, size_t g, size_t count, adsm__cu_mem_handle handle) {
    c->cu.cuMemUnmap(adsm__cuda_dptr(c, c->base + g * c->granule), count * c->granule);
    c->cu.cuMemRelease(handle);
}

/* Whether granule g lies wholly inside [dev, dev + n): then no other object can use it. */
ADSM__PRIVATE int adsm__cuda_owns_granule(const adsm__cuda *c, size_t g, uintptr_t dev, size_t n) {
    uintptr_t at = c->base + g * c->granule;
    return at >= dev && at + c->granule <= dev + n;
}

/* The length of the run to map from unmapped granule g (at most to `last`): granules the object
 * [dev, dev + n) owns wholly go in one run; one it shares with neighbours (adsm packs small
 * objects into pages) is a run of its own, so it can stay mapped while a neighbour lives. */
ADSM__PRIVATE size_t adsm__cuda_run_length(const adsm__cuda *c, size_t g, size_t last, uintptr_t dev, size_t n) {
    size_t k = 1;
    if (!adsm__cuda_owns_granule(c, g, dev, n)) return 1;
    while (g + k <= last && c->granule_refs[g + k] == 0 && adsm__cuda_owns_granule(c, g + k, dev, n)) k++;
    return k;
}

ADSM__PRIVATE void adsm__cuda_unmap(adsm__cuda *c, uintptr_t dev, size_t n);

/* Device memory mapped ahead: at start (normal context, before any object exists), the first
 * granules of the device range, where the arena puts the first objects and adsm_dev_alloc
 * buffers, are mapped as one run that stays until shutdown. A GPU program's objects are mostly
 * made once, inside the part that is timed, and each cuMemCreate, cuMemMap and cuMemSetAccess
 * there cost 0.1-0.25 ms per object on the H200 (the fourth GPU run's "device memory" spans:
 * 0.5-1 ms of the short applications' 3-12 ms), which CUDA's managed memory does not pay at
 * allocation. An object there only has its bytes zeroed (as every new object has). Default:
 * 256 MiB, at most 1/64 of the device's free memory; ADSM_CUDA_MAP_AHEAD=0 maps every object's
 * granules at its allocation, as before; unset, 0 under um/um-prefetch/hmm (lifecycle.h: their
 * objects are managed or host memory). One device only: with several, an object's memory is
 * mapped on the devices that hold it (directory.h). The memory is taken off the capacity adsm
 * fills with objects (capacity.h), which then counts objects there twice: a margin of at most the
 * run. */
#define ADSM__CUDA_MAP_AHEAD_DEFAULT ((size_t)256 << 20)

ADSM__PRIVATE adsm_result adsm__cuda_map_ahead(adsm__cuda *c, size_t want) {
    if (want == ADSM__CUDA_MAP_AHEAD_AUTO) want = ADSM__MIN(ADSM__CUDA_MAP_AHEAD_DEFAULT, c->capacity / 64);
    else if (want > c->capacity / 2)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_CUDA_MAP_AHEAD: %zu bytes is more than half of device %u's "
                          "free memory (%zu MiB)", want, c->index, c->capacity >> 20);
    size_t count = ADSM__MIN(want / c->granule, c->half / c->granule);
    if (count == 0) return ADSM_OK;
    adsm__cu_result r = adsm__cuda_map_run(c, 0, count, &c->granule_handles[0]);
    if (r != 0) { /* only slower: each object maps its own */
        adsm__log(ADSM_LOG_INFO, "cuda: device %u: mapping %zu MiB ahead failed (error %d); objects map their own",
                  c->index, (count * c->granule) >> 20, (int)r);
        return ADSM_OK;
    }
    c->granule_run[0] = (uint32_t)count;
    c->mapped_ahead = count;
    c->capacity -= count * c->granule;
    return ADSM_OK;
}

/* Engine thread: backs [dev, dev + n); every granule counts the objects that use it. Granules
 * mapped ahead are backed already. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_map(adsm__cuda *c, uintptr_t dev, size_t n) {
    size_t first = (dev - c->base) / c->granule, last = (dev + n - 1 - c->base) / c->granule;
    for (size_t g = first, k; g <= last; g += k) {
        k = 1;
        if (g >= c->mapped_ahead && c->granule_refs[g] == 0) {
            k = adsm__cuda_run_length(c, g, last, dev, n);
            adsm__cu_result r = adsm__cuda_map_run(c, g, k, &c->granule_handles[g]);
            if (r != 0) {
                if (g > first) adsm__cuda_unmap(c, dev, c->base + g * c->granule - dev); /* what was done */
                return r;
            }
            c->granule_run[g] = (uint32_t)k;
        }
        for (size_t i = 0; i < k; i++) c->granule_refs[g + i]++;
    }
    return 0;
}

/* Engine thread: unmaps the run that starts at granule g once none of its granules is used; not
 * the run mapped ahead, which stays for the next objects there. */
ADSM__PRIVATE void adsm__cuda_release_run(adsm__cuda *c, size_t g) {
    if (g < c->mapped_ahead) return;
    size_t k = c->granule_run[g];
    for (size_t i = 0; i < k; i++)
        if (c->granule_refs[g + i]) return;
    if (k == 0) return;
    adsm__cuda_unmap_run(c, g, k, c->granule_handles[g]);
    c->granule_run[g] = 0;
    c->granule_handles[g] = 0;
}

/* Engine thread: [dev, dev + n) is no longer used. Runs lie inside the object that made them (they
 * are granules it owned wholly) or are single shared granules, so every run that can go starts
 * in [first, last]. */
ADSM__PRIVATE void adsm__cuda_unmap(adsm__cuda *c, uintptr_t dev, size_t n) {
    size_t first = (dev - c->base) / c->granule, last = (dev + n - 1 - c->base) / c->granule;
    for (size_t g = first; g <= last; g++)
        if (c->granule_refs[g] > 0) c->granule_refs[g]--;
    for (size_t g = first; g <= last; g++) adsm__cuda_release_run(c, g);
}

/* ---- page-locked host ranges ---------------------------------------------------------------- */
/* Signal-safe: whether [host, host + n) lies in one page-locked range. Page-locking is for the
 * process (CU_MEMHOSTREGISTER_PORTABLE: every GPU's context DMAs the pages), and the first GPU's
 * backend, which adsm__cuda_host_lock is called on, keeps the ranges: every GPU asks it, so no
 * fetch from another GPU moves a staging slot over pinned pages (DMA would miss the object). */
ADSM__PRIVATE int adsm__cuda_is_locked(adsm__cuda *gpu, uintptr_t host, size_t n) {
    adsm__cuda *c = (adsm__cuda *)gpu->rt->dev_ctx[0];
    adsm__lock(&c->locked_lock);
    adsm__tree_node *r = adsm__tree_find(&c->locked, host);
    int whole = r && host + n <= r->end;
    adsm__unlock(&c->locked_lock);
    return whole;
}

ADSM__PRIVATE int adsm__cuda_host_direct(void *ctx, uintptr_t host, size_t n) {
    return adsm__cuda_is_locked((adsm__cuda *)ctx, host, n);
}

#endif /* ADSM__CUDA_MEMORY_INCLUDED */
