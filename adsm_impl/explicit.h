/* adsm_impl/explicit.h -- the explicit path, for baselines and programs that mix styles:
 * device-only buffers (adsm_dev_alloc, adsm_dev_alloc_on), copies between them and host memory
 * (adsm_copy_to_device, adsm_copy_from_device), and host memory for those copies
 * (adsm_host_alloc: huge pages, page-locked where the backend can, as careful CUDA code uses).
 *
 * Normal thread context. A buffer lives on one device for good and counts in its bytes (with
 * several devices it takes its room by evicting shared objects, capacity.h); copies are ordered
 * after every launch issued so far, like copies on the kernel stream. */
#ifndef ADSM__EXPLICIT_INCLUDED
#define ADSM__EXPLICIT_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "arena.h"
#include "object.h"
#include "copy.h"
#include "runtime.h"
#include "reservation.h"
#include "backend.h"
#include "directory.h"
#include "capacity.h"
#include "io.h"
#include "object_life.h"
#include "lifecycle.h"

/* Room for a device buffer on device dev: with several devices, evicting shared objects there if
 * need be (capacity.h); the buffer then counts in the device's bytes. Lock and launch_mutex held. */
ADSM__PRIVATE adsm_result adsm__buffer_room(adsm__runtime *rt, unsigned dev, size_t size, size_t span) {
    if (rt->ndev == 1) return adsm__device_room(rt, size, span, "adsm_dev_alloc");
    char what[80];
    snprintf(what, sizeof what, "adsm_dev_alloc_on(%u, %zu)", dev, size);
    int again = 1;
    adsm_result r = ADSM_OK;
    while (r == ADSM_OK && again) r = adsm__make_room(rt, dev, span, NULL, 0, what, &again);
    return r;
}

/* A device buffer's bytes, counted on its device (or given back: sign -1). Lock held. */
ADSM__PRIVATE void adsm__buffer_count(adsm__runtime *rt, const adsm__object *o, int sign) {
    size_t *bytes = rt->ndev == 1 ? &rt->device_used : &rt->dev_bytes[o->home_dev];
    if (sign > 0) *bytes += o->span;
    else *bytes -= o->span;
}

ADSM__PRIVATE void *adsm__dev_alloc_unguarded(int dev, size_t size) {
    adsm__runtime *rt = &adsm__rt;
    if (adsm__ensure() != ADSM_OK) return NULL;
    if (dev < 0 || (unsigned)dev >= rt->ndev) {
        adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_dev_alloc_on(%d, %zu): adsm drives %u device%s (0..%u)", dev, size,
                   rt->ndev, rt->ndev == 1 ? "" : "s", rt->ndev - 1);
        return NULL;
    }
    if (adsm__lost_devices(rt) & adsm__dev_bit((unsigned)dev)) {
        adsm__fail(ADSM_ERROR_DEVICE_LOST, "adsm_dev_alloc_on(%d, %zu): device %d is lost", dev, size, dev);
        return NULL;
    }
    if (size == 0 || size > rt->half) {
        adsm__fail(size && size <= SIZE_MAX / 2 ? ADSM_ERROR_DEVICE_OUT_OF_MEMORY : ADSM_ERROR_INVALID_VALUE,
                   "adsm_dev_alloc(%zu): %s", size, size ? "larger than the device address range" : "size 0");
        return NULL;
    }
    size_t span = ADSM__ALIGN_UP(size, rt->page);
    adsm__object *o = (adsm__object *)calloc(1, sizeof *o);
    if (!o) {
        adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "adsm_dev_alloc: out of host memory");
        return NULL;
    }
    o->size = size;
    o->span = span;
    o->device_only = 1;
    o->home_dev = (unsigned)dev; /* where it lives, for good */
    pthread_mutex_lock(&rt->launch_mutex); /* evictions (several devices) and launches take turns */
    adsm__lock(&rt->lock);
    adsm_result r = adsm__buffer_room(rt, (unsigned)dev, size, span);
    if (r == ADSM_OK && !(o->dev = adsm__arena_alloc(&rt->va_shared, span, adsm__object_align(rt, span))))
        r = adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "adsm_dev_alloc(%zu): out of device address space", size);
    else if (r == ADSM_OK && (r = rt->be->dev_alloc(rt->dev_ctx[dev], o->dev, span)) != ADSM_OK)
        adsm__arena_free(&rt->va_shared, o->dev, span);
    if (r == ADSM_OK) {
        o->dev_node.start = o->dev;
        o->dev_node.end = o->dev + span;
        adsm__tree_insert(&rt->safe_dev, &o->dev_node);
        adsm__buffer_count(rt, o, 1);
    }
    adsm__unlock(&rt->lock);
    pthread_mutex_unlock(&rt->launch_mutex);
    if (r != ADSM_OK) {
        free(o);
        return NULL;
    }
    return (void *)adsm__dev_out(rt, o->dev);
}

