/* adsm_impl/cuda/backend_cuda.h -- the CUDA driver API backend: its vtable verbs, launches, and its
 * start and stop.
 *
 * The driver is opened with dlopen (ADSM_CUDA_DRIVER, else libcuda.so.1, else libcuda.so) and
 * every entry point comes from cuGetProcAddress at the ABI version listed in cuda_driver.h, so
 * adsm builds without CUDA installed. Shared objects keep one address on both sides when the
 * driver lets the device range sit where the host range is (or the host range move onto the
 * device range, as GMAC did); otherwise device addresses are host addresses plus one constant,
 * and pointer arguments are translated at each launch. Device memory is VMM memory mapped in
 * granules on demand. With several GPUs (ADSM_DEVICES) each has its own context of this kind:
 * device 0 may keep the host's addresses, the others translate; an object's memory is mapped on a
 * GPU only while it is resident there (dev_map), and GPU-to-GPU copies are cuMemcpyPeerAsync on
 * the destination's engine (peer_copy), with peer access granted on every mapping. Objects' host
 * pages are page-locked with the driver where it allows (under shared addresses through the host
 * alias, reservation.h), so their copies are direct DMA; other copies go through pinned staging
 * buffers, two per direction, so the CPU copy of one chunk overlaps the DMA of the next.
 *
 * The backend in files, bottom up: cuda_driver.h (the driver's types and entry points),
 * cuda_device.h (one GPU's state, errors, opening it), cuda_memory.h (its address range, device
 * memory, the page-locked host ranges), cuda_engine.h (the engine and completion threads),
 * cuda_modules.h (device code), and this file.
 *
 * Contexts: to_device/from_device/drain/wait run in the SIGSEGV handler (from_device with the
 * runtime lock let go, see protocol.h), so they only queue commands for the engine and wait on
 * futexes. Host page-locking, initialisation, shutdown, module loading and launches run in normal
 * thread context. */
#ifndef ADSM__BACKEND_CUDA_INCLUDED
#define ADSM__BACKEND_CUDA_INCLUDED

#include "../common.h"
#include "../os.h"
#include "../blocktree.h"
#include "../arena.h"
#include "../config.h"
#include "../copy_queue.h"
#include "../runtime.h"
#include "../reservation.h"
#include "../device_error.h"
#include "../backend.h"
#include "../kernel.h"
#include "cuda_driver.h"
#include "cuda_device.h"
#include "cuda_memory.h"
#include "cuda_engine.h"
#include "cuda_modules.h"

/* ---- page-locked host memory ------------------------------------------------------------------ */
/* The driver would not page-lock [.., + n). A refusal of the range itself (shared addresses: it is
 * device address space; a system that forbids locking) holds for every object, so adsm stops
 * asking; anything else (out of lockable memory, RLIMIT_MEMLOCK, an error left by an earlier
 * launch) is this object's alone: its copies are staged, and the next object is tried again.
 * Said once each, at info. */
ADSM__PRIVATE void adsm__cuda_note_lock_refusal(adsm__cuda *c, int object, size_t n, adsm__cu_result cr) {
    int never = cr == ADSM__CUDA_ERROR_INVALID_VALUE || cr == ADSM__CUDA_ERROR_NOT_SUPPORTED ||
                cr == ADSM__CUDA_ERROR_NOT_PERMITTED;
    char text[200];
    adsm__cu_describe(c, cr, "cuMemHostRegister", text, sizeof text);
    if (object && never) {
        c->lock_refused = 1;
        adsm__log(ADSM_LOG_INFO, "cuda: the driver refused to page-lock shared memory (%s addresses: %s); copies "
                  "go through pinned staging", c->delta ? "translated" : "shared", text);
    } else if (!c->lock_short_said) {
        c->lock_short_said = 1;
        adsm__log(ADSM_LOG_INFO, "cuda: the driver would not page-lock %zu bytes of %s (%s); their copies go "
                  "through pinned staging, and later allocations are tried again", n,
                  object ? "a shared object" : "adsm_host_alloc memory", text);
    }
}

/* Initialisation: what pages the alias got (reservation.h), and what 4 KiB pages cost where the
 * kernel refused huge ones (measured on the first GPU, docs/design.md section 1). */
