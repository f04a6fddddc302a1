/* adsm_impl/api.h -- the public functions: initialisation, objects, launches, sync, stats.
 *
 * Every function here runs in normal thread context and is thread safe: object and protocol
 * state changes happen under the runtime lock (the one the fault handler takes); initialisation
 * and shutdown are serialised by their own mutex. Errors are returned as adsm_result, with the
 * detail in the calling thread's last-error text; nothing aborts. */
#ifndef ADSM__API_INCLUDED
#define ADSM__API_INCLUDED

/* ---- initialisation --------------------------------------------------------------------- */
/* The address reservation, the fetch staging slots and the trace buffer, made by adsm__start
 * (the trace file is written here, after the backend's threads stopped). */
ADSM__PRIVATE void adsm__release_memory(adsm__runtime *rt) {
    adsm__release_reservation(rt);
    adsm__filler_release(&rt->fill);
    adsm__trace_close(&rt->trace);
}

ADSM__PRIVATE const adsm__protocol_vtbl *adsm__protocol_for(adsm_protocol_kind kind) {
    switch (kind) {
    case ADSM_PROTOCOL_BATCH: return &adsm__protocol_batch;
    case ADSM_PROTOCOL_LAZY: return &adsm__protocol_lazy;
    default: return &adsm__protocol_rolling;
    }
}

ADSM__PRIVATE adsm_result adsm__backend_start(adsm__runtime *rt) {
    const adsm__backend_vtbl *choice;
    switch (rt->cfg.backend) {
    case ADSM_BACKEND_HOST: choice = &adsm__backend_host; break;
    case ADSM_BACKEND_CUDA: choice = &adsm__backend_cuda; break;
    case ADSM_BACKEND_EMU: choice = &adsm__backend_emu; break;
    default: /* auto: a GPU if one answers, else the emulator */
        if (adsm__backend_cuda.init(rt, &rt->be_ctx) == ADSM_OK) {
            rt->be = &adsm__backend_cuda;
            return ADSM_OK;
        }
        adsm__log(ADSM_LOG_INFO, "no CUDA device (%s); using the emulated device", adsm__tls_error);
        choice = &adsm__backend_emu;
        break;
    }
    adsm_result r = choice->init(rt, &rt->be_ctx);
    if (r == ADSM_OK) rt->be = choice;
    return r;
}

/* Ends every device's context (each backend's shutdown runs what is still queued first). */
ADSM__PRIVATE void adsm__devices_stop(adsm__runtime *rt) {
    for (unsigned d = rt->ndev; d-- > 1;) rt->be->shutdown(rt->dev_ctx[d]);
    rt->be->shutdown(rt->dev_ctx[0]);
    memset(rt->dev_ctx, 0, sizeof rt->dev_ctx);
    rt->ndev = 0;
}

/* The backend's first context is device 0; the backend says how many it drives (emu starts
 * ADSM_EMU_DEVICES - 1 more device processes, each with its own memory at the same addresses;
 * cuda a context per GPU ADSM_DEVICES lists). Several devices need a tracking protocol: the
 * directory (directory.h) follows lazy's and rolling's units. */