/* The device-only object holding [dev, dev + n), or NULL with the error set. Lock held. */
ADSM__PRIVATE adsm__object *adsm__device_buffer(adsm__runtime *rt, const void *dev, size_t n, const char *fn) {
    uintptr_t a = adsm__dev_in(rt, (uintptr_t)dev);
    adsm__tree_node *node = adsm__tree_find(&rt->safe_dev, a);
    adsm__object *o = node ? ADSM__CONTAINER_OF(node, adsm__object, dev_node) : NULL;
    if (!o || !o->device_only) {
        adsm__fail(ADSM_ERROR_NOT_SHARED, "%s(%p): not a buffer from adsm_dev_alloc", fn, dev);
        return NULL;
    }
    if (a - o->dev > o->size || n > o->size - (a - o->dev)) { /* past its end: in the page padding */
        adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: %zu bytes at %p run past the end of the %zu-byte buffer", fn, n, dev,
                   o->size);
        return NULL;
    }
    return o;
}

ADSM__PRIVATE adsm_result adsm__dev_free_unguarded(void *dev) {
    adsm__runtime *rt = &adsm__rt;
    if (!dev) return ADSM_OK;
    if (!adsm__ready()) return adsm__fail(ADSM_ERROR_NOT_SHARED, "adsm_dev_free(%p): adsm is not initialised", dev);
    /* kernels in flight may use it (adsm__await_users lets the lock go: look it up again) */
    uint64_t before = ADSM__LOAD(&rt->launch_seq);
    adsm__lock(&rt->lock);
    adsm__object *o;
    adsm_result r;
    do {
        o = adsm__device_buffer(rt, dev, 0, "adsm_dev_free");
        r = adsm__tls_result;
        if (o && adsm__dev_in(rt, (uintptr_t)dev) != o->dev) {
            r = adsm__fail(ADSM_ERROR_NOT_OBJECT_START, "adsm_dev_free(%p): not the start of its buffer", dev);
            o = NULL;
        }
    } while (o && (adsm__held_elsewhere(o) ? adsm__await_copies(rt) : adsm__await_users(rt, o, before)) != 0);
    if (o) {
        adsm__tree_remove(&rt->safe_dev, &o->dev_node);
        adsm__unlock(&rt->lock); /* cuda: unmapping waits for the device; the range stays taken */
        rt->be->dev_free(rt->dev_ctx[o->home_dev], o->dev, o->span);
        adsm__lock(&rt->lock);
        adsm__buffer_count(rt, o, -1);
        adsm__arena_free(&rt->va_shared, o->dev, o->span);
        free(o);
        r = ADSM_OK;
    }
    adsm__unlock(&rt->lock);
    return r;
}