ADSM__PRIVATE void adsm__cuda_say_alias_pages(const adsm__runtime *rt) {
    if (rt->alias_pages == ADSM__ALIAS_HUGE_BY_SETTING)
        adsm__log(ADSM_LOG_INFO, "cuda: the host alias has 2 MiB pages (transparent_hugepage/shmem_enabled)");
    else if (rt->alias_pages == ADSM__ALIAS_HUGE_BY_COLLAPSE)
        adsm__log(ADSM_LOG_INFO, "cuda: shared memory gets huge pages only on request here: each object's host "
                  "alias is collapsed into 2 MiB pages (MADV_COLLAPSE) before it is page-locked");
    else
        adsm__log(ADSM_LOG_INFO, "cuda: the host alias has 4 KiB pages (%s): making an object and first writing it "
                  "cost about 1 ms per MiB; a program that allocates for one use runs faster with "
                  "ADSM_CUDA_DMA_VIEW=0, or ADSM_CUDA_SAME_ADDRESS=0 where kernels follow no pointers stored in "
                  "objects (README, \"Choosing a placement on cuda\")",
                  rt->cfg.cuda_alias_collapse ? (rt->alias_refusal ? strerror(rt->alias_refusal) : "refused")
                                              : "ADSM_CUDA_ALIAS_COLLAPSE=0");
    if (rt->view_small_pages && rt->alias_pages != ADSM__ALIAS_SMALL)
        adsm__log(ADSM_LOG_INFO, "cuda: rolling with blocks under 2 MiB: the program's view maps those pages 4 KiB at a time, "
                  "so that protecting a block leaves the rest of its 2 MiB page mapped");
}

/* Initialisation, first GPU under shared addresses: the objects' host pages are its device address
 * space (its range sits at their addresses, or the host reservation moved onto it), so they are
 * given a second view, the host alias (reservation.h), which the driver can page-lock and DMA
 * reaches. Without one (ADSM_CUDA_DMA_VIEW=0, or memfd refused) every copy is staged. */
ADSM__PRIVATE void adsm__cuda_alias_host(adsm__cuda *c, adsm__runtime *rt) {
    if (c->index != 0 || c->delta != 0 || !rt->cfg.cuda_dma_view) return;
    if (adsm__alias_shared_half(rt) != 0) {
        adsm__log(ADSM_LOG_INFO, "cuda: shared addresses: cannot give the objects' host pages a second view (%s); "
                  "copies go through pinned staging", strerror(errno));
        return;
    }
    adsm__log(ADSM_LOG_INFO, "cuda: shared addresses: objects' host pages are shared memory with a second view at "
              "%p, page-locked there for DMA (ADSM_CUDA_DMA_VIEW=0 stages every copy instead)",
              (void *)rt->host_alias);
    adsm__cuda_say_alias_pages(rt);
}

/* Normal context, runtime lock not held (object_life.h). Page-locks an object's host pages (or
 * adsm_host_alloc memory): shared objects' through the host alias where there is one. Under
 * shared addresses the reservation's own pages are the first GPU's device address space (the
 * shared half, and the safe half too where the host reservation moved onto a device range):
 * adsm never asks the driver to lock them, as registering pages the unified address space
 * already maps to the device is not a documented use (the driver double refuses it; a driver
 * that took it could shadow the device mapping), and says so once. That is each such object's
 * own case (a safe object's, or every object's without the alias), not a reason to stop
 * locking the others. */