ADSM__PRIVATE adsm_result adsm__devices_start(adsm__runtime *rt) {
    unsigned want = rt->be->device_count ? rt->be->device_count(rt->be_ctx) : 1;
    rt->ndev = 1;
    rt->dev_ctx[0] = rt->be_ctx;
    rt->release_dev = -1;
    rt->dev_lost = 0;
    memset(rt->dev_stats, 0, sizeof rt->dev_stats);
    memset(rt->dev_bytes, 0, sizeof rt->dev_bytes);
    memset(rt->dev_done_seq, 0, sizeof rt->dev_done_seq);
    rt->lru_clock = rt->objects_dealt = 0;
    if (rt->cfg.emu_devices > 1 && rt->be != &adsm__backend_emu)
        adsm__log(ADSM_LOG_WARN, "ADSM_EMU_DEVICES=%u applies to the emu backend; %s drives %u device%s",
                  rt->cfg.emu_devices, rt->be->name, want, want == 1 ? "" : "s");
    if (want > 1 && rt->cfg.protocol == ADSM_PROTOCOL_BATCH)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "%s=%u devices: the batch protocol drives one device; "
                          "use lazy or rolling", rt->be == &adsm__backend_emu ? "ADSM_EMU_DEVICES" : "ADSM_DEVICES",
                          want);
    for (unsigned d = 1; d < want; d++) {
        adsm_result r = rt->be->init(rt, &rt->dev_ctx[d]);
        rt->be_ctx = rt->dev_ctx[0]; /* emu's init points it at the device it starts */
        if (r != ADSM_OK) return r;
        rt->ndev++;
    }
    for (unsigned d = 0; d < rt->ndev && rt->be->start; d++) { /* threads after every fork */
        adsm_result r = rt->be->start(rt->dev_ctx[d]);
        if (r != ADSM_OK) return r;
    }
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__start(const adsm_config *cfg) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r;
    rt->page = (size_t)sysconf(_SC_PAGESIZE);
    if ((r = adsm__settings_resolve(cfg, rt->page, &rt->cfg)) != ADSM_OK) return r;
    if ((r = adsm__reserve(rt)) != ADSM_OK) {
        adsm__release_memory(rt);
        return r;
    }
    if (adsm__filler_init(&rt->fill, rt->page) != 0) {
        r = adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cannot map %zu MiB of staging for fetches: %s",
                       ADSM__FILL_BYTES >> 20, strerror(errno));
        adsm__release_memory(rt);
        return r;
    }
    if (adsm__trace_open(&rt->trace, rt->cfg.trace_path) != 0) {
        r = adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "ADSM_TRACE: cannot map the event buffer: %s", strerror(errno));
        adsm__release_memory(rt);
        return r;
    }
    adsm__tree_init(&rt->objects);
    adsm__tree_init(&rt->safe_dev);
    adsm__tree_init(&rt->host_buffers);
    rt->dev_delta = 0; /* a backend whose device addresses differ sets it */
    rt->ndev = 0;      /* the index of the device whose context starts next (cuda reads it) */
    rt->dev_granule = 0;
    if ((r = adsm__backend_start(rt)) != ADSM_OK) {
        adsm__release_memory(rt);
        return r;
    }
    if ((r = adsm__devices_start(rt)) != ADSM_OK) {
        adsm__devices_stop(rt);
        adsm__release_memory(rt);
        return r;
    }
    rt->proto = rt->be->moves_data ? adsm__protocol_for(rt->cfg.protocol) : &adsm__protocol_untracked;
    if ((r = adsm__fault_install(rt)) != ADSM_OK) {
        adsm__devices_stop(rt);
        adsm__release_memory(rt);
        return r;
    }
    adsm__log(ADSM_LOG_INFO, "backend %s, protocol %s, block size %zu", rt->be->name, adsm__protocol_for(rt->cfg.protocol)->name,
              rt->cfg.block_size);
    ADSM__ADD(&rt->generation, 1);
    ADSM__STORE(&rt->state, ADSM__RT_READY);
    return ADSM_OK;
}

/* Initialises on first use. The caller's uses are let go meanwhile: a shutdown in progress holds
 * the initialisation mutex and waits for them. */
ADSM__PRIVATE adsm_result adsm__ensure(void) {
    while (!ADSM__LIKELY(adsm__ready())) { /* again if another thread shut it down meanwhile */
        int held = adsm__uses_drop();
        pthread_mutex_lock(&adsm__rt.init_mutex);
        adsm_result r = adsm__ready() ? ADSM_OK : adsm__start(NULL);
        pthread_mutex_unlock(&adsm__rt.init_mutex);
        adsm__uses_take(held);
        if (r != ADSM_OK) return r;
    }
    return ADSM_OK;
}

ADSM_API adsm_result adsm_init(const adsm_config *cfg) {
    pthread_mutex_lock(&adsm__rt.init_mutex);
    adsm_result r = adsm__ready() ? adsm__fail(ADSM_ERROR_ALREADY_INITIALIZED,
                                                "adsm_init: already initialised (call adsm_shutdown first)")
                                  : adsm__start(cfg);
    pthread_mutex_unlock(&adsm__rt.init_mutex);
    return r;
}