ADSM__PRIVATE adsm_result adsm__explicit_copy(void *dev, const void *host, size_t n, int to_device) {
    adsm__runtime *rt = &adsm__rt;
    const char *fn = to_device ? "adsm_copy_to_device" : "adsm_copy_from_device";
    adsm_result r;
    if (n == 0) return ADSM_OK;
    if (!dev || !host) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: NULL pointer", fn);
    if ((r = adsm__ensure()) != ADSM_OK) return r;
    if (adsm__touches_shared(host, n))
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: the host buffer is shared memory (use adsm_memcpy)", fn);
    unsigned host_dev; /* the CPU cannot touch one: the backend's copy would fault under the runtime lock */
    if (adsm__device_buffer_kind(rt, (uintptr_t)host, n, &host_dev) != ADSM__NOT_DEVICE_BUFFER)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: the host buffer %p is a device buffer (use adsm_memcpy)", fn,
                          host);
    /* ordered after every launch issued so far, like a copy on the kernel stream */
    if (adsm__wait_all(rt) != 0) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "%s: the device is gone", fn);
    adsm__lock(&rt->lock);
    adsm__object *o = adsm__device_buffer(rt, dev, n, fn);
    r = o ? ADSM_OK : adsm__tls_result;
    void *ctx = o ? rt->dev_ctx[o->home_dev] : NULL;
    if (o && to_device) {
        if (rt->be->to_device(ctx, adsm__dev_in(rt, (uintptr_t)dev), (uintptr_t)host, n, 0, ADSM__EVERY_LAUNCH) != 0)
            r = adsm__fail(ADSM_ERROR_SYSTEM, "%s failed", fn);
        else adsm__count_to_device(rt, o->home_dev, 0, n);
    } else if (o) {
        if (rt->be->from_device(ctx, (uintptr_t)host, adsm__dev_in(rt, (uintptr_t)dev), n) != 0)
            r = adsm__fail(ADSM_ERROR_SYSTEM, "%s failed", fn);
        else adsm__count_from_device(rt, o->home_dev, n);
    }
    adsm__unlock(&rt->lock);
    return r;
}

ADSM__PRIVATE adsm_result adsm__copy_to_device_unguarded(void *dev, const void *host, size_t n) {
    return adsm__explicit_copy(dev, host, n, 1);
}

ADSM__PRIVATE adsm_result adsm__copy_from_device_unguarded(void *host, const void *dev, size_t n) {
    return adsm__explicit_copy((void *)dev, host, n, 0);
}

/* ---- host memory for explicit copies -------------------------------------------------------- */
/* The memory kind of adsm's own objects: page granular, and from a huge page up 2 MiB aligned on
 * transparent huge pages. A small buffer stays small: rounding every buffer up to a huge page
 * made a 64-byte buffer cost 2 MiB of memory once written (512 of them: 1 GiB). */
ADSM__PRIVATE void *adsm__host_alloc_unguarded(size_t size) {
    adsm__runtime *rt = &adsm__rt;
    size_t huge = ADSM__HUGE_PAGE;
    if (adsm__ensure() != ADSM_OK) return NULL;
    if (size == 0 || size > SIZE_MAX - 2 * huge) {
        adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_host_alloc(%zu): %s", size, size ? "too large" : "size 0");
        return NULL;
    }
    size_t span = ADSM__ALIGN_UP(size, rt->page), align = size >= huge ? huge : rt->page;
    adsm__host_buffer *b = (adsm__host_buffer *)calloc(1, sizeof *b);
    void *p = b ? adsm__map_aligned(span, align, PROT_READ | PROT_WRITE, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(b);
        adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "adsm_host_alloc(%zu): %s", size, strerror(errno));
        return NULL;
    }
    uintptr_t at = (uintptr_t)p;
    if (size >= huge) madvise(p, span, MADV_HUGEPAGE);
    b->node.start = at;
    b->node.end = at + span;
    if (rt->be->host_lock) { /* the same care as an object's pages (object_life.h) */
        adsm__host_pages_populate(rt, at, span);
        b->locked = rt->be->host_lock(rt->be_ctx, at, span);
    }
    adsm__lock(&rt->lock);
    adsm__tree_insert(&rt->host_buffers, &b->node);
    adsm__unlock(&rt->lock);
    return (void *)at;
}

ADSM__PRIVATE adsm_result adsm__host_free_unguarded(void *host) {
    adsm__runtime *rt = &adsm__rt;
    if (!host) return ADSM_OK;
    if (!adsm__ready())
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_host_free(%p): adsm is not initialised", host);
    adsm__lock(&rt->lock);
    adsm__tree_node *n = adsm__tree_find(&rt->host_buffers, (uintptr_t)host);
    if (n && n->start == (uintptr_t)host) adsm__tree_remove(&rt->host_buffers, n);
    else n = NULL;
    adsm__unlock(&rt->lock);
    if (!n) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_host_free(%p): not from adsm_host_alloc", host);
    adsm__host_buffer_release(rt, ADSM__CONTAINER_OF(n, adsm__host_buffer, node));
    return ADSM_OK;
}

#endif /* ADSM__EXPLICIT_INCLUDED */
