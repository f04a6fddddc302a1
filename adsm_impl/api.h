/* adsm_impl/api.h -- the public functions: initialisation, shared objects, introspection, and
 * the entry points of everything else (the work is done in lifecycle.h, object_life.h,
 * explicit.h, module.h, launch.h, memops.h, io.h and touch.h).
 *
 * Every function here runs in normal thread context and is thread safe: object and protocol
 * state changes happen under the runtime lock (the one the fault handler takes); initialisation
 * and shutdown are serialised by their own mutex. Each public call holds a use of the runtime
 * while it runs, so a shutdown waits for it (runtime.h). Errors are returned as adsm_result, with
 * the detail in the calling thread's last-error text; nothing aborts. */
#ifndef ADSM__API_INCLUDED
#define ADSM__API_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "stats.h"
#include "config.h"
#include "object.h"
#include "protection.h"
#include "runtime.h"
#include "reservation.h"
#include "protocol.h"
#include "protocol_rolling.h"
#include "capacity.h"
#include "memops.h"
#include "io.h"
#include "touch.h"
#include "object_life.h"
#include "lifecycle.h"
#include "explicit.h"
#include "module.h"
#include "launch.h"
#include "translate.h"

ADSM_API adsm_result adsm_init(const adsm_config *cfg) {
    /* before the mutex, which another thread of the parent may have held at the fork */
    if (adsm__in_forked_child()) return adsm__fail(ADSM_ERROR_UNSUPPORTED, "adsm: %s", ADSM__FORKED_TEXT);
    adsm__lifecycle_lock();
    adsm_result r = adsm__ready() ? adsm__fail(ADSM_ERROR_ALREADY_INITIALIZED,
                                                "adsm_init: already initialised (call adsm_shutdown first)")
                                  : adsm__start(cfg);
    adsm__lifecycle_unlock();
    return r;
}

ADSM_API void adsm_shutdown(void) {
    if (adsm__in_forked_child()) return; /* the parent's runtime: nothing of it to stop here */
    adsm__lifecycle_lock();
    if (adsm__ready()) adsm__stop(&adsm__rt);
    adsm__lifecycle_unlock();
}

/* ---- objects ------------------------------------------------------------------------------ */
ADSM__PRIVATE void *adsm__alloc(size_t size, int safe, const char *fn) {
    adsm__runtime *rt = &adsm__rt;
    adsm__object *o = NULL;
    if (adsm__ensure() != ADSM_OK) return NULL;
    if (size == 0) {
        adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s(0): size 0 is not an object", fn);
        return NULL;
    }
    if (size > rt->half) {
        adsm__fail(size > SIZE_MAX / 2 ? ADSM_ERROR_INVALID_VALUE : ADSM_ERROR_DEVICE_OUT_OF_MEMORY,
                   "%s(%zu): larger than the %zu bytes adsm can map", fn, size, rt->half);
        return NULL;
    }
    adsm_result r = adsm__object_create(rt, size, safe, fn, &o);
    return r == ADSM_OK ? (void *)o->host : NULL;
}

/* Making an object, a span of the trace (where its time goes: page-locking it, on cuda). */
ADSM__PRIVATE void *adsm__alloc_traced(size_t size, int safe, const char *fn) {
    uint64_t t0 = adsm__now_ns();
    void *p = adsm__alloc(size, safe, fn);
    adsm__trace(&adsm__rt.trace, ADSM__TR_ALLOC, t0, (uintptr_t)p, p ? size : 0);
    return p;
}

ADSM__PRIVATE void *adsm__alloc_unguarded(size_t size) { return adsm__alloc_traced(size, 0, "adsm_alloc"); }
ADSM__PRIVATE void *adsm__safe_alloc_unguarded(size_t size) { return adsm__alloc_traced(size, 1, "adsm_safe_alloc"); }

ADSM__PRIVATE adsm_result adsm__free_traced(void *ptr);