ADSM_API void adsm_shutdown(void) {
    adsm__runtime *rt = &adsm__rt;
    pthread_mutex_lock(&rt->init_mutex);
    if (!adsm__ready()) {
        pthread_mutex_unlock(&rt->init_mutex);
        return;
    }
    ADSM__STORE(&rt->state, ADSM__RT_OFF); /* new calls see it shut down */
    adsm__await_no_users();                /* calls in flight finish first */
    for (unsigned d = 0; d < rt->ndev; d++) rt->be->synchronize(rt->dev_ctx[d]);
    adsm__lock(&rt->lock);
    /* device buffers first: the tree also links safe objects, which the list below frees */
    for (adsm__tree_node *n; (n = adsm__tree_first(&rt->safe_dev)) != NULL;) {
        adsm__tree_remove(&rt->safe_dev, n); /* unlinked before freeing: no walk through freed nodes */
        adsm__object *o = ADSM__CONTAINER_OF(n, adsm__object, dev_node);
        if (o->device_only) free(o);
    }
    for (adsm__object *o = rt->first_object, *next; o; o = next) {
        next = o->next;
        adsm__object_destroy(o);
    }
    for (adsm__tree_node *n; (n = adsm__tree_first(&rt->host_buffers)) != NULL;) {
        adsm__tree_remove(&rt->host_buffers, n); /* the memory stays the program's; the cuda */
        free(ADSM__CONTAINER_OF(n, adsm__host_buffer, node)); /* backend unlocks it at shutdown */
    }
    rt->first_object = rt->last_object = NULL;
    adsm__tree_init(&rt->objects); /* its nodes were in the objects just destroyed */
    rt->fifo_head = rt->fifo_tail = NULL;
    rt->fifo_len = rt->nobjects = rt->object_bytes = rt->device_used = rt->tracked_blocks = 0;
    rt->rolling_limit = 0;
    rt->evict_clock = rt->epoch_clock = rt->epoch_regrets = rt->epoch_touched = 0;
    rt->flushes_queued = rt->flushes_settled = 0;
    rt->ahead_sum = 0;
    rt->ahead_epoch++; /* objects are gone, but runs must never outlive a runtime */
    stbds_arrfree(rt->batch_sends);
    stbds_arrfree(rt->through);
    adsm__bounce_release_all(rt);
    adsm__unlock(&rt->lock);
    adsm__devices_stop(rt);
    rt->be = NULL;
    rt->be_ctx = NULL;
    adsm__fault_uninstall(rt);
    adsm__release_memory(rt);
    rt->launch_seq = 0;
    adsm__stats_reset(&rt->stats);
    pthread_mutex_unlock(&rt->init_mutex);
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

ADSM__PRIVATE void *adsm__alloc_unguarded(size_t size) { return adsm__alloc(size, 0, "adsm_alloc"); }
ADSM__PRIVATE void *adsm__safe_alloc_unguarded(size_t size) { return adsm__alloc(size, 1, "adsm_safe_alloc"); }

ADSM__PRIVATE void *adsm__safe_unguarded(const void *host_ptr) {
    adsm__runtime *rt = &adsm__rt;
    if (adsm__ensure() != ADSM_OK) return NULL;
    adsm__lock(&rt->lock);
    uintptr_t a = (uintptr_t)host_ptr, dev = 0;
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
    if (o && a < o->host + o->size) dev = adsm__dev_out(rt, o->dev + (a - o->host));
    adsm__unlock(&rt->lock);
    if (!dev) adsm__fail(ADSM_ERROR_NOT_SHARED, "adsm_safe(%p): not inside a live shared object", host_ptr);
    return (void *)dev;
}

ADSM__PRIVATE adsm_result adsm__free_unguarded(void *ptr) {
    adsm__runtime *rt = &adsm__rt;
    uintptr_t a = (uintptr_t)ptr;
    if (!ptr) return ADSM_OK;
    if (!adsm__ready())
        return adsm__fail(ADSM_ERROR_NOT_SHARED, "adsm_free(%p): adsm is not initialised, so this is no shared object",
                          ptr);
    /* A kernel in flight may use the object: let every launch finish first (errors stay queued
     * for adsm_sync). */
    (void)adsm__wait_all(rt);
    adsm__lock(&rt->lock);
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
    while (o && o->busy_units) { /* a fault's copy of it runs outside the lock: let it finish */
        adsm__await_copies(rt);
        o = adsm__object_of(adsm__tree_find(&rt->objects, a));
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

/* ---- the explicit path: device-only buffers and copies ------------------------------------ */
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
    if (n > o->size - (a - o->dev)) {
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
    (void)adsm__wait_all(rt); /* a kernel in flight may use it */
    adsm__lock(&rt->lock);
    adsm__object *o = adsm__device_buffer(rt, dev, 0, "adsm_dev_free");
    adsm_result r = adsm__tls_result;
    if (o && adsm__dev_in(rt, (uintptr_t)dev) != o->dev) {
        r = adsm__fail(ADSM_ERROR_NOT_OBJECT_START, "adsm_dev_free(%p): not the start of its buffer", dev);
        o = NULL;
    }
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
ADSM__PRIVATE void *adsm__host_alloc_unguarded(size_t size) {
    adsm__runtime *rt = &adsm__rt;
    size_t huge = ADSM__HUGE_PAGE;
    if (adsm__ensure() != ADSM_OK) return NULL;
    if (size == 0 || size > SIZE_MAX - 2 * huge) {
        adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_host_alloc(%zu): %s", size, size ? "too large" : "size 0");
        return NULL;
    }
    size_t span = ADSM__ALIGN_UP(size, huge);
    adsm__host_buffer *b = (adsm__host_buffer *)calloc(1, sizeof *b);
    void *p = b ? adsm__map_aligned(span, huge, PROT_READ | PROT_WRITE, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(b);
        adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "adsm_host_alloc(%zu): %s", size, strerror(errno));
        return NULL;
    }
    uintptr_t at = (uintptr_t)p;
    madvise(p, span, MADV_HUGEPAGE);
    b->node.start = at;
    b->node.end = at + span;
    if (rt->be->host_lock) b->locked = rt->be->host_lock(rt->be_ctx, at, span);
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
    adsm__host_buffer *b = ADSM__CONTAINER_OF(n, adsm__host_buffer, node);
    if (b->locked) rt->be->host_unlock(rt->be_ctx, n->start, n->end - n->start);
    munmap((void *)n->start, n->end - n->start);
    free(b);
    return ADSM_OK;
}

/* ---- device code ---------------------------------------------------------------------------- */
ADSM__PRIVATE adsm_result adsm__module_load(const void *image, size_t size, int source, const char *const *options,
                                            const char *fn) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r;
    if (!image) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: NULL %s", fn, source ? "source" : "image");
    if ((r = adsm__ensure()) != ADSM_OK) return r;
    if (!rt->be->module_load) return ADSM_OK; /* kernels run from their CPU bodies here */
    for (unsigned d = 0; d < rt->ndev; d++) { /* a kernel may run on any device */
        if (adsm__lost_devices(rt) & adsm__dev_bit(d)) continue;
        if ((r = rt->be->module_load(rt->dev_ctx[d], image, size, source, options)) != ADSM_OK) return r;
    }
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__module_load_image_unguarded(const void *image, size_t size) {
    return adsm__module_load(image, size, 0, NULL, "adsm_module_load_image");
}

ADSM__PRIVATE adsm_result adsm__module_load_source_unguarded(const char *cuda_source, const char *const *options) {
    return adsm__module_load(cuda_source, cuda_source ? strlen(cuda_source) : 0, 1, options,
                             "adsm_module_load_source");
}

/* Reads a whole file into a NUL-terminated buffer (PTX is text). */
ADSM__PRIVATE adsm_result adsm__read_file(const char *path, char **out, size_t *size) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0) buf = (char *)malloc((size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    int e = errno;
    if (f) fclose(f);
    if (!buf) return adsm__fail(ADSM_ERROR_SYSTEM, "adsm_module_load_file: cannot read '%s': %s", path, strerror(e));
    buf[len] = 0;
    *out = buf;
    *size = (size_t)len;
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__module_load_file_unguarded(const char *path) {
    char *image = NULL;
    size_t size = 0;
    if (!path) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_module_load_file: NULL path");
    adsm_result r = adsm__read_file(path, &image, &size);
    if (r != ADSM_OK) return r;
    if (size == 0) r = adsm__fail(ADSM_ERROR_INVALID_MODULE, "adsm_module_load_file: '%s' is empty", path);
    else r = adsm__module_load(image, size, 0, NULL, "adsm_module_load_file");
    free(image);
    return r;
}

/* ---- launches ----------------------------------------------------------------------------- */
/* Gets a kernel's device code ready on every live device (cuda compiles single-source kernels
 * and loads them into each context), before placement picks one. No lock held. */
ADSM__PRIVATE adsm_result adsm__prepare_everywhere(adsm__runtime *rt, const adsm_kernel_desc *k) {
    for (unsigned d = 0; rt->be->prepare && d < rt->ndev; d++) {
        if (adsm__lost_devices(rt) & adsm__dev_bit(d)) continue;
        adsm_result r = rt->be->prepare(rt->dev_ctx[d], k);
        if (r != ADSM_OK) return r;
    }
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__launch_unguarded(int dev, const adsm_kernel_desc *k, adsm_grid grid,
                                                const void *args) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r;
    if ((r = adsm__ensure()) != ADSM_OK) return r;
    if (dev != ADSM_ANY_DEVICE && (dev < 0 || (unsigned)dev >= rt->ndev))
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': device %d; adsm drives %u (0..%u)",
                          k ? k->name : "?", dev, rt->ndev, rt->ndev - 1);
    if ((r = adsm__check_kernel_desc(k)) != ADSM_OK) return r;
    if (!k->body && !rt->be->module_load) /* cuda finds kernels in modules instead */
        return adsm__fail(ADSM_ERROR_NO_KERNEL_BODY, "kernel '%s' has no body: define void %s(adsm_grid, ...)",
                          k->name, k->name);
    if (!args) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': NULL argument block", k->name);
    if (rt->be->max_args && k->args_size > rt->be->max_args) /* refused before anything moves */
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': %zu bytes of arguments, the %s backend takes %zu",
                          k->name, k->args_size, rt->be->name, rt->be->max_args);
    if ((r = adsm__check_launch_shape(k, grid)) != ADSM_OK) return r;
    if ((r = adsm__prepare_everywhere(rt, k)) != ADSM_OK) return r;
    size_t threads = adsm_grid_threads(grid); /* counted without overflow: checked above */
    grid.begin = 0;
    grid.end = threads;
    unsigned char *buf = (unsigned char *)malloc(k->args_size ? k->args_size : 1);
    if (!buf) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "kernel '%s': out of memory", k->name);
    adsm__launch l;
    adsm__object *writes[ADSM__MAX_PARAMS], *used[ADSM__MAX_PARAMS];
    uint64_t writer_before[ADSM__MAX_PARAMS];
    unsigned writer_dev_before[ADSM__MAX_PARAMS];
    size_t nwrites = 0, nused = 0;
    unsigned d = 0;
    pthread_mutex_lock(&rt->launch_mutex);
    adsm__lock(&rt->lock);
    if (adsm__bring_outputs_home(rt) != 0) /* write-through: the last calls' outputs first */
        r = adsm__fail(ADSM_ERROR_SYSTEM, "write-through: bringing a kernel's output home failed");
    for (; r == ADSM_OK;) {
        memcpy(buf, args, k->args_size); /* binding translates pointers in place */
        memset(&l, 0, sizeof l);
        l.kernel = k;
        l.grid = grid;
        l.args = buf;
        l.seq = rt->launch_seq + 1;
        nwrites = nused = 0;
        r = adsm__prepare_launch(rt, &l, buf, writes, writer_before, &nwrites, used, &nused);
        if (r != ADSM_OK) break;
        if (adsm__any_busy(writes, nwrites)) {
            adsm__await_copies(rt); /* a fault is fetching an object this kernel writes: let it finish */
            continue;
        }
        d = dev == ADSM_ANY_DEVICE ? adsm__place(rt, writes, nwrites, used, nused) : (unsigned)dev;
        if (adsm__lost_devices(rt) & adsm__dev_bit(d)) {
            r = adsm__fail(ADSM_ERROR_DEVICE_LOST, "kernel '%s': device %u is lost", k->name, d);
            break;
        }
        int again = 0; /* an eviction or a peer copy let the lock go: look everything up again */
        r = adsm__room_for_launch(rt, used, nused, d, k->name, &again);
        if (r == ADSM_OK && !again) r = adsm__peer_copies(rt, used, nused, d, &again);
        if (r != ADSM_OK || !again) break;
    }
    for (size_t i = 0; i < nwrites; i++) writer_dev_before[i] = writes[i]->writer_dev;
    rt->release_dev = (int)d; /* flushes at this call go to d */
    if (r == ADSM_OK) r = adsm__gather(rt, used, nused, d);
    if (r == ADSM_OK) r = rt->proto->release(rt, writes, nwrites, used, nused, l.seq);
    rt->release_dev = -1;
    if (r == ADSM_OK && (r = rt->be->launch(rt->dev_ctx[d], &l)) == ADSM_ERROR_DEVICE_LOST) adsm__mark_lost(rt, d);
    if (r == ADSM_OK) {
        ADSM__STORE(&rt->launch_seq, l.seq);
        adsm__note_users(used, nused, d, l.seq);
        ADSM__ADD(&rt->stats.launches, 1);
        ADSM__ADD(&rt->dev_stats[d].launches, 1);
        if (adsm__tracking(rt)) {
            adsm__drop_replicas(rt, used, nused, writes, nwrites, d);
            adsm__note_outputs(rt, writes, nwrites);
        }
    } else {
        /* this launch will not write them; an earlier one still may */
        for (size_t i = 0; i < nwrites; i++) {
            writes[i]->writer_seq = writer_before[i];
            writes[i]->writer_dev = writer_dev_before[i];
        }
    }
    adsm__unlock(&rt->lock);
    pthread_mutex_unlock(&rt->launch_mutex);
    free(buf);
    return r;
}

ADSM__PRIVATE adsm_result adsm__kernel_prepare_unguarded(const adsm_kernel_desc *k) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r;
    if ((r = adsm__ensure()) != ADSM_OK || (r = adsm__check_kernel_desc(k)) != ADSM_OK) return r;
    return adsm__prepare_everywhere(rt, k);
}