ADSM__PRIVATE int adsm__cuda_host_lock(void *ctx, uintptr_t host, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    int aliased = adsm__in_host_alias(c->rt, host, n), reserved = !adsm__outside_reservation(c->rt, host, n);
    int object = aliased || reserved; /* else adsm_host_alloc memory */
    if (reserved && c->delta == 0) {
        if (!c->device_space_said)
            adsm__log(ADSM_LOG_INFO, "cuda: shared addresses: the host pages of %s are device address space, so "
                      "they are not page-locked; their copies go through pinned staging",
                      c->rt->host_alias ? "adsm_safe_alloc objects" : "objects (ADSM_CUDA_DMA_VIEW=0, or no alias)");
        c->device_space_said = 1;
        return 0;
    }
    if (!c->cu.cuMemHostRegister || !c->cu.cuMemHostUnregister || (object && c->lock_refused) ||
        ADSM__LOAD(&c->lost))
        return 0;
    adsm__tree_node *node = (adsm__tree_node *)calloc(1, sizeof *node);
    /* made here, not on the engine: pinning a large object takes long, and the engine's copies
     * for other objects need not wait for it (the driver is thread-safe; no copy uses the range
     * before the object exists) */
    adsm__cu_result cr = ADSM__CUDA_ERROR_OUT_OF_MEMORY;
    if (node) {
        adsm__cu_context prev = adsm__cuda_enter(c);
        cr = c->cu.cuMemHostRegister((void *)host, n, ADSM__CU_MEMHOSTREGISTER_PORTABLE);
        adsm__cuda_leave(c, prev);
    }
    if (cr != 0) {
        free(node);
        adsm__cuda_note_lock_refusal(c, object, n, cr);
        return 0;
    }
    node->start = host;
    node->end = host + n;
    adsm__lock(&c->locked_lock);
    adsm__tree_insert(&c->locked, node);
    adsm__unlock(&c->locked_lock);
    return 1;
}

ADSM__PRIVATE void adsm__cuda_host_unlock(void *ctx, uintptr_t host, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    (void)n;
    adsm__lock(&c->locked_lock);
    adsm__tree_node *node = adsm__tree_find(&c->locked, host);
    if (node) adsm__tree_remove(&c->locked, node);
    adsm__unlock(&c->locked_lock);
    if (!node) return;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_UNREGISTER, host, 0, n);
    adsm__cuda_run(c, &cmd, 1);
    free(node);
}

/* ---- kernels -------------------------------------------------------------------------------- */
/* A launch with nothing queued before it is made on the calling thread (adsm__queue_run_if_idle:
 * nothing can be queued meanwhile), with this GPU's context current for the call and the thread's
 * own context put back after it: handing it to the engine thread costs a thread wake-up, more
 * than the launch itself. Not when its event slot is still held by a launch in flight: the engine
 * waits for that one, not the caller (who holds the runtime lock). Returns whether it ran here. */
ADSM__PRIVATE int adsm__cuda_launch_here(adsm__cuda *c, adsm__cuda_cmd *cmd) {
    if (!adsm__cuda_slot_free(c, cmd->op.seq)) return 0;
    adsm__cu_context mine = adsm__cuda_enter(c);
    int unused, ran = adsm__queue_run_if_idle(&c->queue, cmd, &unused);
    adsm__cuda_leave(c, mine);
    return ran;
}

ADSM__PRIVATE adsm_result adsm__cuda_launch(void *ctx, const adsm__launch *l) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    const adsm_kernel_desc *k = l->kernel;
    adsm__cuda_cmd *cmd;
    adsm__cu_function fn = NULL;
    adsm_result r;
    if (ADSM__LOAD(&c->lost)) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "kernel '%s': the device is lost", k->name);
    if ((r = adsm__cuda_function(c, k, &fn)) != ADSM_OK) return r;
    uint64_t threads = (uint64_t)l->grid.block.x * l->grid.block.y * l->grid.block.z;
    if (threads > (uint64_t)c->max_threads)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': %llu threads per block, device %s allows %d", k->name,
                          (unsigned long long)threads, c->device_name, c->max_threads);
    cmd = (adsm__cuda_cmd *)malloc(sizeof *cmd);
    if (!cmd) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "kernel '%s': out of memory", k->name);
    memset(cmd, 0, offsetof(adsm__cuda_cmd, args));
    cmd->op.type = ADSM__CMD_LAUNCH;
    cmd->op.seq = l->seq;
    cmd->op.kernel = k;
    cmd->op.fn = fn;
    cmd->op.grid[0] = l->grid.grid.x, cmd->op.grid[1] = l->grid.grid.y, cmd->op.grid[2] = l->grid.grid.z;
    cmd->op.block[0] = l->grid.block.x, cmd->op.block[1] = l->grid.block.y, cmd->op.block[2] = l->grid.block.z;
    memcpy(cmd->args, l->args, k->args_size);
    cmd->access.nwritable = (uint32_t)l->nwritable;
    cmd->access.ninputs = (uint32_t)l->ninputs;
    memcpy(cmd->access.writable, l->writable, l->nwritable * sizeof *l->writable);
    memcpy(cmd->access.inputs, l->inputs, l->ninputs * sizeof *l->inputs);
    adsm__args_to_device(c->rt, k, cmd->args, c->base, c->half, c->delta); /* adsm addresses -> device's */
    ADSM__STORE(&c->sent_seq, l->seq); /* before the push: a wait must not miss it */
    if (!adsm__cuda_launch_here(c, cmd)) adsm__queue_push(&c->queue, cmd, offsetof(adsm__cuda_cmd, args) + k->args_size, NULL);
    free(cmd);
    return ADSM_OK;
}