/* A shared object of count structs of a declared type (translate.h). */
ADSM__PRIVATE void *adsm__alloc_typed_unguarded(const adsm_type_desc *t, size_t count) {
    adsm__runtime *rt = &adsm__rt;
    if (!t) {
        adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_alloc_typed(NULL, %zu): no type (ADSM_ALLOC(T, n) names one)",
                   count);
        return NULL;
    }
    if (adsm__type_check(t, "adsm_alloc_typed") != ADSM_OK) return NULL;
    if (count == 0 || count > SIZE_MAX / t->size) {
        adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_alloc_typed('%s', %zu): %s", t->name, count,
                   count ? "more bytes than a size_t holds" : "0 structs is not an object");
        return NULL;
    }
    void *p = adsm__alloc_traced(count * t->size, 0, "adsm_alloc_typed");
    if (!p) return NULL;
    adsm__lock(&rt->lock);
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, (uintptr_t)p));
    adsm_result r = adsm__object_set_type(rt, o, t, "adsm_alloc_typed");
    adsm__unlock(&rt->lock);
    if (r == ADSM_OK) return p;
    adsm__kept_error why;
    adsm__keep_error(&why);
    adsm__free_traced(p);
    adsm__restore_error(&why);
    return NULL;
}

ADSM__PRIVATE void *adsm__safe_unguarded(const void *host_ptr) {
    adsm__runtime *rt = &adsm__rt;
    if (adsm__ensure() != ADSM_OK) return NULL;
    adsm__lock(&rt->lock);
    uintptr_t a = (uintptr_t)host_ptr, dev = 0;
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
    if (o && a < o->host + o->size) /* managed memory: one address for the CPU and the device */
        dev = o->managed ? a : adsm__dev_out(rt, o->dev + (a - o->host));
    adsm__unlock(&rt->lock);
    if (!dev) adsm__fail(ADSM_ERROR_NOT_SHARED, "adsm_safe(%p): not inside a live shared object", host_ptr);
    return (void *)dev;
}

ADSM__PRIVATE adsm_result adsm__free_unguarded(void *ptr) {
    adsm__runtime *rt = &adsm__rt;
    uintptr_t a = (uintptr_t)ptr;
    if (!ptr) return ADSM_OK;
    if (adsm__in_forked_child()) /* the parent's object: the reason, as every other call gives it */
        return adsm__fail(ADSM_ERROR_UNSUPPORTED, "adsm_free(%p): adsm: %s", ptr, ADSM__FORKED_TEXT);
    if (!adsm__ready())
        return adsm__fail(ADSM_ERROR_NOT_SHARED, "adsm_free(%p): adsm is not initialised, so this is no shared object",
                          ptr);
    /* kernels in flight may use the object (adsm__await_users; errors stay queued for adsm_sync) */
    uint64_t before = ADSM__LOAD(&rt->launch_seq);
    adsm__lock(&rt->lock);
    adsm__object *o;
    for (;;) { /* the waits below let the lock go: look it up again after each */
        o = adsm__object_of(adsm__tree_find(&rt->objects, a));
        if (o && (o->busy_units || adsm__held_elsewhere(o))) /* a fault's copy, or a launch, lets the lock go */
            adsm__await_copies(rt);
        else if (!o || a != o->host || adsm__await_users(rt, o, before) == 0) break;
    }
    adsm_result r = ADSM_OK;
    if (!o) r = adsm__fail(ADSM_ERROR_NOT_SHARED, "adsm_free(%p): not a live shared object (freed twice?)", ptr);
    else if (a != o->host)
        r = adsm__fail(ADSM_ERROR_NOT_OBJECT_START, "adsm_free(%p): inside the object at %p, not its start", ptr,
                       (void *)o->host);
    if (r == ADSM_OK) {
        rt->proto->on_free(rt, o); /* out of the dirty FIFO: no eviction of it is queued any more */
        /* copies queued earlier may still read its pages: they land before the pages go, with
         * the lock let go (a second free of it waits meanwhile) */
        adsm__settle_copies(rt, &o, 1);
        adsm__object_retire(rt, o);
    }
    adsm__unlock(&rt->lock);
    return r;
}

/* ---- stats, errors, introspection ----------------------------------------------------------- */
ADSM__PRIVATE adsm_result adsm__get_stats_unguarded(adsm_stats *out) {
    adsm__runtime *rt = &adsm__rt;
    if (!out) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_get_stats: NULL");
    memset(out, 0, sizeof *out);
    adsm__stats_read(&rt->stats, out);
    if (adsm__ready()) {
        adsm__lock(&rt->lock);
        out->objects = rt->nobjects;
        out->object_bytes = rt->object_bytes;
        out->rolling_size = rt->proto->eager ? adsm__rolling_limit(rt) : 0;
        adsm__unlock(&rt->lock);
    }
    return ADSM_OK;
}