/* Waits for every device and returns the first error, naming its device when there are several.
 * With several devices a lost one is reported once and then left alone, so the others keep
 * working; with one (or once every device is lost) the loss is reported at every sync. */
ADSM__PRIVATE adsm_result adsm__devices_synchronize(adsm__runtime *rt) {
    adsm_result first = ADSM_OK;
    char text[512] = "";
    for (unsigned d = 0; d < rt->ndev; d++) {
        if (adsm__lost_devices(rt) & adsm__dev_bit(d)) continue; /* reported already */
        adsm_result r = rt->be->synchronize(rt->dev_ctx[d]);
        if (r == ADSM_OK) continue;
        if (first == ADSM_OK) {
            first = r;
            if (rt->ndev > 1) snprintf(text, sizeof text, "device %u: %.480s", d, adsm_last_error());
            else snprintf(text, sizeof text, "%s", adsm_last_error());
        }
        /* lost, or a crash its device does not recover from (a CUDA context's; wait says lost) */
        if (r == ADSM_ERROR_DEVICE_LOST || rt->be->wait(rt->dev_ctx[d], 0) != 0) adsm__mark_lost(rt, d);
    }
    if (first == ADSM_OK && rt->ndev > 1 && adsm__live_devices(rt) == 0) {
        first = ADSM_ERROR_DEVICE_LOST;
        snprintf(text, sizeof text, "every device is lost");
    }
    if (first != ADSM_OK) adsm__fail(first, "%s", text);
    return first;
}