/* ---- lifetime -------------------------------------------------------------------------------- */
ADSM__PRIVATE size_t adsm__cuda_capacity(void *ctx) { return ((adsm__cuda *)ctx)->capacity; }

/* How many kernels this GPU runs at once: ADSM_STREAMS, else 4 with several GPUs and 1 with one
 * (where a kernel may follow stored pointers into objects it does not name, so only issue order
 * is safe). Several streams remember each launch's accesses, to order the conflicting ones. */
ADSM__PRIVATE adsm_result adsm__cuda_stream_count(adsm__cuda *c) {
    unsigned devices = c->index == 0 ? c->ndevices : ((adsm__cuda *)c->rt->dev_ctx[0])->ndevices;
    c->nstreams = c->rt->cfg.streams ? c->rt->cfg.streams : devices > 1 ? ADSM__DEFAULT_STREAMS : 1;
    c->nstreams = ADSM__MIN(c->nstreams, ADSM__CUDA_MAX_STREAMS);
    if (c->nstreams == 1) return ADSM_OK;
    c->kev_access = (adsm__cuda_launch_access *)calloc(ADSM__CUDA_EVENTS, sizeof *c->kev_access);
    return c->kev_access ? ADSM_OK : adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: out of memory");
}

ADSM__PRIVATE adsm_result adsm__cuda_streams(adsm__cuda *c) {
    adsm__cu_result r = 0;
    r = c->cu.cuStreamCreate(&c->h2d, ADSM__CU_STREAM_NON_BLOCKING);
    if (r == 0) r = c->cu.cuStreamCreate(&c->d2h, ADSM__CU_STREAM_NON_BLOCKING);
    if (r == 0) r = c->cu.cuStreamCreate(&c->ops, ADSM__CU_STREAM_NON_BLOCKING);
    for (unsigned i = 0; r == 0 && i < c->nstreams; i++) r = c->cu.cuStreamCreate(&c->ks[i], ADSM__CU_STREAM_NON_BLOCKING);
    adsm__cu_event *events[4 + 2 * ADSM__CUDA_SLOTS] = {&c->h2d_last, &c->ops_last, &c->drained, &c->ks_last[0]};
    for (int s = 0; s < ADSM__CUDA_SLOTS; s++) {
        events[4 + 2 * s] = &c->h2d_slot_ev[s];
        events[5 + 2 * s] = &c->d2h_slot_ev[s];
    }
    /* Every event may be waited on by the engine or the completion thread (cuEventSynchronize):
     * blocking sync makes that wait sleep instead of spinning a core; nothing reads timings. */
    unsigned flags = ADSM__CU_EVENT_DISABLE_TIMING | ADSM__CU_EVENT_BLOCKING_SYNC;
    for (size_t i = 0; r == 0 && i < sizeof events / sizeof *events; i++) r = c->cu.cuEventCreate(events[i], flags);
    for (size_t i = 0; r == 0 && i < ADSM__CUDA_EVENTS; i++) r = c->cu.cuEventCreate(&c->kev[i], flags);
    for (unsigned i = 1; r == 0 && i < c->nstreams; i++) r = c->cu.cuEventCreate(&c->ks_last[i], flags);
    return r == 0 ? ADSM_OK : adsm__cu_fail(c, r, "creating streams and events");
}