ADSM_API adsm_result adsm_reset_stats(void) {
    adsm__stats_reset(&adsm__rt.stats);
    for (unsigned d = 0; d < ADSM__MAX_DEVICES; d++) /* atomics, one by one */
        for (size_t i = 0; i < sizeof adsm__rt.dev_stats[d] / sizeof(uint64_t); i++)
            ADSM__STORE(&((uint64_t *)&adsm__rt.dev_stats[d])[i], 0);
    return ADSM_OK;
}

ADSM_API const char *adsm_result_string(adsm_result r) {
    switch (r) {
#define ADSM__RESULT_CASE(name, value, text) \
    case name: return #name ": " text;
        ADSM_RESULT_LIST(ADSM__RESULT_CASE)
#undef ADSM__RESULT_CASE
    default: return "unknown adsm_result";
    }
}

ADSM_API const char *adsm_last_error(void) {
    return adsm__tls_error[0] ? adsm__tls_error : adsm_result_string(adsm__tls_result);
}

ADSM_API adsm_result adsm_last_result(void) { return adsm__tls_result; }

ADSM__PRIVATE const char *adsm__protocol_name_unguarded(void) {
    if (adsm__ensure() != ADSM_OK) return "none";
    return adsm__protocol_for(adsm__rt.cfg.protocol)->name;
}

ADSM__PRIVATE const char *adsm__backend_name_unguarded(void) {
    if (adsm__ensure() != ADSM_OK) return "none";
    return adsm__rt.be->name;
}

ADSM__PRIVATE const char *adsm__fault_engine_name_unguarded(void) {
    if (adsm__ensure() != ADSM_OK) return "none";
    return adsm__protection_name(&adsm__rt.protection);
}

ADSM__PRIVATE size_t adsm__block_size_unguarded(void) {
    if (adsm__ensure() != ADSM_OK) return 0;
    return adsm__rt.cfg.block_size;
}

ADSM__PRIVATE adsm_result adsm__set_affinity_unguarded(const void *ptr, int dev) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r = adsm__ensure();
    if (r != ADSM_OK) return r;
    if (dev < -1 || dev >= (int)rt->ndev)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_set_affinity(%p, %d): adsm drives %u device%s (0..%u, or -1)",
                          ptr, dev, rt->ndev, rt->ndev == 1 ? "" : "s", rt->ndev - 1);
    adsm__lock(&rt->lock);
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, (uintptr_t)ptr));
    if (!o) r = adsm__fail(ADSM_ERROR_NOT_SHARED, "adsm_set_affinity(%p): not in a shared object", ptr);
    else if (rt->ndev > 1) { /* one device: every object is its already */
        o->affinity = dev;
        if (dev >= 0) o->home_dev = (unsigned)dev;
    }
    adsm__unlock(&rt->lock);
    return r;
}

ADSM__PRIVATE char adsm__block_state_unguarded(const void *ptr) {
    adsm__runtime *rt = &adsm__rt;
    char state = 0;
    if (!adsm__ready()) return 0;
    adsm__lock(&rt->lock);
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, (uintptr_t)ptr));
    if (o) state = adsm__state_letters[o->blocks[adsm__tree_block_index(&o->node, (uintptr_t)ptr, rt->cfg.block_shift)].state];
    adsm__unlock(&rt->lock);
    return state;
}

/* ---- the public calls: each holds a use of the runtime (runtime.h) while it runs ------------ */
/* Returns what the call gives back, holding a use of the runtime around it. */
#define ADSM__GUARDED(type, call)       \
    do {                                \
        adsm__use_begin();              \
        type adsm__guarded_r = (call);  \
        adsm__use_end();                \
        return adsm__guarded_r;         \
    } while (0)

ADSM_API void *adsm_alloc(size_t size) { ADSM__GUARDED(void *, adsm__alloc_unguarded(size)); }

ADSM_API void *adsm_safe_alloc(size_t size) { ADSM__GUARDED(void *, adsm__safe_alloc_unguarded(size)); }