ADSM__PRIVATE adsm_result adsm__sync_unguarded(void) {
    adsm__runtime *rt = &adsm__rt;
    if (!adsm__ready()) return ADSM_OK;
    adsm_result r = adsm__devices_synchronize(rt);
    adsm__lock(&rt->lock);
    if (adsm__bring_outputs_home(rt) != 0 && r == ADSM_OK)
        r = adsm__fail(ADSM_ERROR_SYSTEM, "write-through: bringing a kernel's output home failed");
    adsm_result a = rt->proto->acquire(rt);
    adsm__unlock(&rt->lock);
    return r != ADSM_OK ? r : a;
}

/* ---- bulk memory ---------------------------------------------------------------------------- */
ADSM__PRIVATE adsm_result adsm__check_range(const void *p, size_t n, const char *fn) {
    if (n > 0 && !p) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: NULL pointer", fn);
    if ((uintptr_t)p > UINTPTR_MAX - n) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: range wraps around", fn);
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__memset_unguarded(void *dst, int value, size_t n) {
    adsm_result r;
    if ((r = adsm__check_range(dst, n, "adsm_memset")) != ADSM_OK) return r;
    if (n == 0) return ADSM_OK;
    if (!adsm__ready()) { /* nothing is shared before initialisation: plain memory */
        memset(dst, value, n);
        return ADSM_OK;
    }
    unsigned dev;
    switch (adsm__device_buffer_kind(&adsm__rt, (uintptr_t)dst, n, &dev)) {
    case ADSM__IN_DEVICE_BUFFER: return adsm__memset_device_buffer(&adsm__rt, (uintptr_t)dst, value, n, dev);
    case ADSM__ACROSS_DEVICE_BUFFER:
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_memset(%p, %zu): the range runs across the edge of a "
                          "device buffer", dst, n);
    default: return adsm__memset_impl(&adsm__rt, (uintptr_t)dst, value, n);
    }
}