/* Pinned staging buffers; pageable ones (synchronous copies) when the driver cannot pin. */
ADSM__PRIVATE adsm_result adsm__cuda_staging(adsm__cuda *c) {
    unsigned char **all[2 * ADSM__CUDA_SLOTS];
    for (int s = 0; s < ADSM__CUDA_SLOTS; s++) {
        all[2 * s] = &c->h2d_stage[s];
        all[2 * s + 1] = &c->d2h_stage[s];
    }
    c->pinned = 1;
    for (size_t i = 0; i < 2 * ADSM__CUDA_SLOTS; i++) {
        if (c->pinned && c->cu.cuMemAllocHost((void **)all[i], c->stage_size) == 0) continue;
        if (c->pinned) {
            adsm__log(ADSM_LOG_WARN, "cuda: cannot pin %zu bytes of staging memory; copies will be synchronous",
                      c->stage_size);
            for (size_t j = 0; j < i; j++) {
                c->cu.cuMemFreeHost(*all[j]);
                *all[j] = NULL;
            }
            c->pinned = 0;
            i = (size_t)-1; /* start again with pageable buffers */
            continue;
        }
        if (posix_memalign((void **)all[i], 4096, c->stage_size) != 0)
            return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: no memory for staging buffers");
    }
    return ADSM_OK;
}

/* Shutdown: ranges still page-locked (objects the program did not free) are unlocked. */
ADSM__PRIVATE void adsm__cuda_unlock_all(adsm__cuda *c) {
    for (adsm__tree_node *n; (n = adsm__tree_first(&c->locked)) != NULL;) {
        adsm__tree_remove(&c->locked, n);
        if (c->cu.cuMemHostUnregister) c->cu.cuMemHostUnregister((void *)n->start);
        free(n);
    }
}

ADSM__PRIVATE void adsm__cuda_shutdown(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    ADSM__STORE(&c->quitting, 1);
    adsm__queue_stop(&c->queue); /* runs the commands still queued first */
    if (c->completion_started) {
        ADSM__ADD(&c->issued_gen, 1);
        adsm__futex_wake_all(&c->issued_gen);
        pthread_join(c->completion, NULL);
    }
    if (c->ctx_retained) {
        adsm__cu_context prev = adsm__cuda_enter(c);
        if (c->ks[0]) c->cu.cuCtxSynchronize();
        for (size_t g = 0; c->granule_run && g < c->half / c->granule; g++)
            if (c->granule_run[g]) adsm__cuda_unmap_run(c, g, c->granule_run[g], c->granule_handles[g]);
        for (ptrdiff_t m = 0; m < stbds_arrlen(c->modules); m++) c->cu.cuModuleUnload(c->modules[m]);
        for (ptrdiff_t m = 0; m < stbds_arrlen(c->ss_modules); m++) c->cu.cuModuleUnload(c->ss_modules[m]);
        adsm__cuda_unlock_all(c);
        for (int s = 0; s < ADSM__CUDA_SLOTS; s++) {
            if (c->h2d_stage[s]) c->pinned ? (void)c->cu.cuMemFreeHost(c->h2d_stage[s]) : free(c->h2d_stage[s]);
            if (c->d2h_stage[s]) c->pinned ? (void)c->cu.cuMemFreeHost(c->d2h_stage[s]) : free(c->d2h_stage[s]);
            if (c->h2d_slot_ev[s]) c->cu.cuEventDestroy(c->h2d_slot_ev[s]);
            if (c->d2h_slot_ev[s]) c->cu.cuEventDestroy(c->d2h_slot_ev[s]);
        }
        for (size_t i = 0; i < ADSM__CUDA_EVENTS; i++)
            if (c->kev[i]) c->cu.cuEventDestroy(c->kev[i]);
        if (c->h2d_last) c->cu.cuEventDestroy(c->h2d_last);
        for (unsigned i = 0; i < ADSM__CUDA_MAX_STREAMS; i++) {
            if (c->ks_last[i]) c->cu.cuEventDestroy(c->ks_last[i]);
            if (c->ks[i]) c->cu.cuStreamDestroy(c->ks[i]);
        }
        if (c->ops_last) c->cu.cuEventDestroy(c->ops_last);
        if (c->drained) c->cu.cuEventDestroy(c->drained);
        if (c->h2d) c->cu.cuStreamDestroy(c->h2d);
        if (c->ops) c->cu.cuStreamDestroy(c->ops);
        if (c->d2h) c->cu.cuStreamDestroy(c->d2h);
        if (c->va && c->va_moved_host) {
            adsm__cuda_give_back(c, c->va, c->va_size);
            adsm__disown_reservation(c->rt); /* the host reservation was that range */
        } else if (c->va) {
            c->cu.cuMemAddressFree(c->va, c->va_size);
        }
        adsm__cuda_leave(c, prev);
        c->cu.cuDevicePrimaryCtxRelease(c->device);
    }
    /* The driver library stays loaded: drivers do not support being unloaded and loaded again. */
    stbds_arrfree(c->modules);
    stbds_hmfree(c->kernels);
    stbds_arrfree(c->ss_modules);
    stbds_hmfree(c->ss_kernels);
    for (ptrdiff_t i = 0; i < stbds_hmlen(c->ss_failed); i++) free(c->ss_failed[i].value.message);
    stbds_hmfree(c->ss_failed);
    free(c->granule_refs);
    free(c->granule_run);
    free(c->granule_handles);
    free(c->kev_access);
    adsm__device_error_destroy(&c->errors);
    pthread_mutex_destroy(&c->module_mutex);
    free(c);
}