ADSM_API void *adsm_alloc_typed(const adsm_type_desc *type, size_t count) {
    ADSM__GUARDED(void *, adsm__alloc_typed_unguarded(type, count));
}

ADSM_API adsm_result adsm_set_type(void *object, const adsm_type_desc *type) {
    ADSM__GUARDED(adsm_result, adsm__set_type_unguarded(object, type));
}

ADSM_API void *adsm_safe(const void *host_ptr) { ADSM__GUARDED(void *, adsm__safe_unguarded(host_ptr)); }

/* Freeing an object, a span of the trace (its size is not known once it is gone: bytes 0). */
ADSM__PRIVATE adsm_result adsm__free_traced(void *ptr) {
    uint64_t t0 = adsm__now_ns();
    adsm_result r = adsm__free_unguarded(ptr);
    if (ptr) adsm__trace(&adsm__rt.trace, ADSM__TR_FREE, t0, (uintptr_t)ptr, 0);
    return r;
}

ADSM_API adsm_result adsm_free(void *ptr) { ADSM__GUARDED(adsm_result, adsm__free_traced(ptr)); }

ADSM_API void *adsm_dev_alloc(size_t size) { ADSM__GUARDED(void *, adsm__dev_alloc_unguarded(0, size)); }

ADSM_API void *adsm_dev_alloc_on(int dev, size_t size) { ADSM__GUARDED(void *, adsm__dev_alloc_unguarded(dev, size)); }

ADSM_API adsm_result adsm_dev_free(void *dev) { ADSM__GUARDED(adsm_result, adsm__dev_free_unguarded(dev)); }

ADSM_API adsm_result adsm_copy_to_device(void *dev, const void *host, size_t n) {
    ADSM__GUARDED(adsm_result, adsm__copy_to_device_unguarded(dev, host, n));
}

ADSM_API adsm_result adsm_copy_from_device(void *host, const void *dev, size_t n) {
    ADSM__GUARDED(adsm_result, adsm__copy_from_device_unguarded(host, dev, n));
}

ADSM_API void *adsm_host_alloc(size_t size) { ADSM__GUARDED(void *, adsm__host_alloc_unguarded(size)); }

ADSM_API adsm_result adsm_host_free(void *host) { ADSM__GUARDED(adsm_result, adsm__host_free_unguarded(host)); }

ADSM_API adsm_result adsm_module_load_image(const void *image, size_t size) {
    ADSM__GUARDED(adsm_result, adsm__module_load_image_unguarded(image, size));
}

ADSM_API adsm_result adsm_module_load_source(const char *cuda_source, const char *const *options) {
    ADSM__GUARDED(adsm_result, adsm__module_load_source_unguarded(cuda_source, options));
}

ADSM_API adsm_result adsm_module_load_file(const char *path) {
    ADSM__GUARDED(adsm_result, adsm__module_load_file_unguarded(path));
}

ADSM_API adsm_result adsm_launch(const adsm_kernel_desc *k, adsm_grid grid, const void *args) {
    return adsm_launch_on(ADSM_ANY_DEVICE, k, grid, args);
}

ADSM_API adsm_result adsm_launch_on(int dev, const adsm_kernel_desc *k, adsm_grid grid, const void *args) {
    ADSM__GUARDED(adsm_result, adsm__launch_unguarded(dev, k, grid, args));
}

ADSM_API int adsm_device_count(void) {
    adsm__use_begin();
    int n = adsm__ready() ? (int)adsm__rt.ndev : 0;
    adsm__use_end();
    return n;
}

ADSM__PRIVATE void adsm__read_device_stats(adsm__runtime *rt, unsigned d, adsm_device_stats *out) {
    for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++) /* atomics, one by one */
        ((uint64_t *)out)[i] = ADSM__LOAD(&((uint64_t *)&rt->dev_stats[d])[i]);
    adsm__lock(&rt->lock);
    out->resident_bytes = rt->ndev > 1 ? rt->dev_bytes[d] : rt->device_used;
    adsm__unlock(&rt->lock);
}