ADSM__PRIVATE adsm_result adsm__memcpy_unguarded(void *dst, const void *src, size_t n) {
    adsm_result r;
    if ((r = adsm__check_range(dst, n, "adsm_memcpy")) != ADSM_OK ||
        (r = adsm__check_range(src, n, "adsm_memcpy")) != ADSM_OK)
        return r;
    if (n == 0) return ADSM_OK;
    if (!adsm__ready()) { /* nothing is shared before initialisation: plain memory */
        memmove(dst, src, n);
        return ADSM_OK;
    }
    int handled;
    r = adsm__memcpy_device_buffers(&adsm__rt, (uintptr_t)dst, (uintptr_t)src, n, &handled);
    return handled ? r : adsm__memcpy_impl(&adsm__rt, (uintptr_t)dst, (uintptr_t)src, n);
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
ADSM_API void *adsm_alloc(size_t size) {
    adsm__use_begin();
    void * r = adsm__alloc_unguarded(size);
    adsm__use_end();
    return r;
}

ADSM_API void *adsm_safe_alloc(size_t size) {
    adsm__use_begin();
    void * r = adsm__safe_alloc_unguarded(size);
    adsm__use_end();
    return r;
}

ADSM_API void *adsm_safe(const void *host_ptr) {
    adsm__use_begin();
    void * r = adsm__safe_unguarded(host_ptr);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_free(void *ptr) {
    adsm__use_begin();
    adsm_result r = adsm__free_unguarded(ptr);
    adsm__use_end();
    return r;
}

ADSM_API void *adsm_dev_alloc(size_t size) {
    adsm__use_begin();
    void * r = adsm__dev_alloc_unguarded(0, size);
    adsm__use_end();
    return r;
}

ADSM_API void *adsm_dev_alloc_on(int dev, size_t size) {
    adsm__use_begin();
    void * r = adsm__dev_alloc_unguarded(dev, size);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_dev_free(void *dev) {
    adsm__use_begin();
    adsm_result r = adsm__dev_free_unguarded(dev);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_copy_to_device(void *dev, const void *host, size_t n) {
    adsm__use_begin();
    adsm_result r = adsm__copy_to_device_unguarded(dev, host, n);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_copy_from_device(void *host, const void *dev, size_t n) {
    adsm__use_begin();
    adsm_result r = adsm__copy_from_device_unguarded(host, dev, n);
    adsm__use_end();
    return r;
}

ADSM_API void *adsm_host_alloc(size_t size) {
    adsm__use_begin();
    void * r = adsm__host_alloc_unguarded(size);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_host_free(void *host) {
    adsm__use_begin();
    adsm_result r = adsm__host_free_unguarded(host);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_module_load_image(const void *image, size_t size) {
    adsm__use_begin();
    adsm_result r = adsm__module_load_image_unguarded(image, size);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_module_load_source(const char *cuda_source, const char *const *options) {
    adsm__use_begin();
    adsm_result r = adsm__module_load_source_unguarded(cuda_source, options);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_module_load_file(const char *path) {
    adsm__use_begin();
    adsm_result r = adsm__module_load_file_unguarded(path);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_launch(const adsm_kernel_desc *k, adsm_grid grid, const void *args) {
    return adsm_launch_on(ADSM_ANY_DEVICE, k, grid, args);
}

ADSM_API adsm_result adsm_launch_on(int dev, const adsm_kernel_desc *k, adsm_grid grid, const void *args) {
    adsm__use_begin();
    adsm_result r = adsm__launch_unguarded(dev, k, grid, args);
    adsm__use_end();
    return r;
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
    adsm__use_begin();
    adsm_result r = adsm__kernel_prepare_unguarded(kernel);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_sync(void) {
    adsm__use_begin();
    adsm_result r = adsm__sync_unguarded();
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_memset(void *dst, int value, size_t n) {
    adsm__use_begin();
    adsm_result r = adsm__memset_unguarded(dst, value, n);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_memcpy(void *dst, const void *src, size_t n) {
    adsm__use_begin();
    adsm_result r = adsm__memcpy_unguarded(dst, src, n);
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_get_stats(adsm_stats *out) {
    adsm__use_begin();
    adsm_result r = adsm__get_stats_unguarded(out);
    adsm__use_end();
    return r;
}

ADSM_API const char *adsm_protocol_name(void) {
    adsm__use_begin();
    const char * r = adsm__protocol_name_unguarded();
    adsm__use_end();
    return r;
}

ADSM_API const char *adsm_backend_name(void) {
    adsm__use_begin();
    const char * r = adsm__backend_name_unguarded();
    adsm__use_end();
    return r;
}

ADSM_API size_t adsm_block_size(void) {
    adsm__use_begin();
    size_t r = adsm__block_size_unguarded();
    adsm__use_end();
    return r;
}

ADSM_API adsm_result adsm_set_affinity(const void *ptr, int dev) {
    adsm__use_begin();
    adsm_result r = adsm__set_affinity_unguarded(ptr, dev);
    adsm__use_end();
    return r;
}

ADSM_API char adsm_block_state(const void *ptr) {
    adsm__use_begin();
    char r = adsm__block_state_unguarded(ptr);
    adsm__use_end();
    return r;
}

ADSM_API ssize_t adsm_read(int fd, void *buf, size_t count) {
    adsm__use_begin();
    ssize_t r = adsm__read_unguarded(fd, buf, count);
    adsm__use_end();
    return r;
}

ADSM_API ssize_t adsm_write(int fd, const void *buf, size_t count) {
    adsm__use_begin();
    ssize_t r = adsm__write_unguarded(fd, buf, count);
    adsm__use_end();
    return r;
}

ADSM_API ssize_t adsm_pread(int fd, void *buf, size_t count, off_t offset) {
    adsm__use_begin();
    ssize_t r = adsm__pread_unguarded(fd, buf, count, offset);
    adsm__use_end();
    return r;
}

ADSM_API ssize_t adsm_pwrite(int fd, const void *buf, size_t count, off_t offset) {
    adsm__use_begin();
    ssize_t r = adsm__pwrite_unguarded(fd, buf, count, offset);
    adsm__use_end();
    return r;
}

ADSM_API size_t adsm_fread(void *ptr, size_t size, size_t nmemb, FILE *stream) {
    adsm__use_begin();
    size_t r = adsm__fread_unguarded(ptr, size, nmemb, stream);
    adsm__use_end();
    return r;
}

ADSM_API size_t adsm_fwrite(const void *ptr, size_t size, size_t nmemb, FILE *stream) {
    adsm__use_begin();
    size_t r = adsm__fwrite_unguarded(ptr, size, nmemb, stream);
    adsm__use_end();
    return r;
}

#endif /* ADSM__API_INCLUDED */