ADSM__PRIVATE adsm_result adsm__cuda_init(adsm__runtime *rt, void **ctx) {
    adsm__cuda *c = (adsm__cuda *)calloc(1, sizeof *c);
    adsm_result r;
    adsm__cu_mem_alloc_prop prop; /* declared before the first goto: C++ refuses jumps over initialisations */
    adsm__cu_result cr;
    if (!c) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: out of memory");
    c->rt = rt;
    c->index = rt->ndev; /* devices start in order: this one's number is the count so far */
    c->base = rt->base;
    c->half = rt->half;
    c->stage_size = rt->cfg.cuda_staging;
    c->h2d_next = 0;
    adsm__tree_init(&c->locked);
    adsm__device_error_init(&c->errors);
    pthread_mutex_init(&c->module_mutex, NULL);
    if ((r = adsm__cuda_open(c, rt->cfg.cuda_driver)) != ADSM_OK ||
        (r = adsm__cuda_device(c, rt->cfg.cuda_devices ? rt->cfg.cuda_ordinals[c->index] : (int)c->index)) != ADSM_OK)
        goto fail;
    prop = adsm__cuda_prop(c);
    cr = c->cu.cuMemGetAllocationGranularity(&c->granule, &prop, ADSM__CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (cr != 0) {
        r = adsm__cu_fail(c, cr, "cuMemGetAllocationGranularity");
        goto fail;
    }
    if (c->granule == 0 || !adsm__is_pow2(c->granule) || c->half % c->granule) {
        r = adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "cuda backend: unusable allocation granularity %zu", c->granule);
        goto fail;
    }
    if ((r = adsm__cuda_address_space(c, rt)) != ADSM_OK) goto fail;
    c->granule_refs = (uint32_t *)calloc(c->half / c->granule, sizeof *c->granule_refs);
    c->granule_run = (uint32_t *)calloc(c->half / c->granule, sizeof *c->granule_run);
    c->granule_handles = (adsm__cu_mem_handle *)calloc(c->half / c->granule, sizeof *c->granule_handles);
    if (!c->granule_refs || !c->granule_run || !c->granule_handles) {
        r = adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: out of memory");
        goto fail;
    }
    if ((r = adsm__cuda_stream_count(c)) != ADSM_OK || (r = adsm__cuda_streams(c)) != ADSM_OK ||
        (r = adsm__cuda_staging(c)) != ADSM_OK)
        goto fail;
    adsm__queue_start(&c->queue, sizeof(adsm__cuda_cmd), ADSM__CUDA_RING, adsm__cuda_engine_step,
                      adsm__cuda_engine_begin, c);
    c->completion_started = adsm__thread_start(&c->completion, adsm__cuda_completion_main, c) == 0;
    if (!c->queue.started || !c->completion_started) {
        r = adsm__fail(ADSM_ERROR_SYSTEM, "cuda backend: cannot start its threads");
        goto fail;
    }
    adsm__cuda_alias_host(c, rt); /* last: nothing after it fails, so no failure path undoes it */
    adsm__log(ADSM_LOG_INFO, "cuda: device %u is GPU %d (%s, compute %d.%d), %zu MiB, %s addresses, %s staging of "
              "%zu KiB", c->index, (int)c->device, c->device_name, c->cc_major, c->cc_minor, c->capacity >> 20,
              c->delta ? "translated" : "same", c->pinned ? "pinned" : "pageable", c->stage_size >> 10);
    if (c->index == 0)
        adsm__log(ADSM_LOG_INFO, "cuda: a large new object's host pages (and adsm_host_alloc's) are allocated on %u "
                  "thread%s before they are page-locked (ADSM_PREPARE_THREADS)", rt->cfg.prepare_threads,
                  rt->cfg.prepare_threads > 1 ? "s" : "");
    /* the addresses adsm_safe and adsm_dev_alloc hand out are device 0's; the others translate
     * them in their own verbs */
    if (c->index == 0) rt->dev_delta = c->delta;
    if (c->index == 0) rt->dev_granule = c->granule; /* what an object takes on a device (directory.h) */
    adsm__cuda_leave(c, c->init_prev);
    *ctx = c;
    return ADSM_OK;
fail:
    {
        /* keep the message: the calls below must not overwrite it */
        char saved[sizeof adsm__tls_error];
        memcpy(saved, adsm__tls_error, sizeof saved);
        /* auto goes on to emu with the reservation: hand the device range back, keep a fresh one */
        if (c->va_moved_host && adsm__replace_reservation(rt) == ADSM_OK) {
            adsm__cuda_give_back(c, c->va, c->va_size);
            c->va = 0;
            c->va_moved_host = 0;
        }
        if (c->init_entered) adsm__cuda_leave(c, c->init_prev); /* shutdown enters and leaves itself */
        adsm__cuda_shutdown(c);
        adsm__fail(r, "%s", saved);
    }
    return r;
}