ADSM_API adsm_result adsm_get_device_stats(int dev, adsm_device_stats *out) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r = ADSM_OK;
    adsm__use_begin();
    if (!out) r = adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_get_device_stats: NULL result pointer");
    else if (!adsm__ready() || dev < 0 || (unsigned)dev >= rt->ndev)
        r = adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_get_device_stats: device %d; adsm drives %u", dev,
                       adsm__ready() ? rt->ndev : 0);
    else
        adsm__read_device_stats(rt, (unsigned)dev, out);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_kernel_prepare(const adsm_kernel_desc *kernel) {
    ADSM__GUARDED(adsm_result, adsm__kernel_prepare_unguarded(kernel));
}

ADSM_API adsm_result adsm_sync(void) { ADSM__GUARDED(adsm_result, adsm__sync_unguarded()); }

ADSM_API adsm_result adsm_memset(void *dst, int value, size_t n) {
    ADSM__GUARDED(adsm_result, adsm__memset_unguarded(dst, value, n));
}

ADSM_API adsm_result adsm_memcpy(void *dst, const void *src, size_t n) {
    ADSM__GUARDED(adsm_result, adsm__memcpy_unguarded(dst, src, n));
}

ADSM_API adsm_result adsm_get_stats(adsm_stats *out) { ADSM__GUARDED(adsm_result, adsm__get_stats_unguarded(out)); }

ADSM_API const char *adsm_protocol_name(void) { ADSM__GUARDED(const char *, adsm__protocol_name_unguarded()); }

ADSM_API const char *adsm_backend_name(void) { ADSM__GUARDED(const char *, adsm__backend_name_unguarded()); }

ADSM_API const char *adsm_fault_engine_name(void) {
    ADSM__GUARDED(const char *, adsm__fault_engine_name_unguarded());
}

ADSM_API size_t adsm_block_size(void) { ADSM__GUARDED(size_t, adsm__block_size_unguarded()); }

ADSM_API adsm_result adsm_set_affinity(const void *ptr, int dev) {
    ADSM__GUARDED(adsm_result, adsm__set_affinity_unguarded(ptr, dev));
}

ADSM_API char adsm_block_state(const void *ptr) { ADSM__GUARDED(char, adsm__block_state_unguarded(ptr)); }

ADSM_API int adsm_is_shared(const void *ptr, size_t n) { ADSM__GUARDED(int, adsm__is_shared_unguarded(ptr, n)); }

ADSM_API adsm_result adsm_touch(const void *ptr, size_t n, int write) {
    ADSM__GUARDED(adsm_result, adsm__touch_unguarded(ptr, n, write));
}

ADSM_API ssize_t adsm_read(int fd, void *buf, size_t count) {
    ADSM__GUARDED(ssize_t, adsm__read_unguarded(fd, buf, count));
}

ADSM_API ssize_t adsm_write(int fd, const void *buf, size_t count) {
    ADSM__GUARDED(ssize_t, adsm__write_unguarded(fd, buf, count));
}

ADSM_API ssize_t adsm_pread(int fd, void *buf, size_t count, off_t offset) {
    ADSM__GUARDED(ssize_t, adsm__pread_unguarded(fd, buf, count, offset));
}

ADSM_API ssize_t adsm_pwrite(int fd, const void *buf, size_t count, off_t offset) {
    ADSM__GUARDED(ssize_t, adsm__pwrite_unguarded(fd, buf, count, offset));
}

ADSM_API size_t adsm_fread(void *ptr, size_t size, size_t nmemb, FILE *stream) {
    ADSM__GUARDED(size_t, adsm__fread_unguarded(ptr, size, nmemb, stream));
}

ADSM_API size_t adsm_fwrite(const void *ptr, size_t size, size_t nmemb, FILE *stream) {
    ADSM__GUARDED(size_t, adsm__fwrite_unguarded(ptr, size, nmemb, stream));
}

ADSM_API ssize_t adsm_readv(int fd, const struct iovec *iov, int iovcnt) {
    ADSM__GUARDED(ssize_t, adsm__readv_unguarded(fd, iov, iovcnt));
}

ADSM_API ssize_t adsm_writev(int fd, const struct iovec *iov, int iovcnt) {
    ADSM__GUARDED(ssize_t, adsm__writev_unguarded(fd, iov, iovcnt));
}

#undef ADSM__GUARDED

#endif /* ADSM__API_INCLUDED */