/* Once every device's context exists: the devices that may reach this one's memory directly
 * (cuDeviceCanAccessPeer) get access to everything mapped here from now on, so device-to-device
 * copies from it go peer to peer; then the device memory mapped ahead (cuda_memory.h). */
ADSM__PRIVATE adsm_result adsm__cuda_start(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    c->npeers = 0;
    for (unsigned d = 0; d < c->rt->ndev && c->cu.cuDeviceCanAccessPeer; d++) {
        adsm__cuda *other = (adsm__cuda *)c->rt->dev_ctx[d];
        int can = 0;
        if (other == c || other->device == c->device) continue;
        if (c->cu.cuDeviceCanAccessPeer(&can, other->device, c->device) == 0 && can) c->peers[c->npeers++] = other->device;
    }
    if (c->rt->ndev > 1)
        adsm__log(ADSM_LOG_INFO, "cuda: device %u: %u of the other %u devices have peer access to its memory", c->index,
                  c->npeers, c->rt->ndev - 1);
    /* with several devices an object's memory is mapped where it resides (directory.h): none ahead */
    if (c->mapped_ahead || c->rt->ndev > 1) return ADSM_OK;
    adsm__cu_context prev = adsm__cuda_enter(c); /* with the peers' access: after them */
    adsm_result r = adsm__cuda_map_ahead(c, c->rt->cfg.cuda_map_ahead);
    adsm__cuda_leave(c, prev);
    return r;
}

ADSM__PRIVATE unsigned adsm__cuda_device_count(void *ctx) { return ((adsm__cuda *)ctx)->ndevices; }

/* ---- managed memory (protocol_um.h) ----------------------------------------------------------
 * Unified memory beside adsm's own protocols: objects in cuMemAllocManaged memory, which the
 * driver migrates on faults (um) or where prefetches send it (um-prefetch). Called from the
 * program's threads with the context made current around each driver call. */
ADSM__PRIVATE adsm_result adsm__cuda_managed_alloc(void *ctx, size_t n, uintptr_t *addr) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (!c->cu.cuMemAllocManaged || !c->cu.cuMemFree)
        return adsm__fail(ADSM_ERROR_UNSUPPORTED, "cuda backend: this driver has no managed memory (cuMemAllocManaged)");
    if (ADSM__LOAD(&c->lost)) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "cuda backend: the device is lost");
    adsm__cu_deviceptr p = 0;
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_result r = c->cu.cuMemAllocManaged(&p, n, ADSM__CU_MEM_ATTACH_GLOBAL);
    adsm__cuda_leave(c, prev);
    if (r == ADSM__CUDA_ERROR_OUT_OF_MEMORY)
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cuda backend: no managed memory left for %zu bytes", n);
    if (r != 0) return adsm__cu_fail(c, r, "cuMemAllocManaged");
    *addr = (uintptr_t)p;
    return ADSM_OK;
}

ADSM__PRIVATE void adsm__cuda_managed_free(void *ctx, uintptr_t addr) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__cu_context prev = adsm__cuda_enter(c);
    c->cu.cuMemFree((adsm__cu_deviceptr)addr);
    adsm__cuda_leave(c, prev);
}

/* On the first kernel stream, where a launch with one stream runs next (CUDA 12.2's location
 * argument: the driver's ordinal, or the host). */
ADSM__PRIVATE int adsm__cuda_managed_prefetch(void *ctx, uintptr_t addr, size_t n, int to_device) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (!c->cu.cuMemPrefetchAsync || ADSM__LOAD(&c->lost)) return -1;
    adsm__cu_mem_location where = {to_device ? ADSM__CU_MEM_LOCATION_TYPE_DEVICE : ADSM__CU_MEM_LOCATION_TYPE_HOST,
                                   to_device ? c->device : 0};
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_result r = c->cu.cuMemPrefetchAsync((adsm__cu_deviceptr)addr, n, where, 0, c->ks[0]);
    adsm__cuda_leave(c, prev);
    return r == 0 ? 0 : -1;
}

ADSM__PRIVATE int adsm__cuda_managed_settle(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_result r = c->cu.cuStreamSynchronize(c->ks[0]);
    adsm__cuda_leave(c, prev);
    return r == 0 ? 0 : -1;
}

/* Protocol hmm: whether the GPU's kernels reach plain host memory (HMM on x86 with the open kernel
 * modules, ATS on a coherent link), as cuDeviceGetAttribute said at init. */
ADSM__PRIVATE int adsm__cuda_pageable_access(void *ctx) { return ((adsm__cuda *)ctx)->pageable_access; }

ADSM__PRIVATE intptr_t adsm__cuda_address_delta(void *ctx) { return ((adsm__cuda *)ctx)->delta; }

static const adsm__backend_vtbl adsm__backend_cuda = {
    .name = "cuda",
    .moves_data = 1,
    .max_args = ADSM__CUDA_MAX_ARGS,
    .init = adsm__cuda_init,
    .start = adsm__cuda_start,
    .device_count = adsm__cuda_device_count,
    .shutdown = adsm__cuda_shutdown,
    .capacity = adsm__cuda_capacity,
    .dev_alloc = adsm__cuda_dev_alloc,
    .dev_free = adsm__cuda_dev_free,
    .dev_map = adsm__cuda_dev_map,
    .to_device = adsm__cuda_to_device,
    .from_device = adsm__cuda_from_device,
    .peer_copy = adsm__cuda_peer_copy,
    .drain = adsm__cuda_drain,
    .launch = adsm__cuda_launch,
    .wait = adsm__cuda_wait,
    .synchronize = adsm__cuda_synchronize,
    .dev_memset = adsm__cuda_dev_memset,
    .dev_copy = adsm__cuda_dev_copy,
    .module_load = adsm__cuda_module_load,
    .prepare = adsm__cuda_prepare,
    .host_lock = adsm__cuda_host_lock,
    .host_unlock = adsm__cuda_host_unlock,
    .host_direct = adsm__cuda_host_direct,
    .managed_alloc = adsm__cuda_managed_alloc,
    .managed_free = adsm__cuda_managed_free,
    .managed_prefetch = adsm__cuda_managed_prefetch,
    .managed_settle = adsm__cuda_managed_settle,
    .pageable_access = adsm__cuda_pageable_access,
    .address_delta = adsm__cuda_address_delta,
};

#endif /* ADSM__BACKEND_CUDA_INCLUDED */
